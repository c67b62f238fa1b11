//! The response contract: every problem this project sends, as RFC 9457
//! `application/problem+json` documents with a stable `code`.
//!
//! Adapters (server, edge, browser) never write problem bodies by hand: they
//! build a [`Problem`] here and send [`Problem::to_json`] with
//! [`Problem::headers`], so the same fault gives byte-identical answers
//! everywhere.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Media type of every problem document (RFC 9457, section 3).
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Prefix of every problem `type` URI. It is a relative reference that the
/// origin serves as documentation (RFC 9457, section 3.1.1: "When
/// dereferenced, it SHOULD provide human-readable documentation").
pub const PROBLEM_TYPE_PREFIX: &str = "/problems/";

/// The stable machine-readable code of a problem.
///
/// The kebab-case strings ([`ProblemCode::as_str`]) are a cross-language
/// contract, checked by the shared test vectors in `core/vectors/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ProblemCode {
    /// 400: the operation requires an `Idempotency-Key` and none was sent.
    IdempotencyKeyMissing,
    /// 400: the `Idempotency-Key` field is malformed, repeated, empty, too
    /// long or outside the configured profile.
    IdempotencyKeyInvalid,
    /// 422: the key was already used with a different request payload.
    IdempotencyKeyReused,
    /// 409: a request with the same key is still being processed.
    IdempotencyRequestInProgress,
    /// 410: the key's replay window is over; look the operation up.
    IdempotencyKeyExpired,
    /// 400: the body failed validation (field errors attached).
    RequestInvalid,
    /// 413: the body is larger than the operation accepts.
    PayloadTooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 401: missing, unknown or revoked credentials.
    Unauthorized,
    /// 403: a browser sent this request from another site (its
    /// `Sec-Fetch-Site` or `Origin` says so) to an endpoint that serves only
    /// its own page, such as the local demo's switches and tokens.
    CrossSiteRequest,
    /// 404: no such resource for this account.
    NotFound,
    /// 405: the method is not allowed on this resource.
    MethodNotAllowed,
    /// 503: the database failed or a commit's outcome is unknown; retry with
    /// the same key.
    ServiceUnavailable,
    /// 409: the account already has an order with this purchase `reference`
    /// (under another key); the problem's `order` member names it.
    OrderReferenceExists,
    /// 402: the payment provider declined the charge; sending it again
    /// changes nothing.
    PaymentDeclined,
    /// 409: a purchase could not reserve its stock; nothing was charged or
    /// reserved. The answer is stored under the key: a resend replays it.
    OutOfStock,
    /// 409: a long operation (a flow, such as a purchase) ended failed: a
    /// step failed for good and the steps before it were undone. It is the
    /// key's final answer: a resend replays it.
    OperationFailed,
}

impl ProblemCode {
    /// Every code, in documentation order.
    pub const ALL: [ProblemCode; 17] = [
        Self::IdempotencyKeyMissing,
        Self::IdempotencyKeyInvalid,
        Self::IdempotencyKeyReused,
        Self::IdempotencyRequestInProgress,
        Self::IdempotencyKeyExpired,
        Self::RequestInvalid,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::Unauthorized,
        Self::CrossSiteRequest,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::ServiceUnavailable,
        Self::OrderReferenceExists,
        Self::PaymentDeclined,
        Self::OutOfStock,
        Self::OperationFailed,
    ];

    /// The stable kebab-case code, e.g. `idempotency-key-reused`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::IdempotencyKeyMissing => "idempotency-key-missing",
            Self::IdempotencyKeyInvalid => "idempotency-key-invalid",
            Self::IdempotencyKeyReused => "idempotency-key-reused",
            Self::IdempotencyRequestInProgress => "idempotency-request-in-progress",
            Self::IdempotencyKeyExpired => "idempotency-key-expired",
            Self::RequestInvalid => "request-invalid",
            Self::PayloadTooLarge => "payload-too-large",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::Unauthorized => "unauthorized",
            Self::CrossSiteRequest => "cross-site-request",
            Self::NotFound => "not-found",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::ServiceUnavailable => "service-unavailable",
            Self::OrderReferenceExists => "order-reference-exists",
            Self::PaymentDeclined => "payment-declined",
            Self::OutOfStock => "out-of-stock",
            Self::OperationFailed => "operation-failed",
        }
    }

    /// Whether a resend of the same request can never get another answer
    /// and nothing of it stands: the request conflicts with the business's
    /// own state for good (an order reference that exists), or it is the
    /// stored end of a long operation that failed and was undone (a
    /// purchase out of stock, its charge declined, or any other step
    /// refused: `operation-failed`), which the key replays. Its status (409,
    /// 402) may be one a client otherwise retries or looks up. The retry
    /// policy stops on it, even after an attempt whose answer was lost.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            Self::OrderReferenceExists
                | Self::OutOfStock
                | Self::PaymentDeclined
                | Self::OperationFailed
        )
    }

    /// Parses a code string; `None` for an unknown code.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The HTTP status this problem is sent with.
    pub const fn status(self) -> u16 {
        match self {
            Self::IdempotencyKeyMissing | Self::IdempotencyKeyInvalid | Self::RequestInvalid => 400,
            Self::Unauthorized => 401,
            Self::PaymentDeclined => 402,
            Self::CrossSiteRequest => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::IdempotencyRequestInProgress
            | Self::OrderReferenceExists
            | Self::OutOfStock
            | Self::OperationFailed => 409,
            Self::IdempotencyKeyExpired => 410,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::IdempotencyKeyReused => 422,
            Self::ServiceUnavailable => 503,
        }
    }

    /// The short human-readable summary (RFC 9457 `title`); it never changes
    /// between occurrences of the same code.
    pub const fn title(self) -> &'static str {
        match self {
            Self::IdempotencyKeyMissing => "Idempotency-Key is missing",
            Self::IdempotencyKeyInvalid => "Idempotency-Key is invalid",
            Self::IdempotencyKeyReused => "Idempotency-Key reused with another payload",
            Self::IdempotencyRequestInProgress => {
                "A request with this Idempotency-Key is in progress"
            }
            Self::IdempotencyKeyExpired => "Idempotency-Key expired",
            Self::RequestInvalid => "Request is invalid",
            Self::PayloadTooLarge => "Payload too large",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::Unauthorized => "Unauthorized",
            Self::CrossSiteRequest => "Cross-site request refused",
            Self::NotFound => "Not found",
            Self::MethodNotAllowed => "Method not allowed",
            Self::ServiceUnavailable => "Service unavailable",
            Self::OrderReferenceExists => "An order with this reference exists",
            Self::PaymentDeclined => "Payment declined",
            Self::OutOfStock => "Out of stock",
            Self::OperationFailed => "Operation failed",
        }
    }

    /// The problem `type` URI: [`PROBLEM_TYPE_PREFIX`] followed by the code.
    pub fn type_uri(self) -> String {
        format!("{PROBLEM_TYPE_PREFIX}{}", self.as_str())
    }

    /// Whether a client may send the same request again, with the same key.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::IdempotencyRequestInProgress | Self::ServiceUnavailable
        )
    }
}

impl fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failing member of a request body (the `errors` extension member).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// JSON Pointer (RFC 6901) to the member, e.g. `/quantity`; `""` for the
    /// whole body.
    pub pointer: String,
    /// What is wrong with it, for humans.
    pub detail: String,
}

impl FieldError {
    /// A field error at `pointer`.
    pub fn new(pointer: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            detail: detail.into(),
        }
    }
}

/// An RFC 9457 problem: what went wrong, in a form both people and programs read.
///
/// Serialises with members in a fixed order: `type`, `title`, `status`,
/// `detail`, `code`, then `retry_after`, `lookup`, `order` and `errors` when
/// present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    code: ProblemCode,
    detail: String,
    retry_after: Option<u64>,
    lookup: Option<String>,
    order: Option<String>,
    errors: Vec<FieldError>,
}

/// The wire form, borrowed, in contract order.
#[derive(Serialize)]
struct Wire<'a> {
    #[serde(rename = "type")]
    type_uri: String,
    title: &'static str,
    status: u16,
    detail: &'a str,
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lookup: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<&'a str>,
    #[serde(skip_serializing_if = "<[FieldError]>::is_empty")]
    errors: &'a [FieldError],
}

/// A problem document as read back by a client (see [`Problem::from_json`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedProblem {
    /// The `type` URI.
    #[serde(rename = "type", default)]
    pub type_uri: Option<String>,
    /// The `title`.
    #[serde(default)]
    pub title: Option<String>,
    /// The `status`.
    #[serde(default)]
    pub status: Option<u16>,
    /// The `detail`.
    #[serde(default)]
    pub detail: Option<String>,
    /// The stable `code`, as sent (it may be one this version does not know).
    #[serde(default)]
    pub code: Option<String>,
    /// Seconds to wait before retrying, when the problem says so.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// Where to look the operation up, when the problem says so.
    #[serde(default)]
    pub lookup: Option<String>,
    /// The id of the existing order an `order-reference-exists` problem
    /// names.
    #[serde(default)]
    pub order: Option<String>,
    /// Field errors of a `request-invalid` problem.
    #[serde(default)]
    pub errors: Vec<FieldError>,
}

impl Problem {
    /// A problem with `code` and a human-readable `detail`.
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            retry_after: None,
            lookup: None,
            order: None,
            errors: Vec::new(),
        }
    }

    /// Attaches the seconds a client should wait (sent as `Retry-After` and
    /// as the `retry_after` member); at least 1.
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    /// Attaches the URL where the client can look the operation up.
    #[must_use]
    pub fn with_lookup(mut self, lookup: impl Into<String>) -> Self {
        self.lookup = Some(lookup.into());
        self
    }

    /// Attaches the id of the order a conflict is about (the `order`
    /// member of `order-reference-exists`).
    #[must_use]
    pub(crate) fn with_order(mut self, order: String) -> Self {
        self.order = Some(order);
        self
    }

    /// Attaches field errors (for `request-invalid`).
    #[must_use]
    pub fn with_errors(mut self, errors: Vec<FieldError>) -> Self {
        self.errors = errors;
        self
    }

    /// 409: another request with this key is being processed.
    pub fn in_progress(retry_after_secs: u64) -> Self {
        Self::new(
            ProblemCode::IdempotencyRequestInProgress,
            "A request with this Idempotency-Key is still being processed. Retry with the same key after Retry-After seconds.",
        )
        .with_retry_after(retry_after_secs)
    }

    /// 422: the key was used before with another payload.
    pub fn key_reused() -> Self {
        Self::new(
            ProblemCode::IdempotencyKeyReused,
            "This Idempotency-Key was already used with a different request payload. Use a new key for a new operation; the original operation is unchanged.",
        )
    }

    /// 410: the replay window is over; `lookup` says where to find out what
    /// became of the operation.
    pub fn key_expired(lookup: Option<String>) -> Self {
        let problem = Self::new(
            ProblemCode::IdempotencyKeyExpired,
            "The replay window of this Idempotency-Key is over and the request was not executed again. Look the operation up instead of starting a new one.",
        );
        match lookup {
            Some(lookup) => problem.with_lookup(lookup),
            None => problem,
        }
    }

    /// 503: the outcome is unknown or the store failed; keep the same key.
    pub fn service_unavailable(retry_after_secs: u64) -> Self {
        Self::new(
            ProblemCode::ServiceUnavailable,
            "The request could not be completed or its outcome is not confirmed. Retry with the same Idempotency-Key.",
        )
        .with_retry_after(retry_after_secs)
    }

    /// 401: missing or unknown credentials.
    pub fn unauthorized() -> Self {
        Self::new(
            ProblemCode::Unauthorized,
            "Send a valid API token as Authorization: Bearer <token>.",
        )
    }

    /// 403: a request from another site (or another host name) to an
    /// endpoint that answers only its own page.
    pub fn cross_site_request() -> Self {
        Self::new(
            ProblemCode::CrossSiteRequest,
            "This endpoint answers only requests from its own page on this host. Open the page served here instead of calling it from another site.",
        )
    }

    /// 404: nothing at this address for this account.
    pub fn not_found() -> Self {
        Self::new(
            ProblemCode::NotFound,
            "No such resource exists for this account.",
        )
    }

    /// 415: the body must be JSON.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            ProblemCode::UnsupportedMediaType,
            "The request body must be sent as Content-Type: application/json.",
        )
    }

    /// 413: the body exceeds `limit` bytes.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            ProblemCode::PayloadTooLarge,
            format!("The request body must be at most {limit} bytes."),
        )
    }

    /// 405: the method is not allowed here.
    pub fn method_not_allowed() -> Self {
        Self::new(
            ProblemCode::MethodNotAllowed,
            "This method is not allowed on this resource.",
        )
    }

    /// The problem's stable code.
    pub fn code(&self) -> ProblemCode {
        self.code
    }

    /// The HTTP status to send.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// The human-readable detail.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// Seconds to wait, if any.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// Where to look the operation up, if anywhere.
    pub fn lookup(&self) -> Option<&str> {
        self.lookup.as_deref()
    }

    /// The existing order an `order-reference-exists` problem names, if any.
    pub fn order(&self) -> Option<&str> {
        self.order.as_deref()
    }

    /// Field errors, if any.
    pub fn errors(&self) -> &[FieldError] {
        &self.errors
    }

    /// The exact body bytes to send (compact JSON, contract member order).
    pub fn to_json(&self) -> String {
        let wire = Wire {
            type_uri: self.code.type_uri(),
            title: self.code.title(),
            status: self.code.status(),
            detail: &self.detail,
            code: self.code.as_str(),
            retry_after: self.retry_after,
            lookup: self.lookup.as_deref(),
            order: self.order.as_deref(),
            errors: &self.errors,
        };
        // Serialising a struct of strings, integers and a Vec of string pairs
        // into a String cannot fail; the fallback keeps this total anyway.
        serde_json::to_string(&wire).unwrap_or_else(|_| {
            format!(
                "{{\"type\":\"{}\",\"status\":{},\"code\":\"{}\"}}",
                self.code.type_uri(),
                self.code.status(),
                self.code.as_str()
            )
        })
    }

    /// Headers to send with the body, in order: `Content-Type`,
    /// `Cache-Control: no-store`, and `Retry-After` when present.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("content-type", PROBLEM_CONTENT_TYPE.to_owned()),
            ("cache-control", "no-store".to_owned()),
        ];
        if let Some(secs) = self.retry_after {
            headers.push(("retry-after", secs.to_string()));
        }
        headers
    }

    /// Reads a problem document a server sent (lenient: unknown members are
    /// ignored, missing ones are `None`). `None` if the body is not a JSON object.
    pub fn from_json(body: &str) -> Option<ParsedProblem> {
        serde_json::from_str(body).ok()
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.code.status(), self.detail)
    }
}

impl std::error::Error for Problem {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        for code in ProblemCode::ALL {
            assert_eq!(ProblemCode::from_code(code.as_str()), Some(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        let mut all: Vec<_> = ProblemCode::ALL.iter().map(|c| c.as_str()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), ProblemCode::ALL.len());
    }

    #[test]
    fn body_members_come_in_contract_order() {
        let body = Problem::in_progress(0).to_json();
        assert!(
            body.starts_with("{\"type\":\"/problems/idempotency-request-in-progress\",\"title\":")
        );
        assert!(body.ends_with(",\"code\":\"idempotency-request-in-progress\",\"retry_after\":1}"));
    }

    #[test]
    fn retry_after_header_only_when_present() {
        assert_eq!(Problem::key_reused().headers().len(), 2);
        let headers = Problem::service_unavailable(3).headers();
        assert_eq!(headers[2], ("retry-after", "3".to_owned()));
    }

    #[test]
    fn parsed_problem_reads_what_we_send() {
        let sent = Problem::key_expired(Some("/operations/abc".into()));
        let read = Problem::from_json(&sent.to_json()).unwrap();
        assert_eq!(read.code.as_deref(), Some("idempotency-key-expired"));
        assert_eq!(read.status, Some(410));
        assert_eq!(read.lookup.as_deref(), Some("/operations/abc"));
    }
}

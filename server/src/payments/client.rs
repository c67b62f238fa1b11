//! [`ProviderClient`]: the HTTP client of a payment provider that speaks
//! `idemkey-server provider`'s API (`POST /charges` under an
//! `Idempotency-Key`, `GET /charges/{key}`), as the outbox's delivery worker
//! uses it.
//!
//! Every call ends in one [`Attempt`], and the classification is the whole
//! point: a caller may send a charge again only when the provider surely
//! did not apply it ([`Attempt::Retry`]), and must **look it up** first when
//! the request may have reached it ([`Attempt::Uncertain`]). A connection
//! refused happened before anything was sent; a timeout or a connection
//! closed after the request was written may have charged.
//!
//! The bearer secret is sent in a sensitive header and never appears in a
//! `Debug` output, a log line or an [`Attempt`]'s reason.

use std::time::Duration;

use axum::http::HeaderValue;
use idemkey_core::{IdempotencyKey, KEY_HEADER, KeyProfile, Problem, parse_retry_after};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use serde::Serialize;
use thiserror::Error;
use tracing::debug;
use uuid::Uuid;

/// The outcome of one call to the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The provider holds this charge (made now, replayed, or found).
    Charged(FoundCharge),
    /// A lookup found no charge under the key: sending it is safe.
    NotFound,
    /// Refused for good by the provider itself (402, or another 4xx it
    /// answers with its problem document, such as a bad request): sending
    /// it again gets the same answer. A 401, 403 or 404, or an error page
    /// that is not the provider's problem document, is a [`Attempt::Retry`]:
    /// a secret being rotated or a wrong route says nothing about the
    /// payment.
    Declined {
        /// The provider's problem code and detail, or the status.
        reason: String,
    },
    /// Surely not applied (connection refused, 409 in progress, 429, 5xx,
    /// 401/403/404, an error page that is not the provider's): send it
    /// again, after `after` when the provider said so.
    Retry {
        /// The provider's `Retry-After`, if any, at most
        /// [`MAX_RETRY_AFTER`].
        after: Option<Duration>,
        /// What happened.
        reason: String,
    },
    /// Sent, but no answer (a timeout, the connection closed after the
    /// request was written, a 2xx whose body did not arrive, a 410 for a
    /// key past the provider's replay window): the charge may exist; look
    /// it up before sending it again.
    Uncertain {
        /// What happened.
        reason: String,
    },
}

/// A charge as the provider answered it: its id and what it says it
/// charged, so a caller can tell its own charge from another one found
/// under the same key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundCharge {
    /// The provider's charge id (`ch_…`).
    pub charge_id: String,
    /// The order it names, if the answer said.
    pub order_id: Option<String>,
    /// Its amount in cents, if the answer said.
    pub amount_cents: Option<i64>,
    /// Its currency, if the answer said.
    pub currency: Option<String>,
}

impl FoundCharge {
    /// A charge known by its id only.
    pub fn id(charge_id: &str) -> Self {
        Self {
            charge_id: charge_id.to_owned(),
            order_id: None,
            amount_cents: None,
            currency: None,
        }
    }

    /// Whether it is the charge of this order, amount and currency: every
    /// one of them present and equal.
    pub fn is_for(&self, order_id: Uuid, amount_cents: i64, currency: &str) -> bool {
        self.order_id
            .as_deref()
            .and_then(|id| Uuid::try_parse(id).ok())
            == Some(order_id)
            && self.amount_cents == Some(amount_cents)
            && self.currency.as_deref() == Some(currency)
    }
}

/// The longest `Retry-After` honoured: a larger (or absurd) value waits
/// this long, so a provider's answer can neither park a message for years
/// nor overflow a timestamp, and a retry stays well inside the provider's
/// key retention.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Why a [`ProviderClient`] cannot be built.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The secret cannot be sent in an `Authorization` field.
    #[error("the provider token is not a valid bearer token")]
    InvalidToken,
    /// The base URL is not an absolute http(s) URL.
    #[error("the provider URL must be http://host:port (optionally with a path)")]
    InvalidUrl,
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// `url` without its userinfo (`https://user:secret@host` becomes
/// `https://***@host`), for logs and messages: a `--payments-url` may carry
/// credentials, and they never reach a log line, an error or `/metrics`.
pub fn redacted_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return if url.contains('@') {
            "***".to_owned()
        } else {
            url.to_owned()
        };
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}://***@{}", &url[..scheme_end], &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// A client of one provider with one secret. Cheap to clone (the
/// connection pool is shared).
#[derive(Clone)]
pub struct ProviderClient {
    http: reqwest::Client,
    base: String,
    authorization: HeaderValue,
}

impl std::fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderClient")
            .field("base", &redacted_url(&self.base))
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct ChargeRequest<'a> {
    order_id: String,
    amount_cents: i64,
    currency: &'a str,
}

impl ProviderClient {
    /// A client of the provider at `base_url` (e.g. `http://127.0.0.1:3002`)
    /// sending `token` as its bearer secret; each call gives up after
    /// `timeout` (connecting included).
    pub fn new(base_url: &str, token: &str, timeout: Duration) -> Result<Self, ClientError> {
        let base = base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://"))
            || reqwest::Url::parse(base).is_err()
        {
            return Err(ClientError::InvalidUrl);
        }
        if idemkey_core::bearer_token(format!("Bearer {token}").as_bytes()) != Some(token) {
            return Err(ClientError::InvalidToken);
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientError::InvalidToken)?;
        authorization.set_sensitive(true);
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // A redirect would turn the POST into another request.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError::Http(e.without_url().to_string()))?;
        Ok(Self {
            http,
            base: base.to_owned(),
            authorization,
        })
    }

    /// `POST /charges` under `key` (the key's characters, e.g. a
    /// downstream key's UUID): the same key always means the same charge.
    pub async fn charge(
        &self,
        key: &str,
        order_id: Uuid,
        amount_cents: i64,
        currency: &str,
    ) -> Attempt {
        let key = match checked_key(key) {
            Ok(key) => key,
            Err(attempt) => return attempt,
        };
        let body = ChargeRequest {
            order_id: order_id.to_string(),
            amount_cents,
            currency,
        };
        let request = self
            .http
            .post(format!("{}/charges", self.base))
            .header(AUTHORIZATION, self.authorization.clone())
            .header(KEY_HEADER, key.to_header_value())
            .header(CONTENT_TYPE, "application/json")
            .json(&body);
        classify(request.send().await, false).await
    }

    /// `GET /charges/{key}`: the charge made under `key`, if any.
    pub async fn lookup(&self, key: &str) -> Attempt {
        let key = match checked_key(key) {
            Ok(key) => key,
            Err(attempt) => return attempt,
        };
        let path =
            percent_encoding::utf8_percent_encode(key.as_str(), percent_encoding::NON_ALPHANUMERIC);
        let request = self
            .http
            .get(format!("{}/charges/{path}", self.base))
            .header(AUTHORIZATION, self.authorization.clone());
        classify(request.send().await, true).await
    }
}

/// The key as the provider reads it; a key it would refuse is a permanent
/// refusal, found before anything is sent.
fn checked_key(key: &str) -> Result<IdempotencyKey, Attempt> {
    let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
    IdempotencyKey::parse(quoted.as_bytes(), KeyProfile::Strict).map_err(|err| Attempt::Declined {
        reason: format!("the idempotency key cannot be sent: {}", err.reason()),
    })
}

/// What a request and its answer mean (see [`Attempt`]).
async fn classify(sent: reqwest::Result<reqwest::Response>, lookup: bool) -> Attempt {
    let response = match sent {
        Ok(response) => response,
        Err(err) => return transport(&err),
    };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, crate::state::display_now()))
        .map(|ms| Duration::from_millis(ms).min(MAX_RETRY_AFTER));
    let body = match response.text().await {
        Ok(body) => body,
        // The status arrived, the rest did not: for a 2xx the charge exists.
        Err(err) if status.is_success() => return transport(&err),
        Err(_) => String::new(),
    };
    if status.is_success() {
        let value = serde_json::from_str::<serde_json::Value>(&body).ok();
        let found = value.as_ref().and_then(|v| {
            Some(FoundCharge {
                charge_id: v["id"].as_str()?.to_owned(),
                order_id: v["order_id"].as_str().map(str::to_owned),
                amount_cents: v["amount_cents"].as_i64(),
                currency: v["currency"].as_str().map(str::to_owned),
            })
        });
        return match found {
            Some(found) => Attempt::Charged(found),
            None => Attempt::Uncertain {
                reason: format!("{status} without a charge id"),
            },
        };
    }
    let problem = Problem::from_json(&body).filter(|p| p.code.is_some());
    let reason = problem_reason(status, &body);
    let retry = |reason: String| Attempt::Retry {
        after: retry_after,
        reason,
    };
    match status {
        // Only the provider's own "no such charge" proves there is none; a
        // 404 page of a proxy or a wrong path proves nothing.
        StatusCode::NOT_FOUND if lookup && problem.is_some() => Attempt::NotFound,
        // Past the provider's replay window: the charge may exist.
        StatusCode::GONE => Attempt::Uncertain { reason },
        StatusCode::CONFLICT
        | StatusCode::TOO_MANY_REQUESTS
        | StatusCode::REQUEST_TIMEOUT
        | StatusCode::TOO_EARLY => retry(reason),
        s if s.is_server_error() => retry(reason),
        // Our secret or the route is wrong (a rotation, a proxy, a moved
        // endpoint): nothing was charged, and an operator can fix it.
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
            retry(format!("the provider did not take the request ({reason})"))
        }
        // Only the provider's problem document is its decision; an HTML
        // error page or an empty body came from something in between.
        s if s.is_client_error() && problem.is_some() => Attempt::Declined { reason },
        _ => retry(format!("not an answer of the provider ({reason})")),
    }
}

/// `code: detail` of a problem body, else the status.
fn problem_reason(status: StatusCode, body: &str) -> String {
    match Problem::from_json(body) {
        Some(problem) => match (problem.code, problem.detail) {
            (Some(code), Some(detail)) => format!("{code}: {detail}"),
            (Some(code), None) => code,
            (None, Some(detail)) => format!("{status}: {detail}"),
            (None, None) => status.to_string(),
        },
        None => status.to_string(),
    }
}

/// A request that got no status: refused before sending (safe to send
/// again) or lost after it (uncertain).
fn transport(err: &reqwest::Error) -> Attempt {
    let detail = describe(err);
    debug!(error = %detail, "provider request failed");
    if err.is_connect() {
        Attempt::Retry {
            after: None,
            reason: format!("cannot connect: {detail}"),
        }
    } else if err.is_timeout() {
        Attempt::Uncertain {
            reason: format!("no answer in time: {detail}"),
        }
    } else {
        Attempt::Uncertain {
            reason: format!("connection lost after sending: {detail}"),
        }
    }
}

/// The error and its causes, without the URL (which may carry
/// credentials).
fn describe(err: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = source {
        parts.push(e.to_string());
        source = e.source();
    }
    if parts.is_empty() {
        parts.push(if err.is_timeout() {
            "timed out".to_owned()
        } else {
            "request failed".to_owned()
        });
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sent_as_sf_strings_and_bad_ones_refused_before_sending() {
        let key = checked_key("8e03978e-40d5-43e8-bc93-6894a57f9324").expect("a key");
        assert_eq!(
            key.to_header_value(),
            "\"8e03978e-40d5-43e8-bc93-6894a57f9324\""
        );
        assert!(matches!(checked_key(""), Err(Attempt::Declined { .. })));
        assert!(matches!(checked_key("é"), Err(Attempt::Declined { .. })));
    }

    #[test]
    fn credentials_in_a_url_are_redacted() {
        for (url, shown) in [
            (
                "https://user:s3cret@pay.example/v1",
                "https://***@pay.example/v1",
            ),
            ("http://s3cret@127.0.0.1:9", "http://***@127.0.0.1:9"),
            ("http://a:b@c:s3cret@host/x@y", "http://***@host/x@y"),
            ("http://127.0.0.1:9/p?q=a@b", "http://127.0.0.1:9/p?q=a@b"),
            ("user:s3cret@host", "***"),
            ("http://host", "http://host"),
        ] {
            assert_eq!(redacted_url(url), shown);
        }
        let client = ProviderClient::new(
            "http://user:s3cret@127.0.0.1:9",
            "token",
            Duration::from_secs(1),
        )
        .expect("a client");
        assert!(!format!("{client:?}").contains("s3cret"));
    }

    #[test]
    fn the_secret_stays_out_of_debug() {
        let client = ProviderClient::new("http://127.0.0.1:9", "s3cret", Duration::from_secs(1))
            .expect("a client");
        assert!(!format!("{client:?}").contains("s3cret"));
        assert!(ProviderClient::new("ftp://x", "s", Duration::from_secs(1)).is_err());
        assert!(ProviderClient::new("http://x", "a b", Duration::from_secs(1)).is_err());
    }

    /// What a response with this status, `Retry-After` and body comes to.
    async fn outcome(status: u16, retry_after: Option<&str>, body: &str, lookup: bool) -> Attempt {
        let mut response = axum::http::Response::builder().status(status);
        if let Some(value) = retry_after {
            response = response.header("retry-after", value);
        }
        let response = response.body(body.to_owned()).expect("a response");
        classify(Ok(reqwest::Response::from(response)), lookup).await
    }

    #[tokio::test]
    async fn statuses_are_classified_as_the_contract_says() {
        let problem = |code: &str| format!(r#"{{"code":"{code}","detail":"d"}}"#);
        assert_eq!(
            outcome(201, None, r#"{"id":"ch_1"}"#, false).await,
            Attempt::Charged(FoundCharge::id("ch_1"))
        );
        let body = r#"{"id":"ch_2","order_id":"8e03978e-40d5-43e8-bc93-6894a57f9324","amount_cents":5980,"currency":"EUR"}"#;
        let Attempt::Charged(found) = outcome(200, None, body, true).await else {
            panic!("a charge");
        };
        let order = Uuid::parse_str("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap();
        assert!(found.is_for(order, 5980, "EUR"));
        assert!(!found.is_for(order, 5981, "EUR"));
        assert!(!found.is_for(Uuid::nil(), 5980, "EUR"));
        assert!(!FoundCharge::id("ch_1").is_for(order, 5980, "EUR"));
        assert!(matches!(
            outcome(201, None, "{}", false).await,
            Attempt::Uncertain { .. }
        ));
        assert_eq!(
            outcome(404, None, &problem("not-found"), true).await,
            Attempt::NotFound
        );
        for (status, code) in [
            (402, "payment-declined"),
            (400, "request-invalid"),
            (422, "idempotency-key-reused"),
        ] {
            assert_eq!(
                outcome(status, None, &problem(code), false).await,
                Attempt::Declined {
                    reason: format!("{code}: d")
                },
                "{status}"
            );
        }
        for status in [409, 429, 408, 425, 500, 502, 503, 504] {
            assert_eq!(
                outcome(status, Some("3"), &problem("x"), false).await,
                Attempt::Retry {
                    after: Some(Duration::from_secs(3)),
                    reason: "x: d".into()
                },
                "{status}"
            );
        }
        // Auth and routing failures, and error pages that are not the
        // provider's problem document, are not decisions about the payment.
        let html = "<html><body>Bad Gateway</body></html>";
        for (status, body, lookup) in [
            (401, problem("unauthorized"), false),
            (403, problem("forbidden"), false),
            (404, problem("not-found"), false),
            (404, html.to_owned(), true),
            (404, String::new(), true),
            (400, html.to_owned(), false),
            (402, html.to_owned(), false),
            (413, String::new(), false),
            (302, String::new(), false),
        ] {
            let got = outcome(status, None, &body, lookup).await;
            assert!(
                matches!(got, Attempt::Retry { after: None, .. }),
                "{status} {body:?}: {got:?}"
            );
            assert!(!format!("{got:?}").contains("<html>"), "{got:?}");
        }
        assert!(matches!(
            outcome(503, Some("soon"), "", false).await,
            Attempt::Retry { after: None, .. }
        ));
        assert!(matches!(
            outcome(410, None, &problem("idempotency-key-expired"), false).await,
            Attempt::Uncertain { .. }
        ));
    }

    #[tokio::test]
    async fn a_huge_retry_after_is_capped() {
        for value in [
            "99999999999999999999999",
            "18446744073709551615",
            "315360000",
            "Fri, 31 Dec 9999 23:59:59 GMT",
        ] {
            assert_eq!(
                outcome(503, Some(value), "", false).await,
                Attempt::Retry {
                    after: Some(MAX_RETRY_AFTER),
                    reason: "503 Service Unavailable".into()
                },
                "{value}"
            );
        }
    }

    #[test]
    fn reasons_come_from_the_problem() {
        let body = r#"{"code":"payment-declined","detail":"No."}"#;
        assert_eq!(
            problem_reason(StatusCode::PAYMENT_REQUIRED, body),
            "payment-declined: No."
        );
        assert_eq!(
            problem_reason(StatusCode::BAD_GATEWAY, "<html>"),
            "502 Bad Gateway"
        );
    }
}

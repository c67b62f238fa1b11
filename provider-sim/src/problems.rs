//! The simulator's own problems: refusals of a refund that the core's
//! catalogue ([`idemkey_core::ProblemCode`], the order service's contract)
//! has no code for. They are sent in the same RFC 9457 form as the core's
//! (`type`, `title`, `status`, `detail`, `code`), with stable codes a
//! client acts on ([`CHARGE_NOT_FOUND`], [`CHARGE_ALREADY_REFUNDED`],
//! [`REFUND_AMOUNT_MISMATCH`]): each is final, sending the same request
//! again gets the same answer.

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use idemkey_core::{PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_PREFIX};
use serde::Serialize;

/// 404 on `POST /refunds`: the caller has no charge with that id. Not the
/// core's `not-found`, which a client reads as "no such route" (a proxy's or
/// a moved endpoint's answer, worth retrying): this one is a decision.
pub const CHARGE_NOT_FOUND: &str = "charge-not-found";

/// 409 on `POST /refunds`: the charge was refunded already, under another
/// key (the problem's `refund` member names that refund). Unlike the
/// layer's 409 `idempotency-request-in-progress`, it is final.
pub const CHARGE_ALREADY_REFUNDED: &str = "charge-already-refunded";

/// 422 on `POST /refunds`: a refund gives back the charge's whole amount,
/// and the request asked another (the problem's `charge_amount_cents`
/// member says the charge's).
pub const REFUND_AMOUNT_MISMATCH: &str = "refund-amount-mismatch";

/// One of the simulator's own refusals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SimProblem {
    /// [`CHARGE_NOT_FOUND`].
    ChargeNotFound,
    /// [`CHARGE_ALREADY_REFUNDED`], with the refund that was made.
    ChargeAlreadyRefunded {
        /// Its id as shown (`re_…`).
        refund: String,
    },
    /// [`REFUND_AMOUNT_MISMATCH`], with the charge's amount.
    RefundAmountMismatch {
        /// The charge's amount, in cents.
        charge_amount_cents: i64,
    },
}

/// The wire form, in the core's member order, then the extension member.
#[derive(Serialize)]
struct Wire<'a> {
    #[serde(rename = "type")]
    type_uri: String,
    title: &'static str,
    status: u16,
    detail: &'a str,
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    refund: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    charge_amount_cents: Option<i64>,
}

impl SimProblem {
    /// The stable code.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::ChargeNotFound => CHARGE_NOT_FOUND,
            Self::ChargeAlreadyRefunded { .. } => CHARGE_ALREADY_REFUNDED,
            Self::RefundAmountMismatch { .. } => REFUND_AMOUNT_MISMATCH,
        }
    }

    /// The status it is sent with.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::ChargeNotFound => StatusCode::NOT_FOUND,
            Self::ChargeAlreadyRefunded { .. } => StatusCode::CONFLICT,
            Self::RefundAmountMismatch { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::ChargeNotFound => "No such charge",
            Self::ChargeAlreadyRefunded { .. } => "The charge is refunded already",
            Self::RefundAmountMismatch { .. } => "A refund gives back the charge's amount",
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::ChargeNotFound => {
                "This account has no charge with that id: nothing was refunded.".to_owned()
            }
            Self::ChargeAlreadyRefunded { refund } => format!(
                "The charge was refunded under another Idempotency-Key ({refund}); a charge is \
                 refunded once. Nothing was refunded now."
            ),
            Self::RefundAmountMismatch {
                charge_amount_cents,
            } => format!(
                "A refund gives back the whole charge, {charge_amount_cents} cents: nothing was \
                 refunded."
            ),
        }
    }

    /// The problem as a response, headers as the core's problems have them.
    pub(crate) fn response(&self) -> Response {
        let detail = self.detail();
        let wire = Wire {
            type_uri: format!("{PROBLEM_TYPE_PREFIX}{}", self.code()),
            title: self.title(),
            status: self.status().as_u16(),
            detail: &detail,
            code: self.code(),
            refund: match self {
                Self::ChargeAlreadyRefunded { refund } => Some(refund),
                _ => None,
            },
            charge_amount_cents: match self {
                Self::RefundAmountMismatch {
                    charge_amount_cents,
                } => Some(*charge_amount_cents),
                _ => None,
            },
        };
        // A struct of strings and integers always serialises.
        let mut response =
            Response::new(Body::from(serde_json::to_string(&wire).unwrap_or_default()));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn own_problems_have_the_core_form_and_stable_codes() {
        for (problem, status, code) in [
            (SimProblem::ChargeNotFound, 404, "charge-not-found"),
            (
                SimProblem::ChargeAlreadyRefunded {
                    refund: "re_1".into(),
                },
                409,
                "charge-already-refunded",
            ),
            (
                SimProblem::RefundAmountMismatch {
                    charge_amount_cents: 5980,
                },
                422,
                "refund-amount-mismatch",
            ),
        ] {
            let response = problem.response();
            assert_eq!(response.status().as_u16(), status);
            assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .expect("a body");
            let parsed = idemkey_core::Problem::from_json(std::str::from_utf8(&body).unwrap())
                .expect("a problem document");
            assert_eq!(parsed.code.as_deref(), Some(code));
            assert_eq!(parsed.status, Some(status));
            assert_eq!(parsed.type_uri, Some(format!("/problems/{code}")));
        }
    }
}

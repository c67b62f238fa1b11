//! `POST /refunds`, `GET /refunds/{key}`, `GET /refunds`: a charge of the
//! caller given back, whole and once. A purchase whose later step fails for
//! good compensates its charge here under a key; the refund's own rules
//! (the charge must be the caller's, the amount its amount, no second
//! refund under another key) are final refusals ([`crate::problems`]).

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use idemkey::duration::rfc3339;
use idemkey::problems::{ApiError, problem_response};
use idemkey_core::{FieldError, Problem, ProblemCode};
use serde::Serialize;
use tracing::{info, warn};

use crate::auth::Caller;
use crate::charges::MAX_AMOUNT_CENTS;
use crate::http::{Provider, created, json, json_body, request_key};
use crate::problems::SimProblem;
use crate::requests::log_run;
use crate::store::{Endpoint, NewRefund, Refund, RefundWrite};

/// A refund as the provider shows it.
#[derive(Serialize)]
struct RefundBody<'a> {
    id: String,
    idempotency_key: &'a str,
    charge_id: String,
    order_id: String,
    amount_cents: i64,
    currency: &'a str,
    created_at: String,
}

/// A refund's id as shown (`re_` and the simple UUID).
fn shown_id(refund: &Refund) -> String {
    format!("re_{}", refund.id.simple())
}

impl<'a> From<&'a Refund> for RefundBody<'a> {
    fn from(refund: &'a Refund) -> Self {
        Self {
            id: shown_id(refund),
            idempotency_key: &refund.idempotency_key,
            charge_id: format!("ch_{}", refund.charge_id.simple()),
            order_id: refund.order_id.to_string(),
            amount_cents: refund.amount_cents,
            currency: &refund.currency,
            created_at: rfc3339(refund.created_at),
        }
    }
}

/// A refund request's members, checked.
#[derive(Debug)]
struct RefundRequest {
    charge_id: uuid::Uuid,
    amount_cents: i64,
}

/// A charge id as the provider shows it: `ch_` and 32 hex digits.
fn charge_id(shown: &str) -> Option<uuid::Uuid> {
    let hex = shown.strip_prefix("ch_")?;
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| uuid::Uuid::try_parse(hex).ok())
        .flatten()
}

/// Reads `{"charge_id", "amount_cents"}`; 400 `request-invalid` with a
/// pointer per failing member otherwise (415 unless declared JSON).
fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<RefundRequest, Problem> {
    json_body(headers)?;
    let invalid = |errors| {
        Problem::new(ProblemCode::RequestInvalid, "The refund is invalid.").with_errors(errors)
    };
    let Ok(serde_json::Value::Object(members)) = serde_json::from_slice(body) else {
        return Err(invalid(vec![FieldError::new("", "must be a JSON object")]));
    };
    let mut errors = Vec::new();
    let charge = members
        .get("charge_id")
        .and_then(|v| v.as_str())
        .and_then(charge_id);
    if charge.is_none() {
        errors.push(FieldError::new(
            "/charge_id",
            "must be a charge id (ch_ and 32 hex digits)",
        ));
    }
    let amount_cents = members
        .get("amount_cents")
        .and_then(serde_json::Value::as_i64)
        .filter(|a| (1..=MAX_AMOUNT_CENTS).contains(a));
    if amount_cents.is_none() {
        errors.push(FieldError::new(
            "/amount_cents",
            format!("must be a whole number from 1 to {MAX_AMOUNT_CENTS}"),
        ));
    }
    match (charge, amount_cents) {
        (Some(charge_id), Some(amount_cents)) => Ok(RefundRequest {
            charge_id,
            amount_cents,
        }),
        _ => Err(invalid(errors)),
    }
}

/// `POST /refunds`, behind its idempotency layer. The refusals are
/// answers the layer stores like any other (a 4xx is final): the same key
/// gets the same refusal again.
pub(crate) async fn create(
    State(provider): State<Provider>,
    Extension(Caller(scope)): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = match request_key(&headers) {
        Ok(key) => key,
        Err(problem) => return problem_response(&problem),
    };
    let request = match read_request(&headers, &body) {
        Ok(request) => request,
        Err(problem) => return problem_response(&problem),
    };
    let new = NewRefund {
        scope,
        idempotency_key: key.as_str().to_owned(),
        charge_id: request.charge_id,
        amount_cents: request.amount_cents,
    };
    let written = match provider.db.insert_refund(&new).await {
        Ok(written) => written,
        Err(err) => return ApiError::Store(err).into_response(),
    };
    // Every run that reached a refund (made, found under the key, or found
    // under another key), with the charge's order: a second refund
    // attempt of one order shows here even though nothing was written.
    if let RefundWrite::Created(refund)
    | RefundWrite::Existing(refund)
    | RefundWrite::AlreadyRefunded(refund) = &written
        && let Err(response) = log_run(
            &provider,
            &new.scope,
            Endpoint::Refunds,
            &key,
            refund.order_id,
        )
        .await
    {
        return response;
    }
    let refund = match written {
        RefundWrite::Created(refund) => refund,
        RefundWrite::Existing(refund) => {
            if refund.charge_id != new.charge_id || refund.amount_cents != new.amount_cents {
                // Only reachable once the key's record is gone: the layer
                // refuses another payload under a key it remembers.
                warn!("a key's existing refund differs from the request");
                return problem_response(&Problem::key_reused());
            }
            refund
        }
        RefundWrite::NoCharge => return SimProblem::ChargeNotFound.response(),
        RefundWrite::AmountMismatch {
            charge_amount_cents,
        } => {
            return SimProblem::RefundAmountMismatch {
                charge_amount_cents,
            }
            .response();
        }
        RefundWrite::AlreadyRefunded(refund) => {
            info!("a charge refunded already under another key");
            return SimProblem::ChargeAlreadyRefunded {
                refund: shown_id(&refund),
            }
            .response();
        }
    };
    created(Endpoint::Refunds, &key, &RefundBody::from(&refund))
}

/// `GET /refunds/{key}`.
pub(crate) async fn lookup(
    State(provider): State<Provider>,
    Extension(Caller(scope)): Extension<Caller>,
    Path(key): Path<String>,
) -> Response {
    match provider.db.refund(&scope, &key).await {
        Ok(Some(refund)) => json(StatusCode::OK, &RefundBody::from(&refund)),
        Ok(None) => problem_response(&Problem::not_found()),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

#[derive(Serialize)]
struct RefundList<'a> {
    refunds: Vec<RefundBody<'a>>,
}

/// `GET /refunds`: every refund of the caller, oldest first.
pub(crate) async fn list(
    State(provider): State<Provider>,
    Extension(Caller(scope)): Extension<Caller>,
) -> Response {
    match provider.db.refunds(&scope).await {
        Ok(refunds) => json(
            StatusCode::OK,
            &RefundList {
                refunds: refunds.iter().map(RefundBody::from).collect(),
            },
        ),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use axum::http::header::CONTENT_TYPE;

    #[test]
    fn charge_ids_are_read_as_shown() {
        let id = uuid::Uuid::parse_str("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap();
        assert_eq!(charge_id(&format!("ch_{}", id.simple())), Some(id));
        for bad in [
            "8e03978e40d543e8bc936894a57f9324",
            "ch_8e03978e-40d5-43e8-bc93-6894a57f9324",
            "ch_8e03978e40d543e8bc936894a57f932",
            "ch_",
            "re_8e03978e40d543e8bc936894a57f9324",
        ] {
            assert_eq!(charge_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn refund_requests_are_checked_member_by_member() {
        let mut json = HeaderMap::new();
        json.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let ok = read_request(
            &json,
            br#"{"charge_id":"ch_8e03978e40d543e8bc936894a57f9324","amount_cents":5980}"#,
        )
        .expect("a valid refund");
        assert_eq!(ok.amount_cents, 5980);
        let bad =
            read_request(&json, br#"{"charge_id":"x","amount_cents":0}"#).expect_err("invalid");
        let pointers: Vec<&str> = bad.errors().iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/charge_id", "/amount_cents"]);
        let text = read_request(&HeaderMap::new(), b"{}").expect_err("415");
        assert_eq!(text.status(), 415);
    }
}

//! `POST /charges`, `GET /charges/{key}`, `GET /charges`: a payment of an
//! order, the first step of a purchase. The amounts of `--decline-amount`
//! are declined with 402 before anything is stored.

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
use crate::http::{Provider, created, json, json_body, request_key};
use crate::requests::log_run;
use crate::store::{Charge, ChargeWrite, Endpoint, NewCharge};

/// The largest amount a charge may have, in cents.
pub const MAX_AMOUNT_CENTS: i64 = 100_000_000_000;

/// A charge as the provider shows it.
#[derive(Serialize)]
pub(crate) struct ChargeBody<'a> {
    id: String,
    idempotency_key: &'a str,
    order_id: String,
    amount_cents: i64,
    currency: &'a str,
    created_at: String,
}

impl<'a> From<&'a Charge> for ChargeBody<'a> {
    fn from(charge: &'a Charge) -> Self {
        Self {
            id: format!("ch_{}", charge.id.simple()),
            idempotency_key: &charge.idempotency_key,
            order_id: charge.order_id.to_string(),
            amount_cents: charge.amount_cents,
            currency: &charge.currency,
            created_at: rfc3339(charge.created_at),
        }
    }
}

/// A charge request's members, checked.
pub(crate) struct ChargeRequest {
    pub(crate) order_id: uuid::Uuid,
    pub(crate) amount_cents: i64,
    pub(crate) currency: String,
}

/// Reads `{"order_id", "amount_cents", "currency"}`; 400 `request-invalid`
/// with a pointer per failing member otherwise.
pub(crate) fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<ChargeRequest, Problem> {
    json_body(headers)?;
    let invalid = |errors| {
        Problem::new(ProblemCode::RequestInvalid, "The charge is invalid.").with_errors(errors)
    };
    let Ok(serde_json::Value::Object(members)) = serde_json::from_slice(body) else {
        return Err(invalid(vec![FieldError::new("", "must be a JSON object")]));
    };
    let mut errors = Vec::new();
    let order_id = members
        .get("order_id")
        .and_then(|v| v.as_str())
        .and_then(|s| uuid::Uuid::try_parse(s).ok());
    if order_id.is_none() {
        errors.push(FieldError::new("/order_id", "must be a UUID"));
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
    let currency = members
        .get("currency")
        .and_then(|v| v.as_str())
        .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()));
    if currency.is_none() {
        errors.push(FieldError::new(
            "/currency",
            "must be three capital letters (ISO 4217)",
        ));
    }
    match (order_id, amount_cents, currency) {
        (Some(order_id), Some(amount_cents), Some(currency)) => Ok(ChargeRequest {
            order_id,
            amount_cents,
            currency: currency.to_owned(),
        }),
        _ => Err(invalid(errors)),
    }
}

/// `POST /charges`, behind its idempotency layer.
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
    if provider.declined.contains(&request.amount_cents) {
        info!(amount_cents = request.amount_cents, "declined");
        return problem_response(&Problem::payment_declined(&format!(
            "the provider declines charges of {} cents",
            request.amount_cents
        )));
    }
    let new = NewCharge {
        scope,
        idempotency_key: key.as_str().to_owned(),
        order_id: request.order_id,
        amount_cents: request.amount_cents,
        currency: request.currency,
    };
    let written = provider.db.insert_charge(&new).await;
    if written.is_ok()
        && let Err(response) =
            log_run(&provider, &new.scope, Endpoint::Charges, &key, new.order_id).await
    {
        return response;
    }
    let charge = match written {
        Ok(ChargeWrite::Created(charge)) => charge,
        Ok(ChargeWrite::Existing(charge)) => {
            let same = charge.order_id == new.order_id
                && charge.amount_cents == new.amount_cents
                && charge.currency == new.currency;
            if !same {
                // Only reachable once the key's record is gone: the layer
                // refuses another payload under a key it remembers.
                warn!("a key's existing charge differs from the request");
                return problem_response(&Problem::key_reused());
            }
            charge
        }
        Err(err) => return ApiError::Store(err).into_response(),
    };
    created(Endpoint::Charges, &key, &ChargeBody::from(&charge))
}

/// `GET /charges/{key}`.
pub(crate) async fn lookup(
    State(provider): State<Provider>,
    Extension(Caller(scope)): Extension<Caller>,
    Path(key): Path<String>,
) -> Response {
    match provider.db.charge(&scope, &key).await {
        Ok(Some(charge)) => json(StatusCode::OK, &ChargeBody::from(&charge)),
        Ok(None) => problem_response(&Problem::not_found()),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

#[derive(Serialize)]
struct ChargeList<'a> {
    charges: Vec<ChargeBody<'a>>,
}

/// `GET /charges`: every charge of the caller, oldest first.
pub(crate) async fn list(
    State(provider): State<Provider>,
    Extension(Caller(scope)): Extension<Caller>,
) -> Response {
    match provider.db.charges(&scope).await {
        Ok(charges) => json(
            StatusCode::OK,
            &ChargeList {
                charges: charges.iter().map(ChargeBody::from).collect(),
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
    fn charge_requests_are_checked_member_by_member() {
        let mut json = HeaderMap::new();
        json.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let ok = read_request(
            &json,
            br#"{"order_id":"8e03978e-40d5-43e8-bc93-6894a57f9324","amount_cents":5980,"currency":"EUR"}"#,
        )
        .expect("a valid charge");
        assert_eq!((ok.amount_cents, ok.currency.as_str()), (5980, "EUR"));
        let bad = read_request(
            &json,
            br#"{"order_id":"x","amount_cents":0,"currency":"eur"}"#,
        )
        .err()
        .expect("invalid");
        let pointers: Vec<&str> = bad.errors().iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/order_id", "/amount_cents", "/currency"]);
        let text = read_request(&HeaderMap::new(), b"{}").err().expect("415");
        assert_eq!(text.status(), 415);
    }
}

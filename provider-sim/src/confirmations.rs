//! `POST /confirmations`, `GET /confirmations/{key}`, `GET /confirmations`:
//! the simulator's mail sink. A purchase's last step "sends" its
//! confirmation here under a key; the sink keeps one per key (as the
//! charges), so a checker can assert that each order got exactly one.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use idemkey::duration::rfc3339;
use idemkey::problems::{ApiError, problem_response};
use idemkey_core::{FieldError, Problem, ProblemCode};
use serde::Serialize;
use tracing::warn;

use crate::auth::Caller;
use crate::http::{Provider, created, json, json_body, request_key};
use crate::requests::log_run;
use crate::store::{Confirmation, ConfirmationWrite, Endpoint, NewConfirmation};

/// The longest recipient, in characters (an address's limit, RFC 5321).
pub const MAX_RECIPIENT_CHARS: usize = 254;

/// The longest text, in characters.
pub const MAX_TEXT_CHARS: usize = 2000;

/// A confirmation as the provider shows it.
#[derive(Serialize)]
struct ConfirmationBody<'a> {
    id: String,
    idempotency_key: &'a str,
    order_id: String,
    recipient: &'a str,
    text: &'a str,
    created_at: String,
}

impl<'a> From<&'a Confirmation> for ConfirmationBody<'a> {
    fn from(confirmation: &'a Confirmation) -> Self {
        Self {
            id: format!("cf_{}", confirmation.id.simple()),
            idempotency_key: &confirmation.idempotency_key,
            order_id: confirmation.order_id.to_string(),
            recipient: &confirmation.recipient,
            text: &confirmation.text,
            created_at: rfc3339(confirmation.created_at),
        }
    }
}

/// A confirmation request's members, checked.
#[derive(Debug)]
struct ConfirmationRequest {
    order_id: uuid::Uuid,
    recipient: String,
    text: String,
}

/// Reads `{"order_id", "recipient", "text"}`; 400 `request-invalid` with a
/// pointer per failing member otherwise (415 unless declared JSON).
fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<ConfirmationRequest, Problem> {
    json_body(headers)?;
    let invalid = |errors| {
        Problem::new(ProblemCode::RequestInvalid, "The confirmation is invalid.")
            .with_errors(errors)
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
    let text_of = |name: &str, max: usize| {
        members
            .get(name)
            .and_then(|v| v.as_str())
            .filter(|s| (1..=max).contains(&s.chars().count()))
    };
    let recipient = text_of("recipient", MAX_RECIPIENT_CHARS);
    if recipient.is_none() {
        errors.push(FieldError::new(
            "/recipient",
            format!("must be a string of 1 to {MAX_RECIPIENT_CHARS} characters"),
        ));
    }
    let text = text_of("text", MAX_TEXT_CHARS);
    if text.is_none() {
        errors.push(FieldError::new(
            "/text",
            format!("must be a string of 1 to {MAX_TEXT_CHARS} characters"),
        ));
    }
    match (order_id, recipient, text) {
        (Some(order_id), Some(recipient), Some(text)) => Ok(ConfirmationRequest {
            order_id,
            recipient: recipient.to_owned(),
            text: text.to_owned(),
        }),
        _ => Err(invalid(errors)),
    }
}

/// `POST /confirmations`, behind its idempotency layer.
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
    let new = NewConfirmation {
        scope,
        idempotency_key: key.as_str().to_owned(),
        order_id: request.order_id,
        recipient: request.recipient,
        text: request.text,
    };
    let written = provider.db.insert_confirmation(&new).await;
    if written.is_ok()
        && let Err(response) = log_run(
            &provider,
            &new.scope,
            Endpoint::Confirmations,
            &key,
            new.order_id,
        )
        .await
    {
        return response;
    }
    let confirmation = match written {
        Ok(ConfirmationWrite::Created(confirmation)) => confirmation,
        Ok(ConfirmationWrite::Existing(confirmation)) => {
            let same = confirmation.order_id == new.order_id
                && confirmation.recipient == new.recipient
                && confirmation.text == new.text;
            if !same {
                // Only reachable once the key's record is gone: the layer
                // refuses another payload under a key it remembers.
                warn!("a key's existing confirmation differs from the request");
                return problem_response(&Problem::key_reused());
            }
            confirmation
        }
        Err(err) => return ApiError::Store(err).into_response(),
    };
    created(
        Endpoint::Confirmations,
        &key,
        &ConfirmationBody::from(&confirmation),
    )
}

/// `GET /confirmations/{key}`.
pub(crate) async fn lookup(
    State(provider): State<Provider>,
    Extension(Caller(scope)): Extension<Caller>,
    Path(key): Path<String>,
) -> Response {
    match provider.db.confirmation(&scope, &key).await {
        Ok(Some(confirmation)) => json(StatusCode::OK, &ConfirmationBody::from(&confirmation)),
        Ok(None) => problem_response(&Problem::not_found()),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

#[derive(Serialize)]
struct ConfirmationList<'a> {
    confirmations: Vec<ConfirmationBody<'a>>,
}

/// `GET /confirmations`: every confirmation of the caller, oldest first.
pub(crate) async fn list(
    State(provider): State<Provider>,
    Extension(Caller(scope)): Extension<Caller>,
) -> Response {
    match provider.db.confirmations(&scope).await {
        Ok(confirmations) => json(
            StatusCode::OK,
            &ConfirmationList {
                confirmations: confirmations.iter().map(ConfirmationBody::from).collect(),
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
    fn confirmation_requests_are_checked_member_by_member() {
        let mut json = HeaderMap::new();
        json.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let ok = read_request(
            &json,
            r#"{"order_id":"8e03978e-40d5-43e8-bc93-6894a57f9324","recipient":"ana@example.com","text":"Gracias ✓"}"#.as_bytes(),
        )
        .expect("a valid confirmation");
        assert_eq!(
            (ok.recipient.as_str(), ok.text.as_str()),
            ("ana@example.com", "Gracias ✓")
        );
        // Lengths count characters, not bytes.
        let long = "é".repeat(MAX_TEXT_CHARS);
        let body = serde_json::json!({
            "order_id": "8e03978e-40d5-43e8-bc93-6894a57f9324",
            "recipient": "r".repeat(MAX_RECIPIENT_CHARS),
            "text": long,
        });
        assert!(read_request(&json, body.to_string().as_bytes()).is_ok());
        let bad = read_request(
            &json,
            serde_json::json!({
                "order_id": "x",
                "recipient": "r".repeat(MAX_RECIPIENT_CHARS + 1),
                "text": "",
            })
            .to_string()
            .as_bytes(),
        )
        .expect_err("invalid");
        let pointers: Vec<&str> = bad.errors().iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/order_id", "/recipient", "/text"]);
        let text = read_request(&HeaderMap::new(), b"{}").expect_err("415");
        assert_eq!(text.status(), 415);
    }
}

//! `POST /purchases` and `GET /purchases/{id}`: the purchase of several
//! steps ([`crate::purchase`]) under one key.
//!
//! The first request reserves the stock in the key's own transaction and
//! answers `202 Accepted` with the purchase's state document (or its final
//! answer when every step ends within the configured wait); a retry with
//! the same key resumes it and answers the same way; once ended, the key
//! replays the final answer. `GET /purchases/{id}` is where a client polls.

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idemkey::flow::StepError;
use idemkey::idempotency::RecordKey;
use idemkey::in_transaction::{Error, Options, Outcome};
use idemkey::metrics::OutcomeLabel;
use idemkey::problems::{ApiError, UNAVAILABLE_RETRY_AFTER_SECS, json_response, problem_response};
use idemkey_core::{MAX_ORDER_BODY_BYTES, NewOrder, PURCHASE_OPERATION, Problem};
use serde_json::{Value, json};
use tracing::warn;
use uuid::Uuid;

use super::authed::authed;
use super::create::{Read, read};
use crate::AppState;
use crate::auth::bearer_hash;
use crate::purchase::PURCHASE;

/// `POST /purchases`, its response tagged with its outcome for the metrics.
pub(super) async fn create(State(state): State<AppState>, request: Request) -> Response {
    let (label, mut response) = match start(&state, request).await {
        Ok(answered) => answered,
        Err(err) => ("invalid", err.into_response()),
    };
    response.extensions_mut().insert(OutcomeLabel(label));
    response
}

async fn start(state: &AppState, request: Request) -> Result<(&'static str, Response), ApiError> {
    let checked = match read(state, request, MAX_ORDER_BODY_BYTES).await? {
        Read::Ready(checked) => checked,
        Read::Answered(label, response) => return Ok((label, response)),
    };
    let order = NewOrder::from_json(&checked.body)?;
    if state
        .catalogue()
        .price(state.db(), &order.sku)
        .await?
        .is_none()
    {
        return Err(Problem::sku_not_in_catalogue().into());
    }
    let account = authed(
        state,
        checked.token,
        state.db().account(checked.token).await?,
    )?;
    let Some(purchases) = state.purchases() else {
        return Err(Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS).into());
    };
    let key = RecordKey {
        scope: account.scope(),
        operation: PURCHASE_OPERATION,
        key: checked.key,
    };
    let mut input = json!({ "sku": order.sku, "quantity": order.quantity });
    if let Some(reference) = &order.reference {
        input["reference"] = Value::from(reference.as_str());
    }
    let settings = state.settings();
    let options = Options {
        expiry_policy: settings.expiry_policy,
        metrics: Some(std::sync::Arc::clone(state.metrics())),
        ..Options::new(settings.replay_ttl)
    };
    let fingerprint = order.fingerprint_for(&PURCHASE_OPERATION);
    Ok(
        match purchases
            .start(PURCHASE, &key, fingerprint, &input, &options)
            .await
        {
            Ok(Outcome::Executed(response) | Outcome::NotStored(response)) => {
                ("executed", response.to_response(false))
            }
            Ok(Outcome::Replayed(response)) => ("replayed", response.to_response(true)),
            Ok(Outcome::Rejected(problem)) => ("rejected", problem_response(&problem)),
            Err(Error::Store(err)) => return Err(err.into()),
            // A step that failed for a moment rolled the first transaction
            // back: nothing is stored, and the same key runs it again.
            Err(Error::Effect(StepError::Retry(reason) | StepError::Refused(reason))) => {
                warn!(%reason, "a purchase's first transaction rolled back");
                (
                    "unavailable",
                    problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS)),
                )
            }
        },
    )
}

/// `GET /purchases/{id}`: the caller's purchase, as its state document
/// (`200`), with the final answer's status and body once it ended; `404`
/// for another account's or an unknown id.
pub(super) async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let token = bearer_hash(&headers).ok_or_else(Problem::unauthorized)?;
    let account = authed(&state, token, state.db().account(token).await?)?;
    let (Ok(id), Some(purchases)) = (Uuid::try_parse(&id), state.purchases()) else {
        return Err(Problem::not_found().into());
    };
    let Some(view) = purchases.poll(&account.0.to_string(), id).await? else {
        return Err(Problem::not_found().into());
    };
    let mut document = serde_json::to_value(&view.document).unwrap_or(Value::Null);
    document["status"] = Value::from(200);
    if view.row.state.ended() {
        let result = view
            .response
            .body
            .as_deref()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .unwrap_or(Value::Null);
        document["result_status"] = Value::from(view.response.status);
        document["result"] = result;
    }
    Ok(json_response(StatusCode::OK, document.to_string()))
}

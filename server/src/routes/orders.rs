//! `POST /orders`, `GET /orders` and `GET /orders/{id}`.
//!
//! The create path is the order front end of the engine: the core's head
//! checks in the core's order, the body read within its limit and validated
//! by the core, then one database call that claims the key, inserts the
//! order and stores the response in one transaction, or answers from what
//! the key holds (decided by [`idemkey::idempotency`]).

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idemkey_core::{
    Fingerprint, IdempotencyKey, MAX_ORDER_BODY_BYTES, NewOrder, ORDER_OPERATION, Problem,
    ProblemCode,
};
use serde::Serialize;
use std::time::Instant;
use tracing::warn;

use uuid::Uuid;

use super::authed::authed;
use super::operations::lookup_path;
use crate::auth::bearer_hash;
use crate::db::{
    AccountId, Order, OrderAttempt, OrderDraft, Payment, PaymentState, Refusal, StoreError,
};
use crate::faults::{self, Fault};
use crate::replay_cache::{Hit, ReplayCache};
use crate::{AppState, Settings};
use idemkey::duration::rfc3339;
use idemkey::idempotency::{self, Mode, Outcome, Policy, RecordKey, Source, StoredResponse};
use idemkey::metrics::OutcomeLabel;
use idemkey::problems::json_response;
use idemkey::problems::{ApiError, UNAVAILABLE_RETRY_AFTER_SECS, problem_response};
use idemkey::request_log::LogNote;
use idemkey::serve::ConnectionControl;

#[derive(Serialize)]
struct PaymentBody<'a> {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    charge_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    attempts: u32,
}

#[derive(Serialize)]
struct OrderBody<'a> {
    id: String,
    sku: &'a str,
    quantity: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    amount_cents: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    currency: Option<&'a str>,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment: Option<PaymentBody<'a>>,
}

impl<'a> From<&'a Order> for OrderBody<'a> {
    fn from(order: &'a Order) -> Self {
        Self {
            id: order.id.to_string(),
            sku: &order.sku,
            quantity: order.quantity,
            reference: order.reference.as_deref(),
            amount_cents: order.amount.as_ref().map(|(cents, _)| *cents),
            currency: order.amount.as_ref().map(|(_, currency)| currency.as_str()),
            created_at: rfc3339(order.created_at),
            payment: order.payment.as_ref().map(|payment| {
                let (status, charge_id, reason) = match &payment.state {
                    PaymentState::Pending => ("pending", None, None),
                    PaymentState::Charged { charge_id } => {
                        ("charged", Some(charge_id.as_str()), None)
                    }
                    PaymentState::Failed { reason } => ("failed", None, Some(reason.as_str())),
                };
                PaymentBody {
                    status,
                    charge_id,
                    reason,
                    attempts: payment.attempts,
                }
            }),
        }
    }
}

fn order_body(order: &Order) -> String {
    serde_json::to_string(&OrderBody::from(order)).unwrap_or_default()
}

/// The charge's outbox payload: what the provider is asked to charge.
#[derive(Serialize)]
struct ChargePayload<'a> {
    order_id: String,
    amount_cents: i64,
    currency: &'a str,
}

fn charge_payload(order: &Order) -> String {
    let (amount_cents, currency) = order
        .amount
        .as_ref()
        .map_or((0, ""), |(cents, currency)| (*cents, currency.as_str()));
    let payload = ChargePayload {
        order_id: order.id.to_string(),
        amount_cents,
        currency,
    };
    serde_json::to_string(&payload).unwrap_or_default()
}

/// The engine's policies for orders, from the running settings.
fn order_policy(settings: &Settings) -> Policy {
    Policy {
        expiry: settings.expiry_policy,
        lookup: Some(lookup_path),
        // The claim and the order share one transaction: the lease is
        // never visible to anyone else.
        ..Policy::new(
            Mode::Transactional,
            std::time::Duration::from_secs(60),
            settings.replay_ttl,
        )
    }
}

/// `POST /orders`, its response tagged with its outcome for the metrics.
pub(super) async fn create(State(state): State<AppState>, request: Request) -> Response {
    let (label, mut response) = match create_order(&state, request).await {
        Ok(answered) => answered,
        Err(err) => (outcome_of_error(&err), err.into_response()),
    };
    response.extensions_mut().insert(OutcomeLabel(label));
    response
}

/// What stopped a request before the engine answered.
fn outcome_of_error(err: &ApiError) -> &'static str {
    match err {
        ApiError::Store(StoreError::LockTimeout) => "in_progress",
        ApiError::Store(_) => "unavailable",
        ApiError::Problem(problem) => match problem.code() {
            ProblemCode::Unauthorized => "unauthorized",
            ProblemCode::ServiceUnavailable => "unavailable",
            _ => "invalid",
        },
    }
}

async fn create_order(
    state: &AppState,
    request: Request,
) -> Result<(&'static str, Response), ApiError> {
    let checked = match super::create::read(state, request, MAX_ORDER_BODY_BYTES).await? {
        super::create::Read::Ready(checked) => checked,
        super::create::Read::Answered(label, response) => return Ok((label, response)),
    };
    let (token, parts, settings) = (checked.token, &checked.parts, state.settings());
    let headers = &parts.headers;
    let fault = faults::requested(settings, headers);
    let policy = order_policy(settings);
    let cache = state.replay_cache().filter(|_| fault.is_none());
    let hit = cache.and_then(|cache| {
        let account = cache.account(token)?;
        let key = order_key(account, &checked.key);
        Some((cache.lookup(&key)?, key))
    });
    // A body byte for byte the same as one the copy was already found to
    // carry is neither parsed nor hashed again: it parsed then, to the
    // record's fingerprint.
    let known = hit
        .as_ref()
        .and_then(|(hit, _)| hit.fingerprint_of(&checked.body));
    let (fingerprint, order) = match known {
        Some(fingerprint) => (fingerprint, None),
        None => {
            let order = NewOrder::from_json(&checked.body)?;
            (order.fingerprint(), Some(order))
        }
    };
    if let (Some(cache), Some((hit, key))) = (cache, &hit)
        && let Some(answered) = from_cache(cache, hit, key, fingerprint, &policy)
    {
        state.token_usage().note(token);
        let (label, mut response) = answered;
        response.extensions_mut().insert(LogNote {
            resource: None,
            cached: true,
        });
        return Ok((label, response));
    }
    let order = match order {
        Some(order) => order,
        None => NewOrder::from_json(&checked.body)?,
    };

    // The time shown in the order; every decision is the database's.
    let created_at = crate::display_now();
    let id = Uuid::new_v4();
    let catalogue = state.catalogue();
    let mut price = catalogue.price(state.db(), &order.sku).await?;
    let mut tries = 0;
    let answer = loop {
        let Some(unit) = price else {
            return Err(Problem::sku_not_in_catalogue().into());
        };
        let new = Order {
            id,
            sku: order.sku.clone(),
            quantity: order.quantity,
            reference: order.reference.clone(),
            amount: Some((
                unit.unit_cents * i64::from(order.quantity),
                unit.currency.clone(),
            )),
            created_at,
            payment: Some(Payment::NEW),
        };
        let response = StoredResponse::new(faults::stored_status(fault, 201), order_body(&new))
            .with_header("content-type", "application/json")
            .with_header("location", &format!("/orders/{id}"));
        let draft = OrderDraft {
            operation: ORDER_OPERATION,
            key: checked.key.clone(),
            fingerprint,
            charge: charge_payload(&new),
            order: new,
            price: unit,
            response,
            hold: crate::hold::Hold::current(),
        };
        let sent = Instant::now();
        match authed(
            state,
            token,
            state.db().create_order(token, &draft, &policy).await?,
        )? {
            OrderAttempt::Answered(answer) => break (*answer, draft, sent),
            OrderAttempt::Refused(Refusal::ReferenceTaken(existing)) => {
                return Ok((
                    "rejected",
                    problem_response(&Problem::order_reference_exists(existing)),
                ));
            }
            // The price changed (or the sku went) since this process read
            // the catalogue: read it again and write the order at its
            // price; a catalogue that keeps changing is answered as busy.
            OrderAttempt::Refused(Refusal::PriceChanged) if tries == 0 => {
                tries += 1;
                catalogue.reload(state.db()).await?;
                price = catalogue.cached(&order.sku);
            }
            OrderAttempt::Refused(Refusal::PriceChanged) => {
                return Err(Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS).into());
            }
        }
    };
    let (answer, draft, sent) = answer;
    let outcome = answer.outcome;
    if let (Some(cache), Some((account, read))) = (cache, &answer.seen) {
        // A replay or a 422 that the cache could have answered; a replay's
        // body carries the record's fingerprint.
        cache.miss();
        let replayed = matches!(outcome, Outcome::Replayed(_));
        cache.remember(
            token,
            *account,
            &order_key(*account, &draft.key),
            read,
            sent,
            replayed.then_some(&checked.body),
        );
    }
    let label = outcome.label();
    // No line of its own: the request's one access line
    // ([`crate::telemetry`]) carries the outcome and the order.
    let response = match outcome {
        Outcome::Executed { response, .. } => {
            // Its charge is in the outbox: no need for a worker of this
            // process to wait for its next poll.
            state.outbox_wake().notify_one();
            let mut response = after_commit(state, fault, &parts.extensions, response).await;
            response.extensions_mut().insert(LogNote {
                resource: Some(id),
                cached: false,
            });
            response
        }
        Outcome::Replayed(response) => response.to_response(true),
        Outcome::Rejected { problem, .. } => problem_response(&problem),
    };
    Ok((label, response))
}

fn order_key(account: AccountId, key: &IdempotencyKey) -> RecordKey {
    RecordKey {
        scope: account.scope(),
        operation: ORDER_OPERATION,
        key: key.clone(),
    }
}

/// The answer from the replay cache's copy of the caller's completed
/// record: a replay (its response built when the copy was kept), or 422
/// for another payload. The engine decides on the copy as on a row;
/// whatever else it decides is the database's to answer.
fn from_cache(
    cache: &ReplayCache,
    hit: &Hit,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
) -> Option<(&'static str, Response)> {
    let Some(answer) = idempotency::answer_for(&hit.read(), key, fingerprint, policy, Source::Copy)
    else {
        cache.forget(key);
        return None;
    };
    cache.hit();
    let outcome = Outcome::<()>::from(answer);
    let label = outcome.label();
    let response = match outcome {
        Outcome::Replayed(_) => hit.replay(),
        Outcome::Rejected { problem, .. } => problem_response(&problem),
        Outcome::Executed { .. } => return None,
    };
    Some((label, response))
}

/// The answer to a committed new order, unless a fault says otherwise.
async fn after_commit(
    state: &AppState,
    fault: Option<Fault>,
    extensions: &axum::http::Extensions,
    response: StoredResponse,
) -> Response {
    let drop_connection = faults::after_commit(fault) || state.take_lose_next_response();
    if drop_connection {
        if let Some(control) = extensions.get::<ConnectionControl>() {
            warn!("fault: closing the connection after COMMIT, without a response");
            control.abort();
            // The connection task drops this future with the connection.
            std::future::pending::<()>().await;
        }
        // No connection to close (e.g. a test driving the router directly):
        // answer what a client would see from a proxy that lost the answer.
        return problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS));
    }
    response.to_response(false)
}

/// How many orders `GET /orders` lists without `?limit=`.
pub const DEFAULT_LIST_LIMIT: u32 = 50;

/// The most orders one `GET /orders` lists; a larger `?limit=` is capped.
pub const MAX_LIST_LIMIT: u32 = 100;

#[derive(Serialize)]
struct OrderList<'a> {
    orders: Vec<OrderBody<'a>>,
}

/// `?limit=N` (a whole number of 1 or more, of any size: a larger one than
/// [`MAX_LIST_LIMIT`] is capped, as the published contract says, rather
/// than refused when it overflows); other query parameters are ignored.
fn list_limit(query: Option<&str>) -> Result<u32, Problem> {
    let Some(value) = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("limit="))
    else {
        return Ok(DEFAULT_LIST_LIMIT);
    };
    let parsed = match value.parse::<u64>() {
        Err(err) if *err.kind() == std::num::IntErrorKind::PosOverflow => Ok(u64::MAX),
        other => other,
    };
    match parsed {
        Ok(n) if n >= 1 => Ok(u32::try_from(n).map_or(MAX_LIST_LIMIT, |n| n.min(MAX_LIST_LIMIT))),
        _ => Err(Problem::new(
            ProblemCode::RequestInvalid,
            "The limit query parameter must be a whole number of 1 or more.",
        )),
    }
}

/// `GET /orders`: the caller's newest orders, newest first
/// (`{"orders":[{id, sku, quantity, created_at}, ...]}`).
pub(super) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let token = bearer_hash(&headers).ok_or_else(Problem::unauthorized)?;
    let limit = list_limit(query.as_deref())?;
    let orders = authed(&state, token, state.db().recent_orders(token, limit).await?)?;
    let list = OrderList {
        orders: orders.iter().map(OrderBody::from).collect(),
    };
    let body = serde_json::to_string(&list).unwrap_or_default();
    Ok(json_response(StatusCode::OK, body))
}

/// `GET /orders/{id}`: the caller's order; 404, with the same body as for
/// an id that does not exist, for anyone else's.
pub(super) async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let token = bearer_hash(&headers).ok_or_else(Problem::unauthorized)?;
    let id = Uuid::try_parse(&id).ok();
    // Still ask the store for a malformed id, so that an unknown token gets
    // 401 rather than 404 whatever the path says.
    let lookup_id = id.unwrap_or(Uuid::nil());
    match authed(&state, token, state.db().order(token, lookup_id).await?)? {
        Some(order) => Ok(json_response(StatusCode::OK, order_body(&order))),
        None => Err(Problem::not_found().into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_limits() {
        assert_eq!(list_limit(None), Ok(DEFAULT_LIST_LIMIT));
        assert_eq!(list_limit(Some("")), Ok(DEFAULT_LIST_LIMIT));
        assert_eq!(list_limit(Some("x=1&limit=3")), Ok(3));
        assert_eq!(list_limit(Some("limit=100000000000")), Ok(MAX_LIST_LIMIT));
        assert_eq!(list_limit(Some("limit=101")), Ok(MAX_LIST_LIMIT));
        let huge = format!("limit={}", "9".repeat(40));
        assert_eq!(list_limit(Some(&huge)), Ok(MAX_LIST_LIMIT));
        for bad in [
            "limit=0",
            "limit=-1",
            "limit=",
            "limit=two",
            "limit=1.5",
            "limit=-99999999999999999999999",
        ] {
            assert!(list_limit(Some(bad)).is_err(), "{bad}");
        }
    }
}

//! `POST /orders`, `GET /orders` and `GET /orders/{id}`.
//!
//! The create path: the core's head checks in the core's order, the body
//! read within its limit and validated by the core, then one store call
//! that claims the key, inserts the order and stores the response in one
//! transaction, or returns what the key already holds for
//! [`decide`](idemkey_core::decide).

use axum::body::to_bytes;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idemkey_core::{
    Decision, HeadRules, MAX_ORDER_BODY_BYTES, NewOrder, ORDER_OPERATION, Problem, ProblemCode,
    REPLAYED_HEADER, RequestHead, UnixMillis, check_body_len, check_head, decide,
};
use serde::Serialize;
use tracing::{info, warn};
use uuid::Uuid;

use super::{json_response, lookup_path, rfc3339};
use crate::auth::{bearer_hash, hash_token};
use crate::problems::{
    ApiError, UNAVAILABLE_RETRY_AFTER_SECS, body_timeout_response, problem_response,
};
use crate::serve::ConnectionControl;
use crate::store::{
    Authed, CreateOutcome, Order, OrderDraft, OrderStore as _, ReexecuteOutcome, StoreFault,
    StoredResponse,
};
use crate::{AppState, Settings};

/// Request header naming a fault to inject, honoured only under
/// `--test-faults`: `fail-storing-result`, `exit-after-commit` or
/// `drop-after-commit`.
pub const TEST_FAULT_HEADER: &str = "x-idemkey-test-fault";

/// Exit status of the process when `exit-after-commit` fires.
pub const EXIT_AFTER_COMMIT_STATUS: i32 = 86;

/// How many times one request re-reads a key that changed under it.
const MAX_ATTEMPTS: usize = 3;

#[derive(Serialize)]
struct OrderBody<'a> {
    id: String,
    sku: &'a str,
    quantity: u8,
    created_at: String,
}

fn order_body(id: Uuid, sku: &str, quantity: u8, created_at: UnixMillis) -> String {
    let body = OrderBody {
        id: id.to_string(),
        sku,
        quantity,
        created_at: rfc3339(created_at),
    };
    serde_json::to_string(&body).unwrap_or_default()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    FailStoringResult,
    ExitAfterCommit,
    DropAfterCommit,
}

fn requested_fault(settings: &Settings, headers: &HeaderMap) -> Option<Fault> {
    if !settings.test_faults {
        return None;
    }
    match headers.get(TEST_FAULT_HEADER)?.as_bytes() {
        b"fail-storing-result" => Some(Fault::FailStoringResult),
        b"exit-after-commit" => Some(Fault::ExitAfterCommit),
        b"drop-after-commit" => Some(Fault::DropAfterCommit),
        _ => None,
    }
}

/// `POST /orders`.
pub(super) async fn create(
    State(state): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let settings = state.settings();
    let headers = &parts.headers;
    let lines =
        |name| -> Vec<&[u8]> { headers.get_all(name).iter().map(|v| v.as_bytes()).collect() };
    let (authorization, key_lines, content_type) = (
        lines(axum::http::header::AUTHORIZATION.as_str()),
        lines(idemkey_core::KEY_HEADER),
        lines(CONTENT_TYPE.as_str()),
    );
    let content_length = match headers.get(CONTENT_LENGTH) {
        None => None,
        // A Content-Length hyper accepted is a number; anything else is
        // left to the limit on the bytes actually read.
        Some(v) => v.to_str().ok().and_then(|s| s.parse().ok()),
    };
    let head = RequestHead {
        authorization: &authorization,
        idempotency_key: &key_lines,
        content_type: &content_type,
        content_length,
    };
    let rules = HeadRules {
        key_profile: settings.key_profile,
        require_auth: true,
        max_body_bytes: MAX_ORDER_BODY_BYTES,
    };
    let checked = check_head(&head, &rules)?;
    let token = checked
        .bearer
        .map(hash_token)
        .ok_or_else(Problem::unauthorized)?;

    let read = to_bytes(body, MAX_ORDER_BODY_BYTES + 1);
    let Ok(read) = tokio::time::timeout(settings.body_read_timeout, read).await else {
        warn!("the request body did not arrive in time; closing the connection");
        return Ok(body_timeout_response());
    };
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(err) if is_length_limit(&err) => {
            return Err(Problem::payload_too_large(MAX_ORDER_BODY_BYTES).into());
        }
        // The client stopped sending half-way; nobody may read this answer.
        Err(_) => {
            return Err(Problem::new(
                ProblemCode::RequestInvalid,
                "The request body could not be read.",
            )
            .into());
        }
    };
    check_body_len(bytes.len() as u64, MAX_ORDER_BODY_BYTES)?;
    let order = NewOrder::from_json(&bytes)?;
    let fingerprint = order.fingerprint();
    let fault = requested_fault(settings, headers);

    let now = state.now();
    let order_id = Uuid::new_v4();
    let location = format!("/orders/{order_id}");
    let draft = OrderDraft {
        operation: ORDER_OPERATION,
        key: checked.key,
        fingerprint,
        order_id,
        created_at: now,
        replay_until: now.plus_millis(duration_millis(settings.replay_ttl)),
        response: StoredResponse {
            status: 201,
            headers: vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("location".to_owned(), location),
            ],
            body: order_body(order_id, &order.sku, order.quantity, now),
        },
        sku: order.sku,
        quantity: order.quantity,
    };
    let store_fault =
        (fault == Some(Fault::FailStoringResult)).then_some(StoreFault::FailStoringResult);

    for _ in 0..MAX_ATTEMPTS {
        let record = match state
            .store()
            .create_order(token, &draft, store_fault)
            .await?
        {
            CreateOutcome::Created => {
                info!(decision = "execute", order = %order_id, "order created");
                return Ok(after_commit(&state, fault, &parts.extensions, draft.response).await);
            }
            CreateOutcome::Unauthorized => return Err(Problem::unauthorized().into()),
            CreateOutcome::Existing(record) => record,
        };
        let decision = decide(record.stored, fingerprint, now, settings.expiry_policy);
        info!(decision = decision.as_str(), "key already taken");
        match decision {
            Decision::Replay => {
                let Some(stored) = record.response else {
                    warn!("completed record without a stored response");
                    break;
                };
                let mut response = stored.into_response();
                response.headers_mut().insert(
                    REPLAYED_HEADER,
                    axum::http::HeaderValue::from_static("true"),
                );
                return Ok(response);
            }
            Decision::Reexecute | Decision::TakeOver => {
                match state.store().reexecute_order(token, &draft, now).await? {
                    ReexecuteOutcome::Replaced => {
                        info!(decision = decision.as_str(), order = %order_id, "order created");
                        return Ok(
                            after_commit(&state, fault, &parts.extensions, draft.response).await,
                        );
                    }
                    ReexecuteOutcome::Unauthorized => return Err(Problem::unauthorized().into()),
                    ReexecuteOutcome::Changed => continue,
                }
            }
            Decision::Expired => {
                let lookup = lookup_path(&draft.key);
                return Err(Problem::key_expired(Some(lookup)).into());
            }
            // The record exists, so the core never says execute here; read
            // it again rather than guess.
            Decision::Execute => continue,
            other => {
                if let Some(problem) = other.problem(None) {
                    return Err(problem.into());
                }
                break;
            }
        }
    }
    Err(Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS).into())
}

fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

fn duration_millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The answer to a committed new order, unless a fault says otherwise.
async fn after_commit(
    state: &AppState,
    fault: Option<Fault>,
    extensions: &axum::http::Extensions,
    response: StoredResponse,
) -> Response {
    let drop_connection = fault == Some(Fault::DropAfterCommit) || state.take_lose_next_response();
    if fault == Some(Fault::ExitAfterCommit) {
        warn!("test fault: exiting right after COMMIT, before answering");
        std::process::exit(EXIT_AFTER_COMMIT_STATUS);
    }
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
    response.into_response()
}

/// How many orders `GET /orders` lists without `?limit=`.
pub const DEFAULT_LIST_LIMIT: u32 = 50;

/// The most orders one `GET /orders` lists; a larger `?limit=` is capped.
pub const MAX_LIST_LIMIT: u32 = 100;

#[derive(Serialize)]
struct OrderList<'a> {
    orders: Vec<OrderBody<'a>>,
}

/// `?limit=N` (1 or more; capped at [`MAX_LIST_LIMIT`]); other query
/// parameters are ignored.
fn list_limit(query: Option<&str>) -> Result<u32, Problem> {
    let Some(value) = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("limit="))
    else {
        return Ok(DEFAULT_LIST_LIMIT);
    };
    match value.parse::<u64>() {
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
    match state.store().recent_orders(token, limit).await? {
        Authed::Unauthorized => Err(Problem::unauthorized().into()),
        Authed::Ok(orders) => {
            let list = OrderList {
                orders: orders
                    .iter()
                    .map(|o| OrderBody {
                        id: o.id.to_string(),
                        sku: &o.sku,
                        quantity: o.quantity,
                        created_at: rfc3339(o.created_at),
                    })
                    .collect(),
            };
            let body = serde_json::to_string(&list).unwrap_or_default();
            Ok(json_response(StatusCode::OK, body))
        }
    }
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
    match state.store().order(token, lookup_id).await? {
        Authed::Unauthorized => Err(Problem::unauthorized().into()),
        Authed::Ok(Some(Order {
            id,
            sku,
            quantity,
            created_at,
        })) => Ok(json_response(
            StatusCode::OK,
            order_body(id, &sku, quantity, created_at),
        )),
        Authed::Ok(None) => Err(Problem::not_found().into()),
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
        for bad in ["limit=0", "limit=-1", "limit=", "limit=two"] {
            assert!(list_limit(Some(bad)).is_err(), "{bad}");
        }
    }
}

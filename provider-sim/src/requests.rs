//! The request log: every call of an effect as it arrives, and every run
//! of an effect's handler that reached its write (which the effect's
//! unique key would hide), read back by `GET /requests`.

use axum::extract::{RawQuery, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use idemkey::duration::rfc3339;
use idemkey::problems::{ApiError, problem_response};
use idemkey_core::IdempotencyKey;
use serde::Serialize;
use uuid::Uuid;

use crate::auth::Caller;
use crate::calls::call_of;
use crate::http::{Provider, json, query_member, request_key, unknown_member};
use crate::store::{Endpoint, RequestKind};

/// Middleware inside the authentication, outside the faults: logs every
/// call of an effect as it arrives ([`RequestKind`]), so a test sees a
/// second request under a key that the effect's unique key would hide, and
/// whether a lookup came before each resend.
pub(crate) async fn record(
    State(provider): State<Provider>,
    request: Request,
    next: Next,
) -> Response {
    let scope = request.extensions().get::<Caller>().map(|c| c.0.clone());
    let logged = match call_of(request.method(), request.uri().path()) {
        Some((endpoint, None)) => request_key(request.headers())
            .ok()
            .map(|key| (endpoint, RequestKind::Request, key.as_str().to_owned())),
        Some((endpoint, Some(key))) => {
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            Some((endpoint, RequestKind::Lookup, key.into_owned()))
        }
        None => None,
    };
    if let (Some(scope), Some((endpoint, kind, key))) = (scope, logged) {
        if key.is_empty() || key.len() > 1024 {
            return next.run(request).await;
        }
        if let Err(err) = provider
            .db
            .log_provider_request(&scope, endpoint, kind, &key, None)
            .await
        {
            return ApiError::Store(err).into_response();
        }
    }
    next.run(request).await
}

/// Logs a run of `endpoint`'s handler that reached its effect's write,
/// with the order it names: every run, a same-key repeat included, which
/// the effect's unique key would hide.
pub(crate) async fn log_run(
    provider: &Provider,
    scope: &str,
    endpoint: Endpoint,
    key: &IdempotencyKey,
    order_id: Uuid,
) -> Result<(), Response> {
    provider
        .db
        .log_provider_request(
            scope,
            endpoint,
            endpoint.run_kind(),
            key.as_str(),
            Some(order_id),
        )
        .await
        .map_err(|err| ApiError::Store(err).into_response())
}

/// One row of the request log as the provider shows it.
#[derive(Serialize)]
struct RequestBody<'a> {
    seq: i64,
    kind: &'a str,
    effect: &'a str,
    idempotency_key: &'a str,
    order_id: Option<String>,
    created_at: String,
}

#[derive(Serialize)]
struct RequestList<'a> {
    requests: Vec<RequestBody<'a>>,
}

/// `GET /requests`: the caller's request log, in arrival order. The
/// charges' rows without `?effect=` (the log as it was before the other
/// effects, which the discipline check of `idemkey_testkit` reads), one
/// other effect's, or `all`.
pub(crate) async fn requests(
    State(provider): State<Provider>,
    axum::Extension(Caller(scope)): axum::Extension<Caller>,
    RawQuery(query): RawQuery,
) -> Response {
    let effect = match query_member(query.as_deref(), "effect") {
        None => Some(Endpoint::Charges),
        Some("all") => None,
        Some(name) => match Endpoint::from_name(name) {
            Some(endpoint) => Some(endpoint),
            None => return problem_response(&unknown_member("effect", true)),
        },
    };
    match provider.db.provider_requests(&scope, effect).await {
        Ok(log) => json(
            StatusCode::OK,
            &RequestList {
                requests: log
                    .iter()
                    .map(|r| RequestBody {
                        seq: r.seq,
                        kind: &r.kind,
                        effect: &r.effect,
                        idempotency_key: &r.idempotency_key,
                        order_id: r.order_id.map(|id| id.to_string()),
                        created_at: rfc3339(r.created_at),
                    })
                    .collect(),
            },
        ),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

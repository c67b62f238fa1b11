//! `--memory`: a **benchmark sink**, not a simulator of a provider. It
//! answers `POST /charges` (201 and a charge id) and `GET /charges/{key}`
//! (the lookup a client does before sending again) from a map in memory,
//! one charge per caller and `Idempotency-Key`, with no database and no
//! idempotency records behind it: a client's own cost (the outbox worker's)
//! can be measured against a downstream that costs almost nothing.
//! Everything is lost at exit; confirmations, refunds and the request log
//! are not served. The fault switches (`--fail-rate`, `--latency-ms`,
//! `--lose-rate`) apply as they do to the simulator.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header::CACHE_CONTROL;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use idemkey::problems::problem_response;
use idemkey_core::{Problem, REPLAYED_HEADER, UnixMillis};
use parking_lot::Mutex;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::auth::{Caller, authenticate};
use crate::charges::{ChargeBody, read_request};
use crate::faults::inject;
use crate::gates::Gates;
use crate::http::{created, json, request_key};
use crate::store::{Charge, Endpoint};

/// A charge made, with the request body it was made from (another body
/// under the same key is refused, as the simulator refuses it).
struct Made {
    charge: Charge,
    body: Bytes,
}

/// The charges by caller scope and key.
#[derive(Clone, Default)]
struct Sink {
    charges: Arc<Mutex<HashMap<(String, String), Made>>>,
    declined: Arc<HashSet<i64>>,
}

/// The sink's router, with the simulator's authentication and faults.
pub(crate) fn router(gates: Gates) -> Router {
    let Gates {
        scopes,
        faults,
        declined,
    } = gates;
    let sink = Sink {
        declined,
        ..Sink::default()
    };
    Router::new()
        .route("/charges", post(create))
        .route("/charges/{key}", get(lookup))
        .route_layer(from_fn_with_state(faults, inject))
        .route_layer(from_fn_with_state(scopes, authenticate))
        .fallback(|| async { problem_response(&Problem::not_found()) })
        .with_state(sink)
        .layer(SetResponseHeaderLayer::overriding(
            CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
}

/// `POST /charges`: the charge under this key, made now or replayed.
async fn create(
    State(sink): State<Sink>,
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
    if sink.declined.contains(&request.amount_cents) {
        return problem_response(&Problem::payment_declined(&format!(
            "the provider declines charges of {} cents",
            request.amount_cents
        )));
    }
    let mut charges = sink.charges.lock();
    let entry = charges.entry((scope, key.as_str().to_owned()));
    let replayed = matches!(entry, std::collections::hash_map::Entry::Occupied(_));
    let made = entry.or_insert_with(|| Made {
        charge: Charge {
            id: uuid::Uuid::new_v4(),
            idempotency_key: key.as_str().to_owned(),
            order_id: request.order_id,
            amount_cents: request.amount_cents,
            currency: request.currency,
            created_at: now(),
        },
        body: body.clone(),
    });
    if made.body != body {
        return problem_response(&Problem::key_reused());
    }
    let mut response = created(Endpoint::Charges, &key, &ChargeBody::from(&made.charge));
    if replayed {
        response
            .headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    response
}

/// `GET /charges/{key}`.
async fn lookup(
    State(sink): State<Sink>,
    Extension(Caller(scope)): Extension<Caller>,
    Path(key): Path<String>,
) -> Response {
    match sink.charges.lock().get(&(scope, key)) {
        Some(made) => json(StatusCode::OK, &ChargeBody::from(&made.charge)),
        None => problem_response(&Problem::not_found()),
    }
}

/// This process's clock, as the charge's creation time.
fn now() -> UnixMillis {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    UnixMillis(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scope_of;
    use crate::faults::Faults;
    use axum::body::Body;
    use axum::http::Request;
    use std::time::Duration;
    use tower::ServiceExt as _;

    /// The gates `--memory --token s3cret` builds: one caller, no faults,
    /// 402 cents declined.
    fn gates() -> Gates {
        Gates {
            scopes: Arc::new(HashSet::from([scope_of("s3cret")])),
            faults: Arc::new(Faults::new(0.0, 0.0, Duration::ZERO, 1)),
            declined: Arc::new(HashSet::from([402])),
        }
    }

    async fn call(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
        let response = app.clone().oneshot(request).await.expect("an answer");
        let (status, headers) = (response.status(), response.headers().clone());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a body");
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    fn charge(key: &str, amount: i64) -> Request<Body> {
        Request::post("/charges")
            .header("authorization", "Bearer s3cret")
            .header("idempotency-key", format!("\"{key}\""))
            .header("content-type", "application/json")
            .body(Body::from(format!(
                r#"{{"order_id":"8e03978e-40d5-43e8-bc93-6894a57f9324","amount_cents":{amount},"currency":"EUR"}}"#
            )))
            .expect("a request")
    }

    fn lookup(key: &str) -> Request<Body> {
        Request::get(format!("/charges/{key}"))
            .header("authorization", "Bearer s3cret")
            .body(Body::empty())
            .expect("a request")
    }

    #[tokio::test]
    async fn a_key_makes_one_charge_that_a_lookup_finds() {
        let app = router(gates());
        assert_eq!(call(&app, lookup("k1")).await.0, StatusCode::NOT_FOUND);
        let (status, headers, first) = call(&app, charge("k1", 5980)).await;
        assert_eq!(status, StatusCode::CREATED);
        assert!(headers.get(REPLAYED_HEADER).is_none());
        let (status, headers, again) = call(&app, charge("k1", 5980)).await;
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(headers.get(REPLAYED_HEADER).unwrap(), "true");
        assert_eq!(first, again);
        let (status, _, found) = call(&app, lookup("k1")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(found, first);
        assert_eq!(
            call(&app, charge("k1", 100)).await.0,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            call(&app, charge("k2", 402)).await.0,
            StatusCode::PAYMENT_REQUIRED
        );
        let anonymous = Request::get("/charges/k1").body(Body::empty()).unwrap();
        assert_eq!(call(&app, anonymous).await.0, StatusCode::UNAUTHORIZED);
    }
}

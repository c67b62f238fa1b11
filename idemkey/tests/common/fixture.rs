//! The routes of `idemkey-server fixture`, a small HTTP service behind
//! [`IdempotencyLayer`] for third-party conformance suites (the `lenient`
//! key profile, no authentication: one fixed scope). One file for both
//! users: the library's Layer tests (`idemkey/tests/layer.rs`) drive this
//! router in-process, and the server's `fixture` subcommand
//! (`server/src/fixture.rs`) includes it through `#[path]` and serves it. Its routes:
//!
//! | route | answer | behind the layer |
//! |---|---|---|
//! | `POST /echo` | 201, the body's bytes and its `Content-Type` | yes |
//! | `POST /status/{code}` | that status (200 to 599), `status:{code}`, `text/plain` | yes |
//! | `POST /slow?ms=N` | sleeps N ms (at most [`MAX_SLOW_MS`]), then 200 `slept:N` | yes |
//! | `POST /large?bytes=N` | 200, N bytes of `x` (at most [`MAX_LARGE_BYTES`]) | yes |
//! | `GET /counter` | 200 `{"count": n}`: how many POST handlers ran | yes (GET passes through) |
//! | `POST /reset` | 204, the counter back to 0 | no |
//!
//! Every run of a POST handler behind the layer adds one to the counter, so
//! a suite sees whether a retry ran the handler again. Every response has
//! `Cache-Control: no-store`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idemkey_core::{Problem, ProblemCode};
use serde::Deserialize;
use tower_http::set_header::SetResponseHeaderLayer;

use idemkey::layer::IdempotencyLayer;
use idemkey::problems::problem_response;

/// Longest sleep `POST /slow` accepts, in milliseconds.
pub const MAX_SLOW_MS: u64 = 120_000;

/// Largest body `POST /large` sends, in bytes.
pub const MAX_LARGE_BYTES: usize = 64 * 1024 * 1024;

/// How many POST handlers behind the layer ran.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// The count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The fixture's routes behind `layer` (and `POST /reset` outside it).
pub fn router(layer: IdempotencyLayer, counter: Counter) -> Router {
    Router::new()
        .route("/echo", post(echo))
        .route("/status/{code}", post(status))
        .route("/slow", post(slow))
        .route("/large", post(large))
        .route("/counter", get(count))
        .route_layer(layer)
        .route("/reset", post(reset))
        .fallback(|| async { problem_response(&Problem::not_found()) })
        .method_not_allowed_fallback(|| async { problem_response(&Problem::method_not_allowed()) })
        .with_state(counter)
        .layer(SetResponseHeaderLayer::overriding(
            CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
}

/// The one scope of the fixture's records: it has no authentication, so
/// every caller shares it (a conformance fixture, never a service).
pub const FIXTURE_SCOPE: &str = "fixture";

fn text(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

fn invalid(detail: &str) -> Response {
    problem_response(&Problem::new(ProblemCode::RequestInvalid, detail))
}

async fn echo(State(counter): State<Counter>, headers: HeaderMap, body: Bytes) -> Response {
    counter.bump();
    let mut response = (StatusCode::CREATED, body).into_response();
    response.headers_mut().remove(CONTENT_TYPE);
    if let Some(content_type) = headers.get(CONTENT_TYPE) {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, content_type.clone());
    }
    response
}

async fn status(State(counter): State<Counter>, Path(code): Path<String>) -> Response {
    counter.bump();
    match code.parse::<u16>().ok().filter(|c| (200..=599).contains(c)) {
        Some(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            text(status, format!("status:{code}"))
        }
        None => invalid("The status must be a number from 200 to 599."),
    }
}

#[derive(Deserialize)]
struct SlowQuery {
    ms: Option<u64>,
}

async fn slow(
    State(counter): State<Counter>,
    query: Result<Query<SlowQuery>, QueryRejection>,
) -> Response {
    counter.bump();
    let Ok(Query(SlowQuery { ms })) = query else {
        return invalid("ms must be a whole number of milliseconds.");
    };
    let ms = ms.unwrap_or(0);
    if ms > MAX_SLOW_MS {
        return invalid("ms is too large.");
    }
    tokio::time::sleep(Duration::from_millis(ms)).await;
    text(StatusCode::OK, format!("slept:{ms}"))
}

#[derive(Deserialize)]
struct LargeQuery {
    bytes: Option<usize>,
}

async fn large(
    State(counter): State<Counter>,
    query: Result<Query<LargeQuery>, QueryRejection>,
) -> Response {
    counter.bump();
    let Ok(Query(LargeQuery { bytes: Some(n) })) = query else {
        return invalid("bytes must be a whole number.");
    };
    if n > MAX_LARGE_BYTES {
        return invalid("bytes is too large.");
    }
    text(StatusCode::OK, vec![b'x'; n])
}

async fn count(State(counter): State<Counter>) -> Response {
    let mut response = Response::new(Body::from(
        serde_json::json!({ "count": counter.get() }).to_string(),
    ));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

async fn reset(State(counter): State<Counter>) -> StatusCode {
    counter.0.store(0, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

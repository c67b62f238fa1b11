//! `idemkey-server fixture`: a small HTTP service behind
//! [`IdempotencyLayer`] for third-party conformance suites, with the
//! `lenient` key profile, no authentication (one fixed scope) and these
//! routes:
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
//!
//! Without `--database-url` the fixture opens a **new** SQLite file in the
//! system's temporary directory (its path is logged), so each run starts
//! with no keys; pass `--database-url sqlite://PATH` to keep records across
//! restarts, `postgres://…` for PostgreSQL, or `redis://…` /
//! `redis+cluster://host:port,…` for Redis (`--redis-wait-replicas N` makes
//! each claim and completion wait for N replicas).

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
use idemkey_core::{KeyProfile, Problem, ProblemCode};
use serde::Deserialize;
use tower_http::set_header::SetResponseHeaderLayer;
use tracing::info;

use idemkey::Db;
use idemkey::store::{RedisSettings, StoreSettings};
use idemkey_server::config::FixtureArgs;
use idemkey_server::layer::IdempotencyLayer;
use idemkey_server::problems::problem_response;
use idemkey_server::serve::{serve, shutdown_signal};

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

/// The layer as the fixture configures it from its flags.
pub fn layer(db: Db, args: &FixtureArgs) -> IdempotencyLayer {
    IdempotencyLayer::new(db, |_| Some(FIXTURE_SCOPE.to_owned()))
        .key_profile(KeyProfile::Lenient)
        .lease(args.lease)
        .replay_ttl(args.replay_ttl)
        .expiry_policy(args.expiry_policy)
        .max_request_body(args.max_body_bytes)
        .max_stored_response(args.max_response_bytes)
}

/// Runs the fixture until SIGTERM or SIGINT.
pub async fn run(args: FixtureArgs) -> Result<(), String> {
    args.validate()?;
    let temp_file = args.database_url.is_none().then(|| {
        std::env::temp_dir().join(format!(
            "idemkey-fixture-{}-{}.db",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    });
    let url = match (&args.database_url, &temp_file) {
        (Some(url), _) => url.clone(),
        (None, Some(file)) => format!("sqlite://{}", file.display()),
        (None, None) => unreachable!("a temporary file is chosen when no URL is given"),
    };
    let redis = RedisSettings {
        wait_replicas: args.redis_wait_replicas,
        wait_timeout: args.redis_wait_timeout,
        retention: args.redis_retention,
        ca_file: args.redis_ca_file.clone(),
        ..RedisSettings::default()
    };
    let settings = StoreSettings {
        pooler: args.pg_pooler,
        application_name: "idemkey-server",
        redis,
        ..StoreSettings::default()
    };
    let store = Db::open(&url, &settings)
        .await
        .map_err(|e| format!("cannot open the database: {e}"))?;
    let backend = store.backend();
    match &temp_file {
        Some(path) => info!(backend, path = %path.display(), "fixture database"),
        None => info!(backend, "fixture database"),
    }
    let app = router(layer(store, &args), Counter::default());
    let (listener, local) = idemkey_server::serve::bind(args.bind).await?;
    info!(
        address = %local,
        lease_ms = args.lease.as_millis() as u64,
        replay_ttl_s = args.replay_ttl.as_secs(),
        expiry_policy = args.expiry_policy.as_str(),
        "fixture listening on http://{local}"
    );
    let served = serve(listener, app, shutdown_signal(), Duration::from_secs(5))
        .await
        .map_err(|e| format!("server error: {e}"));
    // A temporary database is the fixture's alone: remove it on a clean stop.
    if let Some(file) = temp_file {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = file.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
    served
}

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

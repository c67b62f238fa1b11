//! What both bench servers share, compiled into each (`#[path]`): the one
//! echo handler, the run counter and the serving loop. Two binaries because
//! one lock file cannot hold both: ruts pulls sqlx, whose (unused) SQLite
//! driver links a libsqlite3-sys that conflicts with the one rusqlite, and
//! so idemkey-server, links.
//!
//! Routes of both: `POST /echo` (the measured one: 201 with the request's
//! body and `Content-Type`; `?ms=N` sleeps N ms, at most 10 s, inside the
//! handler, for the concurrent-duplicate probe), `GET /counter` (how many
//! times the handler ran), `POST /session` (creates a session where the
//! server has sessions; 204 elsewhere), `GET /healthz`. Bench tools, never
//! services: no authentication, one fixed idempotency scope, 127.0.0.1 by
//! default.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};

/// How many times the handler ran: a duplicate that reached it shows here.
#[derive(Clone, Debug, Default)]
pub struct Runs(Arc<AtomicU64>);

/// The handler's answer, before it becomes a response (a live one, or one
/// an idempotency store keeps).
pub struct Echo {
    /// The request's `Content-Type`, if it had one.
    pub content_type: Option<HeaderValue>,
    /// The request's body.
    pub body: Bytes,
}

/// `?ms=N` of a request: how long the handler sleeps.
pub fn delay(uri: &Uri) -> Duration {
    let ms = uri
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("ms=")))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    Duration::from_millis(ms.min(10_000))
}

/// The handler's work: count the run, echo the body.
pub fn run(runs: &Runs, headers: &HeaderMap, body: Bytes) -> Echo {
    runs.0.fetch_add(1, Ordering::SeqCst);
    Echo {
        content_type: headers.get(CONTENT_TYPE).cloned(),
        body,
    }
}

impl Echo {
    /// The live response.
    pub fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() = StatusCode::CREATED;
        if let Some(ct) = self.content_type {
            response.headers_mut().insert(CONTENT_TYPE, ct);
        }
        response
    }
}

/// `POST /echo` as a plain axum handler (every mode but in-transaction).
pub async fn handler(
    State(runs): State<Runs>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let wait = delay(&uri);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    run(&runs, &headers, body).into_response()
}

/// `POST /echo` with nothing around it: the baseline.
pub fn bare(runs: Runs) -> Router {
    Router::new().route("/echo", post(handler)).with_state(runs)
}

/// `GET /counter` and `GET /healthz`, plus a no-op `POST /session` unless
/// the measured router has its own.
pub fn outside(runs: Runs, with_session: bool) -> Router {
    let mut router = Router::new()
        .route(
            "/counter",
            get(|State(runs): State<Runs>| async move {
                format!("{{\"count\":{}}}", runs.0.load(Ordering::SeqCst))
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    if !with_session {
        router = router.route("/session", post(|| async { StatusCode::NO_CONTENT }));
    }
    router.with_state(runs)
}

/// Serves `app` on `bind` until SIGINT (SIGTERM ends the process).
pub async fn serve(bind: SocketAddr, app: Router, what: &str) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    eprintln!("{what} listening on http://{bind}");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| e.to_string())
}

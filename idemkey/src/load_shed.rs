//! Load shedding: past a cap, a quick 503 `service-unavailable` with
//! `Retry-After` instead of a queue that grows until clients time out.
//!
//! Two caps, both in [`Limits`]:
//! - **connections** ([`Limits::max_connections`]): the accept loop keeps
//!   accepting; a connection past the cap is answered one 503 (or 200 for
//!   `GET /healthz`) and closed, instead of waiting unseen in the listen
//!   backlog. Answering is itself capped ([`REJECTING_MAX`] at once); past
//!   that, new connections are closed at once.
//! - **requests in progress** ([`Limits::max_in_flight`]): a request past
//!   the cap is answered 503 before any handler runs, so nothing was
//!   stored. The operator's probes ([`EXEMPT`]) are never shed.
//!
//! The database's own wait (`--pool-wait`, on both backends) bounds what is
//! left: a request admitted here waits at most that long for a connection.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::CACHE_CONTROL;
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use idemkey_core::{Problem, ProblemCode};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::debug;

use crate::problems::{UNAVAILABLE_RETRY_AFTER_SECS, problem_response};

/// Default of `--max-connections`: within the 1024 file descriptors a
/// process gets by default, with room for the database's.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Default of `--max-in-flight`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

/// Connections past the cap being answered 503 at once; past this too, a
/// new connection is closed without an answer (memory stays bounded under
/// a flood).
pub const REJECTING_MAX: usize = 256;

/// How long a connection past the cap may take to send its request head.
const REJECT_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Paths never shed by the in-flight cap: liveness, readiness and metrics
/// must answer precisely when the server is busy.
pub const EXEMPT: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The problem's detail when load is shed.
const DETAIL: &str =
    "The server is at capacity and did nothing with this request. Retry after Retry-After seconds.";

static SHED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
static SHED_REQUESTS: AtomicU64 = AtomicU64::new(0);
static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// A request's place under the in-flight cap, counted while it lives (also
/// when the request is dropped half-way, e.g. its client went away).
struct Place {
    _permit: OwnedSemaphorePermit,
}

impl Place {
    fn new(permit: OwnedSemaphorePermit) -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        Self { _permit: permit }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The caps of one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections served at once.
    pub max_connections: usize,
    /// Most requests in progress at once, [`EXEMPT`] paths aside.
    pub max_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

/// What the accept loop does with a new connection.
pub(crate) enum Admission {
    /// Serve it; the permit is its place under the cap.
    Serve(OwnedSemaphorePermit),
    /// Past the cap: answer 503 and close ([`reject`]).
    Reject(OwnedSemaphorePermit),
    /// Past the cap and the rejecting cap: close it at once.
    Close,
}

/// The caps' permits.
pub(crate) struct Shedder {
    connections: Arc<Semaphore>,
    rejecting: Arc<Semaphore>,
    in_flight: Arc<Semaphore>,
}

impl Shedder {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            connections: Arc::new(places(limits.max_connections)),
            rejecting: Arc::new(places(REJECTING_MAX)),
            in_flight: Arc::new(places(limits.max_in_flight)),
        }
    }

    /// Decides a new connection's fate, without waiting.
    pub(crate) fn admit(&self) -> Admission {
        if let Ok(permit) = Arc::clone(&self.connections).try_acquire_owned() {
            return Admission::Serve(permit);
        }
        SHED_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        match Arc::clone(&self.rejecting).try_acquire_owned() {
            Ok(permit) => Admission::Reject(permit),
            Err(_) => Admission::Close,
        }
    }

    /// `router` with the in-flight cap around every route.
    pub(crate) fn limit_in_flight(&self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(
            Arc::clone(&self.in_flight),
            in_flight,
        ))
    }
}

/// A semaphore of `n` places (a cap beyond what a semaphore holds is no
/// cap at all, never a panic).
fn places(n: usize) -> Semaphore {
    Semaphore::new(n.min(Semaphore::MAX_PERMITS))
}

/// `(connections, requests)` shed since the process started, for metrics.
pub fn shed_counts() -> (u64, u64) {
    (
        SHED_CONNECTIONS.load(Ordering::Relaxed),
        SHED_REQUESTS.load(Ordering::Relaxed),
    )
}

/// Requests of this process in progress under the in-flight cap, for
/// metrics.
pub fn in_flight_count() -> u64 {
    IN_FLIGHT.load(Ordering::Relaxed)
}

/// The 503 of shed load: the core's `service-unavailable` with
/// `Retry-After`.
pub fn overloaded() -> Response {
    problem_response(
        &Problem::new(ProblemCode::ServiceUnavailable, DETAIL)
            .with_retry_after(UNAVAILABLE_RETRY_AFTER_SECS),
    )
}

/// Middleware: the request runs holding an in-flight permit, or is answered
/// [`overloaded`] at once.
async fn in_flight(
    State(permits): State<Arc<Semaphore>>,
    request: Request,
    next: Next,
) -> Response {
    if EXEMPT.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let Ok(place) = permits.try_acquire_owned().map(Place::new) else {
        SHED_REQUESTS.fetch_add(1, Ordering::Relaxed);
        debug!(path = request.uri().path(), "in-flight cap reached: 503");
        return overloaded();
    };
    let response = next.run(request).await;
    drop(place);
    response
}

/// Serves one request on a connection past the cap, `permit` held: 200 for
/// `GET /healthz` (the process is alive), [`overloaded`] for anything else,
/// then closes the connection.
pub(crate) async fn reject(stream: TcpStream, permit: OwnedSemaphorePermit) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(REJECT_HEADER_TIMEOUT)
        .keep_alive(false);
    let service = hyper::service::service_fn(|request: hyper::Request<Incoming>| async move {
        let alive = request.method() == Method::GET && request.uri().path() == "/healthz";
        let mut response = if alive { healthz().await } else { overloaded() };
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Ok::<_, Infallible>(response)
    });
    if let Err(err) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        debug!(error = %err, "rejected connection ended with an error");
    }
    drop(permit);
}

/// `GET /healthz`: liveness, answered without the database or its pool
/// (a slow or locked database is `/readyz`'s business; a liveness probe
/// that waited on it would get a busy process restarted). The accept loop
/// answers it even past its connection cap.
pub async fn healthz() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        r#"{"status":"ok"}"#,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_connections_are_answered_then_closed() {
        let shedder = Shedder::new(Limits {
            max_connections: 1,
            max_in_flight: 1,
        });
        let served = shedder.admit();
        assert!(matches!(served, Admission::Serve(_)));
        let rejected: Vec<_> = (0..REJECTING_MAX).map(|_| shedder.admit()).collect();
        assert!(rejected.iter().all(|a| matches!(a, Admission::Reject(_))));
        assert!(matches!(shedder.admit(), Admission::Close));
        // A place freed is a place again.
        drop(served);
        assert!(matches!(shedder.admit(), Admission::Serve(_)));
    }

    #[test]
    fn a_cap_beyond_a_semaphore_is_no_cap_not_a_panic() {
        assert_eq!(
            places(usize::MAX).available_permits(),
            Semaphore::MAX_PERMITS
        );
    }

    #[test]
    fn the_answer_is_the_cores_503_with_retry_after() {
        let response = overloaded();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
    }
}

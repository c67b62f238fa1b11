//! One log line per request: the method, the route template
//! (`/things/{id}`, not the path), the status, the latency and, where a
//! front end tagged one, the idempotency outcome and the resource created.
//! The only line a request writes unless something goes wrong; never a
//! header value, a token or a body.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::info;
use uuid::Uuid;

use crate::metrics::OutcomeLabel;

/// What a route adds to its request's line, as a response extension.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogNote {
    /// The resource the request created.
    pub resource: Option<Uuid>,
    /// Whether a cache answered.
    pub cached: bool,
}

/// Middleware: one log line per request, with the idempotency outcome
/// (`executed`, `replayed`, ...) where a front end tagged one.
pub async fn log_requests(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    let outcome = response.extensions().get::<OutcomeLabel>().map(|o| o.0);
    let note = response
        .extensions()
        .get::<LogNote>()
        .copied()
        .unwrap_or_default();
    info!(
        %method,
        route = route.as_ref().map_or("(unmatched)", MatchedPath::as_str),
        status = response.status().as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        replayed = response.headers().contains_key(idemkey_core::REPLAYED_HEADER),
        outcome,
        resource = note.resource.map(tracing::field::display),
        cached = note.cached.then_some(true),
        "request"
    );
    response
}

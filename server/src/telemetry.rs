//! Logging: the subscriber set-up and one line per request.
//!
//! Request lines carry the method, the route template (`/orders/{id}`, not
//! the path), the status, the latency and, for `POST /orders`, the
//! idempotency outcome and the order created: one line per request, the
//! only one a request writes unless something goes wrong. Never a header
//! value, a token or a body.

use std::io::IsTerminal as _;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::info;
use tracing_subscriber::EnvFilter;
use uuid::Uuid;

use crate::config::LogFormat;
use crate::log_buffer::{LogBuffer, LogGuard};
use crate::metrics::OutcomeLabel;

/// Installs the global subscriber: `RUST_LOG` if set, else `info`; text or
/// JSON lines on stderr through a [`LogBuffer`]. Safe to call more than
/// once (later calls do nothing). Keep the guard until the process ends:
/// its drop writes the lines still buffered.
#[must_use = "dropping the guard stops the log flusher"]
pub fn init(format: LogFormat) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = LogBuffer::start();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    guard
}

/// What a route adds to its request's line, as a response extension.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogNote {
    /// The order the request created.
    pub order: Option<Uuid>,
    /// Whether the replay cache answered.
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
        order = note.order.map(tracing::field::display),
        cached = note.cached.then_some(true),
        "request"
    );
    response
}

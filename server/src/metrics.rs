//! Prometheus metrics, written by hand in the text exposition format
//! (version 0.0.4) at `GET /metrics`.
//!
//! - `idemkey_requests_total{outcome}`: `POST /orders` requests by
//!   idempotency outcome ([`Outcome`]);
//! - `idemkey_request_duration_seconds`: a latency histogram of
//!   `POST /orders`;
//! - `idemkey_pool_*`: database pool gauges (deadpool's `status()` on
//!   PostgreSQL; the one connection of SQLite).
//!
//! The outcome of a `POST /orders` is read off its response by [`record`]:
//! the order route answers every decision in a distinct way (201, 201 with
//! `Idempotent-Replayed: true`, or a problem whose status stands for one
//! code: 422 key reused, 409 in progress, 410 expired, 401, 503; 400, 413
//! and 415 are invalid requests), so the route itself needs no metrics code. A handler
//! may still insert an [`Outcome`] extension into its response to say it
//! explicitly. A request whose connection is dropped on purpose (a test
//! fault) has no response and is not counted.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use idemkey_core::REPLAYED_HEADER;

use crate::{AnyStore, AppState};

/// Media type of the exposition format.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) of the latency histogram's buckets.
pub const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// What became of one `POST /orders`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The order was created (a new key, or an expired one re-executed).
    Executed,
    /// The stored response was replayed.
    Replayed,
    /// 422: the key was used with another payload.
    Reused,
    /// 409: a request with the same key is still in progress.
    InProgress,
    /// 410: the key's replay window is over.
    Expired,
    /// 400, 413 or 415: a bad key, body or media type.
    Invalid,
    /// 401: no or an unknown token.
    Unauthorized,
    /// 503: the store failed or the outcome is unknown.
    Unavailable,
}

impl Outcome {
    /// Every outcome, in exposition order.
    pub const ALL: [Outcome; 8] = [
        Self::Executed,
        Self::Replayed,
        Self::Reused,
        Self::InProgress,
        Self::Expired,
        Self::Invalid,
        Self::Unauthorized,
        Self::Unavailable,
    ];

    /// The `outcome` label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::Reused => "reused",
            Self::InProgress => "in_progress",
            Self::Expired => "expired",
            Self::Invalid => "invalid",
            Self::Unauthorized => "unauthorized",
            Self::Unavailable => "unavailable",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }

    /// The outcome a `POST /orders` response stands for.
    pub fn of_response(response: &Response) -> Self {
        if let Some(outcome) = response.extensions().get::<Outcome>() {
            return *outcome;
        }
        if response.headers().contains_key(REPLAYED_HEADER) {
            return Self::Replayed;
        }
        if response.status().is_success() {
            return Self::Executed;
        }
        // On POST /orders every problem status has one meaning, except 400,
        // 413 and 415, which are all a bad request.
        match response.status().as_u16() {
            422 => Self::Reused,
            409 => Self::InProgress,
            410 => Self::Expired,
            401 => Self::Unauthorized,
            s if s >= 500 => Self::Unavailable,
            _ => Self::Invalid,
        }
    }
}

/// The process's counters, shared by every request through [`AppState`].
#[derive(Debug, Default)]
pub struct Metrics {
    outcomes: [AtomicU64; Outcome::ALL.len()],
    /// Non-cumulative bucket counts; the last one is `+Inf`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Metrics {
    /// Counts one `POST /orders` with its outcome and latency.
    pub fn observe(&self, outcome: Outcome, seconds: f64) {
        self.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        let bucket = BUCKETS
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        // Whole microseconds; a negative or NaN duration counts as 0.
        let micros = (seconds * 1e6).max(0.0).round() as u64;
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// How many requests had `outcome` so far.
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.outcomes[outcome.index()].load(Ordering::Relaxed)
    }

    /// The exposition text: counters, histogram and the pool gauges of
    /// `store`.
    pub fn render(&self, store: &AnyStore) -> String {
        let mut out = String::with_capacity(2048);
        let _ = writeln!(
            out,
            "# HELP idemkey_requests_total POST /orders requests by idempotency outcome."
        );
        let _ = writeln!(out, "# TYPE idemkey_requests_total counter");
        for outcome in Outcome::ALL {
            let _ = writeln!(
                out,
                "idemkey_requests_total{{outcome=\"{}\"}} {}",
                outcome.as_str(),
                self.count(outcome)
            );
        }
        let name = "idemkey_request_duration_seconds";
        let _ = writeln!(out, "# HELP {name} Latency of POST /orders.");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, le) in BUCKETS.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        cumulative += self.buckets[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {}", self.count.load(Ordering::Relaxed));
        render_pool(&mut out, store);
        out
    }
}

fn gauge(out: &mut String, name: &str, help: &str, backend: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "{name}{{backend=\"{backend}\"}} {value}");
}

fn render_pool(out: &mut String, store: &AnyStore) {
    let backend = store.backend();
    match store {
        AnyStore::Postgres(pg) => {
            let status = pg.pool().status();
            gauge(
                out,
                "idemkey_pool_max_size",
                "Largest number of database connections.",
                backend,
                status.max_size,
            );
            gauge(
                out,
                "idemkey_pool_size",
                "Database connections open.",
                backend,
                status.size,
            );
            gauge(
                out,
                "idemkey_pool_available",
                "Idle database connections.",
                backend,
                status.available,
            );
            gauge(
                out,
                "idemkey_pool_waiting",
                "Requests waiting for a database connection.",
                backend,
                status.waiting,
            );
        }
        // SQLite: one connection behind a mutex, open for the store's life.
        AnyStore::Sqlite(_) => {
            gauge(
                out,
                "idemkey_pool_max_size",
                "Largest number of database connections.",
                backend,
                1,
            );
            gauge(
                out,
                "idemkey_pool_size",
                "Database connections open.",
                backend,
                1,
            );
        }
    }
}

/// Middleware: counts every `POST /orders` by outcome and latency.
pub async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let is_order = request.method() == Method::POST
        && request
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|p| p.as_str() == "/orders");
    if !is_order {
        return next.run(request).await;
    }
    let started = Instant::now();
    let response = next.run(request).await;
    state.metrics().observe(
        Outcome::of_response(&response),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// `GET /metrics`.
pub async fn show(State(state): State<AppState>) -> Response {
    let mut response = Response::new(state.metrics().render(state.store()).into());
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problems::problem_response;
    use idemkey_core::Problem;

    #[test]
    fn outcomes_are_read_off_responses() {
        let cases = [
            (Problem::key_reused(), Outcome::Reused),
            (Problem::in_progress(1), Outcome::InProgress),
            (Problem::key_expired(None), Outcome::Expired),
            (Problem::unauthorized(), Outcome::Unauthorized),
            (Problem::service_unavailable(1), Outcome::Unavailable),
            (Problem::unsupported_media_type(), Outcome::Invalid),
            (Problem::payload_too_large(8), Outcome::Invalid),
        ];
        for (problem, outcome) in cases {
            assert_eq!(
                Outcome::of_response(&problem_response(&problem)),
                outcome,
                "{problem:?}"
            );
        }
        let mut created = Response::new(axum::body::Body::empty());
        *created.status_mut() = StatusCode::CREATED;
        assert_eq!(Outcome::of_response(&created), Outcome::Executed);
        created
            .headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        assert_eq!(Outcome::of_response(&created), Outcome::Replayed);
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let metrics = Metrics::default();
        metrics.observe(Outcome::Executed, 0.003);
        metrics.observe(Outcome::Replayed, 0.2);
        metrics.observe(Outcome::Replayed, 60.0);
        assert_eq!(metrics.count(Outcome::Replayed), 2);
        let mut out = String::new();
        let mut cumulative = 0;
        for (i, le) in BUCKETS.iter().enumerate() {
            cumulative += metrics.buckets[i].load(Ordering::Relaxed);
            let _ = write!(out, "{le}:{cumulative} ");
        }
        assert!(out.contains("0.005:1 "), "{out}");
        assert!(out.contains("0.25:2 "), "{out}");
        assert!(out.contains("5:2 "), "{out}");
        assert_eq!(metrics.count.load(Ordering::Relaxed), 3);
    }
}

//! `GET /metrics`: the library's counters ([`idemkey::metrics`]) and the
//! order service's own figures, in the text exposition format (0.0.4).

use std::fmt::Write as _;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use idemkey::metrics::{CONTENT_TYPE_TEXT, FrontEnd, OutcomeLabel, gauge};
use idemkey_core::ORDER_OPERATION;

use crate::state::AppState;

/// Middleware: counts every `POST /orders` by the outcome its route tagged
/// the response with, and its latency.
pub async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let response = next.run(request).await;
    if let Some(OutcomeLabel(outcome)) = response.extensions().get::<OutcomeLabel>() {
        state.metrics().observe(started.elapsed().as_secs_f64());
        state
            .metrics()
            .count(FrontEnd::Orders, &ORDER_OPERATION, outcome);
    }
    response
}

/// The longest a scrape waits for the outbox's figures.
const OUTBOX_STATS_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// `GET /metrics`.
pub async fn show(State(state): State<AppState>) -> Response {
    let mut text = state
        .metrics()
        .render(state.db().pool_status(), state.db().backend());
    if let Some(cache) = state.replay_cache() {
        render_replay_cache(&mut text, cache.stats());
    }
    // The outbox's figures come from the database, asked by one scrape at
    // a time and reused for a second (crate::probe_cache); a scrape never
    // waits long for them (a busy store leaves them out).
    let probes = state.probes();
    let stats = probes
        .outbox
        .get(|| async {
            tokio::time::timeout(OUTBOX_STATS_WAIT, state.db().store().outbox_stats())
                .await
                .ok()
                .and_then(Result::ok)
        })
        .await;
    state.outbox_metrics().render(&mut text, stats);
    let name = "idemkey_probe_queries_total";
    let _ = writeln!(
        text,
        "# HELP {name} Database queries that /readyz and /metrics caused, by figure (at most one per second each)."
    );
    let _ = writeln!(text, "# TYPE {name} counter");
    let _ = writeln!(
        text,
        "{name}{{probe=\"readyz\"}} {}",
        probes.ready.queries()
    );
    let _ = writeln!(
        text,
        "{name}{{probe=\"outbox\"}} {}",
        probes.outbox.queries()
    );
    if let Some((batches, orders)) = state.db().order_batches() {
        for (name, help, value) in [
            (
                "idemkey_sqlite_order_batches_total",
                "Transactions that committed new orders together (one fsync each).",
                batches,
            ),
            (
                "idemkey_sqlite_batched_orders_total",
                "Orders carried by those transactions.",
                orders,
            ),
        ] {
            let _ = writeln!(text, "# HELP {name} {help}");
            let _ = writeln!(text, "# TYPE {name} counter");
            let _ = writeln!(text, "{name} {value}");
        }
    }
    let mut response = Response::new(text.into());
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
    response
}

/// The replay cache's counters and size ([`crate::replay_cache`]).
fn render_replay_cache(out: &mut String, stats: crate::replay_cache::ReplayCacheStats) {
    let name = "idemkey_replay_cache_requests_total";
    let _ = writeln!(
        out,
        "# HELP {name} POST /orders replays and 422s looked up in the replay cache, by result."
    );
    let _ = writeln!(out, "# TYPE {name} counter");
    let _ = writeln!(out, "{name}{{result=\"hit\"}} {}", stats.hits);
    let _ = writeln!(out, "{name}{{result=\"miss\"}} {}", stats.misses);
    for (name, help, value) in [
        (
            "idemkey_replay_cache_entries",
            "Completed records held by the replay cache.",
            stats.entries,
        ),
        (
            "idemkey_replay_cache_bytes",
            "Bytes held by the replay cache, as weighed against --replay-cache-mib.",
            stats.bytes,
        ),
    ] {
        gauge(out, name, help, "", value);
    }
}

//! `GET /metrics` in the Prometheus text format (0.0.4), encoded by
//! `prometheus-client`: the library's counters ([`idemkey::metrics`],
//! [`idemkey::outbox::OutboxMetrics`]), the latency of `POST /orders`, load
//! shedding, the store's pool, the replay cache, the outbox's figures and
//! the probes' queries.
//!
//! The counters live where they are counted (the library's front ends,
//! the accept loop, the caches); each scrape reads them into a registry of
//! its own and encodes it, so nothing here keeps a second copy.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use idemkey::metrics::OutcomeLabel;
use idemkey::outbox::OutboxStats;
use idemkey_core::ORDER_OPERATION;
use prometheus_client::encoding::prometheus_text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use prometheus_client::registry::Registry;

use crate::state::{AppState, ORDERS_FRONT_END};

/// Media type of the exposition format.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The longest a scrape waits for the outbox's figures.
const OUTBOX_STATS_WAIT: Duration = Duration::from_millis(500);

/// Labels of one series, in the order they are written.
type Labels = Vec<(&'static str, String)>;

/// Middleware: counts every `POST /orders` by the outcome its route tagged
/// the response with, and its latency.
pub async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let response = next.run(request).await;
    if let Some(OutcomeLabel(outcome)) = response.extensions().get::<OutcomeLabel>() {
        state.latency().observe(started.elapsed().as_secs_f64());
        state
            .metrics()
            .count(ORDERS_FRONT_END, &ORDER_OPERATION, outcome);
    }
    response
}

/// A counter family holding `values` as they are now.
fn counters(values: impl IntoIterator<Item = (Labels, u64)>) -> Family<Labels, Counter> {
    let family = Family::<Labels, Counter>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).inc_by(value);
    }
    family
}

/// A gauge holding `value`.
fn gauge(value: impl TryInto<i64>) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(value.try_into().unwrap_or(i64::MAX));
    gauge
}

/// A counter (no labels) holding `value`.
fn counter(value: u64) -> Counter<u64, AtomicU64> {
    let counter = Counter::default();
    counter.inc_by(value);
    counter
}

/// `GET /metrics`.
pub async fn show(State(state): State<AppState>) -> Response {
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
    let text = encoded(&state, stats);
    let mut response = Response::new(text.into());
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
    response
}

/// Every figure of this process, read now, in the exposition format.
fn encoded(state: &AppState, stats: Option<OutboxStats>) -> String {
    let mut registry = Registry::default();
    registry.register(
        "idemkey_requests",
        "Requests by front end, operation and idempotency outcome",
        counters(state.metrics().snapshot().into_iter().map(
            |(front_end, operation, outcome, n)| {
                (
                    vec![
                        ("front_end", front_end.as_str().to_owned()),
                        ("operation", operation),
                        ("outcome", outcome.to_owned()),
                    ],
                    n,
                )
            },
        )),
    );
    registry.register(
        "idemkey_request_duration_seconds",
        "Latency of POST /orders",
        state.latency().clone(),
    );
    let (connections, requests) = idemkey::load_shed::shed_counts();
    registry.register(
        "idemkey_shed",
        "Load shed with 503: connections past --max-connections, requests past --max-in-flight",
        counters([
            (vec![("cap", "connections".to_owned())], connections),
            (vec![("cap", "in_flight".to_owned())], requests),
        ]),
    );
    registry.register(
        "idemkey_in_flight",
        "Requests in progress under --max-in-flight",
        gauge(idemkey::load_shed::in_flight_count()),
    );
    let pool = state.db().pool_status();
    let backend = vec![("backend", state.db().backend().to_owned())];
    for (name, help, value) in [
        (
            "idemkey_pool_max_size",
            "Largest number of database connections",
            pool.max_size,
        ),
        ("idemkey_pool_size", "Database connections open", pool.size),
        (
            "idemkey_pool_available",
            "Idle database connections",
            pool.available,
        ),
        (
            "idemkey_pool_waiting",
            "Requests waiting for a database connection",
            pool.waiting,
        ),
    ] {
        let family = Family::<Labels, Gauge>::default();
        family
            .get_or_create(&backend)
            .set(i64::try_from(value).unwrap_or(i64::MAX));
        registry.register(name, help, family);
    }
    if let Some(cache) = state.replay_cache() {
        let stats = cache.stats();
        registry.register(
            "idemkey_replay_cache_requests",
            "POST /orders replays and 422s looked up in the replay cache, by result",
            counters([
                (vec![("result", "hit".to_owned())], stats.hits),
                (vec![("result", "miss".to_owned())], stats.misses),
            ]),
        );
        registry.register(
            "idemkey_replay_cache_entries",
            "Completed records held by the replay cache",
            gauge(stats.entries),
        );
        registry.register(
            "idemkey_replay_cache_bytes",
            "Bytes held by the replay cache, as weighed against --replay-cache-mib",
            gauge(stats.bytes),
        );
    }
    registry.register(
        "idemkey_outbox_deliveries",
        "Outbox delivery attempts by effect and outcome (this process's workers)",
        counters(
            state
                .outbox_metrics()
                .snapshot()
                .into_iter()
                .map(|(effect, outcome, n)| {
                    (vec![("effect", effect), ("outcome", outcome.to_owned())], n)
                }),
        ),
    );
    if let Some(stats) = stats {
        registry.register(
            "idemkey_outbox_pending",
            "Outbox messages not delivered yet (all processes)",
            gauge(stats.pending),
        );
        registry.register(
            "idemkey_outbox_oldest_pending_seconds",
            "Age of the oldest undelivered outbox message, at the store's clock",
            gauge(stats.oldest_pending_ms / 1000),
        );
        registry.register(
            "idemkey_outbox_dead",
            "Outbox messages whose attempts ran out (see `idemkey-server outbox list --status dead`)",
            gauge(stats.dead),
        );
    }
    let probes = state.probes();
    registry.register(
        "idemkey_probe_queries",
        "Database queries that /readyz and /metrics caused, by figure (at most one per second each)",
        counters([
            (vec![("probe", "readyz".to_owned())], probes.ready.queries()),
            (vec![("probe", "outbox".to_owned())], probes.outbox.queries()),
        ]),
    );
    if let Some((batches, orders)) = state.db().order_batches() {
        registry.register(
            "idemkey_sqlite_order_batches",
            "Transactions that committed new orders together (one fsync each)",
            counter(batches),
        );
        registry.register(
            "idemkey_sqlite_batched_orders",
            "Orders carried by those transactions",
            counter(orders),
        );
    }
    let mut text = String::with_capacity(4096);
    // Writing to a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_counters_end_in_total() {
        let mut registry = Registry::default();
        registry.register(
            "idemkey_x",
            "A test series",
            counters([(vec![("operation", "a\"b\\c\nd".to_owned())], 3)]),
        );
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"idemkey_x_total{operation="a\"b\\c\nd"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let histogram =
            prometheus_client::metrics::histogram::Histogram::new(crate::state::LATENCY_BUCKETS);
        for seconds in [0.003, 0.2, 60.0] {
            histogram.observe(seconds);
        }
        let mut registry = Registry::default();
        registry.register("idemkey_h_seconds", "Latency", histogram);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            r#"idemkey_h_seconds_bucket{le="0.005"} 1"#,
            r#"idemkey_h_seconds_bucket{le="0.25"} 2"#,
            r#"idemkey_h_seconds_bucket{le="5"} 2"#,
            r#"idemkey_h_seconds_bucket{le="+Inf"} 3"#,
            "idemkey_h_seconds_count 3",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}

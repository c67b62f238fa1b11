//! The engine's counters, by front end, operation and outcome, kept in a
//! [`Metrics`] a service renders in the text exposition format (0.0.4)
//! and sent to the [`metrics`] facade as well (`idemkey_requests_total`),
//! so a Layer user's own recorder (e.g. `metrics-exporter-prometheus`)
//! shows them with its own series.
//!
//! - `idemkey_requests_total{front_end, operation, outcome}`: requests of
//!   every front end (`orders`, `in_transaction`, `layer`) by the engine's
//!   [`Outcome`](crate::idempotency::Outcome) (`executed`, `released`,
//!   `replayed`, `reused`, `in_progress`, `expired`) or by what stopped them
//!   before the engine (`invalid`, `unauthorized`, `unavailable`);
//! - `idemkey_request_duration_seconds`: a latency histogram a front end
//!   feeds ([`Metrics::observe`]);
//! - `idemkey_shed_total{cap}` and `idemkey_in_flight`: load shed by the
//!   `serve` feature's caps, requests in progress under them;
//! - `idemkey_pool_*`: the store's pool gauges.
//!
//! A front end counts its own outcomes: the layer and `in_transaction`
//! count into the [`Metrics`] they are given; an application route may tag
//! its response with an [`OutcomeLabel`] for its own middleware to count.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use idemkey_core::OperationId;

use crate::store::PoolStatus;

/// Media type of the exposition format.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) of the latency histogram's buckets.
pub const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Which front end of the engine served a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FrontEnd {
    /// `POST /orders`.
    Orders,
    /// `in_transaction`.
    InTransaction,
    /// `layer::IdempotencyLayer`.
    Layer,
}

impl FrontEnd {
    /// The `front_end` label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Orders => "orders",
            Self::InTransaction => "in_transaction",
            Self::Layer => "layer",
        }
    }
}

/// The outcome of a `POST /orders` response, for the order service's `record` middleware: the engine's
/// outcome label, or what stopped the request before the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeLabel(pub &'static str);

type Labels = (FrontEnd, String, &'static str);

/// Every outcome label, engine's and front ends' alike.
pub const OUTCOMES: [&str; 9] = [
    "executed",
    "released",
    "replayed",
    "reused",
    "in_progress",
    "expired",
    "invalid",
    "unauthorized",
    "unavailable",
];

/// The process's counters, shared by every front end that is given them.
#[derive(Debug, Default)]
pub struct Metrics {
    outcomes: Mutex<BTreeMap<Labels, u64>>,
    /// Non-cumulative bucket counts; the last one is `+Inf`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Metrics {
    /// Counts one request of `front_end` for `operation` with `outcome`.
    pub fn count(&self, front_end: FrontEnd, operation: &OperationId, outcome: &'static str) {
        ::metrics::counter!(
            "idemkey_requests_total",
            "front_end" => front_end.as_str(),
            "operation" => operation.as_str().to_owned(),
            "outcome" => outcome,
        )
        .increment(1);
        let mut outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        *outcomes
            .entry((front_end, operation.as_str().to_owned(), outcome))
            .or_default() += 1;
    }

    /// Starts every outcome of `front_end` for `operation` at 0, so that
    /// dashboards see each series from the start.
    pub fn register(&self, front_end: FrontEnd, operation: &OperationId) {
        let mut outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        for outcome in OUTCOMES {
            outcomes
                .entry((front_end, operation.as_str().to_owned(), outcome))
                .or_default();
        }
    }

    /// How many requests of `front_end` for `operation` had `outcome`.
    pub fn counted(&self, front_end: FrontEnd, operation: &OperationId, outcome: &str) -> u64 {
        let outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        outcomes
            .iter()
            .filter(|((f, o, out), _)| {
                *f == front_end && o == operation.as_str() && *out == outcome
            })
            .map(|(_, n)| *n)
            .sum()
    }

    /// Adds one `POST /orders` latency to the histogram.
    pub fn observe(&self, seconds: f64) {
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

    /// The exposition text: counters, histogram and the pool gauges of a
    /// store (`backend` names it).
    pub fn render(&self, status: PoolStatus, backend: &str) -> String {
        let mut out = String::with_capacity(2048);
        let _ = writeln!(
            out,
            "# HELP idemkey_requests_total Requests by front end, operation and idempotency outcome."
        );
        let _ = writeln!(out, "# TYPE idemkey_requests_total counter");
        {
            let outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
            for ((front_end, operation, outcome), n) in outcomes.iter() {
                let _ = writeln!(
                    out,
                    "idemkey_requests_total{{front_end=\"{}\",operation=\"{}\",outcome=\"{outcome}\"}} {n}",
                    front_end.as_str(),
                    escape(operation),
                );
            }
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
        #[cfg(feature = "serve")]
        let (connections, requests) = crate::load_shed::shed_counts();
        #[cfg(not(feature = "serve"))]
        let (connections, requests) = (0, 0);
        let name = "idemkey_shed_total";
        let _ = writeln!(
            out,
            "# HELP {name} Load shed with 503: connections past --max-connections, requests past --max-in-flight."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name}{{cap=\"connections\"}} {connections}");
        let _ = writeln!(out, "{name}{{cap=\"in_flight\"}} {requests}");
        gauge(
            &mut out,
            "idemkey_in_flight",
            "Requests in progress under --max-in-flight.",
            "",
            in_flight_now(),
        );
        for (gauge_name, help, value) in [
            (
                "idemkey_pool_max_size",
                "Largest number of database connections.",
                status.max_size,
            ),
            (
                "idemkey_pool_size",
                "Database connections open.",
                status.size,
            ),
            (
                "idemkey_pool_available",
                "Idle database connections.",
                status.available,
            ),
            (
                "idemkey_pool_waiting",
                "Requests waiting for a database connection.",
                status.waiting,
            ),
        ] {
            gauge(
                &mut out,
                gauge_name,
                help,
                &format!("{{backend=\"{backend}\"}}"),
                value,
            );
        }
        out
    }
}

/// Requests in progress under the in-flight cap.
fn in_flight_now() -> u64 {
    #[cfg(feature = "serve")]
    return crate::load_shed::in_flight_count();
    #[cfg(not(feature = "serve"))]
    0
}

/// One gauge with its help and type lines; `labels` is `{...}` or empty.
pub fn gauge(
    out: &mut String,
    name: &str,
    help: &str,
    labels: &str,
    value: impl std::fmt::Display,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "{name}{labels} {value}");
}

/// A label value with `\`, `"` and newlines escaped.
pub fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey_core::ORDER_OPERATION;

    #[test]
    fn outcomes_are_counted_per_front_end_and_operation() {
        let metrics = Metrics::default();
        let other = OperationId::from_static("http:v1");
        metrics.count(FrontEnd::Orders, &ORDER_OPERATION, "executed");
        metrics.count(FrontEnd::Orders, &ORDER_OPERATION, "executed");
        metrics.count(FrontEnd::Layer, &other, "replayed");
        assert_eq!(
            metrics.counted(FrontEnd::Orders, &ORDER_OPERATION, "executed"),
            2
        );
        assert_eq!(metrics.counted(FrontEnd::Layer, &other, "replayed"), 1);
        assert_eq!(metrics.counted(FrontEnd::Layer, &other, "executed"), 0);
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let metrics = Metrics::default();
        metrics.observe(0.003);
        metrics.observe(0.2);
        metrics.observe(60.0);
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

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }
}

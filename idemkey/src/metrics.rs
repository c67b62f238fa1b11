//! The engine's counters, by front end, operation and outcome: sent to the
//! [`metrics`] facade (`idemkey_requests_total`), so a service's own
//! recorder (e.g. `metrics-exporter-prometheus`) shows them with its own
//! series, and kept in a [`Metrics`] a service may read back
//! ([`Metrics::snapshot`]) to expose them its own way.
//!
//! Outcomes are the engine's [`Outcome`](crate::idempotency::Outcome)
//! labels (`executed`, `released`, `replayed`, `reused`, `in_progress`,
//! `expired`) or what stopped a request before the engine (`invalid`,
//! `unauthorized`, `unavailable`). The layer and `in_transaction` count
//! into the [`Metrics`] they are given; an application route may tag its
//! response with an [`OutcomeLabel`] for its own middleware to count.

use std::collections::BTreeMap;
use std::sync::Mutex;

use idemkey_core::OperationId;

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

/// The outcome an application's route tags its response with, for its own
/// counting middleware: the engine's outcome label, or what stopped the
/// request before the engine.
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

    /// Every `(front end, operation, outcome)` counted (or registered) so
    /// far, with its count.
    pub fn snapshot(&self) -> Vec<(FrontEnd, String, &'static str, u64)> {
        let outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        outcomes
            .iter()
            .map(|((f, o, out), n)| (*f, o.clone(), *out, *n))
            .collect()
    }
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
        assert!(metrics.snapshot().contains(&(
            FrontEnd::Orders,
            "POST /orders:v1".to_owned(),
            "executed",
            2
        )));
    }
}

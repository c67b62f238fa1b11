//! The delivery counters of this process's outbox workers, sent to the
//! `metrics` facade as `idemkey_outbox_deliveries_total` whatever the
//! worker was given (see [`crate::metrics`] for how counting stays free of
//! locks and allocations).

use crate::metrics::Family;

/// The name of the deliveries counter, as a recorder sees it.
pub(super) const DELIVERIES: &str = "idemkey_outbox_deliveries_total";

/// Deliveries by effect and outcome, counted by the workers of this process.
#[derive(Debug)]
pub struct OutboxMetrics {
    deliveries: Family,
}

impl Default for OutboxMetrics {
    fn default() -> Self {
        Self {
            deliveries: Family::new(DELIVERIES, "effect", 0),
        }
    }
}

impl OutboxMetrics {
    /// Counts one delivery attempt of `effect` that ended in `outcome`.
    pub fn count(&self, effect: &str, outcome: &'static str) {
        self.deliveries.increment(effect, &[("outcome", outcome)]);
    }

    /// How many attempts of `effect` ended in `outcome`.
    pub fn deliveries(&self, effect: &str, outcome: &'static str) -> u64 {
        self.deliveries
            .snapshot()
            .into_iter()
            .filter(|(e, labels, _)| e == effect && labels[0].1 == outcome)
            .map(|(_, _, n)| n)
            .sum()
    }

    /// Every `(effect, outcome)` counted so far, with its count, in that
    /// order.
    pub fn snapshot(&self) -> Vec<(String, &'static str, u64)> {
        let mut all: Vec<_> = self
            .deliveries
            .snapshot()
            .into_iter()
            .map(|(effect, labels, n)| (effect, labels[0].1, n))
            .collect();
        all.sort();
        all
    }
}

//! The delivery counters of this process's outbox workers.

use std::collections::BTreeMap;

use parking_lot::Mutex;

/// Deliveries by effect and outcome, counted by the workers of this process.
#[derive(Debug, Default)]
pub struct OutboxMetrics {
    deliveries: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl OutboxMetrics {
    /// Counts one delivery attempt of `effect` that ended in `outcome`.
    pub fn count(&self, effect: &str, outcome: &'static str) {
        ::metrics::counter!(
            "idemkey_outbox_deliveries_total",
            "effect" => effect.to_owned(),
            "outcome" => outcome,
        )
        .increment(1);
        *self
            .deliveries
            .lock()
            .entry((effect.to_owned(), outcome))
            .or_default() += 1;
    }

    /// How many attempts of `effect` ended in `outcome`.
    pub fn deliveries(&self, effect: &str, outcome: &'static str) -> u64 {
        self.deliveries
            .lock()
            .get(&(effect.to_owned(), outcome))
            .copied()
            .unwrap_or(0)
    }

    /// Every `(effect, outcome)` counted so far, with its count.
    pub fn snapshot(&self) -> Vec<(String, &'static str, u64)> {
        self.deliveries
            .lock()
            .iter()
            .map(|((effect, outcome), n)| (effect.clone(), *outcome, *n))
            .collect()
    }
}

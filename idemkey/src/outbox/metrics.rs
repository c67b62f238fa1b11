//! The delivery counters of this process's outbox workers.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use parking_lot::Mutex;

use crate::store::outbox::OutboxStats;

/// Deliveries by effect and outcome, counted by the workers of this process.
#[derive(Debug, Default)]
pub struct OutboxMetrics {
    deliveries: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl OutboxMetrics {
    /// Counts one delivery attempt of `effect` that ended in `outcome`.
    pub fn count(&self, effect: &str, outcome: &'static str) {
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

    /// Appends the counters, and the store's outbox figures when known, in
    /// the Prometheus text format.
    pub fn render(&self, out: &mut String, stats: Option<OutboxStats>) {
        let _ = writeln!(
            out,
            "# HELP idemkey_outbox_deliveries_total Outbox delivery attempts by effect and outcome (this process's workers)."
        );
        let _ = writeln!(out, "# TYPE idemkey_outbox_deliveries_total counter");
        for ((effect, outcome), n) in self.deliveries.lock().iter() {
            let _ = writeln!(
                out,
                "idemkey_outbox_deliveries_total{{effect=\"{effect}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        let Some(stats) = stats else {
            return;
        };
        for (name, help, value) in [
            (
                "idemkey_outbox_pending",
                "Outbox messages not delivered yet (all processes).",
                stats.pending,
            ),
            (
                "idemkey_outbox_oldest_pending_seconds",
                "Age of the oldest undelivered outbox message, at the store's clock.",
                stats.oldest_pending_ms / 1000,
            ),
            (
                "idemkey_outbox_dead",
                "Outbox messages whose attempts ran out (see `idemkey-server outbox list --status dead`).",
                stats.dead,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

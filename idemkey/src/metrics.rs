//! The engine's counters, by front end, operation and outcome, kept in a
//! [`Metrics`] a service may read back ([`Metrics::snapshot`]) to expose
//! them its own way: the one it gives a front end, or [`Metrics::global`]
//! by default. With the `metrics` feature they are also sent to the
//! `metrics` facade: with no recorder installed that is a no-op; with one
//! (e.g. `metrics-exporter-prometheus`) the `idemkey_requests_total` series
//! appear beside the service's own, with no call to the library. Without
//! the feature the facade is not compiled (two crates fewer).
//!
//! Outcomes are the engine's [`Outcome`](crate::idempotency::Outcome)
//! labels (`executed`, `released`, `replayed`, `reused`, `in_progress`,
//! `expired`) or what stopped a request before the engine (`invalid`,
//! `unauthorized`, `unavailable`). An application route may tag its
//! response with an [`OutcomeLabel`] for its own middleware to count.
//!
//! Counting costs no lock and no allocation once a label set has been
//! seen: each label set keeps its count and the facade's handle for it,
//! found through a map that is read without a lock and copied only when a
//! new label set appears (once per operation and outcome). The handle is
//! asked of the recorder again only when the recorder changes (a recorder
//! installed after the first requests, a thread-local one in a test).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use idemkey_core::OperationId;

/// Which front end of the engine served a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FrontEnd {
    /// `in_transaction` (and a flow's start, which goes through it).
    InTransaction,
    /// `layer::IdempotencyLayer`.
    Layer,
    /// A front end of the application's own (route code that drives the
    /// engine itself), counted under the label it gives, e.g.
    /// `FrontEnd::Named("checkout")`. The label should not be
    /// `in_transaction` or `layer`, which name the library's own.
    Named(&'static str),
}

impl FrontEnd {
    /// The `front_end` label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InTransaction => "in_transaction",
            Self::Layer => "layer",
            Self::Named(label) => label,
        }
    }

    /// The front end a `front_end` label value names.
    const fn from_label(label: &'static str) -> Self {
        match label.as_bytes() {
            b"in_transaction" => Self::InTransaction,
            b"layer" => Self::Layer,
            _ => Self::Named(label),
        }
    }
}

/// The outcome an application's route tags its response with, for its own
/// counting middleware: the engine's outcome label, or what stopped the
/// request before the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeLabel(pub &'static str);

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

/// The name of the requests counter, as a recorder sees it.
pub const REQUESTS: &str = "idemkey_requests_total";

/// Request counts by front end, operation and outcome, each also sent to
/// the `metrics` facade (with that feature) as [`REQUESTS`].
#[derive(Debug)]
pub struct Metrics {
    requests: Family,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Family::new(REQUESTS, "operation", 1),
        }
    }
}

impl Metrics {
    /// The process's counts, where every front end counts unless it was
    /// given a [`Metrics`] of its own.
    pub fn global() -> &'static Arc<Self> {
        static GLOBAL: LazyLock<Arc<Metrics>> = LazyLock::new(Arc::default);
        &GLOBAL
    }

    /// Counts one request of `front_end` for `operation` with `outcome`.
    pub fn count(&self, front_end: FrontEnd, operation: &OperationId, outcome: &'static str) {
        self.requests.increment(
            operation.as_str(),
            &[("front_end", front_end.as_str()), ("outcome", outcome)],
        );
    }

    /// Starts every outcome of `front_end` for `operation` at 0, so that
    /// dashboards see each series from the start.
    pub fn register(&self, front_end: FrontEnd, operation: &OperationId) {
        for outcome in OUTCOMES {
            self.requests.register(
                operation.as_str(),
                &[("front_end", front_end.as_str()), ("outcome", outcome)],
            );
        }
    }

    /// How many requests of `front_end` for `operation` had `outcome`.
    pub fn counted(&self, front_end: FrontEnd, operation: &OperationId, outcome: &str) -> u64 {
        self.requests
            .snapshot()
            .into_iter()
            .filter(|(o, labels, _)| {
                o == operation.as_str()
                    && labels[0].1 == front_end.as_str()
                    && labels[1].1 == outcome
            })
            .map(|(_, _, n)| n)
            .sum()
    }

    /// Every `(front end, operation, outcome)` counted (or registered) so
    /// far, with its count, in that order.
    pub fn snapshot(&self) -> Vec<(FrontEnd, String, &'static str, u64)> {
        let mut all: Vec<_> = self
            .requests
            .snapshot()
            .into_iter()
            .map(|(operation, labels, n)| {
                (FrontEnd::from_label(labels[0].1), operation, labels[1].1, n)
            })
            .collect();
        all.sort();
        all
    }
}

/// Where the facade's handles are registered from.
#[cfg(feature = "metrics")]
static METADATA: ::metrics::Metadata<'static> =
    ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));

/// Labels given as `(name, value)`, known at compile time.
pub(crate) type Static = (&'static str, &'static str);

/// One counter's series by one label known only at run time (an
/// operation, an effect) and labels known at compile time (a front end,
/// an outcome).
// The names and the label's place are the facade's; without it they are
// only shown by `Debug`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Family {
    name: &'static str,
    dynamic: &'static str,
    /// Where the run-time label goes among the others.
    dynamic_at: usize,
    by: ArcSwap<HashMap<Box<str>, Vec<Arc<Series>>>>,
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family").field("name", &self.name).finish()
    }
}

/// One label set's count and the facade's handle for it.
struct Series {
    statics: Vec<Static>,
    #[cfg(feature = "metrics")]
    key: ::metrics::Key,
    count: AtomicU64,
    /// The handle, and the address of the recorder it came from.
    #[cfg(feature = "metrics")]
    handle: ArcSwap<(usize, ::metrics::Counter)>,
}

impl Series {
    /// Adds `n` here and to the recorder in use now.
    fn add(&self, n: u64) {
        self.count.fetch_add(n, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        ::metrics::with_recorder(|recorder| {
            let id = std::ptr::from_ref(recorder).cast::<()>() as usize;
            let handle = self.handle.load();
            if handle.0 == id {
                handle.1.increment(n);
                return;
            }
            let counter = recorder.register_counter(&self.key, &METADATA);
            counter.increment(n);
            self.handle.store(Arc::new((id, counter)));
        });
    }
}

impl Family {
    pub(crate) fn new(name: &'static str, dynamic: &'static str, dynamic_at: usize) -> Self {
        Self {
            name,
            dynamic,
            dynamic_at,
            by: ArcSwap::default(),
        }
    }

    /// Counts one for `(dynamic, statics)`: no lock, no allocation once
    /// the label set is known.
    pub(crate) fn increment(&self, dynamic: &str, statics: &[Static]) {
        self.add(dynamic, statics, 1);
    }

    /// Makes `(dynamic, statics)` known, at 0 (a recorder sees it too).
    pub(crate) fn register(&self, dynamic: &str, statics: &[Static]) {
        self.add(dynamic, statics, 0);
    }

    fn add(&self, dynamic: &str, statics: &[Static], n: u64) {
        if let Some(series) = self.by.load().get(dynamic).and_then(|l| find(l, statics)) {
            series.add(n);
            return;
        }
        self.publish(dynamic, statics).add(n);
    }

    /// The series of `(dynamic, statics)`, made and published if new: the
    /// map is copied with it added (once per label set).
    fn publish(&self, dynamic: &str, statics: &[Static]) -> Arc<Series> {
        let mut made: Option<Arc<Series>> = None;
        self.by.rcu(|by| {
            let mut by = HashMap::clone(by);
            let list = by.entry(Box::from(dynamic)).or_default();
            if find(list, statics).is_none() {
                let series = made.get_or_insert_with(|| Arc::new(self.make(dynamic, statics)));
                list.push(Arc::clone(series));
            }
            by
        });
        let by = self.by.load();
        let found = by.get(dynamic).and_then(|l| find(l, statics));
        Arc::clone(found.expect("the series was just published"))
    }

    fn make(&self, dynamic: &str, statics: &[Static]) -> Series {
        #[cfg(not(feature = "metrics"))]
        let _ = dynamic;
        #[cfg(feature = "metrics")]
        let mut labels: Vec<::metrics::Label> = statics
            .iter()
            .map(|&(k, v)| ::metrics::Label::from_static_parts(k, v))
            .collect();
        #[cfg(feature = "metrics")]
        labels.insert(
            self.dynamic_at.min(labels.len()),
            ::metrics::Label::new(self.dynamic, dynamic.to_owned()),
        );
        Series {
            statics: statics.to_vec(),
            #[cfg(feature = "metrics")]
            key: ::metrics::Key::from_parts(self.name, labels),
            count: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            handle: ArcSwap::from_pointee((0, ::metrics::Counter::noop())),
        }
    }

    /// Every label set known, with its count.
    pub(crate) fn snapshot(&self) -> Vec<(String, Vec<Static>, u64)> {
        self.by
            .load()
            .iter()
            .flat_map(|(dynamic, list)| {
                list.iter().map(move |s| {
                    (
                        dynamic.to_string(),
                        s.statics.clone(),
                        s.count.load(Ordering::Relaxed),
                    )
                })
            })
            .collect()
    }
}

/// The series of `statics` in `list`.
fn find<'l>(list: &'l [Arc<Series>], statics: &[Static]) -> Option<&'l Arc<Series>> {
    list.iter().find(|s| s.statics == statics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_per_front_end_and_operation() {
        let metrics = Metrics::default();
        let checkout = OperationId::from_static("POST /checkouts:v1");
        let other = OperationId::from_static("http:v1");
        metrics.count(FrontEnd::Named("checkout"), &checkout, "executed");
        metrics.count(FrontEnd::Named("checkout"), &checkout, "executed");
        metrics.count(FrontEnd::Layer, &other, "replayed");
        assert_eq!(
            metrics.counted(FrontEnd::Named("checkout"), &checkout, "executed"),
            2
        );
        assert_eq!(metrics.counted(FrontEnd::Layer, &other, "replayed"), 1);
        assert_eq!(metrics.counted(FrontEnd::Layer, &other, "executed"), 0);
        let snapshot = metrics.snapshot();
        assert!(snapshot.contains(&(
            FrontEnd::Named("checkout"),
            "POST /checkouts:v1".to_owned(),
            "executed",
            2
        )));
        assert!(snapshot.contains(&(FrontEnd::Layer, "http:v1".to_owned(), "replayed", 1)));
    }
}

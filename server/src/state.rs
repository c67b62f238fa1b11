//! The order service's shared state: its database, settings, metrics,
//! caches and the outbox workers' wake-up, as every route reads them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idemkey::outbox::OutboxMetrics;
use idemkey_core::{ExpiryPolicy, KeyProfile};

use crate::db::Db;
use crate::{catalogue, probe_cache, replay_cache, token_usage};
use idemkey::problems;

/// Service settings that the routes read.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How `Idempotency-Key` values are read.
    pub key_profile: KeyProfile,
    /// How long a stored response is replayed.
    pub replay_ttl: Duration,
    /// How long a key is remembered after creation.
    pub tombstone_ttl: Duration,
    /// What happens after the replay window.
    pub expiry_policy: ExpiryPolicy,
    /// Whether the `x-idemkey-test-fault` request header is honoured (only
    /// in builds with the `test-faults` feature; see [`crate::faults`]).
    pub test_faults: bool,
    /// Directory of the demo's static files, when demo mode is on.
    pub demo_dir: Option<std::path::PathBuf>,
    /// The first demo account's token for this start, served at
    /// `GET /demo/token` in demo mode (which refuses a non-loopback bind).
    pub demo_token: Option<String>,
    /// Longest wait for a request body once its head has arrived; past it
    /// the request is answered 400 and its connection closed.
    pub body_read_timeout: Duration,
    /// The bounds of the replay cache ([`replay_cache`]).
    pub replay_cache: replay_cache::ReplayCacheSettings,
    /// How long a purchase's request waits for its steps to end before
    /// answering `202` with its state.
    pub purchase_wait: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            key_profile: KeyProfile::Lenient,
            replay_ttl: Duration::from_secs(24 * 3600),
            tombstone_ttl: Duration::from_secs(30 * 24 * 3600),
            expiry_policy: ExpiryPolicy::Reject,
            test_faults: false,
            demo_dir: None,
            demo_token: None,
            body_read_timeout: problems::DEFAULT_BODY_READ_TIMEOUT,
            replay_cache: replay_cache::ReplayCacheSettings::default(),
            purchase_wait: Duration::from_secs(2),
        }
    }
}

pub use crate::shown_clock::display_now;

/// The `front_end` label of `POST /orders`: the order route drives the
/// engine itself, a front end of this application's own.
pub const ORDERS_FRONT_END: idemkey::metrics::FrontEnd =
    idemkey::metrics::FrontEnd::Named("orders");

/// Upper bounds (seconds) of the buckets of `POST /orders`'s latency.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Shared state of the routes: the database, the settings, the metrics.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: Db,
    settings: Settings,
    lose_next_response: AtomicBool,
    metrics: Arc<idemkey::metrics::Metrics>,
    latency: prometheus_client::metrics::histogram::Histogram,
    token_usage: Arc<token_usage::TokenUsage>,
    replay_cache: Option<replay_cache::ReplayCache>,
    catalogue: catalogue::Catalogue,
    outbox_metrics: Arc<OutboxMetrics>,
    outbox_wake: Arc<tokio::sync::Notify>,
    probes: probe_cache::Probes,
    purchases: Option<idemkey::flow::Flows>,
}

impl AppState {
    /// State over `db`.
    pub fn new(db: Db, settings: Settings) -> Self {
        let metrics = Arc::new(idemkey::metrics::Metrics::default());
        metrics.register(ORDERS_FRONT_END, &idemkey_core::ORDER_OPERATION);
        metrics.register(
            idemkey::metrics::FrontEnd::InTransaction,
            &idemkey_core::PURCHASE_OPERATION,
        );
        let replay_cache = replay_cache::ReplayCache::new(settings.replay_cache);
        let outbox_wake: Arc<tokio::sync::Notify> = Arc::default();
        // Without a provider here: this process starts purchases and
        // answers polls; a worker with a provider runs their steps.
        let purchases = crate::purchase::flows(
            &db,
            None,
            settings.purchase_wait,
            idemkey::flow::FlowSettings::default().call_timeout,
            Arc::clone(&outbox_wake),
        )
        .ok();
        Self {
            inner: Arc::new(Inner {
                db,
                settings,
                replay_cache,
                catalogue: catalogue::Catalogue::default(),
                outbox_metrics: Arc::default(),
                outbox_wake,
                probes: probe_cache::Probes::default(),
                purchases,
                lose_next_response: AtomicBool::new(false),
                metrics,
                latency: prometheus_client::metrics::histogram::Histogram::new(LATENCY_BUCKETS),
                token_usage: Arc::default(),
            }),
        }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The latency histogram of `POST /orders`.
    pub fn latency(&self) -> &prometheus_client::metrics::histogram::Histogram {
        &self.inner.latency
    }

    /// The metrics of `GET /metrics`.
    pub fn metrics(&self) -> &Arc<idemkey::metrics::Metrics> {
        &self.inner.metrics
    }

    /// The tokens that authenticated a request since the last flush of
    /// their `last_used_at` (see [`token_usage`]).
    pub fn token_usage(&self) -> &Arc<token_usage::TokenUsage> {
        &self.inner.token_usage
    }

    /// The replay cache, unless the settings turn it off.
    pub fn replay_cache(&self) -> Option<&replay_cache::ReplayCache> {
        self.inner.replay_cache.as_ref()
    }

    /// The delivery counters of this process's outbox workers.
    pub fn outbox_metrics(&self) -> &Arc<OutboxMetrics> {
        &self.inner.outbox_metrics
    }

    /// The purchases (operations of several steps), when the store holds
    /// them.
    pub fn purchases(&self) -> Option<&idemkey::flow::Flows> {
        self.inner.purchases.as_ref()
    }

    /// Notified when a new order commits, to wake this process's workers.
    pub fn outbox_wake(&self) -> &Arc<tokio::sync::Notify> {
        &self.inner.outbox_wake
    }

    /// What `/readyz` and `/metrics` last read from the database (see
    /// [`probe_cache`]).
    pub fn probes(&self) -> &probe_cache::Probes {
        &self.inner.probes
    }

    /// The catalogue's prices.
    pub fn catalogue(&self) -> &catalogue::Catalogue {
        &self.inner.catalogue
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Arms the demo's one-shot fault: the next new order commits and its
    /// connection is then closed with no response.
    pub fn arm_lose_next_response(&self) {
        self.inner.lose_next_response.store(true, Ordering::SeqCst);
    }

    /// Takes the demo's one-shot fault, disarming it.
    pub fn take_lose_next_response(&self) -> bool {
        self.inner.lose_next_response.swap(false, Ordering::SeqCst)
    }
}

//! # idemkey-server
//!
//! The order service of idemkey: `POST /orders` is safe to retry with an
//! `Idempotency-Key`. The order and the key's stored response commit in one
//! transaction guarded by the primary key `(account, operation, key)`, so a
//! client whose response was lost retries with the same key and gets the
//! order that was already created, never a second one, through any instance
//! and across restarts. Every rule (key syntax, fingerprint, decision table,
//! problem documents) comes from [`idemkey_core`]; this crate moves bytes
//! between HTTP and the store. [`app`] builds the router, so tests can drive
//! it without a socket; [`serve()`] runs it with graceful shutdown.
//!
//! ```no_run
//! use axum::body::Body;
//! use axum::http::Request;
//! use idemkey_server::store::{PgSettings, PgStore};
//! use idemkey_server::{AnyStore, AppState, Settings, app};
//! use tower::ServiceExt as _;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PgStore::connect("postgres://127.0.0.1/idemkey", &PgSettings::default()).await?;
//! let state = AppState::new(AnyStore::Postgres(store), Settings::default());
//! let response = app(state)
//!     .oneshot(Request::get("/healthz").body(Body::empty())?)
//!     .await?;
//! assert_eq!(response.status(), 200);
//! assert_eq!(response.headers()["cache-control"], "no-store");
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::CACHE_CONTROL;
use idemkey_core::{ExpiryPolicy, KeyProfile, UnixMillis};
use tower_http::set_header::SetResponseHeaderLayer;

pub mod auth;
pub mod config;
pub mod fixture;
pub mod in_transaction;
pub mod layer;
pub mod maintenance;
pub mod metrics;
pub mod operator;
pub mod problems;
pub mod request_id;
pub mod routes;
pub mod serve;
pub mod store;
pub mod telemetry;

pub use serve::{ConnectionControl, serve};
pub use store::AnyStore;

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
    /// Whether the `x-idemkey-test-fault` request header is honoured.
    pub test_faults: bool,
    /// Directory of the demo's static files, when demo mode is on.
    pub demo_dir: Option<std::path::PathBuf>,
    /// The demo account's token, served at `GET /demo/token` in demo mode
    /// (a local demo only: the server binds to 127.0.0.1 by default).
    pub demo_token: Option<String>,
    /// Longest wait for a request body once its head has arrived; past it
    /// the request is answered 400 and its connection closed.
    pub body_read_timeout: Duration,
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
        }
    }
}

/// The one place the server reads the time; tests may pass their own.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> UnixMillis + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self(Arc::new(|| store::from_system_time(SystemTime::now())))
    }

    /// A clock that answers `f()`.
    pub fn from_fn(f: impl Fn() -> UnixMillis + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Now.
    pub fn now(&self) -> UnixMillis {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// Shared state of the routes: the store, the settings, the clock.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: AnyStore,
    settings: Settings,
    clock: Clock,
    lose_next_response: AtomicBool,
    metrics: Arc<metrics::Metrics>,
}

impl AppState {
    /// State over `store` with the system clock.
    pub fn new(store: AnyStore, settings: Settings) -> Self {
        Self::with_clock(store, settings, Clock::system())
    }

    /// State over `store` with a given clock.
    pub fn with_clock(store: AnyStore, settings: Settings, clock: Clock) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                settings,
                clock,
                lose_next_response: AtomicBool::new(false),
                metrics: Arc::default(),
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> &AnyStore {
        &self.inner.store
    }

    /// The metrics of `GET /metrics`.
    pub fn metrics(&self) -> &Arc<metrics::Metrics> {
        &self.inner.metrics
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The time now, from the state's clock.
    pub fn now(&self) -> UnixMillis {
        self.inner.clock.now()
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

/// The router: every route, the problem fallbacks and
/// `Cache-Control: no-store` on every response.
pub fn app(state: AppState) -> Router {
    routes::router(state.clone())
        .merge(operator::router(state.clone()))
        .layer(axum::middleware::from_fn_with_state(state, metrics::record))
        .layer(axum::middleware::from_fn(telemetry::log_requests))
        .layer(axum::middleware::from_fn(request_id::assign))
        .layer(SetResponseHeaderLayer::overriding(
            CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
}

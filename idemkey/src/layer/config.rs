//! What every service a layer builds shares: its settings and its trim
//! task.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use axum::http::request::Parts;
use idemkey_core::{Fingerprint, KeyProfile, OperationId, Problem};

use crate::idempotency::{Policy, Records};
use crate::metrics::Metrics;

/// Rows per trim batch.
pub const TRIM_BATCH: u32 = 500;

/// Chooses a record's scope from the request head; `None` answers 401.
pub type ScopeFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Fingerprints a request from its operation, head and body; an error is
/// answered as it is (e.g. 400 `request-invalid`).
pub type FingerprintFn =
    dyn Fn(&OperationId, &Parts, &[u8]) -> Result<Fingerprint, Problem> + Send + Sync;

/// Settings shared by every service the layer builds.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) methods: HashSet<Method>,
    pub(crate) key_profile: KeyProfile,
    pub(crate) policy: Policy,
    pub(crate) operation: OperationId,
    pub(crate) max_request_body: usize,
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_stored_response: usize,
    pub(crate) replay_headers: Vec<String>,
    pub(crate) scope: Arc<ScopeFn>,
    pub(crate) fingerprint: Arc<FingerprintFn>,
    pub(crate) metrics: Option<Arc<Metrics>>,
    pub(crate) retention: Duration,
    /// `None`: no trim task.
    pub(crate) trim_interval: Option<Duration>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("operation", &self.operation)
            .field("methods", &self.methods)
            .field("key_profile", &self.key_profile)
            .field("policy", &self.policy)
            .field("max_request_body", &self.max_request_body)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("max_stored_response", &self.max_stored_response)
            .field("replay_headers", &self.replay_headers)
            .field("retention", &self.retention)
            .field("trim_interval", &self.trim_interval)
            .finish_non_exhaustive()
    }
}

/// The layer's trim task, started by the first guarded request (a runtime
/// is running then) and stopped when the last service holding this is
/// dropped: the task ends when its stop channel's sender goes.
#[derive(Debug, Default)]
pub(crate) struct Trimmer {
    stop: std::sync::OnceLock<tokio::sync::watch::Sender<bool>>,
}

impl Trimmer {
    /// Starts the task unless it runs, the settings turn it off, the store
    /// expires records itself (Redis) or no runtime is running.
    pub(crate) fn start<R>(&self, db: &R, config: &Config)
    where
        R: Records + Clone + Send + Sync + 'static,
    {
        let Some(interval) = config.trim_interval else {
            return;
        };
        if db.expires_records() || self.stop.get().is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.stop.get_or_init(|| {
            let (stop, stopped) = tokio::sync::watch::channel(false);
            runtime.spawn(crate::maintenance::run(
                db.clone(),
                config.retention,
                interval,
                TRIM_BATCH,
                stopped,
            ));
            stop
        });
    }
}

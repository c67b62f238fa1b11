//! The delivery worker: claims due messages under a lease (the store's
//! clock decides when a crashed worker's claim ends), runs the delivery
//! function registered for their effect, and settles each under its lease:
//! delivered, refused for good, retried after a full-jitter backoff (the
//! downstream's `Retry-After` honoured), or dead-lettered when the attempts
//! run out.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{AttemptOutcome, RetryPolicy, RetryStep};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::OutboxMetrics;
use crate::store::outbox::{OutboxMessage, Settlement};
use crate::store::{Db, StoreError};

/// The longest a delivery waits on a downstream's `Retry-After`: an answer
/// can neither park a message for years nor overflow a timestamp, and a
/// retry stays well inside the downstream's key retention.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// What one delivery attempt came to, as the delivery function saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The downstream applied the effect; its answer (e.g. a charge id).
    Delivered(String),
    /// The downstream refused it for good (e.g. a declined card): never
    /// sent again.
    Refused(String),
    /// Surely not applied (refused connection, 5xx, 429): send it again,
    /// not before `after` when the downstream said so (at most
    /// [`MAX_RETRY_AFTER`]).
    Retry {
        /// The downstream's `Retry-After`.
        after: Option<Duration>,
        /// What happened.
        reason: String,
    },
    /// Maybe applied (a timeout, a connection lost after sending): the next
    /// attempt looks the effect up before sending it again.
    Uncertain(String),
}

impl Delivery {
    fn label(&self) -> &'static str {
        match self {
            Self::Delivered(_) => "delivered",
            Self::Refused(_) => "refused",
            Self::Retry { .. } => "retry",
            Self::Uncertain(_) => "uncertain",
        }
    }
}

/// What a handler that records its own outcome did with a message
/// ([`Worker::handle_settled`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// It settled the message in its own transaction, with what the
    /// message asked for.
    Recorded,
    /// Its claim had ended (another worker took the message over, or the
    /// work moved on): it recorded nothing.
    Fenced,
    /// Nothing was recorded: the worker settles the message as `delivery`
    /// says (retried with backoff, dead-lettered when the attempts run
    /// out, or failed), with the downstream key it was sent with.
    Again {
        /// What the attempt came to.
        delivery: Delivery,
        /// The key the downstream saw, if it was called.
        sent_key: Option<String>,
    },
}

/// The future a delivery function returns.
type DeliveryFuture = Pin<Box<dyn Future<Output = Delivery> + Send>>;
type SettledFuture = Pin<Box<dyn Future<Output = Result<Settled, StoreError>> + Send>>;

#[derive(Clone)]
enum Handler {
    Deliver(Arc<dyn Fn(OutboxMessage) -> DeliveryFuture + Send + Sync>),
    Settles(Arc<dyn Fn(OutboxMessage) -> SettledFuture + Send + Sync>),
}

/// How a worker claims and retries.
#[derive(Clone, Copy, Debug)]
pub struct WorkerSettings {
    /// Messages claimed at once (delivered concurrently).
    pub batch: u32,
    /// How long a claim lasts; a delivery is cut off (as uncertain) at half
    /// of it, so a live worker's claim never ends under it.
    pub lease: Duration,
    /// How long an idle worker waits before looking again (a new order in
    /// this process wakes it at once).
    pub idle_poll: Duration,
    /// Backoff and budget: `max_attempts` deliveries, then a dead letter.
    pub retry: RetryPolicy,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            batch: 16,
            lease: Duration::from_secs(30),
            idle_poll: Duration::from_millis(250),
            retry: RetryPolicy {
                base_ms: 500,
                cap_ms: 60_000,
                max_attempts: 10,
            },
        }
    }
}

/// Delivers the outbox messages of the effects it has a function for.
#[derive(Clone)]
pub struct Worker {
    db: Db,
    handlers: HashMap<String, Handler>,
    settings: WorkerSettings,
    metrics: Arc<OutboxMetrics>,
    wake: Arc<Notify>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("effects", &self.handlers.keys().collect::<Vec<_>>())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker on `db` with no delivery function yet.
    pub fn new(db: Db, settings: WorkerSettings) -> Self {
        Self {
            db,
            handlers: HashMap::new(),
            settings,
            metrics: Arc::default(),
            wake: Arc::default(),
        }
    }

    /// Registers `deliver` for the messages of `effect`. It gets the
    /// message (payload, [`OutboxMessage::downstream_key`],
    /// [`OutboxMessage::maybe_sent`]) and must send the effect with that
    /// key, looking it up first when it may have been sent.
    #[must_use]
    pub fn handle<F, Fut>(mut self, effect: &str, deliver: F) -> Self
    where
        F: Fn(OutboxMessage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Delivery> + Send + 'static,
    {
        let handler = Handler::Deliver(Arc::new(move |message| Box::pin(deliver(message))));
        self.handlers.insert(effect.to_owned(), handler);
        self
    }

    /// Registers `handle` for the messages of `effect`, for work whose
    /// outcome must commit with other rows (a step of a flow and its
    /// journal): it settles the message in its own transaction, fenced by
    /// the message's lease, or hands it back as [`Settled::Again`].
    #[must_use]
    pub fn handle_settled<F, Fut>(mut self, effect: &str, handle: F) -> Self
    where
        F: Fn(OutboxMessage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Settled, StoreError>> + Send + 'static,
    {
        let handler = Handler::Settles(Arc::new(move |message| Box::pin(handle(message))));
        self.handlers.insert(effect.to_owned(), handler);
        self
    }

    /// Counts deliveries into `metrics` (shared with `/metrics`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<OutboxMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Wakes the worker when notified (e.g. after a new order commits), so
    /// that it does not wait for its next poll.
    #[must_use]
    pub fn with_waker(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// Claims one batch of due messages and delivers them; how many it
    /// claimed.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        let effects: Vec<String> = self.handlers.keys().cloned().collect();
        let messages = self
            .db
            .claim_outbox(&effects, self.settings.batch, self.settings.lease)
            .await?;
        let claimed = messages.len();
        let mut deliveries = JoinSet::new();
        for message in messages {
            let worker = self.clone();
            deliveries.spawn(async move { worker.deliver(message).await });
        }
        let mut first_error = None;
        while let Some(done) = deliveries.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    first_error.get_or_insert(err);
                }
                Err(err) => {
                    first_error
                        .get_or_insert(StoreError::Unavailable(format!("delivery task: {err}")));
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(claimed),
        }
    }

    /// Delivers until `shutdown` completes; store errors are logged and
    /// retried after the idle poll.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let idle = match self.run_once().await {
                Ok(0) => true,
                Ok(_) => false,
                Err(err) => {
                    warn!(error = %err, "outbox worker: store error");
                    true
                }
            };
            if idle {
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(self.settings.idle_poll) => {}
                    () = self.wake.notified() => {}
                }
            } else if futures_now(&mut shutdown) {
                return;
            }
        }
    }

    async fn deliver(&self, message: OutboxMessage) -> Result<(), StoreError> {
        let Some(handler) = self.handlers.get(&message.effect) else {
            return Ok(());
        };
        let (delivery, key) = match handler {
            Handler::Deliver(deliver) => {
                let cutoff = self.settings.lease / 2;
                let delivery = tokio::time::timeout(cutoff, deliver(message.clone()))
                    .await
                    .unwrap_or_else(|_| {
                        Delivery::Uncertain(format!("no answer within {} ms", cutoff.as_millis()))
                    });
                (delivery, message.downstream_key().to_string())
            }
            Handler::Settles(handle) => match handle(message.clone()).await? {
                Settled::Recorded => {
                    self.metrics.count(&message.effect, "delivered");
                    return Ok(());
                }
                Settled::Fenced => {
                    self.metrics.count(&message.effect, "lease-lost");
                    return Ok(());
                }
                Settled::Again { delivery, sent_key } => (
                    delivery,
                    sent_key.unwrap_or_else(|| message.downstream_key().to_string()),
                ),
            },
        };
        self.metrics.count(&message.effect, delivery.label());
        let settlement = self.settlement(&message, delivery);
        if matches!(settlement, Settlement::Dead { .. }) {
            self.metrics.count(&message.effect, "dead");
            warn!(id = message.id, effect = %message.effect, "outbox message dead-lettered");
        }
        if !self
            .db
            .settle_outbox(&message, Some(&key), &settlement)
            .await?
        {
            // Its lease ended and another worker took it over: that one's
            // answer counts (the downstream deduplicated by the key).
            self.metrics.count(&message.effect, "lease-lost");
            info!(id = message.id, "outbox claim lost before settling");
        }
        Ok(())
    }

    fn settlement(&self, message: &OutboxMessage, delivery: Delivery) -> Settlement {
        let (outcome, error) = match delivery {
            Delivery::Delivered(result) => return Settlement::Delivered { result },
            Delivery::Refused(reason) => return Settlement::Failed { reason },
            Delivery::Retry { after, reason } => (
                AttemptOutcome::Response {
                    status: 503,
                    // A downstream's wait is honoured up to a bound: a
                    // huge one would park the message for years, or
                    // overflow the store's timestamp arithmetic.
                    retry_after_ms: after.map(|d| {
                        u64::try_from(d.min(MAX_RETRY_AFTER).as_millis()).unwrap_or(u64::MAX)
                    }),
                    code: None,
                },
                reason,
            ),
            Delivery::Uncertain(reason) => (AttemptOutcome::NetworkError, reason),
        };
        match self
            .settings
            .retry
            .step(message.attempts, outcome, random_unit())
        {
            RetryStep::Wait { delay_ms } => Settlement::Retry {
                after: Duration::from_millis(delay_ms),
                error,
            },
            // The outcomes above are a 503 or no answer, which the policy
            // never stops or holds; the provider's 401/403 arrive as
            // `Delivery::Retry` (the payments client classifies them).
            RetryStep::Stop | RetryStep::HoldForAuth => Settlement::Failed { reason: error },
            RetryStep::Reconcile | RetryStep::Done => Settlement::Dead { error },
        }
    }
}

/// Whether `shutdown` has completed, without waiting for it.
fn futures_now(shutdown: &mut Pin<&mut impl Future<Output = ()>>) -> bool {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    shutdown.as_mut().poll(&mut cx).is_ready()
}

/// A uniform number in `[0, 1)` for the backoff's jitter.
fn random_unit() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    // 53 random bits: every value exactly representable.
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

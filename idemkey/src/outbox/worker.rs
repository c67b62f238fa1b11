//! The delivery worker: claims due messages under a lease (the store's
//! clock decides when a crashed worker's claim ends), runs the delivery
//! function registered for their effect, and settles each under its lease:
//! delivered, refused for good, retried after a full-jitter backoff (the
//! downstream's `Retry-After` honoured), or dead-lettered when the attempts
//! run out.
//!
//! [`Worker::run`] keeps up to [`WorkerSettings::concurrency`] deliveries in
//! flight and claims the next batch as soon as half of that room is free,
//! so one slow send holds only itself. Outcomes are settled together: one
//! write for every outcome ready (one statement on PostgreSQL, one
//! transaction on SQLite), as soon as a batch of them is ready or
//! [`SETTLE_WITHIN`] after the first, each still fenced by its own lease.
//! A claimed message is always delivered and settled, or its claim is left
//! to expire (a store error), never dropped.
//!
//! An effect's sends are paced by the operator's [`Rate`] (messages are
//! claimed only as fast as the limit lets them be sent) and by the
//! downstream: a `Retry-After` pauses every new send of that effect until it
//! ends, not only the message it answered. A handler that settles its own
//! messages ([`Worker::handle_settled`], the steps of every flow) sends to
//! many downstreams under one effect: it pauses what its `Retry-After`
//! names itself ([`Settled::Paused`]), never the whole effect.
//!
//! A message is retried for a **duration** ([`WorkerSettings::retry_for`],
//! counted from its enqueueing at the store's clock), not a number of
//! attempts: a downstream's outage is waited out, up to a bound kept below
//! the downstream's key retention (a resend after the downstream forgot the
//! key would apply the effect a second time).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idemkey_core::RetryPolicy;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::{info, warn};

use super::OutboxMetrics;
use super::throttle::{Rate, Throttle};
use crate::Db;
use crate::store::StoreError;
use crate::store::outbox::{OutboxMessage, OutboxOutcome, Settlement};

/// The longest an outcome waits for others to be settled with: its lease
/// is running, and the message's next attempt (if any) is not due before
/// it is settled.
pub const SETTLE_WITHIN: Duration = Duration::from_millis(5);

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
    /// Not sent: the downstream it is bound for asked to wait (a
    /// `Retry-After` the handler keeps per downstream). The claim is handed
    /// back, due again after `after`, and the attempt is not counted.
    Paused {
        /// How long that downstream stays paused.
        after: Duration,
    },
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
    /// Messages claimed at once, and outcomes settled at once.
    pub batch: u32,
    /// Deliveries in flight at most ([`Worker::run`]); the next batch is
    /// claimed when half of them (or a batch, if less) have finished.
    pub concurrency: u32,
    /// How long a claim lasts; a delivery is cut off (as uncertain) at half
    /// of it, so a live worker's claim never ends under it.
    pub lease: Duration,
    /// How long an idle worker waits before looking again (a new message in
    /// this process wakes it at once).
    pub idle_poll: Duration,
    /// Backoff (`base_ms`, `cap_ms`, full jitter) and an optional cap on
    /// deliveries (`max_attempts`; `u32::MAX` for none: the budget is
    /// [`Self::retry_for`]).
    pub retry: RetryPolicy,
    /// How long a message is retried, counted from its enqueueing at the
    /// store's clock: a retry that would start later dead-letters it. Keep
    /// it below the downstream's key retention (a resend after the
    /// downstream forgot the key is a second charge) and above a realistic
    /// outage ([`DEFAULT_RETRY_FOR`]).
    pub retry_for: Duration,
}

/// The default retry budget: 12 hours. A payment provider's incidents last
/// minutes to a few hours, so a step waits out any realistic outage; and a
/// provider keeps an idempotency key for at least 24 hours (Stripe prunes
/// keys once they are at least that old), so the last resend, and an
/// operator's or a client's retry of a dead letter in the 12 hours after,
/// still meets the key.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(12 * 3600);

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            batch: 16,
            concurrency: 32,
            lease: Duration::from_secs(30),
            idle_poll: Duration::from_millis(250),
            retry: RetryPolicy {
                base_ms: 500,
                cap_ms: 60_000,
                max_attempts: u32::MAX,
            },
            retry_for: DEFAULT_RETRY_FOR,
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
    throttle: Arc<Throttle>,
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
            throttle: Arc::default(),
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

    /// Wakes the worker when notified (e.g. after a change with a message commits), so
    /// that it does not wait for its next poll.
    #[must_use]
    pub fn with_waker(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// Sends of `effect` start at most at `rate` (in this process: its
    /// clones share the limit, other processes have their own). Messages of
    /// `effect` are claimed only as fast as the limit lets them be sent.
    #[must_use]
    pub fn rate_limit(self, effect: &str, rate: Rate) -> Self {
        self.throttle.limit(effect, rate, Instant::now());
        self
    }

    /// How long new sends of `effect` stay paused by a downstream's
    /// `Retry-After`, if they are.
    pub fn paused_for(&self, effect: &str) -> Option<Duration> {
        self.throttle.paused_for(effect, Instant::now())
    }

    /// Claims one batch of due messages, delivers them, settles them in one
    /// write, and answers how many it claimed.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        let messages = self.claim(self.settings.batch.max(1)).await?;
        let claimed = messages.len();
        let mut deliveries = JoinSet::new();
        for message in messages {
            let worker = self.clone();
            deliveries.spawn(async move { worker.deliver(message).await });
        }
        let mut outcomes = Vec::with_capacity(claimed);
        let mut first_error = None;
        while let Some(done) = deliveries.join_next().await {
            match joined(done) {
                Ok(Some(outcome)) => outcomes.push(outcome),
                Ok(None) => {}
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        self.settle(&outcomes).await?;
        match first_error {
            Some(err) => Err(err),
            None => Ok(claimed),
        }
    }

    /// Delivers until `shutdown` completes: up to `concurrency` deliveries
    /// in flight, claiming more as room frees up, settling outcomes in
    /// batches. A claim and a settlement run beside the deliveries and
    /// beside each other (one of each at a time): outcomes that finish
    /// while a settlement is being written go in the next one. Store errors
    /// are logged and retried after the idle poll (an outcome that could not
    /// be settled leaves its claim to expire: the message is delivered
    /// again, looked up first). At shutdown it claims nothing more and
    /// settles the deliveries in flight.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let batch = self.settings.batch.max(1);
        let concurrency = self.settings.concurrency.max(1) as usize;
        // Claim when this much room is free: half, or a whole batch if less.
        let claim_at = (batch as usize).min(concurrency.div_ceil(2));
        let mut in_flight = JoinSet::new();
        let mut claiming: Option<JoinHandle<Result<Vec<OutboxMessage>, StoreError>>> = None;
        let mut settling: Option<JoinHandle<Result<(), StoreError>>> = None;
        let mut ready: Vec<OutboxOutcome> = Vec::new();
        let mut settle_by: Option<Instant> = None;
        // Set after a claim found nothing (or failed): no claim before it
        // unless woken.
        let mut quiet_until: Option<Instant> = None;
        let mut stopping = false;
        loop {
            let free = concurrency.saturating_sub(in_flight.len());
            let quiet = quiet_until.is_some_and(|t| t > Instant::now());
            // Outcomes not yet settled count against the room: a store that
            // settles slowly holds claims back rather than letting claimed
            // messages pile up until their leases end and they are sent again.
            let free = free.saturating_sub(ready.len());
            if !stopping && claiming.is_none() && !quiet && free >= claim_at {
                quiet_until.take();
                let asked = u32::try_from(free).unwrap_or(u32::MAX).min(batch);
                let worker = self.clone();
                claiming = Some(tokio::spawn(async move { worker.claim(asked).await }));
            }
            let due = settle_by.is_some_and(|t| t <= Instant::now());
            if settling.is_none()
                && !ready.is_empty()
                && (ready.len() >= batch as usize || in_flight.is_empty() || due)
            {
                let outcomes = std::mem::take(&mut ready);
                settle_by.take();
                let worker = self.clone();
                settling = Some(tokio::spawn(async move {
                    let settled = worker.settle(&outcomes).await;
                    if let Err(err) = &settled {
                        warn!(
                            error = %err,
                            outcomes = outcomes.len(),
                            "outbox worker: settling failed; their claims expire"
                        );
                    }
                    settled
                }));
            }
            if stopping
                && in_flight.is_empty()
                && claiming.is_none()
                && settling.is_none()
                && ready.is_empty()
            {
                return;
            }
            // Wait for the next look only while there is room to claim in.
            let look_at = quiet_until
                .filter(|_| !stopping && concurrency.saturating_sub(in_flight.len()) >= claim_at);
            // A due settlement waits for the one being written, not a timer.
            let settle_at = settle_by.filter(|_| settling.is_none());
            tokio::select! {
                () = &mut shutdown, if !stopping => stopping = true,
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    match joined(done) {
                        Ok(Some(outcome)) => {
                            ready.push(outcome);
                            settle_by.get_or_insert_with(|| Instant::now() + SETTLE_WITHIN);
                        }
                        Ok(None) => {}
                        Err(err) => warn!(error = %err, "outbox worker: store error"),
                    }
                }
                claimed = finished(&mut claiming), if claiming.is_some() => {
                    claiming = None;
                    match claimed {
                        Ok(messages) if messages.is_empty() => {
                            quiet_until = Some(self.next_look(Instant::now()));
                        }
                        Ok(messages) => {
                            for message in messages {
                                let worker = self.clone();
                                in_flight.spawn(async move { worker.deliver(message).await });
                            }
                        }
                        Err(err) => {
                            warn!(error = %err, "outbox worker: store error");
                            quiet_until = Some(Instant::now() + self.settings.idle_poll);
                        }
                    }
                }
                _ = finished(&mut settling), if settling.is_some() => settling = None,
                () = sleep_until(settle_at), if settle_at.is_some() => {}
                () = sleep_until(look_at), if look_at.is_some() => {}
                () = self.wake.notified(), if !stopping => quiet_until = None,
            }
        }
    }

    /// When a worker whose claim found nothing looks again: after the idle
    /// poll, or sooner when a paused or rate-limited effect opens.
    fn next_look(&self, now: Instant) -> Instant {
        self.handlers
            .keys()
            .filter_map(|effect| self.throttle.opens_at(effect, now))
            .fold(now + self.settings.idle_poll, Instant::min)
    }

    /// Claims up to `room` due messages of the effects that may send now:
    /// none of a paused effect, and of a rate-limited one only as many as
    /// its limit lets start now (each claimed separately).
    async fn claim(&self, room: u32) -> Result<Vec<OutboxMessage>, StoreError> {
        let now = Instant::now();
        let (mut limited, mut open) = (Vec::new(), Vec::new());
        for effect in self.handlers.keys() {
            if self.throttle.paused_for(effect, now).is_some() {
                continue;
            }
            if self.throttle.is_limited(effect) {
                limited.push(effect.clone());
            } else {
                open.push(effect.clone());
            }
        }
        let mut room = room;
        let mut messages = Vec::new();
        // The limited first: their limit keeps them from crowding out the
        // others.
        for effect in limited {
            let allowed = self.throttle.take(&effect, room, now);
            if allowed == 0 {
                continue;
            }
            let claimed = self
                .db
                .claim_outbox(std::slice::from_ref(&effect), allowed, self.settings.lease)
                .await;
            let got = claimed.as_ref().map_or(0, Vec::len);
            let got = u32::try_from(got).unwrap_or(allowed);
            self.throttle
                .give_back(&effect, allowed - got.min(allowed), Instant::now());
            messages.extend(claimed?);
            room -= got.min(room);
        }
        if room > 0 && !open.is_empty() {
            messages.extend(
                self.db
                    .claim_outbox(&open, room, self.settings.lease)
                    .await?,
            );
        }
        Ok(messages)
    }

    /// Settles `outcomes` in one write; a claim found taken over is counted
    /// `lease-lost` (the other worker's answer counts: the downstream
    /// deduplicated by the key).
    async fn settle(&self, outcomes: &[OutboxOutcome]) -> Result<(), StoreError> {
        let settled = self.db.settle_outbox_batch(outcomes).await?;
        for (outcome, settled) in outcomes.iter().zip(settled) {
            if !settled {
                self.metrics.count(&outcome.message.effect, "lease-lost");
                info!(id = outcome.message.id, "outbox claim lost before settling");
            }
        }
        Ok(())
    }

    /// Delivers one message: the outcome for the worker to settle, or none
    /// when its handler settled it (or was fenced) itself.
    async fn deliver(&self, message: OutboxMessage) -> Result<Option<OutboxOutcome>, StoreError> {
        let Some(handler) = self.handlers.get(&message.effect) else {
            return Ok(None);
        };
        // A downstream's pushback that arrived after this message was
        // claimed: it is not sent, and its claim is handed back.
        if let Some(after) = self.throttle.paused_for(&message.effect, Instant::now()) {
            self.metrics.count(&message.effect, "postponed");
            return Ok(Some(OutboxOutcome {
                sent_key: message.sent_key.clone(),
                settlement: Settlement::Postponed { after },
                message,
            }));
        }
        // A handler that settles its own messages sends to the downstream
        // each message names, and pauses that one itself.
        let own_pauses = matches!(handler, Handler::Settles(_));
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
                    return Ok(None);
                }
                Settled::Fenced => {
                    self.metrics.count(&message.effect, "lease-lost");
                    return Ok(None);
                }
                Settled::Paused { after } => {
                    self.metrics.count(&message.effect, "postponed");
                    return Ok(Some(OutboxOutcome {
                        sent_key: message.sent_key.clone(),
                        settlement: Settlement::Postponed {
                            after: after.min(MAX_RETRY_AFTER),
                        },
                        message,
                    }));
                }
                Settled::Again { delivery, sent_key } => (
                    delivery,
                    sent_key.unwrap_or_else(|| message.downstream_key().to_string()),
                ),
            },
        };
        self.metrics.count(&message.effect, delivery.label());
        if let Delivery::Retry {
            after: Some(after), ..
        } = &delivery
            && !own_pauses
        {
            self.pause(&message.effect, *after);
        }
        let settlement = self.settlement(&message, delivery);
        if matches!(settlement, Settlement::Dead { .. }) {
            self.metrics.count(&message.effect, "dead");
            warn!(id = message.id, effect = %message.effect, "outbox message dead-lettered");
        }
        Ok(Some(OutboxOutcome {
            message,
            sent_key: Some(key),
            settlement,
        }))
    }

    /// The downstream said when to come back: no new send of `effect`
    /// before then (up to [`MAX_RETRY_AFTER`]).
    fn pause(&self, effect: &str, after: Duration) {
        let after = after.min(MAX_RETRY_AFTER);
        if self.throttle.pause(effect, Instant::now() + after) {
            self.metrics.count(effect, "paused");
            info!(
                effect,
                after_ms = after.as_millis(),
                "the downstream asked to wait: sends of this effect paused"
            );
        }
    }

    /// How `delivery` settles `message`: a retry after a full-jitter
    /// backoff (at least the downstream's `Retry-After`, at most
    /// [`MAX_RETRY_AFTER`]), or a dead letter once that retry would start
    /// past [`WorkerSettings::retry_for`] (or past `max_attempts`).
    fn settlement(&self, message: &OutboxMessage, delivery: Delivery) -> Settlement {
        let (asked, error) = match delivery {
            Delivery::Delivered(result) => return Settlement::Delivered { result },
            Delivery::Refused(reason) => return Settlement::Failed { reason },
            // A huge wait would park the message for years, or overflow
            // the store's timestamp arithmetic.
            Delivery::Retry { after, reason } => {
                (after.unwrap_or_default().min(MAX_RETRY_AFTER), reason)
            }
            Delivery::Uncertain(reason) => (Duration::ZERO, reason),
        };
        let retry = &self.settings.retry;
        let backoff = Duration::from_millis(retry.backoff_ms(message.attempts, random_unit()));
        let after = backoff.max(asked);
        if message.attempts >= retry.max_attempts
            || message.age.saturating_add(after) > self.settings.retry_for
        {
            return Settlement::Dead { error };
        }
        Settlement::Retry { after, error }
    }
}

/// A finished delivery task's result; a task that panicked is a store
/// error for the caller's log (its claim expires).
fn joined(
    done: Result<Result<Option<OutboxOutcome>, StoreError>, tokio::task::JoinError>,
) -> Result<Option<OutboxOutcome>, StoreError> {
    done.unwrap_or_else(|err| Err(StoreError::Unavailable(format!("delivery task: {err}"))))
}

/// What a claim or a settlement running beside the deliveries came to
/// (never called without one); a task that panicked is a store error.
async fn finished<T>(
    task: &mut Option<JoinHandle<Result<T, StoreError>>>,
) -> Result<T, StoreError> {
    match task.as_mut() {
        Some(task) => task
            .await
            .unwrap_or_else(|err| Err(StoreError::Unavailable(format!("outbox task: {err}")))),
        None => std::future::pending().await,
    }
}

/// Sleeps until `at` (never called without one).
async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
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

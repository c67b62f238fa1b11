//! The transactional outbox as the stores read and write it: messages
//! claimed under a lease, settled by the lease's holder only, and the
//! figures and listings operators look at.

use std::time::Duration;

use idemkey_core::{DownstreamKey, UnixMillis, downstream_key_of, instance_downstream_key_of};
use uuid::Uuid;

/// A message claimed for delivery: the effect, its payload and the key
/// tuple its downstream key is derived from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxMessage {
    /// Its id in the outbox.
    pub id: i64,
    /// The scope of the key it was written under (an account id).
    pub scope: String,
    /// The operation of that key.
    pub operation: String,
    /// That key.
    pub key: String,
    /// What to do: the name a delivery function is registered under.
    pub effect: String,
    /// The resource it belongs to (e.g. the id of the row the effect is about).
    pub resource_id: Option<String>,
    /// What the delivery function needs (JSON).
    pub payload: String,
    /// Deliveries tried, this one included.
    pub attempts: u32,
    /// The downstream key recorded by an earlier attempt, if any.
    pub sent_key: Option<String>,
    /// The claim this delivery holds; settling needs it.
    pub lease: Uuid,
    /// How long ago it was enqueued, at the store's clock when claimed: the
    /// worker's retry budget is a duration ([`crate::outbox::WorkerSettings::retry_for`]).
    pub age: Duration,
}

impl OutboxMessage {
    /// The key the downstream deduplicates this message by: derived from
    /// the key tuple and this message's instance ([`Self::instance`]), so
    /// every delivery of it, by any process, sends the same one, and a
    /// second order of a re-executed key gets a key of its own.
    ///
    /// A message an earlier version already sent under the tuple-only key
    /// ([`idemkey_core::downstream_key_of`], recorded in `sent_key`) keeps that
    /// key: the downstream deduplicates its deliveries by it.
    pub fn downstream_key(&self) -> DownstreamKey {
        let legacy = self.legacy_downstream_key();
        if self.sent_key.as_deref() == Some(legacy.as_str()) {
            return legacy;
        }
        self.instance_downstream_key()
    }

    /// The per-instance key ([`instance_downstream_key_of`]), whatever an
    /// earlier attempt sent.
    pub fn instance_downstream_key(&self) -> DownstreamKey {
        instance_downstream_key_of(
            &self.scope,
            &self.operation,
            &self.key,
            &self.effect,
            &self.instance(),
        )
    }

    /// The key versions before the per-instance one sent: derived from the
    /// key tuple alone ([`downstream_key_of`]), so shared by every
    /// execution of one key.
    fn legacy_downstream_key(&self) -> DownstreamKey {
        downstream_key_of(&self.scope, &self.operation, &self.key, &self.effect)
    }

    /// What tells this effect from another of the same key: its resource
    /// (e.g. a row's id), or the message's own id when it has none.
    pub fn instance(&self) -> String {
        match &self.resource_id {
            Some(resource) => resource.clone(),
            None => format!("outbox:{}", self.id),
        }
    }

    /// Whether an earlier attempt may have reached the downstream: it was
    /// sent (or claimed by a worker that may have died while sending), so
    /// this attempt looks the effect up before sending it again.
    pub fn maybe_sent(&self) -> bool {
        self.attempts > 1 || self.sent_key.is_some()
    }
}

/// How a delivery attempt ends a message's claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// The downstream applied it; `result` is what it answered.
    Delivered {
        /// The downstream's answer (e.g. the charge id).
        result: String,
    },
    /// The downstream refused it for good.
    Failed {
        /// Why.
        reason: String,
    },
    /// Try again after `after`, counted from the store's clock.
    Retry {
        /// How long to wait.
        after: Duration,
        /// What went wrong this time.
        error: String,
    },
    /// The attempts ran out: dead-lettered for an operator.
    Dead {
        /// What went wrong last.
        error: String,
    },
    /// Never sent (its effect's sends were paused after it was claimed):
    /// the claim is handed back, due again after `after`, and this attempt
    /// is not counted.
    Postponed {
        /// How long to wait.
        after: Duration,
    },
}

impl Settlement {
    /// The status the message gets.
    pub fn status(&self) -> &'static str {
        match self {
            Self::Delivered { .. } => "delivered",
            Self::Failed { .. } => "failed",
            Self::Retry { .. } | Self::Postponed { .. } => "pending",
            Self::Dead { .. } => "dead",
        }
    }

    /// Whether the attempt this claim counted was sent (all but a
    /// postponed one, whose count is taken back).
    #[allow(dead_code)] // For the backends' settle statements: none in a build without one.
    pub(crate) fn was_sent(&self) -> bool {
        !matches!(self, Self::Postponed { .. })
    }

    /// `(result, last_error, delay ms)` as the settle statements take them.
    #[allow(dead_code)] // For the backends' settle statements: none in a build without one.
    pub(crate) fn columns(&self) -> (Option<&str>, Option<&str>, i64) {
        match self {
            Self::Delivered { result } => (Some(result), None, 0),
            Self::Failed { reason } => (Some(reason), None, 0),
            Self::Retry { after, error } => (None, Some(error), crate::duration::millis(*after)),
            Self::Dead { error } => (None, Some(error), 0),
            Self::Postponed { after } => (None, None, crate::duration::millis(*after)),
        }
    }
}

/// One claimed message's outcome, as a worker settles it with others in one
/// write ([`crate::Db::settle_outbox_batch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxOutcome {
    /// The message, with the lease of its claim.
    pub message: OutboxMessage,
    /// The downstream key it was sent with (a postponed one: the key an
    /// earlier attempt recorded, kept).
    pub sent_key: Option<String>,
    /// How its claim ends.
    pub settlement: Settlement,
}

/// The outbox at a glance, at the store's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Messages not delivered yet.
    pub pending: u64,
    /// Age of the oldest of them, in milliseconds.
    pub oldest_pending_ms: u64,
    /// Messages whose attempts ran out.
    pub dead: u64,
}

/// One message as an operator lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Its id.
    pub id: i64,
    /// The key's scope.
    pub scope: String,
    /// The effect.
    pub effect: String,
    /// The resource the message belongs to.
    pub resource_id: Option<String>,
    /// pending, delivered, failed or dead.
    pub status: String,
    /// Deliveries tried.
    pub attempts: u32,
    /// The downstream key recorded at the last attempt.
    pub downstream_key: Option<String>,
    /// The downstream's answer, or the refusal's reason.
    pub result: Option<String>,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// When it was written.
    pub created_at: UnixMillis,
}

/// What sending messages back to pending came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requeued {
    /// Messages sent back to pending.
    pub requeued: u64,
    /// Messages left where they were because they are older than the
    /// provider's key retention (and the retry was not forced), by id.
    pub too_old: Vec<i64>,
}

/// A batch of settlements as the columns of one statement (the SQL
/// backends bind each as an array), in the order of the batch.
#[allow(
    dead_code,
    reason = "the backends that bind arrays use it (PostgreSQL's); SQLite settles row by row"
)]
#[derive(Debug, Default)]
pub(crate) struct SettleColumns<'a> {
    pub(crate) ids: Vec<i64>,
    pub(crate) leases: Vec<Uuid>,
    pub(crate) statuses: Vec<&'static str>,
    pub(crate) results: Vec<Option<&'a str>>,
    pub(crate) errors: Vec<Option<&'a str>>,
    pub(crate) delays: Vec<i64>,
    pub(crate) keys: Vec<Option<&'a str>>,
    pub(crate) scopes: Vec<&'a str>,
    pub(crate) sent: Vec<bool>,
}

#[allow(
    dead_code,
    reason = "the backends that bind arrays use it (PostgreSQL's); SQLite settles row by row"
)]
impl<'a> SettleColumns<'a> {
    pub(crate) fn of(outcomes: &'a [OutboxOutcome]) -> Self {
        let mut c = Self::default();
        for outcome in outcomes {
            let (result, error, delay) = outcome.settlement.columns();
            c.ids.push(outcome.message.id);
            c.leases.push(outcome.message.lease);
            c.statuses.push(outcome.settlement.status());
            c.results.push(result);
            c.errors.push(error);
            c.delays.push(delay);
            c.keys.push(outcome.sent_key.as_deref());
            c.scopes.push(outcome.message.scope.as_str());
            c.sent.push(outcome.settlement.was_sent());
        }
        c
    }
}

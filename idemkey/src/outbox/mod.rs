//! Effects outside the database, delivered from a transactional outbox.
//!
//! A change and the message that asks for its outside effect (a charge at
//! a payment provider, an e-mail) commit in one transaction
//! ([`enqueue`](crate::in_transaction) on the open transaction); a
//! [`Worker`] delivers the message later, at least once, and the
//! downstream deduplicates the repeats by the key derived from the
//! message's idempotency key ([`OutboxMessage::downstream_key`]).
//! "Once" ends where the downstream's own key retention ends.

mod metrics;
mod throttle;
mod worker;

pub use crate::store::outbox::{
    OutboxEntry, OutboxMessage, OutboxOutcome, OutboxStats, Requeued, Settlement,
};
pub use metrics::OutboxMetrics;
pub use throttle::Rate;
pub use worker::{
    DEFAULT_RETRY_FOR, Delivery, MAX_RETRY_AFTER, SETTLE_WITHIN, Settled, Worker, WorkerSettings,
};

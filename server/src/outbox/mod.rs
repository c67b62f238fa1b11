//! Effects outside the database, delivered from a transactional outbox.
//!
//! A change and the message that asks for its outside effect (a charge at
//! the payment provider) commit in one transaction; a [`Worker`] delivers
//! the message later, at least once, and the downstream deduplicates the
//! repeats by the key derived from the message's idempotency key
//! ([`idemkey_core::downstream_key`]). "Once" ends where the downstream's
//! own key retention ends: see docs/payments.md.

mod args;
mod charge;
mod metrics;
mod worker;

pub use args::{OutboxArgs, OutboxCommand, WorkerArgs};
pub use charge::{CHARGE, charge_delivery};
pub use metrics::OutboxMetrics;
pub use worker::{Delivery, Worker, WorkerSettings};

//! The effects of the payment provider simulator (see the [crate docs](crate)):
//! its charges, confirmations and refunds, one row per `(scope,
//! idempotency key)` of each, guarded by a unique constraint, so even a
//! request the provider's idempotency layer runs again (after its lease)
//! finds the effect it made instead of making a second one. A charge is
//! refunded at most once (a unique constraint on the refund's charge). Only
//! the SQL stores hold them: [`Db`] has no Redis variant.
//!
//! The provider also logs every request it gets and every run of its
//! handlers ([`ProviderRequest`]): the unique keys above hide a second
//! request under one key, the log shows it.

mod charge;
mod confirmation;
mod db;
mod postgres;
mod refund;
mod sqlite;

pub use charge::{Charge, ChargeWrite, Endpoint, NewCharge, ProviderRequest, RequestKind};
pub use confirmation::{Confirmation, ConfirmationWrite, NewConfirmation};
pub use db::{CHARGES_NEED_SQL, Db};
pub use refund::{NewRefund, Refund, RefundWrite};

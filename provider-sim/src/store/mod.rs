//! The charges of the payment provider simulator (see the [crate docs](crate)): one row per
//! `(scope, idempotency key)`, guarded by a unique constraint, so even a
//! request the provider's idempotency layer runs again (after its lease)
//! finds the charge it made instead of making a second one. Only the SQL
//! stores hold charges: [`Db`] has no Redis variant.
//!
//! The provider also logs every request it gets and every run of its
//! charge handler ([`ProviderRequest`]): the unique key above hides a second
//! charge request under one key, the log shows it.

mod charge;
mod db;
mod postgres;
mod sqlite;

pub use charge::{Charge, ChargeWrite, NewCharge, ProviderRequest, RequestKind};
pub use db::{CHARGES_NEED_SQL, Db};

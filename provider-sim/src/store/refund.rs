//! A refund, as the simulator stores it.

use idemkey_core::UnixMillis;
use uuid::Uuid;

/// A refund as stored: the whole amount of one charge of the same scope
/// given back, at most once per charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refund {
    /// Its id (shown as `re_` and the simple UUID).
    pub id: Uuid,
    /// The idempotency key it was made under (its characters, unquoted).
    pub idempotency_key: String,
    /// The charge it refunds ([`Charge::id`](super::Charge::id)).
    pub charge_id: Uuid,
    /// The order of that charge.
    pub order_id: Uuid,
    /// The amount given back, in cents: the charge's.
    pub amount_cents: i64,
    /// The charge's currency.
    pub currency: String,
    /// When it was made, at the database's clock.
    pub created_at: UnixMillis,
}

/// A refund to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRefund {
    /// Whose refund it is: the provider's caller (see [the crate docs](crate)).
    pub scope: String,
    /// The request's idempotency key (its characters, unquoted).
    pub idempotency_key: String,
    /// The charge to refund (one of the same scope's).
    pub charge_id: Uuid,
    /// The amount to give back, in cents: must be the charge's.
    pub amount_cents: i64,
}

/// What [`Db::insert_refund`](super::Db::insert_refund) did, checked in
/// this order: the key first (so a repeat gets its refund whatever
/// happened since), then the charge, then the charge's one refund.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefundWrite {
    /// A new refund.
    Created(Refund),
    /// The key already had this refund; nothing was written.
    Existing(Refund),
    /// The scope has no charge with that id; nothing was written.
    NoCharge,
    /// The charge's amount is not the one asked; nothing was written.
    AmountMismatch {
        /// The charge's amount, in cents.
        charge_amount_cents: i64,
    },
    /// The charge was refunded already, under another key: that refund.
    /// Nothing was written.
    AlreadyRefunded(Refund),
}

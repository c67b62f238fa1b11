//! The charges of the payment provider simulator (`idemkey-server
//! provider`, see [`crate::payments::provider`]): one row per
//! `(scope, idempotency key)`, guarded by a unique constraint, so even a
//! request the provider's idempotency layer runs again (after its lease)
//! finds the charge it made instead of making a second one. Only the SQL
//! stores hold charges; Redis answers [`StoreError::Unavailable`].

use idemkey_core::UnixMillis;
use uuid::Uuid;

use super::{Db, StoreError};

/// A charge as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    /// Its id (shown as `ch_` and the simple UUID).
    pub id: Uuid,
    /// The idempotency key it was made under (its characters, unquoted).
    pub idempotency_key: String,
    /// The order it pays for.
    pub order_id: Uuid,
    /// The amount, in cents.
    pub amount_cents: i64,
    /// ISO 4217 code, e.g. `EUR`.
    pub currency: String,
    /// When it was made, at the database's clock.
    pub created_at: UnixMillis,
}

/// A charge to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCharge {
    /// Whose charge it is: the provider's caller (see
    /// [`crate::payments::provider`]).
    pub scope: String,
    /// The request's idempotency key (its characters, unquoted).
    pub idempotency_key: String,
    /// The order it pays for.
    pub order_id: Uuid,
    /// The amount, in cents (positive).
    pub amount_cents: i64,
    /// ISO 4217 code, three capital letters.
    pub currency: String,
}

/// What [`Db::insert_charge`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChargeWrite {
    /// A new charge.
    Created(Charge),
    /// The key already had this charge; nothing was written.
    Existing(Charge),
}

/// Why Redis holds no charges.
pub const CHARGES_NEED_SQL: &str = "the payment provider keeps its charges in a SQL store: \
     use postgres://... or sqlite://PATH, not Redis";

impl Db {
    /// Makes the charge of `(scope, key)` in one transaction, or returns the
    /// one the key already has.
    pub async fn insert_charge(&self, charge: &NewCharge) -> Result<ChargeWrite, StoreError> {
        each!(self, db => db.insert_charge(charge).await)
    }

    /// The scope's charge made under `key`, if any.
    pub async fn charge(&self, scope: &str, key: &str) -> Result<Option<Charge>, StoreError> {
        each!(self, db => db.charge(scope, key).await)
    }

    /// Every charge of the scope, oldest first.
    pub async fn charges(&self, scope: &str) -> Result<Vec<Charge>, StoreError> {
        each!(self, db => db.charges(scope).await)
    }
}

//! The charges of the payment provider simulator (`idemkey-server
//! provider`, see [`crate::payments::provider`]): one row per
//! `(scope, idempotency key)`, guarded by a unique constraint, so even a
//! request the provider's idempotency layer runs again (after its lease)
//! finds the charge it made instead of making a second one. Only the SQL
//! stores hold charges; Redis answers [`StoreError::Unavailable`].
//!
//! The provider also logs every request it gets and every run of its
//! charge handler ([`ProviderRequest`]): the unique key above hides a second
//! charge request under one key, the log shows it.

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

/// What one row of the provider's request log records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// A `POST /charges` arrived (before any fault was drawn).
    Request,
    /// A `GET /charges/{key}` arrived (before any fault was drawn).
    Lookup,
    /// The charge handler ran: a request reached the charge's write (it
    /// made the charge or found the key's one).
    Charge,
}

impl RequestKind {
    /// The kind as stored: `request`, `lookup` or `charge`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Lookup => "lookup",
            Self::Charge => "charge",
        }
    }
}

/// One row of the provider's request log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRequest {
    /// Its place in arrival order.
    pub seq: i64,
    /// `request`, `lookup` or `charge` ([`RequestKind::as_str`]).
    pub kind: String,
    /// The key it named (its characters, unquoted).
    pub idempotency_key: String,
    /// The order of a `charge` run.
    pub order_id: Option<Uuid>,
    /// When it was logged, at the database's clock.
    pub created_at: UnixMillis,
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

    /// Logs one request of the scope (or one run of the charge handler,
    /// with its order) in the provider's request log.
    pub async fn log_provider_request(
        &self,
        scope: &str,
        kind: RequestKind,
        key: &str,
        order_id: Option<Uuid>,
    ) -> Result<(), StoreError> {
        each!(self, db => db.log_provider_request(scope, kind, key, order_id).await)
    }

    /// The scope's request log, in arrival order.
    pub async fn provider_requests(&self, scope: &str) -> Result<Vec<ProviderRequest>, StoreError> {
        each!(self, db => db.provider_requests(scope).await)
    }
}

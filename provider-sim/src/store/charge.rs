//! A charge and the request log's rows, as the simulator stores them.

use idemkey_core::UnixMillis;
use uuid::Uuid;

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
    /// [the crate docs](crate)).
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

/// What [`Db::insert_charge`](super::Db::insert_charge) did.
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

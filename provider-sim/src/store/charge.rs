//! A charge, the names of the simulator's effects ([`Endpoint`]) and the
//! request log's rows, as the simulator stores them.

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

/// One of the simulator's downstream effects, each behind its own
/// endpoint, idempotency operation and table: a charge, a confirmation (a
/// mail sink) or a refund. The request log and the lose-next switch name
/// them so that a test can watch (or fault) one effect apart from the
/// others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /charges`, `GET /charges/{key}`.
    Charges,
    /// `POST /confirmations`, `GET /confirmations/{key}`.
    Confirmations,
    /// `POST /refunds`, `GET /refunds/{key}`.
    Refunds,
}

impl Endpoint {
    /// Every endpoint.
    pub const ALL: [Endpoint; 3] = [Self::Charges, Self::Confirmations, Self::Refunds];

    /// The name as stored and as the API spells it (the collection's path
    /// segment): `charges`, `confirmations` or `refunds`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Charges => "charges",
            Self::Confirmations => "confirmations",
            Self::Refunds => "refunds",
        }
    }

    /// The endpoint a name spells, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// The kind of the log row that a run of this endpoint's handler
    /// writes.
    pub fn run_kind(self) -> RequestKind {
        match self {
            Self::Charges => RequestKind::Charge,
            Self::Confirmations => RequestKind::Confirmation,
            Self::Refunds => RequestKind::Refund,
        }
    }
}

/// What one row of the provider's request log records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// A `POST` of an effect arrived (before any fault was drawn).
    Request,
    /// A `GET` of an effect's key arrived (before any fault was drawn).
    Lookup,
    /// The charge handler ran: a request reached the charge's write (it
    /// made the charge or found the key's one).
    Charge,
    /// The confirmation handler ran: a request reached the confirmation's
    /// write (it made the confirmation or found the key's one).
    Confirmation,
    /// The refund handler ran: a request reached the refund's write (it
    /// made the refund, found the key's one, or found the charge refunded
    /// under another key).
    Refund,
}

impl RequestKind {
    /// The kind as stored: `request`, `lookup`, `charge`, `confirmation`
    /// or `refund`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Lookup => "lookup",
            Self::Charge => "charge",
            Self::Confirmation => "confirmation",
            Self::Refund => "refund",
        }
    }
}

/// One row of the provider's request log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRequest {
    /// Its place in arrival order.
    pub seq: i64,
    /// `request`, `lookup`, or the run of a handler ([`RequestKind::as_str`]).
    pub kind: String,
    /// The effect it concerns ([`Endpoint::as_str`]).
    pub effect: String,
    /// The key it named (its characters, unquoted).
    pub idempotency_key: String,
    /// The order of a handler's run (a refund's: its charge's order).
    pub order_id: Option<Uuid>,
    /// When it was logged, at the database's clock.
    pub created_at: UnixMillis,
}

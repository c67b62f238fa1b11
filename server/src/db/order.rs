//! The order route's data as the stores read and write it: an order with
//! its price, reference and payment, the draft a new one is written from,
//! and what writing it came to.

use idemkey_core::{IdempotencyKey, OperationId, UnixMillis};
use uuid::Uuid;

use super::caller::AccountId;
use idemkey::StoreError;
use idemkey::idempotency::{self, Outcome, Read, StoredResponse};

/// A catalogue price: what one unit costs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Price {
    /// Unit price in the currency's minor unit (cents).
    pub unit_cents: i64,
    /// ISO 4217 code.
    pub currency: String,
}

/// Where an order's charge stands, as its outbox message says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaymentState {
    /// Not delivered yet (or being retried).
    Pending,
    /// The provider charged it.
    Charged {
        /// The provider's charge id.
        charge_id: String,
    },
    /// The provider refused it for good, or its deliveries ran out.
    Failed {
        /// Why, in words.
        reason: String,
    },
}

/// An order's payment: its state and how many deliveries were tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// Where it stands.
    pub state: PaymentState,
    /// Deliveries tried so far.
    pub attempts: u32,
}

impl Payment {
    /// The payment of a new order: nothing tried yet.
    pub const NEW: Self = Self {
        state: PaymentState::Pending,
        attempts: 0,
    };

    /// The payment from an outbox row's status, result and error.
    pub fn from_outbox(
        status: &str,
        result: Option<String>,
        last_error: Option<String>,
        attempts: i64,
    ) -> Self {
        let state = match status {
            "delivered" => PaymentState::Charged {
                charge_id: result.unwrap_or_default(),
            },
            "failed" => PaymentState::Failed {
                reason: result.unwrap_or_default(),
            },
            "dead" => PaymentState::Failed {
                reason: format!(
                    "no delivery succeeded in {attempts} attempts: {}",
                    last_error.unwrap_or_default()
                ),
            },
            _ => PaymentState::Pending,
        };
        Self {
            state,
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        }
    }
}

/// An order as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// Its id.
    pub id: Uuid,
    /// Stock-keeping unit.
    pub sku: String,
    /// Quantity.
    pub quantity: u8,
    /// The caller's purchase reference, unique per account for ever.
    pub reference: Option<String>,
    /// Its amount in cents and currency; `None` for an order placed before
    /// prices existed.
    pub amount: Option<(i64, String)>,
    /// When the server accepted it.
    pub created_at: UnixMillis,
    /// Its payment; `None` for an order placed before payments existed.
    pub payment: Option<Payment>,
}

/// A new order, ready to be written with its key's record: everything the
/// 201 says is known before the statement runs.
#[derive(Clone, Debug)]
pub struct OrderDraft {
    /// The operation, part of the record's key.
    pub operation: OperationId,
    /// The idempotency key.
    pub key: IdempotencyKey,
    /// The validated payload's fingerprint.
    pub fingerprint: idemkey_core::Fingerprint,
    /// The new order.
    pub order: Order,
    /// The catalogue price the amount was computed from; the store checks
    /// it against the catalogue in the order's transaction.
    pub price: Price,
    /// The charge's outbox payload (JSON).
    pub charge: String,
    /// The 201 response to store.
    pub response: StoredResponse,
    /// A test fault's hold before the commit (never set in builds without
    /// the `test-faults` feature).
    pub hold: Option<crate::hold::Hold>,
}

/// What [`super::Db::create_order`] came to.
#[derive(Clone, Debug)]
pub enum OrderAttempt {
    /// The engine decided: created, replayed or rejected.
    Answered(Box<OrderAnswer>),
    /// The order's own rules refused it; nothing was stored.
    Refused(Refusal),
}

/// Why a new order was refused before anything was stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The sku is not in the catalogue at the draft's price (unknown, or
    /// its price changed since the caller read it).
    PriceChanged,
    /// Another order of the account holds the reference (its id).
    ReferenceTaken(Uuid),
}

/// The engine's answer to [`super::Db::create_order`].
#[derive(Clone, Debug)]
pub struct OrderAnswer {
    /// The engine's outcome.
    pub outcome: Outcome<()>,
    /// When the answer came from the key's record: the caller's account and
    /// the record as read, for the replay cache to keep.
    pub seen: Option<(AccountId, Read)>,
}

impl From<Outcome<()>> for OrderAnswer {
    fn from(outcome: Outcome<()>) -> Self {
        Self {
            outcome,
            seen: None,
        }
    }
}

impl From<Outcome<()>> for OrderAttempt {
    fn from(outcome: Outcome<()>) -> Self {
        Self::Answered(Box::new(outcome.into()))
    }
}

/// The error of an order's effect inside a backend's transaction: the
/// store failed, or the order's own rules refused it (rolled back, nothing
/// stored).
pub(crate) enum OrderEffectError {
    Store(StoreError),
    Refused(Refusal),
}

impl From<StoreError> for OrderEffectError {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

impl OrderEffectError {
    /// The engine's result for an order: its outcome, or the refusal that
    /// rolled it back, or the store's error.
    pub(crate) fn split(
        result: Result<Outcome<()>, idempotency::Error<Self>>,
    ) -> Result<Result<Outcome<()>, Refusal>, StoreError> {
        match result {
            Ok(outcome) => Ok(Ok(outcome)),
            Err(idempotency::Error::Effect(Self::Refused(refusal))) => Ok(Err(refusal)),
            Err(idempotency::Error::Effect(Self::Store(err)) | idempotency::Error::Store(err)) => {
                Err(err)
            }
        }
    }
}

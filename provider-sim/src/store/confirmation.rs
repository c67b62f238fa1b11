//! A confirmation (the simulator's mail sink), as the simulator stores it.

use idemkey_core::UnixMillis;
use uuid::Uuid;

/// A confirmation as stored: a message "sent" to a recipient about an
/// order, once per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirmation {
    /// Its id (shown as `cf_` and the simple UUID).
    pub id: Uuid,
    /// The idempotency key it was made under (its characters, unquoted).
    pub idempotency_key: String,
    /// The order it confirms.
    pub order_id: Uuid,
    /// Whom it was sent to (1 to 254 characters).
    pub recipient: String,
    /// What it said (1 to 2000 characters).
    pub text: String,
    /// When it was made, at the database's clock.
    pub created_at: UnixMillis,
}

/// A confirmation to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewConfirmation {
    /// Whose confirmation it is: the provider's caller (see
    /// [the crate docs](crate)).
    pub scope: String,
    /// The request's idempotency key (its characters, unquoted).
    pub idempotency_key: String,
    /// The order it confirms.
    pub order_id: Uuid,
    /// Whom it is sent to.
    pub recipient: String,
    /// What it says.
    pub text: String,
}

/// What [`Db::insert_confirmation`](super::Db::insert_confirmation) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfirmationWrite {
    /// A new confirmation.
    Created(Confirmation),
    /// The key already had this confirmation; nothing was written.
    Existing(Confirmation),
}

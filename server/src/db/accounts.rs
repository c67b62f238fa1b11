//! Accounts and their API tokens as the operator manages them (the
//! `account` and `token` commands, demo mode), and the batched record of
//! when each token was last used. Requests never come here: they
//! authenticate inside their own statement (see [`crate::db`](super)), which skips
//! revoked tokens, so a revocation holds on every process at once.

use idemkey_core::UnixMillis;
use uuid::Uuid;

use super::caller::{AccountId, TokenHash};

/// A token's id: what `token list` shows and `token revoke` takes, so the
/// token and its hash are never shown again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenId(pub Uuid);

/// An account, as `account list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountSummary {
    /// Its id.
    pub id: AccountId,
    /// Its display name (not unique).
    pub name: String,
    /// When it was created, at the database's clock.
    pub created_at: UnixMillis,
    /// Its tokens that are not revoked.
    pub active_tokens: u64,
    /// Whether demo mode made it for itself.
    pub demo: bool,
}

/// A token, as `token list` shows it: never the token or its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenSummary {
    /// Its id.
    pub id: TokenId,
    /// When it was created.
    pub created_at: UnixMillis,
    /// When a server last saw it authenticate a request, to within the
    /// servers' `--token-last-used-interval`.
    pub last_used_at: Option<UnixMillis>,
    /// When it was revoked.
    pub revoked_at: Option<UnixMillis>,
}

/// What `token revoke` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// Revoked now, at this time (the database's clock).
    Revoked(UnixMillis),
    /// It was already revoked, at this time.
    AlreadyRevoked(UnixMillis),
    /// No token has this id.
    Unknown,
}

/// One of demo mode's own accounts: marked by its slot, never found by name.
#[derive(Clone, Copy, Debug)]
pub struct DemoAccount<'a> {
    /// 1 or 2: which of the demo's accounts.
    pub slot: i16,
    /// The name it is created with.
    pub name: &'a str,
    /// The hash of its token for this start.
    pub token: TokenHash,
}

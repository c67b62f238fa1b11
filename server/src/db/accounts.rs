//! Accounts and their API tokens as the operator manages them (the
//! `account` and `token` commands, demo mode), and the batched record of
//! when each token was last used. Requests never come here: they
//! authenticate inside their own statement (see [`crate::db`](super)), which skips
//! revoked tokens, so a revocation holds on every process at once.

use idemkey_core::UnixMillis;
use uuid::Uuid;

use super::{AccountId, Db, StoreError, TokenHash};

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

impl Db {
    /// Creates an account and stores the hash of its first token.
    pub async fn create_account(
        &self,
        name: &str,
        token: TokenHash,
    ) -> Result<AccountId, StoreError> {
        each!(self, db => db.create_account(name, token).await)
    }

    /// Every account, oldest first.
    pub async fn list_accounts(&self) -> Result<Vec<AccountSummary>, StoreError> {
        each!(self, db => db.accounts(None).await)
    }

    /// The accounts whose id or name is `selector`, oldest first.
    pub async fn find_accounts(&self, selector: &str) -> Result<Vec<AccountSummary>, StoreError> {
        each!(self, db => db.accounts(Some(selector)).await)
    }

    /// Adds a token to an account; `None` when no account has this id.
    pub async fn create_token(
        &self,
        account: AccountId,
        token: TokenHash,
    ) -> Result<Option<TokenId>, StoreError> {
        let id = TokenId(Uuid::new_v4());
        let added = each!(self, db => db.create_token(account, id, token).await)?;
        Ok(added.then_some(id))
    }

    /// An account's tokens, revoked ones included, oldest first.
    pub async fn list_tokens(&self, account: AccountId) -> Result<Vec<TokenSummary>, StoreError> {
        each!(self, db => db.tokens(account).await)
    }

    /// Revokes a token: from the commit on, no statement accepts it.
    pub async fn revoke_token(&self, id: TokenId) -> Result<Revocation, StoreError> {
        each!(self, db => db.revoke_token(id).await)
    }

    /// Demo mode's start: finds each of its accounts by its slot (creating
    /// it the first time), revokes every token its accounts had (the
    /// previous start's), and stores the new ones, in one transaction.
    /// Returns the accounts in the order given and how many tokens were
    /// revoked.
    pub async fn start_demo(
        &self,
        accounts: &[DemoAccount<'_>],
    ) -> Result<(Vec<AccountId>, u64), StoreError> {
        each!(self, db => db.start_demo(accounts).await)
    }

    /// Sets `last_used_at` of these tokens to the database's `now` in one
    /// statement; returns how many rows it touched.
    pub async fn mark_tokens_used(&self, tokens: &[TokenHash]) -> Result<u64, StoreError> {
        if tokens.is_empty() {
            return Ok(0);
        }
        each!(self, db => db.mark_tokens_used(tokens).await)
    }
}

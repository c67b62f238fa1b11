//! The operator's calls on accounts and tokens (the `account` and `token`
//! commands, demo mode) and the batched `last_used_at` record, on either
//! backend.

use uuid::Uuid;

use super::accounts::{AccountSummary, DemoAccount, Revocation, TokenId, TokenSummary};
use super::caller::{AccountId, TokenHash};
use super::store::Db;
use idemkey::StoreError;

impl Db {
    /// Creates an account and stores the hash of its first token.
    pub async fn create_account(
        &self,
        name: &str,
        token: TokenHash,
    ) -> Result<AccountId, StoreError> {
        match self {
            Self::Postgres(db) => db.create_account(name, token).await,
            Self::Sqlite(db) => db.create_account(name, token).await,
        }
    }

    /// Every account, oldest first.
    pub async fn list_accounts(&self) -> Result<Vec<AccountSummary>, StoreError> {
        match self {
            Self::Postgres(db) => db.accounts(None).await,
            Self::Sqlite(db) => db.accounts(None).await,
        }
    }

    /// The accounts whose id or name is `selector`, oldest first.
    pub async fn find_accounts(&self, selector: &str) -> Result<Vec<AccountSummary>, StoreError> {
        match self {
            Self::Postgres(db) => db.accounts(Some(selector)).await,
            Self::Sqlite(db) => db.accounts(Some(selector)).await,
        }
    }

    /// Adds a token to an account; `None` when no account has this id.
    pub async fn create_token(
        &self,
        account: AccountId,
        token: TokenHash,
    ) -> Result<Option<TokenId>, StoreError> {
        let id = TokenId(Uuid::new_v4());
        let added = match self {
            Self::Postgres(db) => db.create_token(account, id, token).await,
            Self::Sqlite(db) => db.create_token(account, id, token).await,
        }?;
        Ok(added.then_some(id))
    }

    /// An account's tokens, revoked ones included, oldest first.
    pub async fn list_tokens(&self, account: AccountId) -> Result<Vec<TokenSummary>, StoreError> {
        match self {
            Self::Postgres(db) => db.tokens(account).await,
            Self::Sqlite(db) => db.tokens(account).await,
        }
    }

    /// Revokes a token: from the commit on, no statement accepts it.
    pub async fn revoke_token(&self, id: TokenId) -> Result<Revocation, StoreError> {
        match self {
            Self::Postgres(db) => db.revoke_token(id).await,
            Self::Sqlite(db) => db.revoke_token(id).await,
        }
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
        match self {
            Self::Postgres(db) => db.start_demo(accounts).await,
            Self::Sqlite(db) => db.start_demo(accounts).await,
        }
    }

    /// Sets `last_used_at` of these tokens to the database's `now` in one
    /// statement; returns how many rows it touched.
    pub async fn mark_tokens_used(&self, tokens: &[TokenHash]) -> Result<u64, StoreError> {
        if tokens.is_empty() {
            return Ok(0);
        }
        match self {
            Self::Postgres(db) => db.mark_tokens_used(tokens).await,
            Self::Sqlite(db) => db.mark_tokens_used(tokens).await,
        }
    }
}

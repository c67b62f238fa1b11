//! Accounts and tokens on PostgreSQL: the operator's commands, demo mode's
//! start and the batched `last_used_at` (see [`crate::db::Db`]'s methods).
//! Every statement is unnamed (`*_typed`), or sent as the store decides
//! (`PgDb::query_pooled`: the account lookup of every request, prepared once per
//! connection on a direct path), so these work behind a transaction-mode
//! pooler too (see `idemkey::store::postgres::query_in`).

use std::time::SystemTime;

use idemkey_core::UnixMillis;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use crate::db::{
    AccountId, AccountSummary, DemoAccount, Revocation, StoreError, TokenHash, TokenId,
    TokenSummary, from_system_time,
};
use idemkey::store::postgres::db_error;

const ACCOUNTS: &str = include_str!("sql/accounts.sql");
const TOKENS: &str = include_str!("sql/tokens.sql");
const CREATE_TOKEN: &str = include_str!("sql/create_token.sql");
const REVOKE_TOKEN: &str = include_str!("sql/revoke_token.sql");
const MARK_TOKENS_USED: &str = include_str!("sql/mark_tokens_used.sql");
const START_DEMO: &str = include_str!("sql/start_demo.sql");

/// Key of the advisory lock that makes two processes starting demo mode at
/// once find or create the same demo accounts.
const DEMO_LOCK: i64 = 0x6964_656d_6b65_7902; // "idemkey" + 2

/// The account a live token belongs to.
const ACCOUNT_OF_TOKEN: &str =
    "SELECT account_id FROM api_tokens WHERE token_hash = $1::bytea AND revoked_at IS NULL";

impl super::PgOrders {
    pub(crate) async fn account(
        &self,
        token: TokenHash,
    ) -> Result<crate::db::Authed<AccountId>, StoreError> {
        let client = self.client().await?;
        let rows = self
            .query_pooled(&client, ACCOUNT_OF_TOKEN, &[(&&token.0[..], Type::BYTEA)])
            .await
            .map_err(db_error)?;
        Ok(match rows.first() {
            Some(row) => crate::db::Authed::Ok(AccountId(row.try_get(0).map_err(db_error)?)),
            None => crate::db::Authed::Unauthorized,
        })
    }

    pub(crate) async fn create_account(
        &self,
        name: &str,
        token: TokenHash,
    ) -> Result<AccountId, StoreError> {
        let mut client = self.client().await?;
        let id = Uuid::new_v4();
        let tx = client.transaction().await.map_err(db_error)?;
        tx.execute_typed(
            "INSERT INTO accounts (id, name) VALUES ($1, $2)",
            &[(&id, Type::UUID), (&name, Type::TEXT)],
        )
        .await
        .map_err(db_error)?;
        tx.execute_typed(
            CREATE_TOKEN,
            &token_params(&Uuid::new_v4(), &&token.0[..], &id),
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(AccountId(id))
    }

    pub(crate) async fn accounts(
        &self,
        selector: Option<&str>,
    ) -> Result<Vec<AccountSummary>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query_typed(ACCOUNTS, &[(&selector, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.iter().map(account_from_row).collect()
    }

    pub(crate) async fn create_token(
        &self,
        account: AccountId,
        id: TokenId,
        token: TokenHash,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let added = client
            .execute_typed(
                CREATE_TOKEN,
                &token_params(&id.0, &&token.0[..], &account.0),
            )
            .await
            .map_err(db_error)?;
        Ok(added == 1)
    }

    pub(crate) async fn tokens(&self, account: AccountId) -> Result<Vec<TokenSummary>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query_typed(TOKENS, &[(&account.0, Type::UUID)])
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(TokenSummary {
                    id: TokenId(row.try_get("id").map_err(db_error)?),
                    created_at: time(row, "created_at")?.unwrap_or(UnixMillis(0)),
                    last_used_at: time(row, "last_used_at")?,
                    revoked_at: time(row, "revoked_at")?,
                })
            })
            .collect()
    }

    pub(crate) async fn revoke_token(&self, id: TokenId) -> Result<Revocation, StoreError> {
        let client = self.client().await?;
        let Some(row) = client
            .query_typed(REVOKE_TOKEN, &[(&id.0, Type::UUID)])
            .await
            .map_err(db_error)?
            .into_iter()
            .next()
        else {
            return Ok(Revocation::Unknown);
        };
        let at = time(&row, "revoked_at")?.unwrap_or(UnixMillis(0));
        let now: bool = row.try_get("now").map_err(db_error)?;
        Ok(if now {
            Revocation::Revoked(at)
        } else {
            Revocation::AlreadyRevoked(at)
        })
    }

    pub(crate) async fn start_demo(
        &self,
        accounts: &[DemoAccount<'_>],
    ) -> Result<(Vec<AccountId>, u64), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        tx.execute_typed(
            "SELECT pg_advisory_xact_lock($1)",
            &[(&DEMO_LOCK, Type::INT8)],
        )
        .await
        .map_err(db_error)?;
        let mut ids = Vec::with_capacity(accounts.len());
        for account in accounts {
            let existing = tx
                .query_typed(
                    "SELECT id FROM accounts WHERE demo_slot = $1 ORDER BY created_at, id LIMIT 1",
                    &[(&account.slot, Type::INT2)],
                )
                .await
                .map_err(db_error)?
                .into_iter()
                .next();
            let id: Uuid = match existing {
                Some(row) => row.try_get(0).map_err(db_error)?,
                None => {
                    let id = Uuid::new_v4();
                    tx.execute_typed(
                        "INSERT INTO accounts (id, name, demo_slot) VALUES ($1, $2, $3)",
                        &[
                            (&id, Type::UUID),
                            (&account.name, Type::TEXT),
                            (&account.slot, Type::INT2),
                        ],
                    )
                    .await
                    .map_err(db_error)?;
                    id
                }
            };
            ids.push(AccountId(id));
        }
        let revoked = tx.execute_typed(START_DEMO, &[]).await.map_err(db_error)?;
        for (account, id) in accounts.iter().zip(&ids) {
            tx.execute_typed(
                CREATE_TOKEN,
                &token_params(&Uuid::new_v4(), &&account.token.0[..], &id.0),
            )
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok((ids, revoked))
    }

    pub(crate) async fn mark_tokens_used(&self, tokens: &[TokenHash]) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let hashes: Vec<&[u8]> = tokens.iter().map(|t| &t.0[..]).collect();
        client
            .execute_typed(MARK_TOKENS_USED, &[(&hashes, Type::BYTEA_ARRAY)])
            .await
            .map_err(db_error)
    }
}

/// `create_token.sql`'s parameters: token id, token hash, account.
fn token_params<'a>(
    id: &'a Uuid,
    hash: &'a &[u8],
    account: &'a Uuid,
) -> [(&'a (dyn ToSql + Sync), Type); 3] {
    [(id, Type::UUID), (hash, Type::BYTEA), (account, Type::UUID)]
}

fn account_from_row(row: &Row) -> Result<AccountSummary, StoreError> {
    let active: i64 = row.try_get("active_tokens").map_err(db_error)?;
    Ok(AccountSummary {
        id: AccountId(row.try_get("id").map_err(db_error)?),
        name: row.try_get("name").map_err(db_error)?,
        created_at: time(row, "created_at")?.unwrap_or(UnixMillis(0)),
        active_tokens: u64::try_from(active).unwrap_or(0),
        demo: row.try_get("demo").map_err(db_error)?,
    })
}

fn time(row: &Row, column: &str) -> Result<Option<UnixMillis>, StoreError> {
    let t: Option<SystemTime> = row.try_get(column).map_err(db_error)?;
    Ok(t.map(from_system_time))
}

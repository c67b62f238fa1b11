//! Accounts and tokens on SQLite: the operator's commands, demo mode's
//! start and the batched `last_used_at` (see [`crate::db::Db`]'s methods).

use idemkey_core::UnixMillis;
use rusqlite::{OptionalExtension as _, Row, params};
use uuid::Uuid;

use crate::db::{
    AccountId, AccountSummary, DemoAccount, Revocation, StoreError, TokenHash, TokenId,
    TokenSummary,
};
use idemkey::store::sqlite::{immediate, sqlite_error};

const ACCOUNTS: &str = include_str!("sql/accounts.sql");
const TOKENS: &str = include_str!("sql/tokens.sql");
const CREATE_TOKEN: &str = include_str!("sql/create_token.sql");
const REVOKE_TOKEN: &str = include_str!("sql/revoke_token.sql");
const MARK_TOKEN_USED: &str = include_str!("sql/mark_token_used.sql");
const START_DEMO: &str = include_str!("sql/start_demo.sql");

/// The account a live token belongs to.
const ACCOUNT_OF_TOKEN: &str =
    "SELECT account_id FROM api_tokens WHERE token_hash = ?1 AND revoked_at IS NULL";

impl super::SqliteOrders {
    pub(crate) async fn account(
        &self,
        token: TokenHash,
    ) -> Result<crate::db::Authed<AccountId>, StoreError> {
        self.with_reader(move |conn| {
            let id: Option<String> = conn
                .prepare_cached(ACCOUNT_OF_TOKEN)
                .and_then(|mut stmt| stmt.query_row([&token.0[..]], |r| r.get(0)).optional())
                .map_err(sqlite_error)?;
            Ok(match id {
                Some(id) => crate::db::Authed::Ok(AccountId(uuid(&id)?)),
                None => crate::db::Authed::Unauthorized,
            })
        })
        .await
    }

    pub(crate) async fn create_account(
        &self,
        name: &str,
        token: TokenHash,
    ) -> Result<AccountId, StoreError> {
        let name = name.to_owned();
        let id = Uuid::new_v4();
        self.with_conn(move |conn| {
            let tx = immediate(conn)?;
            tx.execute(
                "INSERT INTO accounts (id, name) VALUES (?1, ?2)",
                params![id.to_string(), name],
            )
            .map_err(sqlite_error)?;
            tx.execute(
                CREATE_TOKEN,
                params![Uuid::new_v4().to_string(), &token.0[..], id.to_string()],
            )
            .map_err(sqlite_error)?;
            tx.commit().map_err(sqlite_error)
        })
        .await?;
        Ok(AccountId(id))
    }

    pub(crate) async fn accounts(
        &self,
        selector: Option<&str>,
    ) -> Result<Vec<AccountSummary>, StoreError> {
        let selector = selector.map(str::to_owned);
        self.with_reader(move |conn| {
            let mut stmt = conn.prepare(ACCOUNTS).map_err(sqlite_error)?;
            let rows = stmt
                .query_map([selector], |row| {
                    Ok((
                        row.get::<_, String>("id")?,
                        AccountSummary {
                            id: AccountId(Uuid::nil()),
                            name: row.get("name")?,
                            created_at: millis(row, "created_at")?.unwrap_or(UnixMillis(0)),
                            active_tokens: u64::try_from(row.get::<_, i64>("active_tokens")?)
                                .unwrap_or(0),
                            demo: row.get("demo")?,
                        },
                    ))
                })
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(sqlite_error)?;
            rows.into_iter()
                .map(|(id, account)| {
                    Ok(AccountSummary {
                        id: AccountId(uuid(&id)?),
                        ..account
                    })
                })
                .collect()
        })
        .await
    }

    pub(crate) async fn create_token(
        &self,
        account: AccountId,
        id: TokenId,
        token: TokenHash,
    ) -> Result<bool, StoreError> {
        self.with_conn(move |conn| {
            let added = conn
                .execute(
                    CREATE_TOKEN,
                    params![id.0.to_string(), &token.0[..], account.0.to_string()],
                )
                .map_err(sqlite_error)?;
            Ok(added == 1)
        })
        .await
    }

    pub(crate) async fn tokens(&self, account: AccountId) -> Result<Vec<TokenSummary>, StoreError> {
        self.with_reader(move |conn| {
            let mut stmt = conn.prepare(TOKENS).map_err(sqlite_error)?;
            let rows = stmt
                .query_map([account.0.to_string()], |row| {
                    Ok((
                        row.get::<_, String>("id")?,
                        millis(row, "created_at")?.unwrap_or(UnixMillis(0)),
                        millis(row, "last_used_at")?,
                        millis(row, "revoked_at")?,
                    ))
                })
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(sqlite_error)?;
            rows.into_iter()
                .map(|(id, created_at, last_used_at, revoked_at)| {
                    Ok(TokenSummary {
                        id: TokenId(uuid(&id)?),
                        created_at,
                        last_used_at,
                        revoked_at,
                    })
                })
                .collect()
        })
        .await
    }

    pub(crate) async fn revoke_token(&self, id: TokenId) -> Result<Revocation, StoreError> {
        self.with_conn(move |conn| {
            let tx = immediate(conn)?;
            let id = id.0.to_string();
            let found: Option<Option<i64>> = tx
                .query_row(
                    "SELECT revoked_at FROM api_tokens WHERE id = ?1",
                    [&id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sqlite_error)?;
            let answer = match found {
                None => Revocation::Unknown,
                Some(Some(at)) => Revocation::AlreadyRevoked(from_ms(at)),
                Some(None) => {
                    let at: i64 = tx
                        .query_row(REVOKE_TOKEN, [&id], |row| row.get(0))
                        .map_err(sqlite_error)?;
                    Revocation::Revoked(from_ms(at))
                }
            };
            tx.commit().map_err(sqlite_error)?;
            Ok(answer)
        })
        .await
    }

    pub(crate) async fn start_demo(
        &self,
        accounts: &[DemoAccount<'_>],
    ) -> Result<(Vec<AccountId>, u64), StoreError> {
        let accounts: Vec<(i16, String, TokenHash)> = accounts
            .iter()
            .map(|a| (a.slot, a.name.to_owned(), a.token))
            .collect();
        self.with_conn(move |conn| {
            // The write lock first: two processes starting at once make the
            // accounts once.
            let tx = immediate(conn)?;
            let mut ids = Vec::with_capacity(accounts.len());
            for (slot, name, _) in &accounts {
                let existing: Option<String> = tx
                    .query_row(
                        "SELECT id FROM accounts WHERE demo_slot = ?1 ORDER BY created_at, id LIMIT 1",
                        [slot],
                        |row| row.get(0),
                    )
                    .optional()
                    .map_err(sqlite_error)?;
                let id = match existing {
                    Some(id) => uuid(&id)?,
                    None => {
                        let id = Uuid::new_v4();
                        tx.execute(
                            "INSERT INTO accounts (id, name, demo_slot) VALUES (?1, ?2, ?3)",
                            params![id.to_string(), name, slot],
                        )
                        .map_err(sqlite_error)?;
                        id
                    }
                };
                ids.push(AccountId(id));
            }
            let revoked = tx.execute(START_DEMO, []).map_err(sqlite_error)?;
            for ((_, _, token), id) in accounts.iter().zip(&ids) {
                tx.execute(
                    CREATE_TOKEN,
                    params![Uuid::new_v4().to_string(), &token.0[..], id.0.to_string()],
                )
                .map_err(sqlite_error)?;
            }
            tx.commit().map_err(sqlite_error)?;
            Ok((ids, u64::try_from(revoked).unwrap_or(0)))
        })
        .await
    }

    pub(crate) async fn mark_tokens_used(&self, tokens: &[TokenHash]) -> Result<u64, StoreError> {
        let tokens = tokens.to_vec();
        self.with_conn(move |conn| {
            let tx = immediate(conn)?;
            let mut touched = 0;
            {
                let mut stmt = tx.prepare_cached(MARK_TOKEN_USED).map_err(sqlite_error)?;
                for token in &tokens {
                    touched += stmt.execute([&token.0[..]]).map_err(sqlite_error)?;
                }
            }
            tx.commit().map_err(sqlite_error)?;
            Ok(u64::try_from(touched).unwrap_or(0))
        })
        .await
    }
}

fn millis(row: &Row<'_>, column: &str) -> rusqlite::Result<Option<UnixMillis>> {
    Ok(row.get::<_, Option<i64>>(column)?.map(from_ms))
}

fn from_ms(v: i64) -> UnixMillis {
    UnixMillis(u64::try_from(v).unwrap_or(0))
}

fn uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::try_parse(text).map_err(|_| StoreError::Unavailable("an id is not a UUID".into()))
}

//! The SQLite backend: one file, WAL journal, `BEGIN IMMEDIATE` for every
//! transaction that writes, a busy timeout, and the same primary key and
//! one-transaction-per-order contract as PostgreSQL. Several processes may
//! share the file: SQLite admits one writer at a time, and `BEGIN IMMEDIATE`
//! takes the write lock before the first read, so a claim's insert and the
//! read of what the key holds see one consistent file.
//!
//! rusqlite is blocking: each call takes the store's one connection on a
//! blocking thread.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkey_core::{Fingerprint, IdempotencyKey, OperationId, UnixMillis};
use rusqlite::{Connection, ErrorCode, OptionalExtension as _, TransactionBehavior, params};
use tracing::{info, warn};
use uuid::Uuid;

use super::{
    AccountId, Authed, CreateOutcome, Order, OrderDraft, OrderStore, Record, ReexecuteOutcome,
    StoreError, StoreFault, StoredResponse, TokenHash, TrimReport, stored_from_columns,
};

const CLAIM: &str = include_str!("sqlite/claim.sql");
const REEXECUTE: &str = include_str!("sqlite/reexecute.sql");
const RECORD: &str = include_str!("sqlite/record.sql");
const TRIM: &str = include_str!("sqlite/trim.sql");
const PURGE: &str = include_str!("sqlite/purge.sql");

/// Versioned migrations, numbered as the PostgreSQL ones of the same tables.
const MIGRATIONS: &[(i64, &str, &str)] = &[(1, "init", include_str!("sqlite/0001_init.sql"))];

/// How long a write waits for another process's write lock (then 503).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite store.
#[derive(Clone)]
pub struct SqliteStore {
    path: Arc<PathBuf>,
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the file at `path`, switches it to WAL and
    /// applies pending migrations.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let for_open = path.clone();
        let conn = tokio::task::spawn_blocking(move || open_and_migrate(&for_open))
            .await
            .map_err(|e| StoreError::Unavailable(format!("open task: {e}")))??;
        Ok(Self {
            path: Arc::new(path),
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Versions of this build's migrations that the file has not applied
    /// (empty when it is up to date); an error when it cannot be read.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>, StoreError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare("SELECT version FROM schema_migrations")?;
            let applied = stmt
                .query_map([], |row| row.get::<_, i64>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(MIGRATIONS
                .iter()
                .map(|(version, _, _)| *version)
                .filter(|version| !applied.contains(version))
                .collect())
        })
        .await
    }

    /// Runs `f` with the connection on a blocking thread.
    async fn with_conn<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock leaves no half transaction
            // behind (rusqlite rolls back on drop), so the poison is moot.
            let mut guard = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("blocking task: {e}")))?
        .map_err(sqlite_error)
    }
}

fn open_and_migrate(path: &Path) -> Result<Connection, StoreError> {
    open_with_migrations(path, MIGRATIONS).map_err(sqlite_error)
}

/// Opens an SQLite file the way every idemkey store does (busy timeout, WAL,
/// `synchronous = FULL` so a commit survives a power loss, foreign keys on)
/// and applies the `(version, name, sql)` migrations not yet recorded in
/// `schema_migrations`, under the write lock (`BEGIN IMMEDIATE`) so two
/// processes starting at once migrate once. Shared by the order store and
/// the idempotency layer's lease store.
pub(crate) fn open_with_migrations(
    path: &Path,
    migrations: &[(i64, &str, &str)],
) -> Result<Connection, rusqlite::Error> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        warn!(mode, "SQLite did not switch to WAL");
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY,
             name TEXT NOT NULL,
             applied_at INTEGER NOT NULL DEFAULT (unixepoch()))",
    )?;
    for (version, name, sql) in migrations {
        let done = tx
            .query_row(
                "SELECT 1 FROM schema_migrations WHERE version = ?1",
                [version],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if done {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (?1, ?2)",
            params![version, name],
        )?;
        info!(version, name, "applied SQLite migration");
    }
    tx.commit()?;
    Ok(conn)
}

fn ms(t: UnixMillis) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

fn from_ms(v: i64) -> UnixMillis {
    UnixMillis(u64::try_from(v).unwrap_or(0))
}

fn account_of(conn: &Connection, token: TokenHash) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT account_id FROM api_tokens WHERE token_hash = ?1",
        [&token.0[..]],
        |row| row.get(0),
    )
    .optional()
}

fn read_record(
    conn: &Connection,
    account: &str,
    operation: &str,
    key: &str,
) -> rusqlite::Result<Option<Record>> {
    conn.prepare_cached(RECORD)?
        .query_row(params![account, operation, key], |row| {
            let fingerprint: Vec<u8> = row.get(0)?;
            let fingerprint: [u8; 32] = fingerprint.try_into().map_err(|_| {
                rusqlite::Error::IntegralValueOutOfRange(0, 0) // schema forbids it
            })?;
            let fingerprint = Fingerprint::from_bytes(fingerprint);
            let status: String = row.get(1)?;
            let response_status: Option<i64> = row.get(2)?;
            let headers: Option<String> = row.get(3)?;
            let body: Option<String> = row.get(4)?;
            let created_at = from_ms(row.get(5)?);
            let replay_until = from_ms(row.get(6)?);
            let lease_until: Option<i64> = row.get(7)?;
            let response = match (response_status, body) {
                (Some(status), Some(body)) => Some(StoredResponse {
                    status: u16::try_from(status).unwrap_or(500),
                    headers: headers
                        .as_deref()
                        .map(StoredResponse::headers_from_json)
                        .unwrap_or_default(),
                    body,
                }),
                _ => None,
            };
            Ok(Record {
                stored: stored_from_columns(
                    &status,
                    fingerprint,
                    replay_until,
                    lease_until.map(from_ms),
                ),
                response,
                resource_id: row.get(8)?,
                created_at,
                replay_until,
            })
        })
        .optional()
}

/// The parameters shared by claim.sql and reexecute.sql.
struct DraftParams {
    operation: String,
    key: String,
    fingerprint: Vec<u8>,
    body: String,
    headers: String,
    created_at: i64,
    replay_until: i64,
    order_id: String,
    sku: String,
    quantity: i64,
}

impl DraftParams {
    fn new(draft: &OrderDraft) -> Self {
        Self {
            operation: draft.operation.as_str().to_owned(),
            key: draft.key.as_str().to_owned(),
            fingerprint: draft.fingerprint.as_bytes().to_vec(),
            body: draft.response.body.clone(),
            headers: draft.response.headers_json(),
            created_at: ms(draft.created_at),
            replay_until: ms(draft.replay_until),
            order_id: draft.order_id.to_string(),
            sku: draft.sku.clone(),
            quantity: i64::from(draft.quantity),
        }
    }

    fn insert_order(&self, conn: &Connection, account: &str) -> rusqlite::Result<usize> {
        conn.prepare_cached(
            "INSERT INTO orders (id, account_id, sku, quantity, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![self.order_id, account, self.sku, self.quantity, self.created_at])
    }
}

impl OrderStore for SqliteStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.with_conn(|conn| conn.query_row("SELECT 1", [], |_| Ok(())))
            .await
    }

    async fn create_account(&self, name: &str, token: TokenHash) -> Result<AccountId, StoreError> {
        let name = name.to_owned();
        let id = Uuid::new_v4();
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT INTO accounts (id, name) VALUES (?1, ?2)",
                params![id.to_string(), name],
            )?;
            tx.execute(
                "INSERT INTO api_tokens (token_hash, account_id) VALUES (?1, ?2)",
                params![&token.0[..], id.to_string()],
            )?;
            tx.commit()
        })
        .await?;
        Ok(AccountId(id))
    }

    async fn add_named_token(&self, name: &str, token: TokenHash) -> Result<AccountId, StoreError> {
        let name = name.to_owned();
        let new_id = Uuid::new_v4().to_string();
        let id = self
            .with_conn(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let existing: Option<String> = tx
                    .query_row(
                        "SELECT id FROM accounts WHERE name = ?1 ORDER BY created_at, id LIMIT 1",
                        [&name],
                        |row| row.get(0),
                    )
                    .optional()?;
                let id = match existing {
                    Some(id) => id,
                    None => {
                        tx.execute(
                            "INSERT INTO accounts (id, name) VALUES (?1, ?2)",
                            params![new_id, name],
                        )?;
                        new_id
                    }
                };
                tx.execute(
                    "INSERT INTO api_tokens (token_hash, account_id) VALUES (?1, ?2)",
                    params![&token.0[..], id],
                )?;
                tx.commit()?;
                Ok(id)
            })
            .await?;
        Uuid::try_parse(&id)
            .map(AccountId)
            .map_err(|_| StoreError::Unavailable("account id is not a UUID".into()))
    }

    async fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        fault: Option<StoreFault>,
    ) -> Result<CreateOutcome, StoreError> {
        let p = DraftParams::new(draft);
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let Some(account) = account_of(&tx, token)? else {
                return Ok(CreateOutcome::Unauthorized);
            };
            let claimed = tx.prepare_cached(CLAIM)?.execute(params![
                account,
                p.operation,
                p.key,
                p.fingerprint,
                p.body,
                p.headers,
                p.created_at,
                p.replay_until,
                p.order_id
            ])?;
            if claimed == 1 {
                p.insert_order(&tx, &account)?;
                if fault == Some(StoreFault::FailStoringResult) {
                    // A write to the stored result that the schema refuses;
                    // dropping the transaction rolls everything back.
                    tx.execute(
                        "UPDATE idempotency_records SET response_status = 0
                         WHERE account_id = ?1 AND operation = ?2 AND key = ?3",
                        params![account, p.operation, p.key],
                    )?;
                }
                tx.commit()?;
                return Ok(CreateOutcome::Created);
            }
            let record = read_record(&tx, &account, &p.operation, &p.key)?;
            tx.commit()?;
            // The write lock was held from before the claim, so the row that
            // refused it is there to read.
            record
                .map(CreateOutcome::Existing)
                .ok_or(rusqlite::Error::QueryReturnedNoRows)
        })
        .await
    }

    async fn reexecute_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        now: UnixMillis,
    ) -> Result<ReexecuteOutcome, StoreError> {
        let p = DraftParams::new(draft);
        let now = ms(now);
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let Some(account) = account_of(&tx, token)? else {
                return Ok(ReexecuteOutcome::Unauthorized);
            };
            let replaced = tx.prepare_cached(REEXECUTE)?.execute(params![
                account,
                p.operation,
                p.key,
                p.fingerprint,
                p.body,
                p.headers,
                p.created_at,
                p.replay_until,
                p.order_id,
                now
            ])?;
            if replaced == 0 {
                return Ok(ReexecuteOutcome::Changed);
            }
            p.insert_order(&tx, &account)?;
            tx.commit()?;
            Ok(ReexecuteOutcome::Replaced)
        })
        .await
    }

    async fn order(&self, token: TokenHash, id: Uuid) -> Result<Authed<Option<Order>>, StoreError> {
        self.with_conn(move |conn| {
            let Some(account) = account_of(conn, token)? else {
                return Ok(Authed::Unauthorized);
            };
            let order = conn
                .prepare_cached(
                    "SELECT sku, quantity, created_at FROM orders WHERE account_id = ?1 AND id = ?2",
                )?
                .query_row(params![account, id.to_string()], |row| {
                    let quantity: i64 = row.get(1)?;
                    Ok(Order {
                        id,
                        sku: row.get(0)?,
                        quantity: u8::try_from(quantity).unwrap_or(0),
                        created_at: from_ms(row.get(2)?),
                    })
                })
                .optional()?;
            Ok(Authed::Ok(order))
        })
        .await
    }

    async fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> Result<Authed<Vec<Order>>, StoreError> {
        self.with_conn(move |conn| {
            let Some(account) = account_of(conn, token)? else {
                return Ok(Authed::Unauthorized);
            };
            let mut stmt = conn.prepare_cached(
                "SELECT id, sku, quantity, created_at FROM orders WHERE account_id = ?1 \
                 ORDER BY created_at DESC, id DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![account, i64::from(limit)], |row| {
                let id: String = row.get(0)?;
                let quantity: i64 = row.get(2)?;
                Ok(Order {
                    id: Uuid::try_parse(&id).unwrap_or(Uuid::nil()),
                    sku: row.get(1)?,
                    quantity: u8::try_from(quantity).unwrap_or(0),
                    created_at: from_ms(row.get(3)?),
                })
            })?;
            Ok(Authed::Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?))
        })
        .await
    }

    async fn record(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> Result<Authed<Option<Record>>, StoreError> {
        let (operation, key) = (operation.as_str().to_owned(), key.as_str().to_owned());
        self.with_conn(move |conn| {
            let Some(account) = account_of(conn, token)? else {
                return Ok(Authed::Unauthorized);
            };
            Ok(Authed::Ok(read_record(conn, &account, &operation, &key)?))
        })
        .await
    }

    async fn trim(
        &self,
        now: UnixMillis,
        forget_before: UnixMillis,
        batch: u32,
    ) -> Result<TrimReport, StoreError> {
        let (now, forget_before, batch) = (ms(now), ms(forget_before), i64::from(batch));
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let trimmed = tx.execute(TRIM, params![now, forget_before, batch])?;
            let deleted = tx.execute(PURGE, params![forget_before, batch])?;
            tx.commit()?;
            Ok(TrimReport {
                trimmed: trimmed as u64,
                deleted: deleted as u64,
            })
        })
        .await
    }
}

/// Maps an SQLite error by its code, never by message text: a lock held
/// past the busy timeout is overload (503), like every other failure.
fn sqlite_error(err: rusqlite::Error) -> StoreError {
    let code = err.sqlite_error_code();
    if code == Some(ErrorCode::DatabaseBusy) || code == Some(ErrorCode::DatabaseLocked) {
        warn!("SQLite write lock wait timed out");
        return StoreError::Unavailable("database is busy".into());
    }
    warn!(code = ?code, "SQLite error");
    StoreError::Unavailable(format!("sqlite: {code:?}"))
}

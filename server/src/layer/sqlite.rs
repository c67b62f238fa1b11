//! The SQLite lease store: one file, WAL journal, `BEGIN IMMEDIATE` for
//! every write and a busy timeout, so several processes can share the file.
//!
//! rusqlite is blocking: each call takes the store's one connection on a
//! blocking thread (`tokio::task::spawn_blocking`). SQLite runs one writer
//! at a time anyway, and `BEGIN IMMEDIATE` takes the write lock before the
//! first read, so a claim's insert and read see one consistent file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use idemkey_core::{Fingerprint, UnixMillis};
use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};
use tracing::warn;
use uuid::Uuid;

use super::store::{
    ClaimOutcome, ClaimToken, LeaseKey, LeaseRecord, LeaseResponse, LeaseStore, NewClaim,
    StoreError, stored_from_row,
};

const CLAIM: &str = include_str!("sqlite/claim.sql");
const READ: &str = include_str!("sqlite/read.sql");
const TAKE_OVER: &str = include_str!("sqlite/take_over.sql");
const COMPLETE: &str = include_str!("sqlite/complete.sql");
const RELEASE: &str = include_str!("sqlite/release.sql");

/// Versioned migrations of this store, numbered as the PostgreSQL ones of
/// the same tables, applied in order, each once, recorded in
/// `schema_migrations`.
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    2,
    "idempotency_leases",
    include_str!("sqlite/0002_idempotency_leases.sql"),
)];

/// Lease records in an SQLite file.
#[derive(Clone)]
pub struct SqliteLeaseStore {
    path: Arc<PathBuf>,
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLeaseStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteLeaseStore {
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

    /// Runs `f` with the connection on a blocking thread.
    async fn with_conn<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut conn = conn
                .lock()
                .map_err(|_| StoreError::Unavailable("connection lock poisoned".to_owned()))?;
            f(&mut conn).map_err(sqlite_error)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("store task: {e}")))?
    }
}

fn open_and_migrate(path: &Path) -> Result<Connection, StoreError> {
    crate::store::sqlite::open_with_migrations(path, MIGRATIONS).map_err(sqlite_error)
}

fn millis(t: UnixMillis) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

fn read_record(conn: &Connection, key: &LeaseKey) -> Result<Option<LeaseRecord>, rusqlite::Error> {
    let mut stmt = conn.prepare_cached(READ)?;
    stmt.query_row(
        params![key.scope, key.operation.as_str(), key.key.as_str()],
        |row| {
            let bad = |i: usize| {
                rusqlite::Error::FromSqlConversionFailure(
                    i,
                    rusqlite::types::Type::Blob,
                    "malformed lease row".into(),
                )
            };
            let fingerprint: Vec<u8> = row.get(0)?;
            let fingerprint = <[u8; 32]>::try_from(fingerprint.as_slice())
                .map(Fingerprint::from_bytes)
                .map_err(|_| bad(0))?;
            let token: Vec<u8> = row.get(1)?;
            let token = Uuid::from_slice(&token).map_err(|_| bad(1))?;
            let status: String = row.get(2)?;
            let time = |i: usize| -> Result<Option<UnixMillis>, rusqlite::Error> {
                let t: Option<i64> = row.get(i)?;
                Ok(t.map(|t| UnixMillis(u64::try_from(t).unwrap_or(0))))
            };
            let (lease_until, replay_until) = (time(3)?, time(4)?);
            let response_status: Option<i64> = row.get(5)?;
            let headers: Option<String> = row.get(6)?;
            let body: Option<Vec<u8>> = row.get(7)?;
            let response = match response_status {
                Some(status) => Some(LeaseResponse {
                    status: u16::try_from(status).map_err(|_| bad(5))?,
                    headers: LeaseResponse::headers_from_json(headers.as_deref().unwrap_or("[]")),
                    body: body.map(Into::into),
                }),
                None => None,
            };
            Ok(LeaseRecord {
                stored: stored_from_row(&status, fingerprint, lease_until, replay_until),
                token: ClaimToken(token),
                response,
            })
        },
    )
    .optional()
}

impl LeaseStore for SqliteLeaseStore {
    async fn claim(&self, key: &LeaseKey, claim: &NewClaim) -> Result<ClaimOutcome, StoreError> {
        let (key, claim) = (key.clone(), *claim);
        let outcome = self
            .with_conn(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let inserted = tx.prepare_cached(CLAIM)?.execute(params![
                    key.scope,
                    key.operation.as_str(),
                    key.key.as_str(),
                    &claim.fingerprint.as_bytes()[..],
                    &claim.token.0.as_bytes()[..],
                    millis(claim.now),
                    millis(claim.lease_until),
                ])?;
                let outcome = if inserted == 1 {
                    Some(ClaimOutcome::Claimed)
                } else {
                    read_record(&tx, &key)?.map(ClaimOutcome::Existing)
                };
                tx.commit()?;
                Ok(outcome)
            })
            .await?;
        // The insert conflicted, so the row was there inside one write
        // transaction; it cannot be missing.
        outcome.ok_or_else(|| StoreError::Unavailable("claimed row vanished".to_owned()))
    }

    async fn take_over(
        &self,
        key: &LeaseKey,
        previous: ClaimToken,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let (key, claim) = (key.clone(), *claim);
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.prepare_cached(TAKE_OVER)?.execute(params![
                key.scope,
                key.operation.as_str(),
                key.key.as_str(),
                &claim.fingerprint.as_bytes()[..],
                &claim.token.0.as_bytes()[..],
                millis(claim.now),
                millis(claim.lease_until),
                &previous.0.as_bytes()[..],
            ])?;
            tx.commit()?;
            Ok(n == 1)
        })
        .await
    }

    async fn complete(
        &self,
        key: &LeaseKey,
        token: ClaimToken,
        response: &LeaseResponse,
        replay_until: UnixMillis,
    ) -> Result<bool, StoreError> {
        let (key, response) = (key.clone(), response.clone());
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.prepare_cached(COMPLETE)?.execute(params![
                key.scope,
                key.operation.as_str(),
                key.key.as_str(),
                &token.0.as_bytes()[..],
                millis(replay_until),
                i64::from(response.status),
                response.headers_json(),
                response.body.as_deref(),
            ])?;
            tx.commit()?;
            Ok(n == 1)
        })
        .await
    }

    async fn release(&self, key: &LeaseKey, token: ClaimToken) -> Result<bool, StoreError> {
        let key = key.clone();
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.prepare_cached(RELEASE)?.execute(params![
                key.scope,
                key.operation.as_str(),
                key.key.as_str(),
                &token.0.as_bytes()[..],
            ])?;
            tx.commit()?;
            Ok(n == 1)
        })
        .await
    }
}

fn sqlite_error(err: rusqlite::Error) -> StoreError {
    warn!(error = %err, "lease store: SQLite error");
    StoreError::Unavailable(err.to_string())
}

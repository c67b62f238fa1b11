//! Idempotency **in your transaction**: for someone else's axum service whose
//! effect lives in the same database as idemkey's `idempotency_records`.
//!
//! [`pg_in_transaction`] (PostgreSQL) and [`sqlite_in_transaction`] (SQLite;
//! [`sqlite_in_transaction_async`] runs it on a blocking thread) claim the
//! key, run the caller's closure with the open transaction (the caller's own
//! `INSERT`s go in it), store the response and commit, all in **one**
//! transaction. Either the effect and its stored response commit together,
//! or neither does.
//!
//! # The protocol
//!
//! 1. `BEGIN` (SQLite: `BEGIN IMMEDIATE`, which takes the write lock).
//! 2. **Claim**: `INSERT INTO idempotency_records ... ON CONFLICT DO NOTHING`
//!    of an `in_flight` row. The schema's CHECKs allow it (`in_flight` with a
//!    `lease_until`, no response); it is never visible to anyone else,
//!    because it is replaced in step 4 before the commit. A concurrent
//!    request with the same key blocks on the primary key until this
//!    transaction ends.
//! 3. **Claimed**: run the closure in the same transaction. **Not claimed**:
//!    read the row with a *separate* statement. Under READ COMMITTED each
//!    statement takes a new snapshot, so this read sees the concurrent
//!    winner's committed row even though the `INSERT`'s snapshot could not
//!    (the snapshot trap the order route's `create_order.sql` documents).
//!    The row is mapped to [`Stored`] and [`idemkey_core::decide`] answers:
//!    replay the stored response, 422 (another payload), 410 (expired,
//!    policy `reject`), 409, or re-execute (policy `reexecute`): the expired
//!    row is turned back into a claim by a conditional `UPDATE` in this
//!    transaction (a concurrent re-executor waits on the row lock, re-checks
//!    the condition and reads again), then the closure runs.
//! 4. **Complete**: `UPDATE` the row to `completed` with the response, then
//!    `COMMIT`.
//!
//! A closure error rolls everything back: nothing is stored and the key can
//! be used again. A lock wait past `lock_timeout` (SQLSTATE 55P03,
//! `lock_not_available`) answers [`Outcome::Rejected`] with
//! [`Problem::in_progress`]`(1)`: another request holds the key. Set the
//! session's `lock_timeout` (as [`crate::store::PgStore`] does) or
//! [`Options::lock_timeout`], or a duplicate waits as long as the first
//! request runs.
//!
//! # Cost
//!
//! The built-in order route (`POST /orders`) runs a *fused* version of the
//! same protocol: authentication, claim, order and stored response in one
//! statement (`create_order.sql`), one round trip. This generic API cannot
//! know the caller's statements, so it costs about **four** round trips plus
//! the closure's own: `BEGIN`, claim, complete, `COMMIT` (a replay: `BEGIN`,
//! claim, read, `ROLLBACK`). Statements are sent with
//! `query_typed`, so none needs a separate prepare round trip.
//!
//! # Example (PostgreSQL)
//!
//! ```no_run
//! use std::time::Duration;
//! use idemkey_core::{ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, OperationId, UnixMillis};
//! use idemkey_server::in_transaction::{Options, Outcome, Scope, pg_in_transaction};
//! use idemkey_server::store::{AccountId, StoredResponse};
//!
//! # async fn run(client: &mut tokio_postgres::Client, account: AccountId) -> Result<(), Box<dyn std::error::Error>> {
//! let operation = OperationId::from_static("POST /payments:v1");
//! let body = r#"{"cents":500}"#;
//! let scope = Scope {
//!     account,
//!     operation: operation.clone(),
//!     key: IdempotencyKey::parse(b"\"pay-1\"", KeyProfile::Lenient)?,
//!     fingerprint: Fingerprint::of_json(&operation, body)?,
//! };
//! let options = Options::new(UnixMillis(1_764_700_000_000), Duration::from_secs(86_400));
//! let outcome = pg_in_transaction(client, &scope, options, |tx| {
//!     Box::pin(async move {
//!         tx.execute("INSERT INTO payments (cents) VALUES (500)", &[]).await?;
//!         Ok::<_, tokio_postgres::Error>(StoredResponse {
//!             status: 201,
//!             headers: vec![("content-type".into(), "application/json".into())],
//!             body: r#"{"cents":500}"#.into(),
//!         })
//!     })
//! })
//! .await?;
//! match outcome {
//!     Outcome::Executed(r) | Outcome::Replayed(r) => assert_eq!(r.status, 201),
//!     Outcome::Rejected(problem) => eprintln!("{}", problem.status()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! `client` may be a `deadpool_postgres::Object` (`&mut object` derefs to
//! the `tokio_postgres::Client`). The records' `account_id` references
//! `accounts`, so the account must exist (see
//! [`crate::store::OrderStore::create_account`]), and the database must be
//! migrated ([`crate::store::PgStore::connect`] or
//! [`crate::store::SqliteStore::open`] do it).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idemkey_core::{
    Decision, ExpiryPolicy, Fingerprint, IdempotencyKey, OperationId, Problem, Stored, UnixMillis,
    decide,
};
use rusqlite::{Connection, ErrorCode, OptionalExtension as _, TransactionBehavior, params};
use thiserror::Error;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Transaction};

use crate::store::{
    AccountId, StoreError, StoredResponse, from_system_time, stored_from_columns, to_system_time,
};

/// How many times a request reads and decides again when the row changed
/// under it (removed by trim, or re-executed by a concurrent request).
const ATTEMPTS: usize = 3;

/// What one request is about: the record's key and the request's
/// fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The caller's account (must exist in `accounts`).
    pub account: AccountId,
    /// The operation, e.g. `POST /payments:v1`.
    pub operation: OperationId,
    /// The idempotency key.
    pub key: IdempotencyKey,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
}

/// The time and the policies one call applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Now: the record's `created_at` and the instant decisions are made at.
    pub now: UnixMillis,
    /// How long a stored response is replayed.
    pub replay_ttl: Duration,
    /// What happens after the replay window.
    pub expiry_policy: ExpiryPolicy,
    /// PostgreSQL only: `SET LOCAL lock_timeout` for this transaction (one
    /// more round trip). `None` keeps the session's setting.
    pub lock_timeout: Option<Duration>,
}

impl Options {
    /// Policy `reject`, the session's lock timeout.
    pub const fn new(now: UnixMillis, replay_ttl: Duration) -> Self {
        Self {
            now,
            replay_ttl,
            expiry_policy: ExpiryPolicy::Reject,
            lock_timeout: None,
        }
    }

    fn replay_until(&self) -> UnixMillis {
        let ms = u64::try_from(self.replay_ttl.as_millis()).unwrap_or(u64::MAX);
        self.now.plus_millis(ms)
    }
}

/// What a call did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The closure ran; its effect and this response committed together.
    Executed(StoredResponse),
    /// The key was already used with the same payload: the stored response
    /// (send it with `Idempotent-Replayed: true`). The closure did not run.
    Replayed(StoredResponse),
    /// 409, 410 or 422: the closure did not run and nothing was written.
    Rejected(Problem),
}

impl IntoResponse for Outcome {
    /// The stored response (with `Idempotent-Replayed: true` for a replay),
    /// or the problem document.
    fn into_response(self) -> Response {
        match self {
            Self::Executed(r) => stored_response(r, false),
            Self::Replayed(r) => stored_response(r, true),
            Self::Rejected(problem) => crate::problems::problem_response(&problem),
        }
    }
}

fn stored_response(r: StoredResponse, replayed: bool) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, r.body).into_response();
    let headers = response.headers_mut();
    for (name, value) in r.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
    }
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// Why a call failed; in every case the transaction rolled back and nothing
/// is stored.
#[derive(Debug, Error)]
pub enum Error<E> {
    /// The caller's closure failed.
    #[error("the effect failed: {0}")]
    Effect(E),
    /// The database failed (unreachable, busy, or a statement error).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The future a PostgreSQL closure returns: boxed, so that it may borrow the
/// transaction.
pub type PgEffect<'t, E> = Pin<Box<dyn Future<Output = Result<StoredResponse, E>> + Send + 't>>;

// ------------------------------------------------------------- PostgreSQL

const PG_CLAIM: &str = "INSERT INTO idempotency_records
    (account_id, operation, key, fingerprint, status, created_at, replay_until, lease_until)
VALUES ($1, $2, $3, $4, 'in_flight', $5, $6, $5)
ON CONFLICT (account_id, operation, key) DO NOTHING
RETURNING 1";

const PG_READ: &str = "SELECT fingerprint, status, response_status, response_headers::text,
       response_body, replay_until, lease_until
FROM idempotency_records WHERE account_id = $1 AND operation = $2 AND key = $3";

const PG_RECLAIM: &str = "UPDATE idempotency_records
SET status = 'in_flight', response_status = NULL, response_headers = NULL,
    response_body = NULL, created_at = $5, replay_until = $6, lease_until = $5,
    resource_id = NULL
WHERE account_id = $1 AND operation = $2 AND key = $3 AND fingerprint = $4
  AND (status = 'tombstone'
       OR (status = 'completed' AND replay_until <= $5)
       OR (status = 'in_flight' AND lease_until <= $5))
RETURNING 1";

const PG_COMPLETE: &str = "UPDATE idempotency_records
SET status = 'completed', response_status = $4, response_headers = $5::text::jsonb,
    response_body = $6, lease_until = NULL
WHERE account_id = $1 AND operation = $2 AND key = $3";

/// Runs `effect` exactly once per `(account, operation, key)` on PostgreSQL,
/// in one transaction with the claim and the stored response (see the
/// [module docs](self)).
///
/// The closure receives the open transaction; return the response to store
/// (and replay) or an error, which rolls everything back.
pub async fn pg_in_transaction<F, E>(
    client: &mut Client,
    scope: &Scope,
    options: Options,
    effect: F,
) -> Result<Outcome, Error<E>>
where
    F: for<'t, 'c> FnOnce(&'t Transaction<'c>) -> PgEffect<'t, E> + Send,
    E: Send,
{
    let tx = client.transaction().await.map_err(pg_error)?;
    if let Some(timeout) = options.lock_timeout {
        tx.batch_execute(&format!("SET LOCAL lock_timeout = {}", timeout.as_millis()))
            .await
            .map_err(pg_error)?;
    }
    match pg_claim(&tx, scope, &options).await {
        Ok(Claim::Claimed) => {}
        Ok(Claim::Answer(outcome)) => {
            tx.rollback().await.map_err(pg_error)?;
            return Ok(outcome);
        }
        Err(err) if is_lock_timeout(&err) => {
            return Ok(Outcome::Rejected(Problem::in_progress(1)));
        }
        Err(err) => return Err(pg_error(err).into()),
    }
    let response = effect(&tx).await.map_err(Error::Effect)?;
    let status = i32::from(response.status);
    let headers = response.headers_json();
    let account = scope.account.0;
    let (operation, key) = (scope.operation.as_str(), scope.key.as_str());
    let typed: [(&(dyn ToSql + Sync), Type); 6] = [
        (&account, Type::UUID),
        (&operation, Type::TEXT),
        (&key, Type::TEXT),
        (&status, Type::INT4),
        (&headers, Type::TEXT),
        (&response.body, Type::TEXT),
    ];
    tx.query_typed(PG_COMPLETE, &typed)
        .await
        .map_err(pg_error)?;
    tx.commit().await.map_err(pg_error)?;
    Ok(Outcome::Executed(response))
}

enum Claim {
    /// The row is this transaction's claim: run the effect.
    Claimed,
    /// The answer, without running anything.
    Answer(Outcome),
}

async fn pg_claim(
    tx: &Transaction<'_>,
    scope: &Scope,
    options: &Options,
) -> Result<Claim, tokio_postgres::Error> {
    let account = scope.account.0;
    let (operation, key) = (scope.operation.as_str(), scope.key.as_str());
    let fingerprint = scope.fingerprint.as_bytes().to_vec();
    let now = to_system_time(options.now);
    let replay_until = to_system_time(options.replay_until());
    let write: [(&(dyn ToSql + Sync), Type); 6] = [
        (&account, Type::UUID),
        (&operation, Type::TEXT),
        (&key, Type::TEXT),
        (&fingerprint, Type::BYTEA),
        (&now, Type::TIMESTAMPTZ),
        (&replay_until, Type::TIMESTAMPTZ),
    ];
    for _ in 0..ATTEMPTS {
        if tx.query_typed(PG_CLAIM, &write).await?.len() == 1 {
            return Ok(Claim::Claimed);
        }
        // A new statement, hence a new snapshot: it sees the winner's row.
        let Some(row) = tx.query_typed_opt(PG_READ, &write[..3]).await? else {
            continue; // removed meanwhile: claim again
        };
        let fp: Vec<u8> = row.try_get(0)?;
        let status: String = row.try_get(1)?;
        let response_status: Option<i32> = row.try_get(2)?;
        let headers: Option<String> = row.try_get(3)?;
        let body: Option<String> = row.try_get(4)?;
        let stored_replay_until = from_system_time(row.try_get(5)?);
        let lease_until: Option<std::time::SystemTime> = row.try_get(6)?;
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
        let stored = stored_of(
            &fp,
            &status,
            stored_replay_until,
            lease_until.map(from_system_time),
        );
        match answer(stored, response, scope, options) {
            Step::Answer(outcome) => return Ok(Claim::Answer(outcome)),
            Step::ClaimAgain => {}
            Step::Reclaim => {
                if tx.query_typed(PG_RECLAIM, &write).await?.len() == 1 {
                    return Ok(Claim::Claimed);
                }
            }
        }
    }
    Ok(Claim::Answer(Outcome::Rejected(Problem::in_progress(1))))
}

fn is_lock_timeout(err: &tokio_postgres::Error) -> bool {
    err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

fn pg_error(err: tokio_postgres::Error) -> StoreError {
    if is_lock_timeout(&err) {
        return StoreError::LockTimeout;
    }
    match err.as_db_error() {
        Some(db) => StoreError::Unavailable(format!("{}: {}", db.code().code(), db.message())),
        None => StoreError::Unavailable(err.to_string()),
    }
}

// ----------------------------------------------------------------- shared

enum Step {
    Answer(Outcome),
    /// The row is gone: try the claim again.
    ClaimAgain,
    /// Expired (policy `reexecute`) or an abandoned claim: replace the row.
    Reclaim,
}

fn stored_of(
    fingerprint: &[u8],
    status: &str,
    replay_until: UnixMillis,
    lease_until: Option<UnixMillis>,
) -> Stored {
    // The schema's CHECK makes a fingerprint 32 bytes; anything else counts
    // as another payload's.
    let fingerprint = Fingerprint::from_bytes(<[u8; 32]>::try_from(fingerprint).unwrap_or([0; 32]));
    stored_from_columns(status, fingerprint, replay_until, lease_until)
}

fn answer(
    stored: Stored,
    response: Option<StoredResponse>,
    scope: &Scope,
    options: &Options,
) -> Step {
    let decision = decide(
        stored,
        scope.fingerprint,
        options.now,
        options.expiry_policy,
    );
    match decision {
        Decision::Replay => match response {
            Some(r) => Step::Answer(Outcome::Replayed(r)),
            // A completed row always has a response (CHECK); be safe.
            None => Step::Answer(Outcome::Rejected(Problem::in_progress(1))),
        },
        Decision::Execute => Step::ClaimAgain,
        Decision::TakeOver | Decision::Reexecute => Step::Reclaim,
        other => Step::Answer(Outcome::Rejected(
            other
                .problem(None)
                .unwrap_or_else(|| Problem::in_progress(1)),
        )),
    }
}

// ----------------------------------------------------------------- SQLite

const SQLITE_CLAIM: &str = "INSERT INTO idempotency_records
    (account_id, operation, key, fingerprint, status, created_at, replay_until, lease_until)
VALUES (?1, ?2, ?3, ?4, 'in_flight', ?5, ?6, ?5)
ON CONFLICT (account_id, operation, key) DO NOTHING";

const SQLITE_READ: &str = "SELECT fingerprint, status, response_status, response_headers,
       response_body, replay_until, lease_until
FROM idempotency_records WHERE account_id = ?1 AND operation = ?2 AND key = ?3";

const SQLITE_RECLAIM: &str = "UPDATE idempotency_records
SET status = 'in_flight', response_status = NULL, response_headers = NULL,
    response_body = NULL, created_at = ?5, replay_until = ?6, lease_until = ?5,
    resource_id = NULL
WHERE account_id = ?1 AND operation = ?2 AND key = ?3 AND fingerprint = ?4
  AND (status = 'tombstone'
       OR (status = 'completed' AND replay_until <= ?5)
       OR (status = 'in_flight' AND lease_until <= ?5))";

const SQLITE_COMPLETE: &str = "UPDATE idempotency_records
SET status = 'completed', response_status = ?4, response_headers = ?5,
    response_body = ?6, lease_until = NULL
WHERE account_id = ?1 AND operation = ?2 AND key = ?3";

fn ms(t: UnixMillis) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

fn from_ms(v: i64) -> UnixMillis {
    UnixMillis(u64::try_from(v).unwrap_or(0))
}

/// Runs `effect` exactly once per `(account, operation, key)` on SQLite, in
/// one `BEGIN IMMEDIATE` transaction with the claim and the stored response
/// (see the [module docs](self)).
///
/// Blocking: call it from a blocking thread, or use
/// [`sqlite_in_transaction_async`]. Give the connection a busy timeout
/// (`Connection::busy_timeout`): a write lock held past it by another
/// connection is [`Error::Store`] (`database is busy`), as in the order
/// store. The closure's `rusqlite::Error`s are the caller's to map into `E`.
pub fn sqlite_in_transaction<F, E>(
    conn: &mut Connection,
    scope: &Scope,
    options: Options,
    effect: F,
) -> Result<Outcome, Error<E>>
where
    F: FnOnce(&rusqlite::Transaction<'_>) -> Result<StoredResponse, E>,
{
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite_error)?;
    match sqlite_claim(&tx, scope, &options).map_err(sqlite_error)? {
        Claim::Claimed => {}
        Claim::Answer(outcome) => {
            tx.rollback().map_err(sqlite_error)?;
            return Ok(outcome);
        }
    }
    let response = effect(&tx).map_err(Error::Effect)?;
    tx.execute(
        SQLITE_COMPLETE,
        params![
            scope.account.0.to_string(),
            scope.operation.as_str(),
            scope.key.as_str(),
            i64::from(response.status),
            response.headers_json(),
            response.body,
        ],
    )
    .map_err(sqlite_error)?;
    tx.commit().map_err(sqlite_error)?;
    Ok(Outcome::Executed(response))
}

/// [`sqlite_in_transaction`] on a blocking thread, with the connection
/// behind a mutex (held for the whole transaction).
pub async fn sqlite_in_transaction_async<F, E>(
    conn: Arc<Mutex<Connection>>,
    scope: Scope,
    options: Options,
    effect: F,
) -> Result<Outcome, Error<E>>
where
    F: FnOnce(&rusqlite::Transaction<'_>) -> Result<StoredResponse, E> + Send + 'static,
    E: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        // A panic inside a transaction leaves nothing behind (rusqlite rolls
        // back on drop), so a poisoned lock is still usable.
        let mut guard = conn.lock().unwrap_or_else(|e| e.into_inner());
        sqlite_in_transaction(&mut guard, &scope, options, effect)
    })
    .await
    .map_err(|e| Error::Store(StoreError::Unavailable(format!("blocking task: {e}"))))?
}

fn sqlite_claim(
    tx: &rusqlite::Transaction<'_>,
    scope: &Scope,
    options: &Options,
) -> rusqlite::Result<Claim> {
    let account = scope.account.0.to_string();
    let (operation, key) = (scope.operation.as_str(), scope.key.as_str());
    let fingerprint = &scope.fingerprint.as_bytes()[..];
    let (now, replay_until) = (ms(options.now), ms(options.replay_until()));
    let write = params![account, operation, key, fingerprint, now, replay_until];
    for _ in 0..ATTEMPTS {
        if tx.prepare_cached(SQLITE_CLAIM)?.execute(write)? == 1 {
            return Ok(Claim::Claimed);
        }
        let row = tx
            .prepare_cached(SQLITE_READ)?
            .query_row(params![account, operation, key], |row| {
                let fp: Vec<u8> = row.get(0)?;
                let status: String = row.get(1)?;
                let response_status: Option<i64> = row.get(2)?;
                let headers: Option<String> = row.get(3)?;
                let body: Option<String> = row.get(4)?;
                let replay_until = from_ms(row.get(5)?);
                let lease_until: Option<i64> = row.get(6)?;
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
                let stored = stored_of(&fp, &status, replay_until, lease_until.map(from_ms));
                Ok((stored, response))
            })
            .optional()?;
        let Some((stored, response)) = row else {
            continue;
        };
        match answer(stored, response, scope, options) {
            Step::Answer(outcome) => return Ok(Claim::Answer(outcome)),
            Step::ClaimAgain => {}
            Step::Reclaim => {
                if tx.prepare_cached(SQLITE_RECLAIM)?.execute(write)? == 1 {
                    return Ok(Claim::Claimed);
                }
            }
        }
    }
    Ok(Claim::Answer(Outcome::Rejected(Problem::in_progress(1))))
}

fn sqlite_error(err: rusqlite::Error) -> StoreError {
    let code = err.sqlite_error_code();
    if code == Some(ErrorCode::DatabaseBusy) || code == Some(ErrorCode::DatabaseLocked) {
        return StoreError::Unavailable("database is busy".into());
    }
    StoreError::Unavailable(format!("sqlite: {err}"))
}

//! [`sqlite_in_transaction`] and [`sqlite_in_transaction_async`]: the
//! in-transaction front end on a SQLite store (see
//! [`crate::in_transaction`]).

use std::future::Future;
use std::sync::Arc;

use idemkey_core::Fingerprint;
use parking_lot::Mutex;
use rusqlite::Connection;

use super::db::SqliteDb;
use super::transaction::{SqliteTx, run_in_transaction};
use crate::idempotency::{Done, RecordKey, StoredResponse};
use crate::store::StoreError;
use crate::store::in_transaction::{Error, Options, Outcome, finish};

/// Runs `effect` exactly once per [`RecordKey`] on SQLite, in one `BEGIN
/// IMMEDIATE` transaction of `conn` (a connection to `db`'s file) with the
/// claim and the stored response, in `db`'s tables (see the [module
/// docs](crate::in_transaction)).
///
/// Blocking: call it from a blocking thread, or use
/// [`sqlite_in_transaction_async`]. Give the connection a busy timeout: a
/// write lock held past it by another connection is [`Error::Store`].
pub fn sqlite_in_transaction<F, E>(
    db: &SqliteDb,
    conn: &mut Connection,
    key: &RecordKey,
    fingerprint: Fingerprint,
    options: &Options,
    effect: F,
) -> Result<Outcome, Error<E>>
where
    F: FnOnce(SqliteTx<'_>) -> Result<StoredResponse, E>,
{
    let result = run_in_transaction(db, conn, key, fingerprint, &options.policy(), |tx| {
        Ok(Done {
            response: effect(tx)?,
            resource: None,
            value: (),
        })
    });
    finish(key, options, result)
}

/// [`sqlite_in_transaction`] on a blocking thread, with the connection
/// behind a mutex (held for the whole transaction), e.g.
/// [`crate::store::sqlite::SqliteDb::connection`] or one of your own to `db`'s
/// file.
pub fn sqlite_in_transaction_async<F, E>(
    db: &SqliteDb,
    conn: Arc<Mutex<Connection>>,
    key: RecordKey,
    fingerprint: Fingerprint,
    options: Options,
    effect: F,
) -> impl Future<Output = Result<Outcome, Error<E>>> + Send + 'static
where
    F: FnOnce(SqliteTx<'_>) -> Result<StoredResponse, E> + Send + 'static,
    E: Send + 'static,
{
    // The store is cloned now, so the future borrows nothing (it may be
    // spawned).
    let db = db.clone();
    async move {
        tokio::task::spawn_blocking(move || {
            // A panic inside a transaction leaves nothing behind (rusqlite
            // rolls back on drop); parking_lot's lock has no poisoning.
            let mut guard = conn.lock();
            sqlite_in_transaction(&db, &mut guard, &key, fingerprint, &options, effect)
        })
        .await
        .map_err(|e| Error::Store(StoreError::Unavailable(format!("blocking task: {e}"))))?
    }
}

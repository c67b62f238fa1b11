//! The engine inside one SQLite `BEGIN IMMEDIATE` transaction (or one
//! savepoint of a batch's transaction): the claim, the caller's effect and
//! the stored response commit together, or nothing does.

use std::ops::Deref;

use idemkey_core::Fingerprint;
use rusqlite::Connection;

use super::connection::{immediate, sqlite_error};
use super::db::SqliteDb;
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey, StoredResponse};
#[cfg(feature = "outbox")]
use crate::store::StoreError;
use crate::store::{Effect, Tables, Transactional};

/// An open transaction (or savepoint) of a [`SqliteDb`]'s database, with
/// the store's table names: what an effect run in a transaction receives.
/// It derefs to the driver's [`Connection`] for your own statements, and
/// whatever it writes into the library's tables ([`SqliteTx::enqueue`])
/// goes to the store's tables, by construction.
#[derive(Clone, Copy)]
pub struct SqliteTx<'a> {
    conn: &'a Connection,
    db: &'a SqliteDb,
}

impl std::fmt::Debug for SqliteTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTx")
            .field("tables", self.db.tables())
            .finish_non_exhaustive()
    }
}

impl<'a> SqliteTx<'a> {
    /// The open transaction's connection (also reached by deref).
    pub fn connection(&self) -> &'a Connection {
        self.conn
    }

    /// The store's table names, for statements of your own that join the
    /// library's tables ([`Tables::render`]).
    pub fn tables(&self) -> &'a Tables {
        self.db.tables()
    }

    /// Puts an effect in the store's outbox in this transaction: it is
    /// delivered only if the transaction commits. Returns the message's id:
    /// the outbox has no index on `resource_id` (an index entry every
    /// enqueue would pay for), so keep the id on your own row to find the
    /// message again.
    #[cfg(feature = "outbox")]
    pub fn enqueue(
        &self,
        key: &RecordKey,
        effect: &str,
        resource: Option<&str>,
        payload: &str,
    ) -> Result<i64, StoreError> {
        super::outbox::enqueue(self.conn, self.tables(), key, effect, resource, payload)
    }
}

impl Deref for SqliteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

/// Runs [`idempotency::run`] in a new `BEGIN IMMEDIATE` transaction of
/// `conn` (a connection to `db`'s database) on `db`'s tables, `effect`
/// receiving the open transaction. Blocking: call it on a blocking thread.
/// Commits only when the effect ran and its response is stored; a replay,
/// a rejection, a temporary status or an error rolls everything back.
pub fn run_in_transaction<T, E, F>(
    db: &SqliteDb,
    conn: &mut Connection,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    F: FnOnce(SqliteTx<'_>) -> Result<Done<T>, E>,
{
    let tx = immediate(conn)?;
    let outcome = run_engine(db, &tx, key, fingerprint, policy, effect)?;
    if matches!(outcome, Outcome::Executed { stored: true, .. }) {
        tx.commit().map_err(sqlite_error)?;
    } else {
        tx.rollback().map_err(sqlite_error)?;
    }
    Ok(outcome)
}

/// [`run_in_transaction`] inside a savepoint of the open transaction `tx`
/// (a batch of `group_commit`): the savepoint is released only when
/// the effect ran and its response is stored, and rolled back otherwise, so
/// one request's failure leaves its batch-mates' work in place.
pub fn run_in_savepoint<T, E, F>(
    db: &SqliteDb,
    tx: &mut rusqlite::Transaction<'_>,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    F: FnOnce(SqliteTx<'_>) -> Result<Done<T>, E>,
{
    let savepoint = tx.savepoint().map_err(sqlite_error)?;
    // Dropped on an error: rolled back to and released.
    let outcome = run_engine(db, &savepoint, key, fingerprint, policy, effect)?;
    if matches!(outcome, Outcome::Executed { stored: true, .. }) {
        savepoint.commit().map_err(sqlite_error)?;
    } else {
        let mut savepoint = savepoint;
        savepoint.rollback().map_err(sqlite_error)?;
    }
    Ok(outcome)
}

/// The engine on an open transaction or savepoint `open`. Every step is
/// synchronous (SQLite is local and the transaction holds the write lock),
/// so the engine's future completes without waiting.
fn run_engine<C, T, E, F>(
    db: &SqliteDb,
    open: &C,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    C: Deref<Target = Connection>,
    F: FnOnce(SqliteTx<'_>) -> Result<Done<T>, E>,
{
    let conn: &Connection = open;
    pollster::block_on(idempotency::run(
        &db.records(conn),
        key,
        fingerprint,
        policy,
        async move || effect(SqliteTx { conn, db }),
    ))
}

impl Transactional for SqliteDb {
    type Tx<'t> = SqliteTx<'t>;
    type Answer<'t, R: 't> = R;

    async fn transaction<'a, E, F>(
        &'a self,
        key: &'a RecordKey,
        fingerprint: Fingerprint,
        policy: Policy,
        _lock_timeout: Option<std::time::Duration>,
        effect: F,
    ) -> Result<Outcome<()>, idempotency::Error<E>>
    where
        E: Send + 'static,
        F: Effect<Self, E>,
    {
        let (key, store) = (key.clone(), self.clone());
        self.with_conn(move |conn| {
            Ok(run_in_transaction(
                &store,
                conn,
                &key,
                fingerprint,
                &policy,
                |tx| {
                    Ok(Done {
                        response: effect.run(tx)?,
                        resource: None,
                        value: (),
                    })
                },
            ))
        })
        .await?
    }
}

impl<E: 'static, F> Effect<SqliteDb, E> for F
where
    F: FnOnce(SqliteTx<'_>) -> Result<StoredResponse, E> + Send + 'static,
{
    fn run<'t>(
        self,
        tx: <SqliteDb as Transactional>::Tx<'t>,
    ) -> <SqliteDb as Transactional>::Answer<'t, Result<StoredResponse, E>> {
        self(tx)
    }
}

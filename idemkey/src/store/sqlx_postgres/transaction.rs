//! The engine inside a transaction of yours: the claim, your effect and
//! the stored response in one `sqlx::Transaction<'_, Postgres>`.
//!
//! The call's part runs under a savepoint of your transaction (sqlx's
//! nested `begin`): when the effect ran and its response is stored, the
//! savepoint is released and everything waits for your commit; a replay,
//! a rejection, a temporary status or an error rolls back to it, so
//! nothing of the call stays and your transaction goes on. On a connection
//! outside any transaction the same call opens and ends its own.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::time::Duration;

use idemkey_core::Fingerprint;
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

use super::db::SqlxPgDb;
use super::error::sqlx_error;
use super::records::SqlxPgRecords;
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey, StoredResponse};
use crate::store::Tables;
use crate::store::backend::{Effect, Transactional};
use crate::store::in_transaction::{self as front, Options};

/// The future an effect returns: boxed, so that it may borrow the
/// transaction.
pub type SqlxEffect<'t, E> = Pin<Box<dyn Future<Output = Result<StoredResponse, E>> + Send + 't>>;

/// Your open transaction while your effect runs, with the store's table
/// names: it derefs to the `PgConnection` for your own statements
/// (`sqlx::query(…).execute(&mut *tx)`), and what it writes into the
/// library's tables ([`SqlxTx::enqueue`]) goes to the store's tables.
pub struct SqlxTx<'t> {
    conn: &'t mut PgConnection,
    db: &'t SqlxPgDb,
}

impl std::fmt::Debug for SqlxTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlxTx")
            .field("tables", self.db.tables())
            .finish_non_exhaustive()
    }
}

impl<'t> SqlxTx<'t> {
    /// The store's table names, for statements of yours that join the
    /// library's tables ([`Tables::render`]).
    pub fn tables(&self) -> &'t Tables {
        self.db.tables()
    }

    /// The store this transaction writes for.
    #[cfg_attr(not(feature = "flow"), allow(dead_code))]
    pub(super) fn db(&self) -> &'t SqlxPgDb {
        self.db
    }

    /// Whether your statements may be named and cached (`false` behind a
    /// transaction pooler: send them with `.persistent(false)`).
    pub fn persistent(&self) -> bool {
        self.db.persistent()
    }

    /// Puts an effect in the store's outbox in this transaction: delivered
    /// only if it commits. Returns the message's id.
    #[cfg(feature = "outbox")]
    pub async fn enqueue(
        &mut self,
        key: &RecordKey,
        effect: &str,
        resource: Option<&str>,
        payload: &str,
    ) -> Result<i64, crate::store::StoreError> {
        let db = self.db;
        db.enqueue_on(self.conn, key, effect, resource, payload)
            .await
    }
}

impl Deref for SqlxTx<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.conn
    }
}

impl DerefMut for SqlxTx<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn
    }
}

/// Runs [`idempotency::run`] under a savepoint of `conn`'s transaction (or
/// in a transaction of its own), `effect` receiving the open transaction;
/// the savepoint is released only when the effect ran and its response is
/// stored, and rolled back otherwise.
pub(crate) async fn run_in_transaction<T, E, F>(
    db: &SqlxPgDb,
    conn: &mut PgConnection,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    lock_timeout: Option<Duration>,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    F: for<'t> FnOnce(SqlxTx<'t>) -> Pin<Box<dyn Future<Output = Result<Done<T>, E>> + Send + 't>>,
{
    let mut tx = conn.begin().await.map_err(sqlx_error)?;
    if let Some(timeout) = lock_timeout {
        let set = format!("SET LOCAL lock_timeout = {}", timeout.as_millis());
        tx.execute(sqlx::raw_sql(AssertSqlSafe(set)))
            .await
            .map_err(sqlx_error)?;
    }
    let outcome = {
        let records = SqlxPgRecords::of(db, &mut tx);
        idempotency::run(&records, key, fingerprint, policy, async || {
            let mut conn = records.lock().await;
            effect(SqlxTx {
                conn: &mut conn,
                db,
            })
            .await
        })
        .await
    };
    match outcome {
        Ok(outcome @ Outcome::Executed { stored: true, .. }) => {
            tx.commit().await.map_err(sqlx_error)?;
            Ok(outcome)
        }
        other => {
            tx.rollback().await.map_err(sqlx_error)?;
            other
        }
    }
}

/// Runs `effect` exactly once per [`RecordKey`] in **your** transaction:
/// pass `&mut *tx` of your `sqlx::Transaction<'_, Postgres>`. The claim,
/// the effect and the stored response go in it (under a savepoint, see the
/// [module docs](crate::store::sqlx_postgres)), in `db`'s tables, and commit when you commit it:
/// on [`front::Outcome::Executed`] commit; any other answer has already
/// been rolled back to the savepoint, and your transaction goes on.
///
/// Behind a transaction pooler send your own statements with
/// `.persistent(false)` ([`SqlxTx::persistent`] says which).
pub async fn sqlx_in_transaction<F, E>(
    db: &SqlxPgDb,
    conn: &mut PgConnection,
    key: &RecordKey,
    fingerprint: Fingerprint,
    options: &Options,
    effect: F,
) -> Result<front::Outcome, front::Error<E>>
where
    F: for<'t> FnOnce(SqlxTx<'t>) -> SqlxEffect<'t, E>,
    E: Send + 'static,
{
    let result = run_in_transaction(
        db,
        conn,
        key,
        fingerprint,
        &options.policy(),
        options.lock_timeout,
        |tx| {
            let effect = effect(tx);
            Box::pin(async move {
                Ok(Done {
                    response: effect.await?,
                    resource: None,
                    value: (),
                })
            })
        },
    )
    .await;
    front::finish(key, options, result)
}

/// The seam's in-transaction front end
/// ([`crate::in_transaction::transaction`]): each call in a new transaction
/// of a connection of the pool.
impl Transactional for SqlxPgDb {
    type Tx<'t> = SqlxTx<'t>;
    type Answer<'t, R: 't> = Pin<Box<dyn Future<Output = R> + Send + 't>>;

    async fn transaction<'a, E, F>(
        &'a self,
        key: &'a RecordKey,
        fingerprint: Fingerprint,
        policy: Policy,
        lock_timeout: Option<Duration>,
        effect: F,
    ) -> Result<Outcome<()>, idempotency::Error<E>>
    where
        E: Send + 'static,
        F: Effect<Self, E>,
    {
        let mut conn = self.pool().acquire().await.map_err(sqlx_error)?;
        run_in_transaction(
            self,
            &mut conn,
            key,
            fingerprint,
            &policy,
            lock_timeout,
            |tx| {
                let effect = effect.run(tx);
                Box::pin(async move {
                    Ok(Done {
                        response: effect.await?,
                        resource: None,
                        value: (),
                    })
                })
            },
        )
        .await
    }
}

impl<E: 'static, F> Effect<SqlxPgDb, E> for F
where
    F: for<'t> FnOnce(SqlxTx<'t>) -> SqlxEffect<'t, E> + Send + 'static,
{
    fn run<'t>(
        self,
        tx: <SqlxPgDb as Transactional>::Tx<'t>,
    ) -> <SqlxPgDb as Transactional>::Answer<'t, Result<StoredResponse, E>> {
        self(tx)
    }
}

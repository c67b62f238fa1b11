//! The engine inside one PostgreSQL transaction: the claim, the caller's
//! effect and the stored response commit together, or nothing does.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::time::Duration;

use idemkey_core::Fingerprint;
use tokio_postgres::{Client, Transaction};

use super::db::PgDb;
use super::error::db_error;
use super::records::PgRecords;
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey, StoredResponse};
use crate::store::{Effect, StoreError, Tables, Transactional};

/// The future a PostgreSQL effect returns: boxed, so that it may borrow the
/// transaction.
pub type PgEffect<'t, T, E> = Pin<Box<dyn Future<Output = Result<Done<T>, E>> + Send + 't>>;

/// The future an in-transaction closure returns on PostgreSQL (its
/// response): boxed, so that it may borrow the transaction.
pub type PgResponseFuture<'t, E> =
    Pin<Box<dyn Future<Output = Result<StoredResponse, E>> + Send + 't>>;

/// An open transaction of a [`PgDb`], with the store's table names: what
/// an effect run in a transaction receives. It derefs to the driver's
/// [`Transaction`] for your own statements, and whatever it writes into
/// the library's tables ([`PgTx::enqueue`]) goes to the store's tables, by
/// construction: there is no way to reach them with other names.
#[derive(Clone, Copy)]
pub struct PgTx<'t, 'c> {
    tx: &'t Transaction<'c>,
    db: &'t PgDb,
}

impl std::fmt::Debug for PgTx<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTx")
            .field("tables", self.db.tables())
            .finish_non_exhaustive()
    }
}

impl<'t, 'c> PgTx<'t, 'c> {
    /// The driver's transaction (also reached by deref).
    pub fn transaction(&self) -> &'t Transaction<'c> {
        self.tx
    }

    /// The store's table names, for statements of your own that join the
    /// library's tables ([`Tables::render`]).
    pub fn tables(&self) -> &'t Tables {
        self.db.tables()
    }

    /// Puts an effect in the store's outbox in this transaction: it is
    /// delivered only if the transaction commits. Returns the message's id.
    /// The outbox has no index on `resource_id` (an index entry every
    /// enqueue would pay for): to find the message again, keep its id on
    /// your own row; with the key's scope it is the outbox's primary key.
    #[cfg(feature = "outbox")]
    pub async fn enqueue(
        &self,
        key: &RecordKey,
        effect: &str,
        resource: Option<&str>,
        payload: &str,
    ) -> Result<i64, StoreError> {
        super::outbox::enqueue(self.tx, self.tables(), key, effect, resource, payload).await
    }
}

impl<'c> Deref for PgTx<'_, 'c> {
    type Target = Transaction<'c>;

    fn deref(&self) -> &Transaction<'c> {
        self.tx
    }
}

/// `SET LOCAL lock_timeout` for the rest of `tx`.
pub(crate) async fn set_lock_timeout(
    tx: &Transaction<'_>,
    timeout: Duration,
) -> Result<(), StoreError> {
    tx.batch_execute(&format!("SET LOCAL lock_timeout = {}", timeout.as_millis()))
        .await
        .map_err(db_error)
}

/// Runs [`idempotency::run`] in a new transaction of `client` (one of
/// `db`'s connections, or any connection to its database) on `db`'s
/// tables, `effect` receiving the open transaction. Commits only when the
/// effect ran and its response is stored; a replay, a rejection, a
/// temporary status or an error rolls everything back.
pub async fn run_in_transaction<T, E, F>(
    db: &PgDb,
    client: &mut Client,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    lock_timeout: Option<Duration>,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    F: for<'t, 'c> FnOnce(PgTx<'t, 'c>) -> PgEffect<'t, T, E>,
{
    let tx = client.transaction().await.map_err(db_error)?;
    if let Some(timeout) = lock_timeout {
        set_lock_timeout(&tx, timeout).await?;
    }
    let open = PgTx { tx: &tx, db };
    let outcome = idempotency::run(
        &PgRecords::of(db, &tx),
        key,
        fingerprint,
        policy,
        async || effect(open).await,
    )
    .await?;
    if matches!(outcome, Outcome::Executed { stored: true, .. }) {
        tx.commit().await.map_err(db_error)?;
    } else {
        tx.rollback().await.map_err(db_error)?;
    }
    Ok(outcome)
}

impl Transactional for PgDb {
    type Tx<'t> = PgTx<'t, 't>;
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
        let mut client = self.client().await?;
        run_in_transaction(
            self,
            &mut client,
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

impl<E: 'static, F> Effect<PgDb, E> for F
where
    F: for<'t, 'c> FnOnce(PgTx<'t, 'c>) -> PgResponseFuture<'t, E> + Send + 'static,
{
    fn run<'t>(
        self,
        tx: <PgDb as Transactional>::Tx<'t>,
    ) -> <PgDb as Transactional>::Answer<'t, Result<StoredResponse, E>> {
        self(tx)
    }
}

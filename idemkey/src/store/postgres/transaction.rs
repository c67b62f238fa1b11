//! The engine inside one PostgreSQL transaction: the claim, the caller's
//! effect and the stored response commit together, or nothing does.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use idemkey_core::Fingerprint;
use tokio_postgres::{Client, Transaction};

use super::error::db_error;
use super::records::PgRecords;
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey};
use crate::store::StoreError;

/// The future a PostgreSQL effect returns: boxed, so that it may borrow the
/// transaction.
pub type PgEffect<'t, T, E> = Pin<Box<dyn Future<Output = Result<Done<T>, E>> + Send + 't>>;

/// `SET LOCAL lock_timeout` for the rest of `tx`.
pub async fn set_lock_timeout(tx: &Transaction<'_>, timeout: Duration) -> Result<(), StoreError> {
    tx.batch_execute(&format!("SET LOCAL lock_timeout = {}", timeout.as_millis()))
        .await
        .map_err(db_error)
}

/// Runs [`idempotency::run`] in a new transaction of `client`, `effect`
/// receiving the open transaction. Commits only when the effect ran and its
/// response is stored; a replay, a rejection, a temporary status or an
/// error rolls everything back.
pub async fn run_in_transaction<T, E, F>(
    client: &mut Client,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    lock_timeout: Option<Duration>,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    F: for<'t, 'c> FnOnce(&'t Transaction<'c>) -> PgEffect<'t, T, E>,
{
    let tx = client.transaction().await.map_err(db_error)?;
    if let Some(timeout) = lock_timeout {
        set_lock_timeout(&tx, timeout).await?;
    }
    let outcome = idempotency::run(&PgRecords::new(&tx), key, fingerprint, policy, async || {
        effect(&tx).await
    })
    .await?;
    if matches!(outcome, Outcome::Executed { stored: true, .. }) {
        tx.commit().await.map_err(db_error)?;
    } else {
        tx.rollback().await.map_err(db_error)?;
    }
    Ok(outcome)
}

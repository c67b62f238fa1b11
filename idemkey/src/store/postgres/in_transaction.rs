//! [`pg_in_transaction`]: the in-transaction front end on a PostgreSQL
//! store (see [`crate::in_transaction`]).

use idemkey_core::Fingerprint;

use super::db::PgDb;
use super::transaction::{PgResponseFuture, PgTx, run_in_transaction};
use crate::idempotency::{Done, RecordKey};
use crate::store::in_transaction::{Error, Options, Outcome, finish};

/// Runs `effect` exactly once per [`RecordKey`] on PostgreSQL, in one
/// transaction of a connection of `db`'s pool with the claim and the
/// stored response, in `db`'s tables (see the [module docs](self)). The
/// closure receives the open transaction with the store's names.
pub async fn pg_in_transaction<F, E>(
    db: &PgDb,
    key: &RecordKey,
    fingerprint: Fingerprint,
    options: &Options,
    effect: F,
) -> Result<Outcome, Error<E>>
where
    F: for<'t, 'c> FnOnce(PgTx<'t, 'c>) -> PgResponseFuture<'t, E>,
    E: Send + 'static,
{
    let mut client = db.client().await?;
    let result = run_in_transaction(
        db,
        &mut client,
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
    finish(key, options, result)
}

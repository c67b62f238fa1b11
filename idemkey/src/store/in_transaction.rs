//! The in-transaction front end over any store that joins transactions
//! (see [`crate::in_transaction`], which offers it): the policies of one
//! call, what it did, and the run through the [`Transactional`] seam.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "axum")]
use axum::response::{IntoResponse, Response};
use idemkey_core::{ExpiryPolicy, Fingerprint, Problem};

use crate::error::StoreError;
use crate::idempotency::{self, Done, Mode, Policy, RecordKey, Records, StoredResponse};
use crate::metrics::{FrontEnd, Metrics};
use crate::store::backend::{Effect, Transactional};

/// The claim's lease inside a transaction: never visible to anyone else
/// (the row is completed or rolled back before the commit), so it only has
/// to satisfy the schema.
const TRANSACTION_LEASE: Duration = Duration::from_secs(60);

/// The policies one call applies.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long a stored response is replayed.
    pub replay_ttl: Duration,
    /// What happens after the replay window.
    pub expiry_policy: ExpiryPolicy,
    /// PostgreSQL only: `SET LOCAL lock_timeout` for this transaction (one
    /// more round trip). `None` keeps the session's setting.
    pub lock_timeout: Option<Duration>,
    /// Where outcomes are counted besides the `metrics`
    /// facade: [`Metrics::global`] when `None`.
    pub metrics: Option<Arc<Metrics>>,
}

impl Options {
    /// Policy `reject`, the session's lock timeout, the global metrics.
    pub const fn new(replay_ttl: Duration) -> Self {
        Self {
            replay_ttl,
            expiry_policy: ExpiryPolicy::Reject,
            lock_timeout: None,
            metrics: None,
        }
    }

    pub(crate) fn policy(&self) -> Policy {
        Policy {
            expiry: self.expiry_policy,
            ..Policy::new(Mode::Transactional, TRANSACTION_LEASE, self.replay_ttl)
        }
    }
}

/// What a call did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The closure ran; its effect and this response committed together.
    Executed(StoredResponse),
    /// The key was already used with the same payload: the stored response
    /// (sent with `Idempotent-Replayed: true`). The closure did not run.
    Replayed(StoredResponse),
    /// 409, 410 or 422: the closure did not run and nothing was written.
    Rejected(Problem),
    /// The closure answered a temporary status (408, 425, 429, 5xx): it was
    /// rolled back and nothing is stored, so a retry runs it again.
    NotStored(StoredResponse),
}

#[cfg(feature = "axum")]
impl IntoResponse for Outcome {
    /// The response (a replay marked `Idempotent-Replayed: true`), or the
    /// problem document.
    fn into_response(self) -> Response {
        match self {
            Self::Executed(r) | Self::NotStored(r) => r.to_response(false),
            Self::Replayed(r) => r.to_response(true),
            Self::Rejected(problem) => crate::problems::problem_response(&problem),
        }
    }
}

/// Why a call failed; the transaction rolled back and nothing is stored.
pub type Error<E> = idempotency::Error<E>;

/// Runs `effect` exactly once per [`RecordKey`] through any [`Records`]
/// bound to a transaction **you** opened (e.g. `PgRecords::of(&db, &tx)`
/// or `sqlite_db.records(&tx)`, in the store's tables, or a store of your own): claim, effect, stored
/// response, all in that transaction. Commit it when the answer is
/// [`Outcome::Executed`]; roll it back otherwise (a replay, a rejection, a
/// response with a temporary status, or an error), so that nothing of a
/// call that is not its key's result stays.
///
/// [`transaction`] (and each backend's front end, e.g.
/// `pg_in_transaction`) does exactly this with the transaction opened and
/// ended for you.
pub async fn in_transaction<R, E>(
    records: &R,
    key: &RecordKey,
    fingerprint: Fingerprint,
    options: &Options,
    effect: impl AsyncFnOnce() -> Result<StoredResponse, E>,
) -> Result<Outcome, Error<E>>
where
    R: Records,
{
    let result = idempotency::run(records, key, fingerprint, &options.policy(), async || {
        Ok(Done {
            response: effect().await?,
            resource: None,
            value: (),
        })
    })
    .await;
    finish(key, options, result)
}

pub(crate) fn finish<T, E>(
    key: &RecordKey,
    options: &Options,
    result: Result<idempotency::Outcome<T>, Error<E>>,
) -> Result<Outcome, Error<E>> {
    let outcome = match result {
        Ok(outcome) => outcome,
        // Another transaction holds the key past the lock timeout.
        Err(Error::Store(StoreError::LockTimeout)) => {
            return Ok(Outcome::Rejected(Problem::in_progress(1)));
        }
        Err(err) => return Err(err),
    };
    options.metrics.as_ref().unwrap_or(Metrics::global()).count(
        FrontEnd::InTransaction,
        &key.operation,
        outcome.label(),
    );
    Ok(match outcome {
        idempotency::Outcome::Executed {
            response,
            stored: true,
            ..
        } => Outcome::Executed(response),
        idempotency::Outcome::Executed { response, .. } => Outcome::NotStored(response),
        idempotency::Outcome::Replayed(response) => Outcome::Replayed(response),
        idempotency::Outcome::Rejected { problem, .. } => Outcome::Rejected(problem),
    })
}

/// Runs `effect` exactly once per [`RecordKey`] in one new transaction of
/// `db`, any store that joins transactions ([`Transactional`]): the claim,
/// the effect with the open transaction ([`Transactional::Tx`], in the
/// store's tables) and the stored response commit together, or nothing
/// does. The closure is typed by the backend's transaction (`|tx: PgTx|`
/// returning a boxed future on PostgreSQL, `|tx: SqliteTx|` returning the
/// response on SQLite, run on a blocking thread).
pub async fn transaction<B, E, F>(
    db: &B,
    key: &RecordKey,
    fingerprint: Fingerprint,
    options: &Options,
    effect: F,
) -> Result<Outcome, Error<E>>
where
    B: Transactional,
    E: Send + 'static,
    F: Effect<B, E>,
{
    let result = db
        .transaction(
            key,
            fingerprint,
            options.policy(),
            options.lock_timeout,
            effect,
        )
        .await;
    finish(key, options, result)
}

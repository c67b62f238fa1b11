//! Idempotency **in your transaction**: for someone else's service whose
//! effect lives in the same database as idemkey's records.
//!
//! [`pg_in_transaction`] (PostgreSQL) and [`sqlite_in_transaction`] (SQLite;
//! [`sqlite_in_transaction_async`] runs it on a blocking thread) run the
//! [engine](crate::idempotency) in **one** transaction: claim the key, run
//! the caller's closure with the open transaction (the caller's own
//! `INSERT`s go in it), store the response, commit. Either the effect and
//! its stored response commit together, or neither does.
//!
//! - A retry with the same payload gets [`Outcome::Replayed`]; another
//!   payload 422, a key past its window 410 (or a new run under
//!   `reexecute`), all decided at the database's clock.
//! - A concurrent request with the same key waits on the row lock until the
//!   first commits, then replays; past `lock_timeout` it gets 409.
//! - The closure's error, or a response with a temporary status (408, 425,
//!   429, 5xx), rolls everything back: nothing is stored, and a retry runs
//!   the closure again (committing the effect would let that retry do it
//!   twice).
//!
//! # Cost
//! About four round trips plus the closure's own: `BEGIN`, claim, complete,
//! `COMMIT` (a replay: `BEGIN`, claim, read, `ROLLBACK`). The built-in order
//! route fuses the common case into one statement.
//!
//! # Example (PostgreSQL)
//!
//! ```no_run
//! use std::time::Duration;
//! use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};
//! use uuid::Uuid;
//! use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
//! use idemkey::in_transaction::{Options, Outcome, pg_in_transaction};
//! use idemkey::store::PgDb;
//!
//! # async fn run(db: &PgDb, account: Uuid) -> Result<(), Box<dyn std::error::Error>> {
//! let operation = OperationId::from_static("POST /payments:v1");
//! let body = r#"{"cents":500}"#;
//! let fingerprint = Fingerprint::of_json(&operation, body)?;
//! let key = RecordKey {
//!     scope: Scope::account(account),
//!     operation,
//!     key: IdempotencyKey::parse(b"\"pay-1\"", KeyProfile::Lenient)?,
//! };
//! let options = Options::new(Duration::from_secs(86_400));
//! let outcome = pg_in_transaction(db, &key, fingerprint, &options, |tx| {
//!     Box::pin(async move {
//!         tx.execute_typed("INSERT INTO payments (cents) VALUES (500)", &[])
//!             .await
//!             .map_err(idemkey::store::postgres::db_error)?;
//!         Ok::<_, idemkey::store::StoreError>(
//!             StoredResponse::new(201, r#"{"cents":500}"#)
//!                 .with_header("content-type", "application/json"),
//!         )
//!     })
//! })
//! .await?;
//! match outcome {
//!     Outcome::Executed(r) | Outcome::Replayed(r) => assert_eq!(r.status, 201),
//!     Outcome::Rejected(problem) => eprintln!("{}", problem.status()),
//!     Outcome::NotStored(r) => eprintln!("rolled back: {}", r.status),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # The store's tables
//! Every call takes the store ([`crate::store::PgDb`] or
//! [`crate::store::SqliteDb`]), and the closure receives a [`PgTx`] or
//! [`SqliteTx`] that carries its [`crate::store::Tables`]: the claim, the
//! stored response and an [`enqueue`](PgTx::enqueue) land in the store's
//! tables (`acme_idempotency_records`, `acme_outbox` under
//! `Tables::with_prefix("acme_")`), never in tables of the default names
//! that another deployment may own.
//!
//! # Effects outside the database
//! An effect the transaction cannot hold (an e-mail, a call to another
//! service) goes in the outbox from the closure, with [`PgTx::enqueue`] or
//! [`SqliteTx::enqueue`] on the open transaction: it is delivered only if
//! the transaction commits, and only once per key (a replay runs no
//! closure). A [`crate::outbox::Worker`] on the same store, with your
//! delivery function, delivers it at least once; send it with
//! [`crate::store::outbox::OutboxMessage::downstream_key`] so the receiver
//! can deduplicate the repeats (`server/examples/outbox.rs`).
//!
//! # Behind PgBouncer (transaction pooling)
//! The transaction keeps one server connection from `BEGIN` to `COMMIT`.
//! Send your own statements unnamed (`tx.execute_typed`, `tx.query_typed`,
//! or [`crate::store::postgres::query_in`]): a named one (`tx.execute("…")`
//! prepares `s7`) can meet another client's `s7` on the pooler's server
//! connection. Never keep anything across transactions: no
//! `prepare_cached`, no session `SET` (use [`Options::lock_timeout`], a
//! `SET LOCAL`). See `docs/pgbouncer.md`.
//!
//! [`pg_in_transaction`] takes a connection of the store's pool for the
//! call. The database must be migrated ([`crate::store::Db::open`] does it).

// The front ends of the stores that join transactions, under the names this
// module has always offered.
#[cfg(feature = "postgres")]
pub use crate::store::postgres::{PgResponseFuture as PgEffect, PgTx, pg_in_transaction};
#[cfg(feature = "sqlite")]
pub use crate::store::sqlite::{SqliteTx, sqlite_in_transaction, sqlite_in_transaction_async};

use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use idemkey_core::{ExpiryPolicy, Fingerprint, Problem};

use crate::idempotency::{self, Done, Mode, Policy, RecordKey, Records, StoredResponse};
use crate::metrics::{FrontEnd, Metrics};
use crate::store::{Effect, StoreError, Transactional};

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
    /// Where outcomes are counted besides the [`metrics`]
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
/// [`pg_in_transaction`] and [`sqlite_in_transaction`] do exactly this with
/// the transaction opened and ended for you.
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

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

#[cfg(feature = "postgres")]
pub use crate::store::postgres::PgTx;
#[cfg(feature = "sqlite")]
pub use crate::store::sqlite::SqliteTx;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use std::future::Future;
#[cfg(feature = "postgres")]
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "axum")]
use axum::response::{IntoResponse, Response};
use idemkey_core::{ExpiryPolicy, Fingerprint, Problem};
#[cfg(feature = "sqlite")]
use parking_lot::Mutex;
#[cfg(feature = "sqlite")]
use rusqlite::Connection;

use crate::idempotency::{self, Done, Mode, Policy, RecordKey, Records, StoredResponse};
use crate::metrics::{FrontEnd, Metrics};
#[cfg(feature = "postgres")]
use crate::store::PgDb;
#[cfg(feature = "sqlite")]
use crate::store::SqliteDb;
use crate::store::StoreError;
#[cfg(feature = "postgres")]
use crate::store::postgres;
#[cfg(feature = "sqlite")]
use crate::store::sqlite;

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

/// The future a PostgreSQL closure returns: boxed, so that it may borrow the
/// transaction.
#[cfg(feature = "postgres")]
pub type PgEffect<'t, E> = Pin<Box<dyn Future<Output = Result<StoredResponse, E>> + Send + 't>>;

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

/// Runs `effect` exactly once per [`RecordKey`] on PostgreSQL, in one
/// transaction of a connection of `db`'s pool with the claim and the
/// stored response, in `db`'s tables (see the [module docs](self)). The
/// closure receives the open transaction with the store's names.
#[cfg(feature = "postgres")]
pub async fn pg_in_transaction<F, E>(
    db: &PgDb,
    key: &RecordKey,
    fingerprint: Fingerprint,
    options: &Options,
    effect: F,
) -> Result<Outcome, Error<E>>
where
    F: for<'t, 'c> FnOnce(PgTx<'t, 'c>) -> PgEffect<'t, E>,
    E: Send + 'static,
{
    let mut client = db.client().await?;
    let result = postgres::run_in_transaction(
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

/// Runs `effect` exactly once per [`RecordKey`] on SQLite, in one `BEGIN
/// IMMEDIATE` transaction of `conn` (a connection to `db`'s file) with the
/// claim and the stored response, in `db`'s tables (see the [module
/// docs](self)).
///
/// Blocking: call it from a blocking thread, or use
/// [`sqlite_in_transaction_async`]. Give the connection a busy timeout: a
/// write lock held past it by another connection is [`Error::Store`].
#[cfg(feature = "sqlite")]
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
    let result = sqlite::run_in_transaction(db, conn, key, fingerprint, &options.policy(), |tx| {
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
/// [`crate::store::SqliteDb::connection`] or one of your own to `db`'s
/// file.
#[cfg(feature = "sqlite")]
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

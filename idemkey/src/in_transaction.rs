//! Idempotency **in your transaction**: for someone else's service whose
//! effect lives in the same database as idemkey's records.
//!
//! `pg_in_transaction` (PostgreSQL) and `sqlite_in_transaction` (SQLite;
//! `sqlite_in_transaction_async` runs it on a blocking thread) run the
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
//! use idemkey::in_transaction::{Options, Outcome};
//! use idemkey::store::postgres::pg_in_transaction;
//! use idemkey::store::postgres::PgDb;
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
//!         Ok::<_, idemkey::StoreError>(
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
//! Every call takes the store (`PgDb` or
//! `SqliteDb`), and the closure receives a `PgTx` or
//! `SqliteTx` that carries its [`crate::store::Tables`]: the claim, the
//! stored response and an `enqueue` land in the store's
//! tables (`acme_idempotency_records`, `acme_outbox` under
//! `Tables::with_prefix("acme_")`), never in tables of the default names
//! that another deployment may own.
//!
//! # Effects outside the database
//! An effect the transaction cannot hold (an e-mail, a call to another
//! service) goes in the outbox from the closure, with `PgTx::enqueue` or
//! `SqliteTx::enqueue` on the open transaction: it is delivered only if
//! the transaction commits, and only once per key (a replay runs no
//! closure). A `outbox::Worker` on the same store, with your
//! delivery function, delivers it at least once; send it with
//! `OutboxMessage::downstream_key` so the receiver
//! can deduplicate the repeats (`server/examples/outbox.rs`).
//!
//! # Behind PgBouncer (transaction pooling)
//! The transaction keeps one server connection from `BEGIN` to `COMMIT`.
//! Send your own statements unnamed (`tx.execute_typed`, `tx.query_typed`,
//! or `query_in`): a named one (`tx.execute("…")`
//! prepares `s7`) can meet another client's `s7` on the pooler's server
//! connection. Never keep anything across transactions: no
//! `prepare_cached`, no session `SET` (use [`Options::lock_timeout`], a
//! `SET LOCAL`). See `docs/pgbouncer.md`.
//!
//! `pg_in_transaction` takes a connection of the store's pool for the
//! call. The database must be migrated ([`crate::Db::open`] does it).

// The backend-neutral part; each store's own function and transaction type
// live in its module (`store::postgres`, `store::sqlite`, `store::sqlx_postgres`).

pub use crate::store::in_transaction::{Error, Options, Outcome, in_transaction, transaction};

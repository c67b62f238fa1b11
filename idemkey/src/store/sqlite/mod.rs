//! SQLite: one file, WAL journal, `BEGIN IMMEDIATE` for every transaction
//! that writes, a busy timeout, and the same tables, primary keys and
//! one-transaction-per-request contract as PostgreSQL. Several processes may
//! share the file: SQLite admits one writer at a time, and `BEGIN
//! IMMEDIATE` takes the write lock before the first read, so a claim's
//! insert and the read of what the key holds see one consistent file.
//!
//! The store's clock is SQLite's own (`unixepoch('subsec')` inside each
//! statement). rusqlite is blocking: each call takes the store's one
//! connection on a blocking thread. New requests go through one writer
//! thread that commits every request waiting at that moment in one
//! transaction, each in its own savepoint (the `group_commit` module): one fsync
//! per batch instead of one per request.
//!
//! Every call's wait is bounded by one deadline (the server's
//! `--pool-wait`): first for the connection (a timed lock, waited for on
//! the blocking thread that will use it, so the connection passes from one
//! call to the next without a trip through the async runtime: the one
//! connection is the store's bottleneck, and a semaphore awaited before
//! `spawn_blocking` left it idle between calls, 0.67x the new requests per
//! second), then for another process's write lock (SQLite's busy timeout,
//! set to what is left of the deadline). Past it the call fails with
//! [`StoreError::Unavailable`](crate::StoreError::Unavailable) (503) before anything was written. The
//! server's `--max-in-flight` bounds the threads that wait.

mod backend;
mod connection;
mod db;
#[cfg(feature = "flow")]
pub(crate) mod flow;
mod group_commit;
mod in_transaction;
#[cfg(feature = "flow")]
mod journal;
mod migrate;
#[cfg(feature = "outbox")]
mod outbox;
mod private_file;
mod readers;
mod records;
mod statements;
mod transaction;

pub(crate) use backend::OPENER;
pub use connection::{DEFAULT_WAIT, immediate, sqlite_error};
pub use db::SqliteDb;
pub use in_transaction::{sqlite_in_transaction, sqlite_in_transaction_async};
pub use readers::{DEFAULT_READERS, MAX_READERS};
pub use records::{SqliteRecords, read_from_row};
pub use transaction::{SqliteTx, run_in_savepoint, run_in_transaction};

//! SQLite: one file, WAL journal, `BEGIN IMMEDIATE` for every transaction
//! that writes, a busy timeout, and the same tables, primary keys and
//! one-transaction-per-order contract as PostgreSQL. Several processes may
//! share the file: SQLite admits one writer at a time, and `BEGIN
//! IMMEDIATE` takes the write lock before the first read, so a claim's
//! insert and the read of what the key holds see one consistent file.
//!
//! The store's clock is SQLite's own (`unixepoch('subsec')` inside each
//! statement). rusqlite is blocking: each call takes the store's one
//! connection on a blocking thread. New orders go through one writer
//! thread that commits every order waiting at that moment in one
//! transaction, each in its own savepoint (the `group_commit` module): one fsync
//! per batch instead of one per order.
//!
//! Every call's wait is bounded by one deadline (the server's
//! `--pool-wait`): first for the connection (a timed lock, waited for on
//! the blocking thread that will use it, so the connection passes from one
//! call to the next without a trip through the async runtime: the one
//! connection is the store's bottleneck, and a semaphore awaited before
//! `spawn_blocking` left it idle between calls, 0.67x the new orders per
//! second), then for another process's write lock (SQLite's busy timeout,
//! set to what is left of the deadline). Past it the call fails with
//! [`StoreError::Unavailable`] (503) before anything was written. The
//! server's `--max-in-flight` bounds the threads that wait.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OptionalExtension as _, TransactionBehavior, params};
use tracing::{info, warn};

use super::{PoolStatus, StoreError};

mod accounts;
mod charges;
mod group_commit;
mod orders;
mod outbox;
mod private_file;
mod readers;
mod records;
mod transaction;

pub use orders::enqueue;
pub use readers::{DEFAULT_READERS, MAX_READERS};
pub use records::SqliteRecords;
pub use transaction::run_in_transaction;

/// Versioned migrations, numbered as the PostgreSQL ones of the same tables.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("migrations/0001_init.sql")),
    (
        2,
        "idempotency_leases",
        include_str!("migrations/0002_idempotency_leases.sql"),
    ),
    (
        3,
        "one_records_table",
        include_str!("migrations/0003_one_records_table.sql"),
    ),
    (
        4,
        "token_management",
        include_str!("migrations/0004_token_management.sql"),
    ),
    (
        5,
        "account_first_keys",
        include_str!("migrations/0005_account_first_keys.sql"),
    ),
    (6, "payments", include_str!("migrations/0006_payments.sql")),
    (
        7,
        "provider_charges",
        include_str!("migrations/0007_provider_charges.sql"),
    ),
    (
        8,
        "provider_requests",
        include_str!("migrations/0008_provider_requests.sql"),
    ),
];

/// How long a call waits for the connection and another process's write
/// lock together (then 503), unless [`SqliteDb::open_with_wait`] says.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// The SQLite database.
#[derive(Clone)]
pub struct SqliteDb {
    path: Arc<PathBuf>,
    conn: Arc<Mutex<Connection>>,
    /// Calls waiting for `conn` (the pool gauge `waiting`).
    waiting: Arc<AtomicUsize>,
    /// Calls using `conn` (0 or 1; the pool gauge `available` is 1 minus it).
    busy: Arc<AtomicUsize>,
    /// The bound on a call's wait.
    wait: Duration,
    /// The writer that commits new orders in batches.
    group: group_commit::GroupCommit,
    /// Read-only connections for the calls that only read; `None` when
    /// there are none (those calls then take `conn`).
    readers: Option<Arc<readers::Readers>>,
}

impl std::fmt::Debug for SqliteDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDb")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteDb {
    /// Opens (creating if needed) the file at `path`, switches it to WAL and
    /// applies pending migrations; calls wait at most [`DEFAULT_WAIT`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with_wait(path, DEFAULT_WAIT).await
    }

    /// [`SqliteDb::open`], each call waiting at most `wait` for the
    /// connection and another process's write lock together, then failing
    /// with [`StoreError::Unavailable`] (answered 503).
    pub async fn open_with_wait(
        path: impl AsRef<Path>,
        wait: Duration,
    ) -> Result<Self, StoreError> {
        Self::open_with_readers(path, wait, DEFAULT_READERS).await
    }

    /// [`SqliteDb::open_with_wait`] with `readers` read-only connections for
    /// the calls that only read (0: every call takes the one write
    /// connection, as a new order's batch does; see the `readers` module).
    pub async fn open_with_readers(
        path: impl AsRef<Path>,
        wait: Duration,
        readers: usize,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let for_open = path.clone();
        // Migrations at start-up may wait for another process's longer.
        let (conn, readers) = tokio::task::spawn_blocking(move || {
            let conn = open_waiting(&for_open, wait.max(DEFAULT_WAIT))?;
            conn.busy_timeout(wait)?;
            // After the write connection: the file is in WAL mode and
            // migrated, which a read-only connection cannot do.
            let readers = match readers {
                0 => None,
                n => Some(Arc::new(readers::Readers::open(&for_open, n, wait)?)),
            };
            Ok((conn, readers))
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("open task: {e}")))?
        .map_err(sqlite_error)?;
        let conn = Arc::new(Mutex::new(conn));
        let busy = Arc::new(AtomicUsize::new(0));
        let group = group_commit::GroupCommit::start(Arc::clone(&conn), Arc::clone(&busy), wait)?;
        Ok(Self {
            path: Arc::new(path),
            conn,
            waiting: Arc::new(AtomicUsize::new(0)),
            busy,
            wait,
            group,
            readers,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection, for callers that run their own statements next to
    /// ours (e.g. [`crate::in_transaction`]); held for whole transactions.
    /// Locking it directly skips the bounded wait of the store's own calls
    /// (its busy timeout is still the store's wait).
    pub fn connection(&self) -> Arc<Mutex<Connection>> {
        Arc::clone(&self.conn)
    }

    /// Runs `f` with the connection on a blocking thread, waiting at most
    /// the store's wait (see the module docs).
    pub(super) async fn with_conn<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.with_conn_within(self.wait, f).await
    }

    /// [`SqliteDb::with_conn`] with its own bound on the wait (`/readyz`'s
    /// shorter one).
    pub(super) async fn with_conn_within<T, F>(&self, wait: Duration, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let deadline = Instant::now() + wait;
        let conn = Arc::clone(&self.conn);
        let (waiting, busy) = (Arc::clone(&self.waiting), Arc::clone(&self.busy));
        let full = self.wait;
        tokio::task::spawn_blocking(move || {
            let counted = Waiting::count(&waiting);
            let guard = conn.try_lock_for(wait);
            drop(counted);
            let Some(mut guard) = guard else {
                warn!("no SQLite connection within the wait");
                return Err(StoreError::Unavailable("connection wait timed out".into()));
            };
            let _using = Waiting::count(&busy);
            // Another process's write lock may take only what is left.
            let left = deadline.saturating_duration_since(Instant::now());
            guard.busy_timeout(left).map_err(sqlite_error)?;
            let result = f(&mut guard);
            // Direct users of `connection()` get the store's whole wait.
            guard.busy_timeout(full).map_err(sqlite_error)?;
            result
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("blocking task: {e}")))?
    }

    /// Runs `f`, which only reads, on a read-only connection (the write
    /// connection when the store has none), waiting at most the store's
    /// wait for one; every statement sees every commit acknowledged before
    /// it started.
    pub(super) async fn with_reader<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.with_reader_within(self.wait, f).await
    }

    /// [`SqliteDb::with_reader`] with its own bound on the wait.
    pub(super) async fn with_reader_within<T, F>(
        &self,
        wait: Duration,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let Some(readers) = self.readers.clone() else {
            return self.with_conn_within(wait, move |conn| f(conn)).await;
        };
        let deadline = Instant::now() + wait;
        tokio::task::spawn_blocking(move || {
            readers
                .with(deadline, |conn| {
                    let left = deadline.saturating_duration_since(Instant::now());
                    conn.busy_timeout(left).map_err(sqlite_error)?;
                    f(conn)
                })
                .unwrap_or_else(|| {
                    warn!("no SQLite reader within the wait");
                    Err(StoreError::Unavailable("reader wait timed out".into()))
                })
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("blocking task: {e}")))?
    }

    /// `(batches, orders)` of new orders group-committed so far.
    pub fn order_batches(&self) -> (u64, u64) {
        self.group.committed()
    }

    pub(super) fn pool_status(&self) -> PoolStatus {
        // The write connection and the readers, all open for the store's
        // life.
        let (readers, idle, waiting) = self
            .readers
            .as_ref()
            .map_or((0, 0, 0), |readers| readers.status());
        PoolStatus {
            max_size: 1 + readers,
            size: 1 + readers,
            available: 1 - self.busy.load(Ordering::Relaxed).min(1) + idle,
            waiting: self.waiting.load(Ordering::Relaxed) + self.group.queued() + waiting,
        }
    }

    /// `/readyz`: the versions not applied, read under the write lock, so a
    /// write lock that another process holds past `within` makes the store
    /// not ready (a plain read would still succeed in WAL mode while every
    /// order fails).
    pub(super) async fn ready(&self, within: Duration) -> Result<Vec<i64>, StoreError> {
        self.with_conn_within(within, |conn| {
            let tx = immediate(conn)?;
            let pending = pending_in(&tx)?;
            tx.rollback().map_err(sqlite_error)?;
            Ok(pending)
        })
        .await
    }

    pub(super) fn close(&self) {}

    pub(super) async fn pending_migrations(&self) -> Result<Vec<i64>, StoreError> {
        self.with_conn(|conn| pending_in(conn)).await
    }

    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        self.with_conn(|conn| {
            conn.query_row("SELECT 1", [], |_| Ok(()))
                .map_err(sqlite_error)
        })
        .await
    }
}

/// One call counted in one of [`SqliteDb`]'s gauges while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::Relaxed);
        Self(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The versions of [`MIGRATIONS`] that `conn`'s file has not applied.
fn pending_in(conn: &Connection) -> Result<Vec<i64>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT version FROM schema_migrations")
        .map_err(sqlite_error)?;
    let applied = stmt
        .query_map([], |row| row.get::<_, i64>(0))
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(sqlite_error)?;
    Ok(MIGRATIONS
        .iter()
        .map(|(version, _, _)| *version)
        .filter(|version| !applied.contains(version))
        .collect())
}

/// `BEGIN IMMEDIATE`: the write lock before the first read.
pub(super) fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, StoreError> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite_error)
}

/// [`open_connection`], tried again for up to `wait` while
/// another process holds a lock that SQLite reports at once instead of
/// waiting for: switching a new file to WAL upgrades a read lock to an
/// exclusive one, and SQLite never runs the busy handler for such an upgrade
/// (it could deadlock), so two processes opening one new file at once could
/// fail with `SQLITE_BUSY` in a millisecond.
fn open_waiting(path: &Path, wait: Duration) -> Result<Connection, rusqlite::Error> {
    let deadline = Instant::now() + wait;
    loop {
        match open_connection(path, wait) {
            Err(err) if is_busy(&err) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Whether another connection's lock made a statement fail.
fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Opens an SQLite file the way every idemkey store does (created 0600, busy
/// timeout, WAL, `synchronous = FULL` so a commit survives a power loss,
/// foreign keys on)
/// and applies the migrations not yet recorded in `schema_migrations`, under
/// the write lock, so two processes starting at once migrate once.
fn open_connection(path: &Path, wait: Duration) -> Result<Connection, rusqlite::Error> {
    private_file::ensure_private(path).map_err(|e| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("cannot create the file with mode 0600: {e}")),
        )
    })?;
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(wait)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        warn!(mode, "SQLite did not switch to WAL");
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    // One plan per statement whatever its bound values: without this, a
    // statement whose plan considered a bound value (e.g. against a partial
    // index's WHERE) is parsed and planned again after every bind, which
    // halved the replay rate of a cached read.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY,
             name TEXT NOT NULL,
             applied_at INTEGER NOT NULL DEFAULT (unixepoch()))",
    )?;
    for (version, name, sql) in MIGRATIONS {
        let done = tx
            .query_row(
                "SELECT 1 FROM schema_migrations WHERE version = ?1",
                [version],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if done {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (?1, ?2)",
            params![version, name],
        )?;
        info!(version, name, "applied SQLite migration");
    }
    tx.commit()?;
    Ok(conn)
}

/// Maps an SQLite error by its code, never by message text: a lock held
/// past the busy timeout is overload (503), like every other failure.
pub(crate) fn sqlite_error(err: rusqlite::Error) -> StoreError {
    let code = err.sqlite_error_code();
    if is_busy(&err) {
        warn!("SQLite write lock wait timed out");
        return StoreError::Unavailable("database is busy".into());
    }
    warn!(code = ?code, error = %err, "SQLite error");
    StoreError::Unavailable(format!("sqlite: {code:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new file in rollback mode whose write lock another connection
    /// holds for 300 ms, then releases.
    fn writer_for_a_moment(path: &Path) -> std::thread::JoinHandle<()> {
        let writer = Connection::open(path).expect("open");
        writer
            .execute_batch("CREATE TABLE t (x); BEGIN IMMEDIATE; INSERT INTO t VALUES (1);")
            .expect("write transaction");
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            writer.execute_batch("COMMIT").expect("commit");
        })
    }

    fn new_file() -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("idemkey-open-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.db");
        (dir, path)
    }

    #[test]
    fn switching_to_wal_under_a_writer_fails_without_waiting() {
        // The lock is gone after 300 ms, well inside the busy timeout, yet
        // the plain open fails: SQLite did not wait.
        let (dir, path) = new_file();
        let writer = writer_for_a_moment(&path);
        let err = open_connection(&path, DEFAULT_WAIT).expect_err("busy under the writer");
        assert!(is_busy(&err), "{err}");
        writer.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn opening_waits_for_the_writer_instead_of_failing() {
        let (dir, path) = new_file();
        let writer = writer_for_a_moment(&path);
        open_waiting(&path, DEFAULT_WAIT).expect("open once the writer is done");
        writer.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

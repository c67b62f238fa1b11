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

use super::migrations::{self, Known, Migration};
use super::{PoolStatus, StoreError, StoreSettings, Tables};

mod group_commit;
#[cfg(feature = "outbox")]
mod outbox;
mod private_file;
mod readers;
mod records;
mod transaction;

#[cfg(feature = "outbox")]
pub use outbox::enqueue;
pub use readers::{DEFAULT_READERS, MAX_READERS};
pub use records::SqliteRecords;
pub use transaction::{run_in_savepoint, run_in_transaction};

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
    tables: Tables,
    sql: Arc<records::Statements>,
    known: Known,
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
    /// applies the library's pending migrations; calls wait at most
    /// [`DEFAULT_WAIT`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with_wait(path, DEFAULT_WAIT).await
    }

    /// Opens the file with `settings` (the wait is `pool_wait`, the readers
    /// `sqlite_readers`, the table names `tables`) without migrating.
    pub async fn connect(
        path: impl AsRef<Path>,
        settings: &StoreSettings,
    ) -> Result<Self, StoreError> {
        Self::open_unmigrated(
            path,
            settings.pool_wait,
            settings.sqlite_readers,
            settings.tables.clone(),
        )
        .await
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
        let db = Self::open_unmigrated(path, wait, readers, Tables::default()).await?;
        db.migrate().await?;
        Ok(db)
    }

    async fn open_unmigrated(
        path: impl AsRef<Path>,
        wait: Duration,
        readers: usize,
        tables: Tables,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let for_open = path.clone();
        // Migrations at start-up may wait for another process's longer.
        let (conn, readers) = tokio::task::spawn_blocking(move || {
            let conn = open_waiting(&for_open, wait.max(DEFAULT_WAIT))?;
            conn.busy_timeout(wait)?;
            // After the write connection: the file exists in WAL mode,
            // which a read-only connection cannot make it.
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
            sql: Arc::new(records::Statements::new(&tables)),
            tables,
            known: Known::default(),
        })
    }

    /// Applies the library's pending migrations (see
    /// [`crate::store::migrations`]).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(&migrations::library(
            include_str!("migrations/records_0001.sql"),
            include_str!("migrations/outbox_0001.sql"),
        ))
        .await
    }

    /// Applies the pending migrations of `list` in one `BEGIN IMMEDIATE`
    /// transaction (the file's write lock serialises processes starting at
    /// once). An application runs its own components through it; the
    /// store's readiness check then covers them too.
    pub async fn migrate_with(&self, list: &[Migration]) -> Result<(), StoreError> {
        self.known.add(list);
        let list = list.to_vec();
        let tables = self.tables.clone();
        // Migrations may wait for another process's longer than a request.
        self.with_conn_within(self.wait.max(DEFAULT_WAIT), move |conn| {
            migrate_in(conn, &tables, &list).map_err(sqlite_error)
        })
        .await
    }

    /// The names of the library's tables in this file.
    pub fn tables(&self) -> &Tables {
        &self.tables
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
    pub async fn with_conn<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.with_conn_within(self.wait, f).await
    }

    /// [`SqliteDb::with_conn`] with its own bound on the wait (`/readyz`'s
    /// shorter one).
    pub async fn with_conn_within<T, F>(&self, wait: Duration, f: F) -> Result<T, StoreError>
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
    /// Runs `f` with a read-only connection (the write connection when
    /// there are none) on a blocking thread, waiting at most the store's
    /// wait.
    pub async fn with_reader<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.with_reader_within(self.wait, f).await
    }

    /// [`SqliteDb::with_reader`] with its own bound on the wait.
    /// [`SqliteDb::with_reader`] with its own bound on the wait.
    pub async fn with_reader_within<T, F>(&self, wait: Duration, f: F) -> Result<T, StoreError>
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
    pub fn group_commits(&self) -> (u64, u64) {
        self.group.committed()
    }

    /// Runs `work` in a savepoint of the next group-committed transaction
    /// (see the `group_commit` module), waiting at most the store's wait
    /// before it starts, and answers once that transaction committed: many
    /// writers, one fsync. `work` takes its own savepoint on the open
    /// transaction if it must be able to fail alone.
    pub async fn group_commit<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut rusqlite::Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.group.submit(self.wait, work).await
    }

    /// The records of `conn` in this store's tables.
    pub fn records<'a>(&self, conn: &'a Connection) -> SqliteRecords<'a> {
        SqliteRecords::of(self, conn)
    }

    /// The connection figures (one writer).
    pub fn pool_status(&self) -> PoolStatus {
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
    /// `/readyz`'s question on SQLite: the pending migrations, read under
    /// the write lock (a lock another process holds past `within` means not
    /// ready).
    pub async fn ready(&self, within: Duration) -> Result<Vec<String>, StoreError> {
        let (tables, known) = (self.tables.clone(), self.known.all());
        self.with_conn_within(within, move |conn| {
            let tx = immediate(conn)?;
            let pending = pending_in(&tx, &tables, &known)?;
            tx.rollback().map_err(sqlite_error)?;
            Ok(pending)
        })
        .await
    }

    /// Nothing to close: the connections end with the last clone.
    pub fn close(&self) {}

    /// The migrations this store was asked to apply that the file has not
    /// applied, as `component/version`.
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        let (tables, known) = (self.tables.clone(), self.known.all());
        self.with_conn(move |conn| pending_in(conn, &tables, &known))
            .await
    }

    /// Checks that the file answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
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

/// The migrations of `known` that `conn`'s file has not applied.
fn pending_in(
    conn: &Connection,
    tables: &Tables,
    known: &[Migration],
) -> Result<Vec<String>, StoreError> {
    let applied = applied_in(conn, &tables.migrations()).map_err(sqlite_error)?;
    Ok(known
        .iter()
        .filter(|m| {
            !applied
                .iter()
                .any(|(c, v)| c == m.component && *v == m.version)
        })
        .map(Migration::label)
        .collect())
}

/// The `(component, version)` pairs applied; none before the bookkeeping
/// table exists.
fn applied_in(conn: &Connection, book: &str) -> rusqlite::Result<Vec<(String, i32)>> {
    let exists = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [book],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(&format!("SELECT component, version FROM {book}"))?;
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect()
}

/// Applies `list`'s pending migrations in one `BEGIN IMMEDIATE` transaction.
fn migrate_in(conn: &mut Connection, tables: &Tables, list: &[Migration]) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let book = tables.migrations();
    tx.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {book} (
             component TEXT NOT NULL,
             version INTEGER NOT NULL,
             name TEXT NOT NULL,
             adopted INTEGER NOT NULL DEFAULT 0,
             applied_at INTEGER NOT NULL DEFAULT (unixepoch()),
             PRIMARY KEY (component, version))"
    ))?;
    let applied = applied_in(&tx, &book)?;
    for m in list {
        if applied
            .iter()
            .any(|(c, v)| c == m.component && *v == m.version)
        {
            continue;
        }
        let adopted = match m.adopt {
            Some(adopt) => adoptable(&tx, tables, adopt)?,
            None => false,
        };
        if !adopted {
            tx.execute_batch(&tables.render(m.sql))?;
        }
        tx.execute(
            &format!(
                "INSERT INTO {book} (component, version, name, adopted) VALUES (?1, ?2, ?3, ?4)"
            ),
            params![m.component, m.version, m.name, adopted],
        )?;
        info!(
            migration = m.label(),
            name = m.name,
            adopted,
            "applied SQLite migration"
        );
    }
    tx.commit()
}

/// Whether `adopt`'s table exists with its marker column; a table of that
/// name without it is someone else's.
fn adoptable(
    conn: &Connection,
    tables: &Tables,
    adopt: migrations::Adopt,
) -> rusqlite::Result<bool> {
    let table = tables.render(adopt.table);
    let exists = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [&table],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !exists {
        return Ok(false);
    }
    let marked = conn
        .query_row(
            "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
            params![table, adopt.column],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if marked {
        Ok(true)
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(format!(
                "table {table} exists but was not made by idemkey: choose a table prefix"
            )),
        ))
    }
}

/// `BEGIN IMMEDIATE`: the write lock before the first read.
/// Starts a `BEGIN IMMEDIATE` transaction (the write lock first).
pub fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, StoreError> {
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
    let conn = Connection::open(path)?;
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
    Ok(conn)
}

/// Maps an SQLite error by its code, never by message text: a lock held
/// past the busy timeout is overload (503), like every other failure.
pub fn sqlite_error(err: rusqlite::Error) -> StoreError {
    let code = err.sqlite_error_code();
    if is_busy(&err) {
        warn!("SQLite write lock wait timed out");
        return StoreError::Unavailable("database is busy".into());
    }
    warn!(code = ?code, error = %err, "SQLite error");
    match code {
        Some(ErrorCode::ConstraintViolation) => StoreError::Conflict(format!("sqlite: {code:?}")),
        Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt(err.to_string()),
        _ => StoreError::Unavailable(format!("sqlite: {code:?}")),
    }
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

//! [`SqliteDb`]: the write connection, its group commit, the read-only
//! connections and the bound on every call's wait.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::Connection;
use tracing::warn;

use super::connection::{DEFAULT_WAIT, Waiting, immediate, open_waiting, sqlite_error};
use super::migrate::{migrate_in, pending_in};
use super::statements::Statements;
use super::{group_commit, readers};
use crate::error::StoreError;
use crate::store::migrations::{self, Known, Migration};
use crate::store::{PoolStatus, StoreSettings, Tables};

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
    /// The writer that commits new requests in batches.
    group: group_commit::GroupCommit,
    /// Read-only connections for the calls that only read; `None` when
    /// there are none (those calls then take `conn`).
    readers: Option<Arc<readers::Readers>>,
    pub(super) tables: Tables,
    pub(super) sql: Arc<Statements>,
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
        Self::open_with_readers(path, wait, readers::DEFAULT_READERS).await
    }

    /// [`SqliteDb::open_with_wait`] with `readers` read-only connections for
    /// the calls that only read (0: every call takes the one write
    /// connection, as a new request's batch does; see the `readers` module).
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
            sql: Arc::new(Statements::new(&tables)),
            tables,
            known: Known::default(),
        })
    }

    /// Applies the library's pending migrations (see
    /// [`crate::store::migrations`]).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(&Self::library_migrations()).await
    }

    /// The library's own migrations on this backend: an application that
    /// migrates its tables too passes them with its own to one
    /// `migrate_with`, so one transaction applies all or none.
    pub fn library_migrations() -> Vec<Migration> {
        migrations::library(
            (
                include_str!("migrations/records_0001.sql"),
                &[(
                    "status check without an IN list",
                    include_str!("migrations/records_0002.sql"),
                )],
            ),
            (
                include_str!("migrations/outbox_0001.sql"),
                &[
                    (
                        "flow-step index",
                        include_str!("migrations/outbox_0002.sql"),
                    ),
                    (
                        "status check without an IN list",
                        include_str!("migrations/outbox_0003.sql"),
                    ),
                ],
            ),
            (
                include_str!("migrations/steps_0001.sql"),
                &[(
                    "state checks without an IN list",
                    include_str!("migrations/steps_0002.sql"),
                )],
            ),
            &["id"],
        )
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

    /// `(batches, requests)` of new requests group-committed so far.
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

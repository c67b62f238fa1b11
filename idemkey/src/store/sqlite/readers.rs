//! Read-only connections on the store's file, for the calls that only read
//! (order reads, key lookups, the authentication they carry, the outbox's
//! figures for `/metrics`). In WAL mode a reader neither waits for the
//! writer nor makes it wait, so these calls go on while a batch of new
//! orders holds the write connection (or another process holds the file's
//! write lock).
//!
//! Each connection is opened `SQLITE_OPEN_READ_ONLY` (SQLite itself refuses
//! any write on it) and lent to one call at a time, with the same bounded
//! wait as the write connection (then 503). A reader runs in autocommit
//! mode: every statement is its own read transaction, so it sees every
//! commit acknowledged before it started, in this process or another; a
//! call that leaves a transaction open has it rolled back before the
//! connection is lent again, so no snapshot outlives its call.
//!
//! `POST /orders` does not read its key on a reader before queueing for
//! the writer: that read cost every new order one more statement and, on
//! the measured machine, about 12 % of new orders per second, while the
//! replay cache already answers repeated replays without the database. A
//! replay the cache misses is answered in the writer's batch, as before.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use tracing::warn;

use super::connection::Waiting;

/// Read-only connections by default (`--sqlite-readers`): two lets a page
/// of orders and a lookup go on at once without many idle file handles.
pub const DEFAULT_READERS: usize = crate::store::settings::DEFAULT_SQLITE_READERS;

/// Most read-only connections `--sqlite-readers` accepts: each holds a
/// file handle and a page cache, and a few already serve more reads than
/// the requests the server runs at once.
pub const MAX_READERS: usize = 64;

/// A small pool of read-only connections.
pub(super) struct Readers {
    idle: Mutex<Vec<Connection>>,
    freed: Condvar,
    size: usize,
    /// Calls waiting for a reader (added to the pool gauge `waiting`).
    waiting: AtomicUsize,
}

impl Readers {
    /// Opens `size` read-only connections on `path` (a file the write
    /// connection has already opened, switched to WAL and migrated).
    pub(super) fn open(path: &Path, size: usize, wait: Duration) -> rusqlite::Result<Self> {
        let idle = (0..size)
            .map(|_| open_reader(path, wait))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(Self {
            idle: Mutex::new(idle),
            freed: Condvar::new(),
            size,
            waiting: AtomicUsize::new(0),
        })
    }

    /// `(size, idle, waiting)` for the pool gauges.
    pub(super) fn status(&self) -> (usize, usize, usize) {
        (
            self.size,
            self.idle.lock().len(),
            self.waiting.load(Ordering::Relaxed),
        )
    }

    /// Runs `f` on an idle reader, waiting until `deadline` for one; `None`
    /// when none came free in time. Blocking: call it on a blocking thread.
    pub(super) fn with<T>(&self, deadline: Instant, f: impl FnOnce(&Connection) -> T) -> Option<T> {
        let conn = {
            let counted = Waiting::count(&self.waiting);
            let mut idle = self.idle.lock();
            loop {
                if let Some(conn) = idle.pop() {
                    break conn;
                }
                if self.freed.wait_until(&mut idle, deadline).timed_out() && idle.is_empty() {
                    drop(counted);
                    return None;
                }
            }
        };
        let lent = Lent {
            readers: self,
            conn: Some(conn),
        };
        Some(f(lent.conn.as_ref()?))
    }
}

/// A reader out of the pool; goes back when dropped, even if its call
/// panicked.
struct Lent<'a> {
    readers: &'a Readers,
    conn: Option<Connection>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if !conn.is_autocommit() {
            // A read transaction left open would pin an old snapshot for
            // the next call (and keep the WAL from being checkpointed).
            if let Err(err) = conn.execute_batch("ROLLBACK") {
                warn!(error = %err, "could not end a reader's transaction; closing it");
                return;
            }
        }
        self.readers.idle.lock().push(conn);
        self.readers.freed.notify_one();
    }
}

/// One read-only connection: SQLite refuses writes on it (`SQLITE_READONLY`)
/// whatever the statement; the write connection's busy timeout and
/// one-plan-per-statement setting (QPSG); no migrations, no journal mode
/// (both are the write connection's, already done).
pub(super) fn open_reader(path: &Path, wait: Duration) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(wait)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::ErrorCode;

    fn new_file() -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("idemkey-readers-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);",
            )
            .unwrap();
        (dir, path)
    }

    #[test]
    fn a_reader_cannot_write() {
        let (dir, path) = new_file();
        let reader = open_reader(&path, Duration::from_secs(1)).unwrap();
        for sql in [
            "INSERT INTO t VALUES (2)",
            "UPDATE t SET x = 3",
            "DELETE FROM t",
            "CREATE TABLE u (y)",
        ] {
            let err = reader.execute(sql, []).expect_err(sql);
            assert_eq!(
                err.sqlite_error_code(),
                Some(ErrorCode::ReadOnly),
                "{sql}: {err}"
            );
        }
        let n: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1, "the reader reads, and nothing was written");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reader_sees_each_commit_and_keeps_no_snapshot_across_calls() {
        let (dir, path) = new_file();
        let readers = Readers::open(&path, 1, Duration::from_secs(1)).unwrap();
        let deadline = || Instant::now() + Duration::from_secs(1);
        let count = |conn: &Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap()
        };
        // A call that leaves its read transaction open.
        let first = readers
            .with(deadline(), |conn| {
                conn.execute_batch("BEGIN").unwrap();
                count(conn)
            })
            .unwrap();
        assert_eq!(first, 1);
        Connection::open(&path)
            .unwrap()
            .execute("INSERT INTO t VALUES (2)", [])
            .unwrap();
        let second = readers.with(deadline(), count).unwrap();
        assert_eq!(
            second, 2,
            "the next call sees the commit made after the first"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_call_waits_for_a_busy_reader_at_most_until_its_deadline() {
        let (dir, path) = new_file();
        let readers = Readers::open(&path, 1, Duration::from_secs(1)).unwrap();
        let inner = readers.with(Instant::now() + Duration::from_secs(1), |_| {
            readers.with(Instant::now() + Duration::from_millis(50), |_| ())
        });
        assert_eq!(
            inner,
            Some(None),
            "no second reader while the only one is lent"
        );
        assert_eq!(
            readers.status(),
            (1, 1, 0),
            "the reader is back, nobody waits"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Opening a connection (WAL, `synchronous=FULL`, a busy timeout), the
//! write transaction every write starts with, and SQLite's errors as
//! [`StoreError`]s.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use tracing::warn;

use super::private_file;
use crate::error::StoreError;

/// How long a call waits for the connection and another process's write
/// lock together (then 503), unless [`SqliteDb::open_with_wait`](super::SqliteDb::open_with_wait) says.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// One call counted in one of [`SqliteDb`]'s gauges while it lives.
pub(super) struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    pub(super) fn count(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::Relaxed);
        Self(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

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
pub(super) fn open_waiting(path: &Path, wait: Duration) -> Result<Connection, rusqlite::Error> {
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
/// foreign keys on); migrations are the runner's business (`migrate.rs`).
pub(super) fn open_connection(path: &Path, wait: Duration) -> Result<Connection, rusqlite::Error> {
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
    // A row a reader found malformed (see `corrupt_in_row`) stays corrupt.
    if let rusqlite::Error::FromSqlConversionFailure(_, _, inner) = &err
        && let Some(StoreError::Corrupt(what)) = inner.downcast_ref::<StoreError>()
    {
        return StoreError::Corrupt(what.clone());
    }
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

/// A store error raised inside a row's mapping, carried through rusqlite's
/// error so that [`sqlite_error`] gives it back unchanged.
pub(crate) fn corrupt_in_row(err: StoreError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Null, Box::new(err))
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

    fn new_file() -> (std::path::PathBuf, std::path::PathBuf) {
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

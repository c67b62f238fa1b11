//! PostgreSQL's errors as [`StoreError`]s.

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;
use tracing::warn;

use super::tls;
use crate::error::StoreError;

/// Maps a database error by SQLSTATE (never by message text): a lock
/// timeout, a constraint's refusal ([`StoreError::Conflict`]) or a passing
/// failure. The message goes to the log without the server's DETAIL, which
/// may quote row values. Public for statements of your own next to ours.
pub fn db_error(err: tokio_postgres::Error) -> StoreError {
    if let Some(db) = err.as_db_error() {
        if *db.code() == SqlState::LOCK_NOT_AVAILABLE {
            return StoreError::LockTimeout;
        }
        if *db.code() == SqlState::UNIQUE_VIOLATION || *db.code() == SqlState::CHECK_VIOLATION {
            warn!(sqlstate = db.code().code(), "constraint refused a write");
            return StoreError::Conflict(format!("{}: {}", db.code().code(), db.message()));
        }
        warn!(
            sqlstate = db.code().code(),
            message = db.message(),
            "database error"
        );
        return StoreError::Unavailable(format!("{}: {}", db.code().code(), db.message()));
    }
    let message = tls::describe(&err);
    warn!(closed = err.is_closed(), error = %message, "database connection error");
    StoreError::Unavailable(message)
}

pub(super) fn pool_error(err: PoolError) -> StoreError {
    match err {
        PoolError::Backend(e) => db_error(e),
        other => {
            warn!(error = %other, "connection pool error");
            StoreError::Unavailable(other.to_string())
        }
    }
}

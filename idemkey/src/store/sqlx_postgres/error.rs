//! sqlx's errors as [`StoreError`]s.

use tracing::warn;

use crate::error::StoreError;

/// Maps an sqlx error by SQLSTATE (never by message text): a lock timeout,
/// a constraint's refusal ([`StoreError::Conflict`]) or a passing failure.
/// Public for statements of your own next to ours.
pub fn sqlx_error(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            match code.as_str() {
                "55P03" => StoreError::LockTimeout,
                "23505" | "23514" => {
                    warn!(sqlstate = code, "constraint refused a write");
                    StoreError::Conflict(format!("{code}: {}", db.message()))
                }
                _ => {
                    warn!(sqlstate = code, message = db.message(), "database error");
                    StoreError::Unavailable(format!("{code}: {}", db.message()))
                }
            }
        }
        sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::Decode(_) => StoreError::Corrupt(format!("malformed row: {err}")),
        _ => {
            warn!(error = %err, "database connection error");
            StoreError::Unavailable(err.to_string())
        }
    }
}

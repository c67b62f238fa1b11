//! The records store on sqlx: the tokio-postgres backend's statements
//! (its `.sql` files) on one connection, as the pool's own [`Records`]
//! (each call one statement, in a transaction of its own behind a
//! transaction pooler) and as [`SqlxPgRecords`], bound to an open
//! transaction of yours.

use std::time::Duration;

use idemkey_core::UnixMillis;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use time::OffsetDateTime;
use tokio::sync::Mutex;
use uuid::Uuid;

use super::db::{SqlxPgDb, Statements};
use super::error::sqlx_error;
use super::send::query;
#[cfg(feature = "flow")]
use super::send::rendered;
use crate::duration::millis;
use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse, TrimReport,
    state_name,
};
use crate::store::StoreError;
use crate::store::stored::{RecordRow, malformed, read_record};

/// The statements of one store and how to send them.
#[derive(Clone, Copy)]
pub(super) struct On<'a> {
    pub(super) sql: &'a Statements,
    pub(super) persistent: bool,
}

impl On<'_> {
    async fn claim(
        self,
        conn: &mut PgConnection,
        key: &RecordKey,
        claim: &NewClaim,
    ) -> Result<Claimed, StoreError> {
        let inserted = query(&self.sql.claim, self.persistent)
            .bind(key.scope.as_str())
            .bind(key.operation.as_str())
            .bind(key.key.as_str())
            .bind(&claim.fingerprint.as_bytes()[..])
            .bind(claim.token.0)
            .bind(millis(claim.lease))
            .bind(millis(claim.replay_ttl))
            .fetch_optional(&mut *conn)
            .await
            .map_err(sqlx_error)?;
        match inserted {
            Some(_) => Ok(Claimed::Won),
            None => Ok(Claimed::Taken(self.read(conn, key).await?)),
        }
    }

    async fn read(self, conn: &mut PgConnection, key: &RecordKey) -> Result<Read, StoreError> {
        let row = query(&self.sql.read, self.persistent)
            .bind(key.scope.as_str())
            .bind(key.operation.as_str())
            .bind(key.key.as_str())
            .fetch_one(conn)
            .await
            .map_err(sqlx_error)?;
        read_from_row(&row)
    }

    async fn take_over(
        self,
        conn: &mut PgConnection,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let done = query(&self.sql.take_over, self.persistent)
            .bind(key.scope.as_str())
            .bind(key.operation.as_str())
            .bind(key.key.as_str())
            .bind(&claim.fingerprint.as_bytes()[..])
            .bind(claim.token.0)
            .bind(millis(claim.lease))
            .bind(previous.token.0)
            .bind(state_name(&previous.stored))
            .bind(millis(claim.replay_ttl))
            .execute(conn)
            .await
            .map_err(sqlx_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn complete(
        self,
        conn: &mut PgConnection,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let done = query(&self.sql.complete, self.persistent)
            .bind(key.scope.as_str())
            .bind(key.operation.as_str())
            .bind(key.key.as_str())
            .bind(token.0)
            .bind(millis(replay_ttl))
            .bind(i32::from(response.status))
            .bind(response.headers_json())
            .bind(response.body.as_deref())
            .bind(resource_id)
            .execute(conn)
            .await
            .map_err(sqlx_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(
        self,
        conn: &mut PgConnection,
        key: &RecordKey,
        token: ClaimToken,
    ) -> Result<bool, StoreError> {
        let done = query(&self.sql.release, self.persistent)
            .bind(key.scope.as_str())
            .bind(key.operation.as_str())
            .bind(key.key.as_str())
            .bind(token.0)
            .execute(conn)
            .await
            .map_err(sqlx_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn trim(
        self,
        conn: &mut PgConnection,
        retention: Duration,
        batch: u32,
    ) -> Result<TrimReport, StoreError> {
        let row = query(&self.sql.trim, self.persistent)
            .bind(millis(retention))
            .bind(i64::from(batch))
            .fetch_one(conn)
            .await
            .map_err(sqlx_error)?;
        let count = |name: &str| -> Result<u64, StoreError> {
            let n: i64 = row.try_get(name).map_err(sqlx_error)?;
            Ok(n.unsigned_abs())
        };
        Ok(TrimReport {
            trimmed: count("trimmed")?,
            deleted: count("deleted")?,
            rescheduled: count("rescheduled")?,
        })
    }
}

/// A timestamp of the database as milliseconds since the epoch (0 before
/// it).
pub(super) fn unix_millis(t: OffsetDateTime) -> UnixMillis {
    UnixMillis(u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
}

/// The store's clock and the record (if any) from a row that selects `now`
/// and the records table's columns by name (as `read.sql` does).
fn read_from_row(row: &PgRow) -> Result<Read, StoreError> {
    read_record(&SqlxRow(row))
}

/// An sqlx row as the one record decoder reads it.
struct SqlxRow<'r>(&'r PgRow);

impl SqlxRow<'_> {
    fn get<'a, T>(&'a self, column: &str) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'a, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        self.0.try_get(column).map_err(|_| malformed(column))
    }
}

impl RecordRow for SqlxRow<'_> {
    fn time(&self, column: &str) -> Result<Option<UnixMillis>, StoreError> {
        Ok(self.get::<Option<OffsetDateTime>>(column)?.map(unix_millis))
    }
    fn bytes(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(column)
    }
    fn text(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column)
    }
    fn int(&self, column: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.get::<Option<i32>>(column)?.map(i64::from))
    }
    fn uuid(&self, column: &str) -> Result<Option<Uuid>, StoreError> {
        self.get(column)
    }
}

/// The records of an open transaction (or any connection) of yours, in
/// the tables of a [`SqlxPgDb`]: with [`crate::in_transaction::in_transaction`],
/// the claim, your effect and the stored response commit with your
/// transaction. Statements go as the store's pooler requires.
pub struct SqlxPgRecords<'c> {
    conn: Mutex<&'c mut PgConnection>,
    on: On<'c>,
}

impl std::fmt::Debug for SqlxPgRecords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlxPgRecords").finish_non_exhaustive()
    }
}

impl<'c> SqlxPgRecords<'c> {
    /// The records of `conn` (e.g. `&mut *tx` of a `sqlx::Transaction`)
    /// in `db`'s tables.
    pub fn of(db: &'c SqlxPgDb, conn: &'c mut PgConnection) -> Self {
        Self {
            conn: Mutex::new(conn),
            on: db.on(),
        }
    }

    /// The connection, for a caller's statements between the engine's
    /// (never held across one of them).
    pub(super) async fn lock(&self) -> tokio::sync::MutexGuard<'_, &'c mut PgConnection> {
        self.conn.lock().await
    }
}

impl SqlxPgDb {
    pub(super) fn on(&self) -> On<'_> {
        On {
            sql: &self.sql,
            persistent: self.persistent(),
        }
    }
}

impl Records for SqlxPgRecords<'_> {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        self.on
            .claim(&mut **self.conn.lock().await, key, claim)
            .await
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        self.on.read(&mut **self.conn.lock().await, key).await
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn.lock().await;
        self.on.take_over(&mut conn, key, previous, claim).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn.lock().await;
        self.on
            .complete(&mut conn, key, token, response, replay_ttl, resource_id)
            .await
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        self.on
            .release(&mut **self.conn.lock().await, key, token)
            .await
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        self.on
            .trim(&mut **self.conn.lock().await, retention, batch)
            .await
    }
}

/// The pool's records: each call takes a connection for one statement
/// (in a transaction of its own behind a transaction pooler).
impl Records for SqlxPgDb {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let mut s = self.session().await?;
        let claimed = self.on().claim(s.conn(), key, claim).await?;
        s.finish().await?;
        Ok(claimed)
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        let mut s = self.session().await?;
        let read = self.on().read(s.conn(), key).await?;
        s.finish().await?;
        Ok(read)
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let mut s = self.session().await?;
        let done = self.on().take_over(s.conn(), key, previous, claim).await?;
        s.finish().await?;
        Ok(done)
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut s = self.session().await?;
        let done = self
            .on()
            .complete(s.conn(), key, token, response, replay_ttl, resource_id)
            .await?;
        s.finish().await?;
        Ok(done)
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        let mut s = self.session().await?;
        let done = self.on().release(s.conn(), key, token).await?;
        s.finish().await?;
        Ok(done)
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        let mut s = self.session().await?;
        #[allow(unused_mut)]
        let mut report = self.on().trim(s.conn(), retention, batch).await?;
        #[cfg(feature = "flow")]
        {
            report.deleted += trim_flows(self, s.conn(), retention, batch).await?;
        }
        s.finish().await?;
        Ok(report)
    }
}

/// The executions of the step journal that ended longer than `$1` ms ago,
/// up to `$2` of them (their steps with them).
#[cfg(feature = "flow")]
const TRIM: &str = include_str!("../postgres/sql/journal_trim.sql");

/// The step journal's part of a trim: deletes up to `batch` executions
/// that ended longer than `retention` ago (their steps with them), at the
/// database's clock; how many.
#[cfg(feature = "flow")]
async fn trim_flows(
    db: &SqlxPgDb,
    conn: &mut PgConnection,
    retention: std::time::Duration,
    batch: u32,
) -> Result<u64, StoreError> {
    query(&rendered(db.tables(), TRIM), db.persistent())
        .bind(millis(retention))
        .bind(i64::from(batch))
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
        .map_err(sqlx_error)
}

//! The records store on SQLite: [`SqliteRecords`] over a connection or an
//! open transaction, and the database's own [`Records`] (each call one
//! `BEGIN IMMEDIATE` transaction, committed before it returns).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{Fingerprint, UnixMillis};
use rusqlite::{Connection, Row, params};
use uuid::Uuid;

use super::connection::{corrupt_in_row, immediate, sqlite_error};
use super::db::SqliteDb;
use super::statements::Statements;
use crate::duration::millis;
use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse, TrimReport,
    state_name, stored_from_columns,
};
use crate::store::{StoreError, decode_response};

/// The records of one connection or open transaction. Its calls are
/// blocking: use it on a blocking thread.
#[derive(Debug)]
pub struct SqliteRecords<'a> {
    conn: &'a Connection,
    sql: Arc<Statements>,
}

impl<'a> SqliteRecords<'a> {
    /// The records of `conn` (a connection or an open transaction) in the
    /// tables `db` uses (its prefix). There is no form without the store:
    /// the names are the store's, never a default picked here.
    pub fn of(db: &SqliteDb, conn: &'a Connection) -> Self {
        Self {
            conn,
            sql: Arc::clone(&db.sql),
        }
    }

    /// What the key holds, read on this connection now.
    pub fn read_now(&self, key: &RecordKey) -> Result<Read, StoreError> {
        self.read_here(key)
    }
}

impl SqliteRecords<'_> {
    pub(super) fn claim_now(
        &self,
        key: &RecordKey,
        claim: &NewClaim,
    ) -> Result<Claimed, StoreError> {
        let inserted = self
            .conn
            .prepare_cached(&self.sql.claim)
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key.scope.as_str(),
                    key.operation.as_str(),
                    key.key.as_str(),
                    &claim.fingerprint.as_bytes()[..],
                    &claim.token.0.as_bytes()[..],
                    millis(claim.lease),
                ])
            })
            .map_err(sqlite_error)?;
        if inserted == 1 {
            Ok(Claimed::Won)
        } else {
            Ok(Claimed::Taken(self.read_here(key)?))
        }
    }

    fn read_here(&self, key: &RecordKey) -> Result<Read, StoreError> {
        self.conn
            .prepare_cached(&self.sql.read)
            .and_then(|mut stmt| {
                stmt.query_row(
                    params![key.scope.as_str(), key.operation.as_str(), key.key.as_str()],
                    read_from_row,
                )
            })
            .map_err(sqlite_error)
    }

    fn take_over_now(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(&self.sql.take_over)
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key.scope.as_str(),
                    key.operation.as_str(),
                    key.key.as_str(),
                    &claim.fingerprint.as_bytes()[..],
                    &claim.token.0.as_bytes()[..],
                    millis(claim.lease),
                    &previous.token.0.as_bytes()[..],
                    state_name(&previous.stored),
                ])
            })
            .map_err(sqlite_error)?;
        Ok(n == 1)
    }

    fn complete_now(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(&self.sql.complete)
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key.scope.as_str(),
                    key.operation.as_str(),
                    key.key.as_str(),
                    &token.0.as_bytes()[..],
                    millis(replay_ttl),
                    i64::from(response.status),
                    response.headers_json(),
                    response.body.as_deref(),
                    resource_id,
                ])
            })
            .map_err(sqlite_error)?;
        Ok(n == 1)
    }

    fn release_now(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(&self.sql.release)
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key.scope.as_str(),
                    key.operation.as_str(),
                    key.key.as_str(),
                    &token.0.as_bytes()[..],
                ])
            })
            .map_err(sqlite_error)?;
        Ok(n == 1)
    }

    fn trim_now(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        let trimmed = self
            .conn
            .execute(&self.sql.trim, params![i64::from(batch)])
            .map_err(sqlite_error)?;
        let deleted = self
            .conn
            .execute(
                &self.sql.purge,
                params![millis(retention), i64::from(batch)],
            )
            .map_err(sqlite_error)?;
        Ok(TrimReport {
            trimmed: trimmed as u64,
            deleted: deleted as u64,
            rescheduled: 0,
        })
    }
}

/// Blocking, like the connection: each call does its work when called and
/// returns a ready future (so it is `Send` whatever the connection is).
impl Records for SqliteRecords<'_> {
    fn claim(
        &self,
        key: &RecordKey,
        claim: &NewClaim,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send {
        std::future::ready(self.claim_now(key, claim))
    }

    fn read(&self, key: &RecordKey) -> impl Future<Output = Result<Read, StoreError>> + Send {
        std::future::ready(self.read_here(key))
    }

    fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        std::future::ready(self.take_over_now(key, previous, claim))
    }

    fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        std::future::ready(self.complete_now(key, token, response, replay_ttl, resource_id))
    }

    fn release(
        &self,
        key: &RecordKey,
        token: ClaimToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        std::future::ready(self.release_now(key, token))
    }

    fn trim(
        &self,
        retention: Duration,
        batch: u32,
    ) -> impl Future<Output = Result<TrimReport, StoreError>> + Send {
        std::future::ready(self.trim_now(retention, batch))
    }
}

impl SqliteDb {
    /// The records of `conn` in this store's tables.
    pub fn records<'a>(&self, conn: &'a Connection) -> SqliteRecords<'a> {
        SqliteRecords::of(self, conn)
    }

    /// Runs `f` on the records in one `BEGIN IMMEDIATE` transaction,
    /// committed when `f` succeeds.
    async fn in_write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&SqliteRecords<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let sql = Arc::clone(&self.sql);
        self.with_conn(move |conn| {
            let tx = immediate(conn)?;
            let value = f(&SqliteRecords { conn: &tx, sql })?;
            tx.commit().map_err(sqlite_error)?;
            Ok(value)
        })
        .await
    }
}

/// The database's records: each call its own committed transaction.
impl Records for SqliteDb {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let (key, claim) = (key.clone(), *claim);
        self.in_write(move |r| r.claim_now(&key, &claim)).await
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        let key = key.clone();
        let sql = Arc::clone(&self.sql);
        self.with_reader(move |conn| SqliteRecords { conn, sql }.read_here(&key))
            .await
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let (key, previous, claim) = (key.clone(), previous.clone(), *claim);
        self.in_write(move |r| r.take_over_now(&key, &previous, &claim))
            .await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let (key, response) = (key.clone(), response.clone());
        let resource_id = resource_id.map(str::to_owned);
        self.in_write(move |r| {
            r.complete_now(&key, token, &response, replay_ttl, resource_id.as_deref())
        })
        .await
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        let key = key.clone();
        self.in_write(move |r| r.release_now(&key, token)).await
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        #[cfg(feature = "flow")]
        let tables = self.tables().clone();
        self.in_write(move |r| {
            #[allow(unused_mut)]
            let mut report = r.trim_now(retention, batch)?;
            #[cfg(feature = "flow")]
            {
                report.deleted += super::flow::trim(r.conn, &tables, retention, batch)?;
            }
            Ok(report)
        })
        .await
    }
}

fn from_ms(v: i64) -> UnixMillis {
    UnixMillis(u64::try_from(v).unwrap_or(0))
}

/// The store's clock and the record (if any) from a row of read.sql.
pub fn read_from_row(row: &Row<'_>) -> rusqlite::Result<Read> {
    let now = from_ms(row.get("now")?);
    let fingerprint: Option<Vec<u8>> = row.get("fingerprint")?;
    let Some(fingerprint) = fingerprint else {
        return Ok(Read { now, record: None });
    };
    // The schema's CHECKs keep these lengths; anything else is corruption.
    let malformed = || rusqlite::Error::IntegralValueOutOfRange(0, 0);
    let fingerprint =
        Fingerprint::from_bytes(<[u8; 32]>::try_from(fingerprint).map_err(|_| malformed())?);
    let claim: Vec<u8> = row.get("claim")?;
    let token = ClaimToken(Uuid::from_slice(&claim).map_err(|_| malformed())?);
    let state: String = row.get("status")?;
    let lease_until: Option<i64> = row.get("lease_until")?;
    let replay_until: Option<i64> = row.get("replay_until")?;
    let status: Option<i64> = row.get("response_status")?;
    let headers: Option<String> = row.get("response_headers")?;
    // Bodies are BLOBs; a TEXT value (written by hand or by another tool)
    // is read as its bytes, not refused.
    let body: Option<Vec<u8>> = match row.get_ref("response_body")? {
        rusqlite::types::ValueRef::Null => None,
        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => Some(t.to_vec()),
        _ => return Err(malformed()),
    };
    let response = decode_response(status, headers.as_deref(), body).map_err(corrupt_in_row)?;
    Ok(Read {
        now,
        record: Some(Record {
            stored: stored_from_columns(
                &state,
                fingerprint,
                lease_until.map(from_ms),
                replay_until.map(from_ms),
            ),
            token,
            response,
            resource_id: row.get("resource_id")?,
            created_at: from_ms(row.get("created_at")?),
            replay_until: replay_until.map(from_ms),
        }),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, ORDER_OPERATION};
    use rusqlite::StatementStatus;

    use super::*;
    use crate::idempotency::{ClaimToken, Scope};

    /// A replay claims (refused) and reads the same key again and again: the
    /// cached statements must run as prepared, not be parsed and planned
    /// anew after every bind (what SQLite does to a statement whose plan
    /// looked at a bound value, unless the plan is declared stable).
    #[test]
    fn repeated_claims_and_reads_are_not_prepared_again() {
        let mut conn = super::super::connection::open_connection(
            Path::new(":memory:"),
            super::super::connection::DEFAULT_WAIT,
        )
        .expect("open");
        super::super::migrate::migrate_in(
            &mut conn,
            &crate::store::Tables::default(),
            &super::super::SqliteDb::library_migrations(),
        )
        .expect("migrate");
        let records = SqliteRecords {
            conn: &conn,
            sql: Arc::new(Statements::new(&crate::store::Tables::default())),
        };
        let key = RecordKey {
            scope: Scope::new("tenant-a").expect("a scope"),
            operation: ORDER_OPERATION,
            key: IdempotencyKey::parse(b"\"k-1\"", KeyProfile::Strict).expect("a key"),
        };
        let claim = NewClaim {
            token: ClaimToken(Uuid::from_u128(1)),
            fingerprint: Fingerprint::from_bytes([7; 32]),
            lease: Duration::from_secs(60),
            replay_ttl: Duration::from_secs(3600),
        };
        assert!(matches!(records.claim_now(&key, &claim), Ok(Claimed::Won)));
        for _ in 0..20 {
            let again = records.claim_now(&key, &claim).expect("claim");
            assert!(matches!(
                again,
                Claimed::Taken(Read {
                    record: Some(_),
                    ..
                })
            ));
        }
        for sql in [&*records.sql.claim, &*records.sql.read] {
            let stmt = conn.prepare_cached(sql).expect("cached");
            assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
            assert!(stmt.get_status(StatementStatus::Run) >= 20, "{sql}");
        }
    }

    /// A completed record whose stored headers are not the JSON the store
    /// wrote is corrupt: read back, it is an error, never a replay with no
    /// headers.
    #[test]
    fn malformed_stored_headers_are_corrupt() {
        let mut conn = super::super::connection::open_connection(
            Path::new(":memory:"),
            super::super::connection::DEFAULT_WAIT,
        )
        .expect("open");
        let tables = crate::store::Tables::default();
        super::super::migrate::migrate_in(
            &mut conn,
            &tables,
            &super::super::SqliteDb::library_migrations(),
        )
        .expect("migrate");
        let records = SqliteRecords {
            conn: &conn,
            sql: Arc::new(Statements::new(&tables)),
        };
        let key = RecordKey {
            scope: Scope::new("tenant-a").expect("a scope"),
            operation: ORDER_OPERATION,
            key: IdempotencyKey::parse(b"\"k-2\"", KeyProfile::Strict).expect("a key"),
        };
        let claim = NewClaim {
            token: ClaimToken(Uuid::from_u128(2)),
            fingerprint: Fingerprint::from_bytes([7; 32]),
            lease: Duration::from_secs(60),
            replay_ttl: Duration::from_secs(3600),
        };
        assert!(matches!(records.claim_now(&key, &claim), Ok(Claimed::Won)));
        conn.execute_batch(
            "UPDATE idempotency_records SET status = 'completed', response_status = 201, \
             response_headers = '{not json', lease_until = NULL, \
             replay_until = unixepoch() * 1000 + 3600000",
        )
        .expect("corrupt the headers");
        let read = records.claim_now(&key, &claim);
        assert!(matches!(read, Err(StoreError::Corrupt(_))), "{read:?}");
    }
}

//! The records store on PostgreSQL: [`PgRecords`] over any client or open
//! transaction, and the pool's own [`Records`] (each call one autocommit
//! statement, so a lease-mode claim is committed before its effect runs).
//!
//! On the pool's own connections, unless a transaction pooler sits between,
//! each statement is prepared once per connection (deadpool's statement
//! cache) and then costs one round trip with nothing to parse or plan: on
//! a lease-mode key (claim, then completion) that is 1.8 times the
//! throughput of unnamed statements in PostgreSQL (pgbench, extended
//! against prepared). On a caller's client or transaction, and behind a
//! transaction pooler, statements go unnamed with their parameter types
//! (`query_typed`): still one round trip, with no separate prepare.

use std::time::{Duration, SystemTime};

use deadpool_postgres::ClientWrapper;
use idemkey_core::UnixMillis;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row};
use uuid::Uuid;

use super::db::PgDb;
use super::error::db_error;
use super::send::{self, Param};
use super::statements::Statements;
use crate::duration::from_system_time;
use crate::duration::millis;
use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse, TrimReport,
    state_name,
};
use crate::store::StoreError;
use crate::store::stored::{RecordRow, malformed, read_record};

/// The records of one client or open transaction.
#[derive(Debug)]
pub struct PgRecords<'a, C> {
    client: &'a C,
    sql: &'a Statements,
    /// The pooled connection's statement cache, where named statements
    /// live as long as the connection (no transaction pooler between).
    cache: Option<&'a ClientWrapper>,
}

impl<'a, C> PgRecords<'a, C> {
    /// The records of `client` (a connection or an open transaction) in
    /// the tables `db` uses (its prefix). There is no form without the
    /// store: the names are the store's, never a default picked here.
    pub fn of(db: &'a PgDb, client: &'a C) -> Self {
        Self {
            client,
            sql: &db.sql,
            cache: None,
        }
    }
}

impl<'a> PgRecords<'a, tokio_postgres::Client> {
    /// The records of one of `db`'s own connections: its statements are
    /// sent as [`super::send`] decides for the store's pooler.
    fn pooled(db: &'a PgDb, conn: &'a deadpool_postgres::Object) -> Self {
        Self {
            client: conn,
            sql: &db.sql,
            cache: db.cache(conn),
        }
    }
}

impl<C: GenericClient + Sync> PgRecords<'_, C> {
    async fn rows(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        send::rows(self.cache, self.client, sql, params)
            .await
            .map_err(db_error)
    }

    async fn changed(&self, sql: &str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        send::changed(self.cache, self.client, sql, params)
            .await
            .map_err(db_error)
    }
}

impl<C: GenericClient + Sync> Records for PgRecords<'_, C> {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
        let fingerprint = &claim.fingerprint.as_bytes()[..];
        let (lease, replay) = (millis(claim.lease), millis(claim.replay_ttl));
        let inserted = self
            .rows(
                &self.sql.claim,
                &[
                    (&scope, Type::TEXT),
                    (&operation, Type::TEXT),
                    (&k, Type::TEXT),
                    (&fingerprint, Type::BYTEA),
                    (&claim.token.0, Type::UUID),
                    (&lease, Type::INT8),
                    (&replay, Type::INT8),
                ],
            )
            .await?;
        if inserted.is_empty() {
            Ok(Claimed::Taken(self.read(key).await?))
        } else {
            Ok(Claimed::Won)
        }
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
        let rows = self
            .rows(
                &self.sql.read,
                &[
                    (&scope, Type::TEXT),
                    (&operation, Type::TEXT),
                    (&k, Type::TEXT),
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::Unavailable("read returned no row".into()))?;
        read_from_row(row)
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
        let fingerprint = &claim.fingerprint.as_bytes()[..];
        let (lease, replay) = (millis(claim.lease), millis(claim.replay_ttl));
        let state = state_name(&previous.stored);
        let rows = self
            .changed(
                &self.sql.take_over,
                &[
                    (&scope, Type::TEXT),
                    (&operation, Type::TEXT),
                    (&k, Type::TEXT),
                    (&fingerprint, Type::BYTEA),
                    (&claim.token.0, Type::UUID),
                    (&lease, Type::INT8),
                    (&previous.token.0, Type::UUID),
                    (&state, Type::TEXT),
                    (&replay, Type::INT8),
                ],
            )
            .await?;
        Ok(rows == 1)
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
        let replay = millis(replay_ttl);
        let status = i32::from(response.status);
        let headers = response.headers_json();
        let body = response.body.as_deref();
        let rows = self
            .changed(
                &self.sql.complete,
                &[
                    (&scope, Type::TEXT),
                    (&operation, Type::TEXT),
                    (&k, Type::TEXT),
                    (&token.0, Type::UUID),
                    (&replay, Type::INT8),
                    (&status, Type::INT4),
                    (&headers, Type::TEXT),
                    (&body, Type::BYTEA),
                    (&resource_id, Type::TEXT),
                ],
            )
            .await?;
        Ok(rows == 1)
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
        let rows = self
            .changed(
                &self.sql.release,
                &[
                    (&scope, Type::TEXT),
                    (&operation, Type::TEXT),
                    (&k, Type::TEXT),
                    (&token.0, Type::UUID),
                ],
            )
            .await?;
        Ok(rows == 1)
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        let (retention, batch) = (millis(retention), i64::from(batch));
        let rows = self
            .rows(
                &self.sql.trim,
                &[(&retention, Type::INT8), (&batch, Type::INT8)],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::Unavailable("trim returned no row".into()))?;
        let trimmed: i64 = row.try_get("trimmed").map_err(db_error)?;
        let deleted: i64 = row.try_get("deleted").map_err(db_error)?;
        let rescheduled: i64 = row.try_get("rescheduled").map_err(db_error)?;
        Ok(TrimReport {
            trimmed: trimmed.unsigned_abs(),
            deleted: deleted.unsigned_abs(),
            rescheduled: rescheduled.unsigned_abs(),
        })
    }
}

/// The pool's records: each call takes a connection for one statement.
impl Records for PgDb {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let client = self.client().await?;
        PgRecords::pooled(self, &client).claim(key, claim).await
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        let client = self.client().await?;
        PgRecords::pooled(self, &client).read(key).await
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        PgRecords::pooled(self, &client)
            .take_over(key, previous, claim)
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
        let client = self.client().await?;
        PgRecords::pooled(self, &client)
            .complete(key, token, response, replay_ttl, resource_id)
            .await
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        let client = self.client().await?;
        PgRecords::pooled(self, &client).release(key, token).await
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        let client = self.client().await?;
        #[allow(unused_mut)]
        let mut report = PgRecords::pooled(self, &client)
            .trim(retention, batch)
            .await?;
        #[cfg(feature = "flow")]
        {
            report.deleted += super::flow::trim(&**client, self.tables(), retention, batch).await?;
        }
        Ok(report)
    }
}

/// Reads the store's clock and the record (if any) from a row that selects
/// `now` and the records table's columns by name (as `read.sql` does):
/// for statements of your own that read a record with your data.
pub fn read_from_row(row: &Row) -> Result<Read, StoreError> {
    read_record(&PgRow(row))
}

/// A tokio-postgres row as the one record decoder reads it.
struct PgRow<'r>(&'r Row);

impl PgRow<'_> {
    fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
        &'a self,
        column: &str,
    ) -> Result<T, StoreError> {
        self.0.try_get(column).map_err(|_| malformed(column))
    }
}

impl RecordRow for PgRow<'_> {
    fn time(&self, column: &str) -> Result<Option<UnixMillis>, StoreError> {
        Ok(self
            .get::<Option<SystemTime>>(column)?
            .map(from_system_time))
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

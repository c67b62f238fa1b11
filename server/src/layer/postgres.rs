//! The PostgreSQL lease store: the table `idempotency_leases` (migration 2
//! of [`PgStore::migrate`]) over the same deadpool pool as the order store.
//!
//! Each call is one statement in its own implicit transaction, so a claim is
//! committed before the handler runs and no transaction stays open while it
//! runs. A claim costs one round trip; a retry that finds the key taken
//! costs two (the insert, then a read in a fresh snapshot).

use deadpool_postgres::{Pool, PoolError};
use idemkey_core::{Fingerprint, UnixMillis};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tracing::warn;
use uuid::Uuid;

use super::store::{
    ClaimOutcome, ClaimToken, LeaseKey, LeaseRecord, LeaseResponse, LeaseStore, NewClaim,
    StoreError, stored_from_row,
};
use crate::store::{PgSettings, PgStore, from_system_time, to_system_time};

const CLAIM: &str = include_str!("postgres/claim.sql");
const READ: &str = include_str!("postgres/read.sql");
const TAKE_OVER: &str = include_str!("postgres/take_over.sql");
const COMPLETE: &str = include_str!("postgres/complete.sql");
const RELEASE: &str = include_str!("postgres/release.sql");

/// How many times a claim re-reads a key whose row vanished between the
/// insert and the read (released by a 5xx meanwhile).
const CLAIM_ATTEMPTS: usize = 3;

/// Lease records in PostgreSQL.
#[derive(Clone)]
pub struct PgLeaseStore {
    pool: Pool,
}

impl std::fmt::Debug for PgLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaseStore")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl PgLeaseStore {
    /// Shares the pool of an order store, whose migrations created the table.
    pub fn from_store(store: &PgStore) -> Self {
        Self {
            pool: store.pool().clone(),
        }
    }

    /// Opens a pool for `url` and applies pending migrations (all of the
    /// server's: the lease table is migration 2 of the same sequence).
    pub async fn connect(url: &str, settings: &PgSettings) -> Result<Self, StoreError> {
        Ok(Self::from_store(&PgStore::connect(url, settings).await?))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }
}

fn key_params(key: &LeaseKey) -> (&str, &str, &str) {
    (&key.scope, key.operation.as_str(), key.key.as_str())
}

fn record_from_row(row: &Row) -> Result<LeaseRecord, StoreError> {
    let bad = |what: &str| StoreError::Unavailable(format!("malformed lease row: {what}"));
    let fingerprint: Vec<u8> = row.try_get(0).map_err(|_| bad("fingerprint"))?;
    let fingerprint = <[u8; 32]>::try_from(fingerprint.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| bad("fingerprint length"))?;
    let token: Uuid = row.try_get(1).map_err(|_| bad("claim"))?;
    let status: String = row.try_get(2).map_err(|_| bad("status"))?;
    let time = |i: usize| -> Result<Option<UnixMillis>, StoreError> {
        let t: Option<std::time::SystemTime> = row.try_get(i).map_err(|_| bad("time"))?;
        Ok(t.map(from_system_time))
    };
    let (lease_until, replay_until) = (time(3)?, time(4)?);
    let response_status: Option<i32> = row.try_get(5).map_err(|_| bad("response_status"))?;
    let headers: Option<String> = row.try_get(6).map_err(|_| bad("response_headers"))?;
    let body: Option<Vec<u8>> = row.try_get(7).map_err(|_| bad("response_body"))?;
    let response = match response_status {
        Some(status) => Some(LeaseResponse {
            status: u16::try_from(status).map_err(|_| bad("response_status"))?,
            headers: LeaseResponse::headers_from_json(headers.as_deref().unwrap_or("[]")),
            body: body.map(Into::into),
        }),
        None => None,
    };
    Ok(LeaseRecord {
        stored: stored_from_row(&status, fingerprint, lease_until, replay_until),
        token: ClaimToken(token),
        response,
    })
}

impl LeaseStore for PgLeaseStore {
    async fn claim(&self, key: &LeaseKey, claim: &NewClaim) -> Result<ClaimOutcome, StoreError> {
        let client = self.client().await?;
        let (scope, operation, idem_key) = key_params(key);
        let fingerprint = &claim.fingerprint.as_bytes()[..];
        let (now, lease_until) = (to_system_time(claim.now), to_system_time(claim.lease_until));
        let insert = client.prepare_cached(CLAIM).await.map_err(db_error)?;
        let read = client.prepare_cached(READ).await.map_err(db_error)?;
        for _ in 0..CLAIM_ATTEMPTS {
            let inserted = client
                .execute(
                    &insert,
                    &[
                        &scope,
                        &operation,
                        &idem_key,
                        &fingerprint,
                        &claim.token.0,
                        &now,
                        &lease_until,
                    ],
                )
                .await
                .map_err(db_error)?;
            if inserted == 1 {
                return Ok(ClaimOutcome::Claimed);
            }
            if let Some(row) = client
                .query_opt(&read, &[&scope, &operation, &idem_key])
                .await
                .map_err(db_error)?
            {
                return Ok(ClaimOutcome::Existing(record_from_row(&row)?));
            }
        }
        Err(StoreError::Unavailable(
            "the key's row kept changing under the claim".to_owned(),
        ))
    }

    async fn take_over(
        &self,
        key: &LeaseKey,
        previous: ClaimToken,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let (scope, operation, idem_key) = key_params(key);
        let stmt = client.prepare_cached(TAKE_OVER).await.map_err(db_error)?;
        let n = client
            .execute(
                &stmt,
                &[
                    &scope,
                    &operation,
                    &idem_key,
                    &&claim.fingerprint.as_bytes()[..],
                    &claim.token.0,
                    &to_system_time(claim.now),
                    &to_system_time(claim.lease_until),
                    &previous.0,
                ],
            )
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }

    async fn complete(
        &self,
        key: &LeaseKey,
        token: ClaimToken,
        response: &LeaseResponse,
        replay_until: UnixMillis,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let (scope, operation, idem_key) = key_params(key);
        let stmt = client.prepare_cached(COMPLETE).await.map_err(db_error)?;
        let n = client
            .execute(
                &stmt,
                &[
                    &scope,
                    &operation,
                    &idem_key,
                    &token.0,
                    &to_system_time(replay_until),
                    &i32::from(response.status),
                    &response.headers_json(),
                    &response.body.as_deref(),
                ],
            )
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }

    async fn release(&self, key: &LeaseKey, token: ClaimToken) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let (scope, operation, idem_key) = key_params(key);
        let stmt = client.prepare_cached(RELEASE).await.map_err(db_error)?;
        let n = client
            .execute(&stmt, &[&scope, &operation, &idem_key, &token.0])
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }
}

fn db_error(err: tokio_postgres::Error) -> StoreError {
    if let Some(db) = err.as_db_error() {
        if *db.code() == SqlState::LOCK_NOT_AVAILABLE {
            return StoreError::LockTimeout;
        }
        warn!(sqlstate = db.code().code(), "lease store: database error");
        return StoreError::Unavailable(format!("{}: {}", db.code().code(), db.message()));
    }
    warn!(closed = err.is_closed(), error = %err, "lease store: connection error");
    StoreError::Unavailable(err.to_string())
}

fn pool_error(err: PoolError) -> StoreError {
    match err {
        PoolError::Backend(e) => db_error(e),
        other => {
            warn!(error = %other, "lease store: connection pool error");
            StoreError::Unavailable(other.to_string())
        }
    }
}

//! Every database the server speaks: one folder per backend, each holding
//! its records store ([`Records`]), its order statements and its migrations
//! (every statement in a `.sql` file next to its code), behind one [`Db`]
//! enum opened from a URL. Nothing outside this module matches on the
//! backend.
//!
//! Every call that acts for a caller takes the caller's [`TokenHash`] and
//! resolves the account in the same statement (or transaction) as the work
//! itself, so authentication costs no extra round trip.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemkey_core::{IdempotencyKey, OperationId, UnixMillis};
use thiserror::Error;
use uuid::Uuid;

use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Policy, Read, Record, RecordKey, Records, StoredResponse,
    TrimReport,
};

pub mod postgres;
pub mod redis;
pub mod sqlite;

pub use postgres::{PgDb, PgPooler, PgSettings};
pub use redis::{RedisDb, RedisSettings};
pub use sqlite::SqliteDb;

/// SHA-256 of an API token: the only form in which tokens are stored.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash(pub [u8; 32]);

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Even the hash stays out of logs.
        f.write_str("TokenHash(..)")
    }
}

/// An account's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AccountId(pub Uuid);

/// Why a database call failed. Messages go to logs only, never to clients.
#[derive(Clone, Debug, Error)]
pub enum StoreError {
    /// A lock wait exceeded `lock_timeout`: another request holds the key.
    #[error("lock wait timed out")]
    LockTimeout,
    /// The database is unreachable, timed out, or the outcome is unknown.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The write may have reached the store, which could not confirm that
    /// it would survive a failover (fewer Redis replicas than asked for
    /// acknowledged it in time, or the call failed with the write in
    /// flight): a completion that must not be acknowledged to the client,
    /// since a failover may still lose it.
    #[error("write not confirmed: {0}")]
    Unconfirmed(String),
}

/// The answer to a call for a caller: the token is unknown, or the result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authed<T> {
    /// The token belongs to no account.
    Unauthorized,
    /// The caller's result.
    Ok(T),
}

/// Connection-pool figures for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Largest number of connections.
    pub max_size: usize,
    /// Connections open.
    pub size: usize,
    /// Idle connections.
    pub available: usize,
    /// Requests waiting for a connection.
    pub waiting: usize,
}

/// The database chosen at start-up.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Db {
    /// PostgreSQL: the shared, multi-instance store.
    Postgres(PgDb),
    /// SQLite: the embedded, single-host store.
    Sqlite(SqliteDb),
    /// Redis or Redis Cluster: records of the idempotency layer (lease
    /// mode) only; the order route and the account calls are refused.
    Redis(RedisDb),
}

/// The database used when none is given: a file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://idemkey.db";

/// The one place that matches on the backend: `$body` with `$db` bound to
/// the backend's store.
macro_rules! each {
    ($self:expr, $db:ident => $body:expr) => {
        match $self {
            Db::Postgres($db) => $body,
            Db::Sqlite($db) => $body,
            Db::Redis($db) => $body,
        }
    };
}

mod accounts;
mod order;
pub mod outbox;
pub use accounts::{AccountSummary, DemoAccount, Revocation, TokenId, TokenSummary};
pub(in crate::db) use order::OrderEffectError;
pub use order::{
    Order, OrderAnswer, OrderAttempt, OrderDraft, Payment, PaymentState, Price, Refusal,
};
mod charges;
pub use charges::{CHARGES_NEED_SQL, Charge, ChargeWrite, NewCharge, ProviderRequest, RequestKind};

impl Db {
    /// Opens the database a URL names and applies pending migrations:
    /// `postgres://...` (or `postgresql://`, or libpq's `host=... dbname=...`
    /// form; TLS by `sslmode` and `sslrootcert` as in libpq), `sqlite://PATH` (relative to
    /// the working directory; `sqlite:///abs/path` for an absolute one), or
    /// a Redis node or cluster (see [`Db::open_with`]) with default settings.
    pub async fn open(url: &str, settings: &PgSettings) -> Result<Self, StoreError> {
        Self::open_with(url, settings, &RedisSettings::default()).await
    }

    /// [`Db::open`], with the settings of a Redis store: `redis://…`,
    /// `rediss://…` (TLS), or a cluster's seeds,
    /// `redis+cluster://host:port,host:port` (`rediss+cluster://` for TLS).
    pub async fn open_with(
        url: &str,
        settings: &PgSettings,
        redis: &RedisSettings,
    ) -> Result<Self, StoreError> {
        if redis::is_redis_url(url) {
            Ok(Self::Redis(RedisDb::connect(url, redis).await?))
        } else if url.starts_with("postgres://")
            || url.starts_with("postgresql://")
            || postgres::is_key_value(url)
        {
            Ok(Self::Postgres(PgDb::connect(url, settings).await?))
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::Unavailable(
                    "sqlite:// needs a file path".into(),
                ));
            }
            Ok(Self::Sqlite(
                SqliteDb::open_with_readers(path, settings.pool_wait, settings.sqlite_readers)
                    .await?,
            ))
        } else {
            // The URL may hold a password: never repeat it.
            Err(StoreError::Unavailable(
                "unknown database URL: use postgres://... (or libpq's host=... form), \
                 sqlite://PATH or redis://..."
                    .into(),
            ))
        }
    }

    /// `postgres`, `sqlite` or `redis`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
            Self::Redis(_) => "redis",
        }
    }

    /// SQLite only: `(batches, orders)` of new orders group-committed so
    /// far (one fsync per batch).
    pub fn order_batches(&self) -> Option<(u64, u64)> {
        match self {
            Self::Sqlite(db) => Some(db.order_batches()),
            Self::Postgres(_) | Self::Redis(_) => None,
        }
    }

    /// Whether this store holds only the idempotency layer's records (no
    /// accounts, no orders, no transactions to join): Redis. The `serve`
    /// command refuses such a store.
    pub fn lease_only(&self) -> bool {
        matches!(self, Self::Redis(_))
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        each!(self, db => db.ping().await)
    }

    /// Versions of this build's migrations that the database has not
    /// applied (empty when it is up to date).
    pub async fn pending_migrations(&self) -> Result<Vec<i64>, StoreError> {
        each!(self, db => db.pending_migrations().await)
    }

    /// `/readyz`'s question: the migrations this build knows that the
    /// database has not applied, answered within `within` or
    /// [`StoreError::Unavailable`]. On SQLite the read takes the write lock,
    /// so a lock another process holds past `within` means not ready.
    pub async fn ready(&self, within: Duration) -> Result<Vec<i64>, StoreError> {
        let check = async {
            match self {
                Self::Sqlite(db) => db.ready(within).await,
                _ => self.pending_migrations().await,
            }
        };
        tokio::time::timeout(within, check)
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("no answer in time".into())))
    }

    /// The connection pool's figures.
    pub fn pool_status(&self) -> PoolStatus {
        each!(self, db => db.pool_status())
    }

    /// Closes the pool's connections (at shutdown).
    pub fn close(&self) {
        each!(self, db => db.close())
    }

    /// Creates the draft's order with its key's record in one transaction,
    /// or answers from what the key holds: the order route's front end.
    pub async fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        policy: &Policy,
    ) -> Result<Authed<OrderAttempt>, StoreError> {
        each!(self, db => db.create_order(token, draft, policy).await)
    }

    /// Claims up to `limit` due outbox messages of `effects` for
    /// `lease_for`; no other worker delivers them until it ends.
    pub async fn claim_outbox(
        &self,
        effects: &[String],
        limit: u32,
        lease_for: Duration,
    ) -> Result<Vec<outbox::OutboxMessage>, StoreError> {
        each!(self, db => db.claim_outbox(effects, limit, lease_for).await)
    }

    /// Ends a message's claim as `settlement` says, with the downstream key
    /// it was sent with; `false` when the claim was no longer this one's
    /// (its lease ended and another worker took the message over).
    pub async fn settle_outbox(
        &self,
        message: &outbox::OutboxMessage,
        sent_key: Option<&str>,
        settlement: &outbox::Settlement,
    ) -> Result<bool, StoreError> {
        each!(self, db => db.settle_outbox(message, sent_key, settlement).await)
    }

    /// The outbox's depth, oldest pending age and dead letters.
    pub async fn outbox_stats(&self) -> Result<outbox::OutboxStats, StoreError> {
        each!(self, db => db.outbox_stats().await)
    }

    /// Outbox messages, oldest first: all, or those of one status.
    pub async fn outbox_list(
        &self,
        status: Option<&str>,
        limit: u32,
    ) -> Result<Vec<outbox::OutboxEntry>, StoreError> {
        each!(self, db => db.outbox_list(status, limit).await)
    }

    /// Sends messages back to pending: one dead or failed message by id,
    /// or (`id` `None`) every dead letter. Those older than `retention` (the
    /// provider's key retention, at the store's clock) stay unless `force`.
    pub async fn outbox_retry(
        &self,
        id: Option<i64>,
        retention: Duration,
        force: bool,
    ) -> Result<outbox::Requeued, StoreError> {
        each!(self, db => db.outbox_retry(id, retention, force).await)
    }

    /// The catalogue: every sku with its price.
    pub async fn products(&self) -> Result<Vec<(String, Price)>, StoreError> {
        each!(self, db => db.products().await)
    }

    /// The caller's order with this id, if it is theirs.
    pub async fn order(
        &self,
        token: TokenHash,
        id: Uuid,
    ) -> Result<Authed<Option<Order>>, StoreError> {
        each!(self, db => db.order(token, id).await)
    }

    /// The caller's newest orders, newest first, at most `limit`.
    pub async fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> Result<Authed<Vec<Order>>, StoreError> {
        each!(self, db => db.recent_orders(token, limit).await)
    }

    /// What the caller's account holds for `(operation, key)`, with the
    /// store's clock.
    pub async fn lookup(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> Result<Authed<Read>, StoreError> {
        each!(self, db => db.lookup(token, operation, key).await)
    }
}

impl Records for Db {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        each!(self, db => db.claim(key, claim).await)
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        each!(self, db => db.read(key).await)
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        each!(self, db => db.take_over(key, previous, claim).await)
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        each!(self, db => db.complete(key, token, response, replay_ttl, resource_id).await)
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        each!(self, db => db.release(key, token).await)
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        each!(self, db => db.trim(retention, batch).await)
    }
}

/// Milliseconds since the epoch as a [`SystemTime`].
pub fn to_system_time(t: UnixMillis) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t.0)
}

/// A [`SystemTime`] as milliseconds since the epoch (0 before the epoch).
pub fn from_system_time(t: SystemTime) -> UnixMillis {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    UnixMillis(ms)
}

/// A duration in whole milliseconds, as statements take it.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trips_through_system_time() {
        let t = UnixMillis(1_764_700_000_123);
        assert_eq!(from_system_time(to_system_time(t)), t);
    }

    #[test]
    fn token_hash_debug_hides_the_bytes() {
        assert_eq!(format!("{:?}", TokenHash([7; 32])), "TokenHash(..)");
    }
}

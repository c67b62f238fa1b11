//! [`Db`]: the store a URL names, among the backends this build enables,
//! and the one place that matches on the backend.

use std::time::Duration;

use crate::error::StoreError;
use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse, TrimReport,
};
use crate::store::migrations;
use crate::store::pool::PoolStatus;
#[cfg(feature = "postgres")]
use crate::store::postgres::{self, PgDb};
#[cfg(feature = "redis")]
use crate::store::redis::RedisDb;
use crate::store::settings::StoreSettings;
#[cfg(feature = "sqlite")]
use crate::store::sqlite::SqliteDb;

/// The store chosen at start-up, among the backends this build enables.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Db {
    /// PostgreSQL: the shared, multi-instance store.
    #[cfg(feature = "postgres")]
    Postgres(PgDb),
    /// SQLite: the embedded, single-host store.
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteDb),
    /// Redis or Redis Cluster: records of the idempotency layer (lease
    /// mode) only; it joins no transaction of yours.
    #[cfg(feature = "redis")]
    Redis(RedisDb),
    /// A build without a store feature has no store to open.
    #[doc(hidden)]
    #[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "redis")))]
    None(std::convert::Infallible),
}

/// The database used when none is given: a file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://idemkey.db";

/// The one place that matches on the backend: `$body` with `$db` bound to
/// the backend's store.
macro_rules! each {
    ($self:expr, $db:ident => $body:expr) => {
        match $self {
            #[cfg(feature = "postgres")]
            Db::Postgres($db) => $body,
            #[cfg(feature = "sqlite")]
            Db::Sqlite($db) => $body,
            #[cfg(feature = "redis")]
            Db::Redis($db) => $body,
            #[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "redis")))]
            Db::None(never) => match *never {},
        }
    };
}

impl Db {
    /// Opens the store a URL names and applies the library's pending
    /// migrations ([`migrations`]): `postgres://...` (or `postgresql://`,
    /// or libpq's `host=... dbname=...` form; TLS by `sslmode` and
    /// `sslrootcert` as in libpq), `sqlite://PATH` (relative to the working
    /// directory; `sqlite:///abs/path` for an absolute one), or a Redis
    /// node or cluster (`redis://…`, `rediss://…` for TLS,
    /// `redis+cluster://host:port,host:port`). A URL whose backend this
    /// build lacks is [`StoreError::Unsupported`].
    pub async fn open(url: &str, settings: &StoreSettings) -> Result<Self, StoreError> {
        let db = Self::connect(url, settings).await?;
        db.migrate().await?;
        Ok(db)
    }

    /// [`Db::open`] without migrating: for an application that migrates
    /// its own tables first (then calls [`Db::migrate`]).
    pub async fn connect(url: &str, settings: &StoreSettings) -> Result<Self, StoreError> {
        let _ = settings;
        if redis_url(url) {
            #[cfg(feature = "redis")]
            return Ok(Self::Redis(RedisDb::connect(url, &settings.redis).await?));
            #[cfg(not(feature = "redis"))]
            return Err(missing("redis"));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") || url.contains('=') {
            #[cfg(feature = "postgres")]
            if url.contains("://") || postgres::is_key_value(url) {
                return Ok(Self::Postgres(PgDb::connect(url, settings).await?));
            }
            #[cfg(not(feature = "postgres"))]
            if url.contains("://") {
                return Err(missing("postgres"));
            }
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::Unsupported(
                    "sqlite:// needs a file path".into(),
                ));
            }
            #[cfg(feature = "sqlite")]
            return Ok(Self::Sqlite(SqliteDb::connect(path, settings).await?));
            #[cfg(not(feature = "sqlite"))]
            return Err(missing("sqlite"));
        }
        // The URL may hold a password: never repeat it.
        Err(StoreError::Unsupported(
            "unknown database URL: use postgres://... (or libpq's host=... form), \
             sqlite://PATH or redis://..."
                .into(),
        ))
    }

    /// Applies the library's pending migrations (its records table, and
    /// the outbox table with the `outbox` feature) in the store's
    /// [`Tables`](crate::store::Tables); nothing of yours is touched. Redis needs none.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        each!(self, db => db.migrate().await)
    }

    /// The library's own migrations on this store's backend (none on
    /// Redis), for an application that passes them with its own to one
    /// [`Db::migrate_with`], so one transaction applies all or none.
    pub fn library_migrations(&self) -> Vec<migrations::Migration> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => PgDb::library_migrations(),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => SqliteDb::library_migrations(),
            #[allow(unreachable_patterns)]
            _ => Vec::new(),
        }
    }

    /// Applies your own component's pending migrations through the
    /// library's runner (see [`migrations`]); Redis has nothing to migrate.
    pub async fn migrate_with(&self, list: &[migrations::Migration]) -> Result<(), StoreError> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(db) => db.migrate_with(list).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(db) => db.migrate_with(list).await,
            #[allow(unreachable_patterns)]
            _ => {
                let _ = list;
                Ok(())
            }
        }
    }

    /// `postgres`, `sqlite` or `redis`.
    pub fn backend(&self) -> &'static str {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => "postgres",
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => "sqlite",
            #[cfg(feature = "redis")]
            Self::Redis(_) => "redis",
            #[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "redis")))]
            Self::None(never) => match *never {},
        }
    }

    /// SQLite only: `(batches, writes)` of writes group-committed so far
    /// (one fsync per batch; see `SqliteDb::group_commit`).
    pub fn group_commits(&self) -> Option<(u64, u64)> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(db) => Some(db.group_commits()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Whether this store holds only the idempotency layer's records (no
    /// transactions to join, no outbox) and expires them itself: Redis.
    pub fn lease_only(&self) -> bool {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(_) => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        each!(self, db => db.ping().await)
    }

    /// Versions of this build's migrations that the database has not
    /// applied (empty when it is up to date).
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        each!(self, db => db.pending_migrations().await)
    }

    /// `/readyz`'s question: the migrations this build knows that the
    /// database has not applied, answered within `within` or
    /// [`StoreError::Unavailable`]. On SQLite the read takes the write lock,
    /// so a lock another process holds past `within` means not ready.
    pub async fn ready(&self, within: Duration) -> Result<Vec<String>, StoreError> {
        let check = async {
            match self {
                #[cfg(feature = "sqlite")]
                Self::Sqlite(db) => db.ready(within).await,
                #[allow(unreachable_patterns)]
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
}

/// The outbox of a SQL store; Redis has none ([`StoreError::Unsupported`]).
#[cfg(feature = "outbox")]
macro_rules! sql_only {
    ($self:expr, $db:ident => $body:expr) => {
        match $self {
            #[cfg(feature = "postgres")]
            Db::Postgres($db) => $body,
            #[cfg(feature = "sqlite")]
            Db::Sqlite($db) => $body,
            #[allow(unreachable_patterns)]
            _ => Err(StoreError::Unsupported(
                "the outbox needs a SQL store (PostgreSQL or SQLite)".into(),
            )),
        }
    };
}

#[cfg(feature = "outbox")]
use crate::store::outbox;

#[cfg(feature = "outbox")]
impl Db {
    /// Claims up to `limit` due outbox messages of `effects` for
    /// `lease_for`; no other worker delivers them until it ends.
    pub async fn claim_outbox(
        &self,
        effects: &[String],
        limit: u32,
        lease_for: Duration,
    ) -> Result<Vec<outbox::OutboxMessage>, StoreError> {
        sql_only!(self, db => db.claim_outbox(effects, limit, lease_for).await)
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
        sql_only!(self, db => db.settle_outbox(message, sent_key, settlement).await)
    }

    /// Ends the claims of `outcomes` in one write (one statement on
    /// PostgreSQL, one transaction on SQLite), each fenced by its own
    /// lease: for each outcome, in order, whether it was settled (`false`:
    /// its lease ended and another worker took the message over).
    pub async fn settle_outbox_batch(
        &self,
        outcomes: &[outbox::OutboxOutcome],
    ) -> Result<Vec<bool>, StoreError> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        sql_only!(self, db => db.settle_outbox_batch(outcomes).await)
    }

    /// The outbox's depth, oldest pending age and dead letters.
    pub async fn outbox_stats(&self) -> Result<outbox::OutboxStats, StoreError> {
        sql_only!(self, db => db.outbox_stats().await)
    }

    /// Outbox messages, oldest first: all, or those of one status.
    pub async fn outbox_list(
        &self,
        status: Option<&str>,
        limit: u32,
    ) -> Result<Vec<outbox::OutboxEntry>, StoreError> {
        sql_only!(self, db => db.outbox_list(status, limit).await)
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
        sql_only!(self, db => db.outbox_retry(id, retention, force).await)
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

    fn expires_records(&self) -> bool {
        self.lease_only()
    }
}

/// Whether the URL names a Redis node or cluster.
fn redis_url(url: &str) -> bool {
    [
        "redis://",
        "rediss://",
        "redis+cluster://",
        "rediss+cluster://",
    ]
    .iter()
    .any(|scheme| url.starts_with(scheme))
}

/// A URL of a backend this build was compiled without.
#[allow(dead_code)]
fn missing(feature: &str) -> StoreError {
    StoreError::Unsupported(format!(
        "this build has no {feature} store: enable idemkey's `{feature}` feature"
    ))
}

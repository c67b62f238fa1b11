//! [`Db`]: the store a URL names, among the backends this build registers
//! ([`OPENERS`]: one line per backend), held type-erased behind the
//! [`Backend`] seam.

use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse, TrimReport,
};
use crate::store::backend::{Backend, DynBackend, Opener};
use crate::store::migrations;
use crate::store::pool::PoolStatus;
use crate::store::settings::StoreSettings;

/// The backends this build knows, in the order a URL is tried: the one
/// place that names them. A new backend is one folder under `store/`, one
/// feature, and one line here.
const OPENERS: &[Opener] = &[
    #[cfg(feature = "redis")]
    crate::store::redis::OPENER,
    #[cfg(feature = "postgres")]
    crate::store::postgres::OPENER,
    #[cfg(feature = "sqlite")]
    crate::store::sqlite::OPENER,
    #[cfg(feature = "sqlx-postgres")]
    crate::store::sqlx_postgres::OPENER,
];

/// URL forms of the backends this crate offers, for the error that names
/// the feature a build lacks (no code of theirs is reached from here).
const KNOWN: &[(&str, &str)] = &[
    ("redis://", "redis"),
    ("rediss://", "redis"),
    ("redis+cluster://", "redis"),
    ("rediss+cluster://", "redis"),
    ("postgres://", "postgres"),
    ("postgresql://", "postgres"),
    ("sqlite://", "sqlite"),
];

/// The store chosen at start-up: any [`Backend`], opened from a URL
/// ([`Db::open`]) or wrapped ([`Db::new`]). Cloning shares the store.
#[derive(Clone, Debug)]
pub struct Db(Arc<dyn DynBackend>);

/// The database used when none is given: a file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://idemkey.db";

impl Db {
    /// Holds `backend` (a store opened by hand, or one of your own).
    pub fn new<B: Backend>(backend: B) -> Self {
        Self(Arc::new(backend))
    }

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
        if let Some(opener) = OPENERS.iter().find(|o| (o.accepts)(url)) {
            return Ok(Self((opener.connect)(url, settings).await?));
        }
        if let Some((_, feature)) = KNOWN.iter().find(|(scheme, _)| url.starts_with(scheme)) {
            return Err(StoreError::Unsupported(format!(
                "this build has no {feature} store: enable idemkey's `{feature}` feature"
            )));
        }
        // The URL may hold a password: never repeat it.
        Err(StoreError::Unsupported(
            "unknown database URL: use postgres://... (or libpq's host=... form), \
             sqlite://PATH or redis://..."
                .into(),
        ))
    }

    /// The backend this store is, for an application's own statements
    /// (`db.backend_as::<PgDb>()`); `None` when it is another.
    pub fn backend_as<B: Backend>(&self) -> Option<&B> {
        self.0.as_any().downcast_ref::<B>()
    }

    /// Applies the library's pending migrations (its records table, and
    /// the outbox table with the `outbox` feature) in the store's
    /// [`Tables`](crate::store::Tables); nothing of yours is touched. Redis needs none.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.0.migrate().await
    }

    /// The library's own migrations on this store's backend (none on
    /// Redis), for an application that passes them with its own to one
    /// [`Db::migrate_with`], so one transaction applies all or none.
    pub fn library_migrations(&self) -> Vec<migrations::Migration> {
        self.0.library_migrations()
    }

    /// Applies your own component's pending migrations through the
    /// library's runner (see [`migrations`]); Redis has nothing to migrate.
    pub async fn migrate_with(&self, list: &[migrations::Migration]) -> Result<(), StoreError> {
        self.0.migrate_with(list).await
    }

    /// The backend's name ([`Backend::NAME`]): `postgres`, `sqlite`, `redis`.
    pub fn backend(&self) -> &'static str {
        self.0.name()
    }

    /// `(batches, writes)` of writes group-committed so far, on a store
    /// that batches its commits (SQLite; see `SqliteDb::group_commit`).
    pub fn group_commits(&self) -> Option<(u64, u64)> {
        self.0.group_commits()
    }

    /// Whether this store holds only the idempotency layer's records (no
    /// transactions to join, no outbox) and expires them itself: Redis.
    pub fn lease_only(&self) -> bool {
        self.0.lease_only()
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }

    /// Versions of this build's migrations that the database has not
    /// applied (empty when it is up to date).
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        self.0.pending_migrations().await
    }

    /// `/readyz`'s question: the migrations this build knows that the
    /// database has not applied, answered within `within` or
    /// [`StoreError::Unavailable`]. On SQLite the read takes the write lock,
    /// so a lock another process holds past `within` means not ready.
    pub async fn ready(&self, within: Duration) -> Result<Vec<String>, StoreError> {
        tokio::time::timeout(within, self.0.ready(within))
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("no answer in time".into())))
    }

    /// The connection pool's figures.
    pub fn pool_status(&self) -> PoolStatus {
        self.0.pool_status()
    }

    /// Closes the pool's connections (at shutdown).
    pub fn close(&self) {
        self.0.close();
    }

    /// The store's step journal, or why it has none.
    #[cfg(feature = "flow")]
    pub(crate) fn journal(&self) -> Result<&dyn crate::store::flow::JournalStore, StoreError> {
        self.0.journal().ok_or_else(|| {
            StoreError::Unsupported(
                "operations of several steps need a SQL store (PostgreSQL or SQLite)".into(),
            )
        })
    }
}

#[cfg(feature = "outbox")]
use crate::store::outbox;

#[cfg(feature = "outbox")]
impl Db {
    /// The store's outbox, or why it has none.
    fn outbox(&self) -> Result<&dyn crate::store::backend::OutboxStore, StoreError> {
        self.0.outbox().ok_or_else(|| {
            StoreError::Unsupported("the outbox needs a SQL store (PostgreSQL or SQLite)".into())
        })
    }

    /// Claims up to `limit` due outbox messages of `effects` for
    /// `lease_for`; no other worker delivers them until it ends.
    pub async fn claim_outbox(
        &self,
        effects: &[String],
        limit: u32,
        lease_for: Duration,
    ) -> Result<Vec<outbox::OutboxMessage>, StoreError> {
        self.outbox()?.claim_outbox(effects, limit, lease_for).await
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
        self.outbox()?
            .settle_outbox(message, sent_key, settlement)
            .await
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
        self.outbox()?.settle_outbox_batch(outcomes).await
    }

    /// The outbox's depth, oldest pending age and dead letters.
    pub async fn outbox_stats(&self) -> Result<outbox::OutboxStats, StoreError> {
        self.outbox()?.outbox_stats().await
    }

    /// Outbox messages, oldest first: all, or those of one status.
    pub async fn outbox_list(
        &self,
        status: Option<&str>,
        limit: u32,
    ) -> Result<Vec<outbox::OutboxEntry>, StoreError> {
        self.outbox()?.outbox_list(status, limit).await
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
        self.outbox()?.outbox_retry(id, retention, force).await
    }
}

impl Records for Db {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        self.0.claim(key, claim).await
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        self.0.read(key).await
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        self.0.take_over(key, previous, claim).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.0
            .complete(key, token, response, replay_ttl, resource_id)
            .await
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        self.0.release(key, token).await
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        self.0.trim(retention, batch).await
    }

    fn expires_records(&self) -> bool {
        self.0.expires_records()
    }
}

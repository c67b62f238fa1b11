//! The seam between the library and a store: what a backend implements
//! ([`Backend`], and the capabilities [`OutboxStore`] and, with `flow`,
//! [`JournalStore`](crate::store::flow::JournalStore)), written once
//! outside every backend's folder, the way sqlx's drivers implement its
//! `Database` traits. The engine, the Layer, the outbox worker, the step
//! journal and the trim reach a store only through these traits, by way of
//! [`Db`](crate::Db), which holds any of them type-erased.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse, TrimReport,
};
use crate::store::migrations::Migration;
use crate::store::pool::PoolStatus;
use crate::store::settings::StoreSettings;

pub use super::boxed::BoxFuture;

/// A store of the library's records that [`Db`](crate::Db) can hold: its
/// lifecycle (migrations, readiness, pool figures) on top of [`Records`].
/// A backend is one folder under `store/` implementing this (and the
/// capabilities it has: `Backend::outbox` with `outbox`, `Backend::journal` with `flow`), behind
/// one cargo feature, with one registration line in `store/db.rs`.
pub trait Backend: Records + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The backend's name, as [`Db::backend`](crate::Db::backend) reports
    /// it and as a flow's local steps are keyed (`postgres`, `sqlite`).
    const NAME: &'static str;

    /// Applies the library's pending migrations in the store's tables.
    fn migrate(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The library's own migrations on this backend (none by default), for
    /// an application that applies them with its own in one transaction.
    fn library_migrations(&self) -> Vec<Migration> {
        Vec::new()
    }

    /// Applies an application's migrations through the library's runner
    /// (nothing to migrate by default).
    fn migrate_with(
        &self,
        list: &[Migration],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = list;
        std::future::ready(Ok(()))
    }

    /// Checks that the database answers.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Versions of the library's migrations the database has not applied.
    fn pending_migrations(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// `/readyz`'s question, within `within` (the caller bounds it too):
    /// the pending migrations by default.
    fn ready(
        &self,
        within: Duration,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        let _ = within;
        self.pending_migrations()
    }

    /// The connection pool's figures.
    fn pool_status(&self) -> PoolStatus;

    /// Closes the pool's connections (at shutdown).
    fn close(&self);

    /// Whether the store holds only the idempotency layer's records (no
    /// transaction to join, no outbox) and expires them itself.
    fn lease_only(&self) -> bool {
        false
    }

    /// `(batches, writes)` group-committed so far, on a store that batches
    /// its commits.
    fn group_commits(&self) -> Option<(u64, u64)> {
        None
    }

    /// The store's outbox, if it has one.
    #[cfg(feature = "outbox")]
    fn outbox(&self) -> Option<&dyn OutboxStore> {
        None
    }

    /// The store's step journal, if it has one.
    #[cfg(feature = "flow")]
    #[doc(hidden)]
    #[allow(private_interfaces)]
    fn journal(&self) -> Option<&dyn crate::store::flow::JournalStore> {
        None
    }
}

/// How a backend connects to a URL (without migrating).
pub(crate) type Connect = for<'a> fn(
    &'a str,
    &'a StoreSettings,
) -> BoxFuture<'a, Result<Arc<dyn DynBackend>, StoreError>>;

/// One line of [`Db`](crate::Db)'s registration: how a backend recognises
/// its URLs and opens them.
#[derive(Clone, Copy)]
pub(crate) struct Opener {
    /// Whether `url` is this backend's.
    pub(crate) accepts: fn(&str) -> bool,
    /// Connects to `url` (without migrating).
    pub(crate) connect: Connect,
}

/// The outbox of a store: claims, settlements and the operator's views,
/// the way the outbox worker and the admin commands use them.
#[cfg(feature = "outbox")]
pub trait OutboxStore: Send + Sync {
    /// Claims up to `limit` due messages of `effects` for `lease_for`.
    fn claim_outbox<'a>(
        &'a self,
        effects: &'a [String],
        limit: u32,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Vec<crate::store::outbox::OutboxMessage>, StoreError>>;

    /// Ends a message's claim as `settlement` says; `false` when the claim
    /// was no longer this one's.
    fn settle_outbox<'a>(
        &'a self,
        message: &'a crate::store::outbox::OutboxMessage,
        sent_key: Option<&'a str>,
        settlement: &'a crate::store::outbox::Settlement,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let one = crate::store::outbox::OutboxOutcome {
                message: message.clone(),
                sent_key: sent_key.map(str::to_owned),
                settlement: settlement.clone(),
            };
            Ok(self.settle_outbox_batch(&[one]).await? == [true])
        })
    }

    /// Ends the claims of `outcomes` in one write, each fenced by its lease.
    fn settle_outbox_batch<'a>(
        &'a self,
        outcomes: &'a [crate::store::outbox::OutboxOutcome],
    ) -> BoxFuture<'a, Result<Vec<bool>, StoreError>>;

    /// The outbox's depth, oldest pending age and dead letters.
    fn outbox_stats(&self) -> BoxFuture<'_, Result<crate::store::outbox::OutboxStats, StoreError>>;

    /// Messages, oldest first: all, or those of one status.
    fn outbox_list<'a>(
        &'a self,
        status: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<crate::store::outbox::OutboxEntry>, StoreError>>;

    /// Sends dead or failed messages back to pending.
    fn outbox_retry(
        &self,
        id: Option<i64>,
        retention: Duration,
        force: bool,
    ) -> BoxFuture<'_, Result<crate::store::outbox::Requeued, StoreError>>;
}

/// [`Backend`] and [`Records`] with boxed futures, so that [`Db`](crate::Db)
/// can hold any backend behind one pointer.
pub(crate) trait DynBackend: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn as_any(&self) -> &dyn Any;
    fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>>;
    fn library_migrations(&self) -> Vec<Migration>;
    fn migrate_with<'a>(&'a self, list: &'a [Migration]) -> BoxFuture<'a, Result<(), StoreError>>;
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;
    fn pending_migrations(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;
    fn ready(&self, within: Duration) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;
    fn pool_status(&self) -> PoolStatus;
    fn close(&self);
    fn lease_only(&self) -> bool;
    fn group_commits(&self) -> Option<(u64, u64)>;
    #[cfg(feature = "outbox")]
    fn outbox(&self) -> Option<&dyn OutboxStore>;
    #[cfg(feature = "flow")]
    fn journal(&self) -> Option<&dyn crate::store::flow::JournalStore>;
    fn claim<'a>(
        &'a self,
        key: &'a RecordKey,
        claim: &'a NewClaim,
    ) -> BoxFuture<'a, Result<Claimed, StoreError>>;
    fn read<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Read, StoreError>>;
    fn take_over<'a>(
        &'a self,
        key: &'a RecordKey,
        previous: &'a Record,
        claim: &'a NewClaim,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: ClaimToken,
        response: &'a StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: ClaimToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn trim(
        &self,
        retention: Duration,
        batch: u32,
    ) -> BoxFuture<'_, Result<TrimReport, StoreError>>;
    fn expires_records(&self) -> bool;
}

impl<B: Backend> DynBackend for B {
    fn name(&self) -> &'static str {
        B::NAME
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(Backend::migrate(self))
    }
    fn library_migrations(&self) -> Vec<Migration> {
        Backend::library_migrations(self)
    }
    fn migrate_with<'a>(&'a self, list: &'a [Migration]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Backend::migrate_with(self, list))
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(Backend::ping(self))
    }
    fn pending_migrations(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(Backend::pending_migrations(self))
    }
    fn ready(&self, within: Duration) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(Backend::ready(self, within))
    }
    fn pool_status(&self) -> PoolStatus {
        Backend::pool_status(self)
    }
    fn close(&self) {
        Backend::close(self);
    }
    fn lease_only(&self) -> bool {
        Backend::lease_only(self)
    }
    fn group_commits(&self) -> Option<(u64, u64)> {
        Backend::group_commits(self)
    }
    #[cfg(feature = "outbox")]
    fn outbox(&self) -> Option<&dyn OutboxStore> {
        Backend::outbox(self)
    }
    #[cfg(feature = "flow")]
    fn journal(&self) -> Option<&dyn crate::store::flow::JournalStore> {
        Backend::journal(self)
    }
    fn claim<'a>(
        &'a self,
        key: &'a RecordKey,
        claim: &'a NewClaim,
    ) -> BoxFuture<'a, Result<Claimed, StoreError>> {
        Box::pin(Records::claim(self, key, claim))
    }
    fn read<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Read, StoreError>> {
        Box::pin(Records::read(self, key))
    }
    fn take_over<'a>(
        &'a self,
        key: &'a RecordKey,
        previous: &'a Record,
        claim: &'a NewClaim,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(Records::take_over(self, key, previous, claim))
    }
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: ClaimToken,
        response: &'a StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(Records::complete(
            self,
            key,
            token,
            response,
            replay_ttl,
            resource_id,
        ))
    }
    fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: ClaimToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(Records::release(self, key, token))
    }
    fn trim(
        &self,
        retention: Duration,
        batch: u32,
    ) -> BoxFuture<'_, Result<TrimReport, StoreError>> {
        Box::pin(Records::trim(self, retention, batch))
    }
    fn expires_records(&self) -> bool {
        Records::expires_records(self)
    }
}

/// A store whose transactions [`in_transaction`](crate::in_transaction)
/// joins: the capability a SQL backend adds to [`Backend`]. It runs the
/// engine in one new transaction (claim, the caller's effect with the open
/// transaction, the stored response) and commits only when the response is
/// stored.
pub trait Transactional: Backend {
    /// The open transaction an effect receives: the driver's transaction
    /// with the store's table names (and `enqueue` into its outbox).
    type Tx<'t>;
    /// What an effect answers on this backend: a boxed future on an async
    /// driver, the value itself on a blocking one.
    type Answer<'t, R: 't>;

    /// Runs `effect` once under `key` in one transaction of this store
    /// (`lock_timeout`: a `SET LOCAL` where the backend has one).
    fn transaction<'a, E, F>(
        &'a self,
        key: &'a RecordKey,
        fingerprint: idemkey_core::Fingerprint,
        policy: crate::idempotency::Policy,
        lock_timeout: Option<Duration>,
        effect: F,
    ) -> impl Future<Output = Result<crate::idempotency::Outcome<()>, crate::idempotency::Error<E>>>
    + Send
    + 'a
    where
        E: Send + 'static,
        F: Effect<Self, E>;
}

/// An effect run in a transaction of `B`: each backend implements it for
/// the closures over its own transaction (`|tx| ...`), so a closure is
/// typed by that backend's transaction through the trait.
pub trait Effect<B: Transactional, E: 'static>: Send + 'static {
    /// Runs the effect with the open transaction.
    fn run<'t>(self, tx: B::Tx<'t>) -> B::Answer<'t, Result<StoredResponse, E>>;
}

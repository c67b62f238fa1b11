//! sqlx's PostgreSQL behind the store's seam: its [`Backend`] lifecycle,
//! its outbox (and, in flow.rs, its step journal) as capabilities, and the
//! line that registers it with [`Db`](crate::Db).

use std::sync::Arc;

use super::db::SqlxPgDb;
use crate::error::StoreError;
use crate::store::StoreSettings;
use crate::store::backend::{Backend, BoxFuture, DynBackend, Opener};
use crate::store::migrations::Migration;
use crate::store::pool::PoolStatus;

/// How [`Db`](crate::Db) recognises and opens a PostgreSQL URL for sqlx: tried after
/// the tokio-postgres backend, so it answers `postgres://` in a build
/// without that one (with both, wrap a pool yourself: `Db::new` of
/// [`SqlxPgDb::from_pool`]).
pub(crate) const OPENER: Opener = Opener { accepts, connect };

fn accepts(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

fn connect<'a>(
    url: &'a str,
    settings: &'a StoreSettings,
) -> BoxFuture<'a, Result<Arc<dyn DynBackend>, StoreError>> {
    Box::pin(
        async move { Ok(Arc::new(SqlxPgDb::connect(url, settings).await?) as Arc<dyn DynBackend>) },
    )
}

impl Backend for SqlxPgDb {
    const NAME: &'static str = "sqlx-postgres";

    async fn migrate(&self) -> Result<(), StoreError> {
        SqlxPgDb::migrate(self).await
    }

    fn library_migrations(&self) -> Vec<Migration> {
        SqlxPgDb::library_migrations()
    }

    async fn migrate_with(&self, list: &[Migration]) -> Result<(), StoreError> {
        SqlxPgDb::migrate_with(self, list).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        SqlxPgDb::ping(self).await
    }

    async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        SqlxPgDb::pending_migrations(self).await
    }

    fn pool_status(&self) -> PoolStatus {
        SqlxPgDb::pool_status(self)
    }

    fn close(&self) {
        SqlxPgDb::close(self);
    }

    #[cfg(feature = "outbox")]
    fn outbox(&self) -> Option<&dyn crate::store::backend::OutboxStore> {
        Some(self)
    }

    #[cfg(feature = "flow")]
    #[allow(private_interfaces)]
    fn journal(&self) -> Option<&dyn crate::store::flow::JournalStore> {
        Some(self)
    }
}

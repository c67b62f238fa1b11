//! PostgreSQL behind the store's seam: its [`Backend`] lifecycle, its
//! outbox and step journal as capabilities, and the line that registers it
//! with [`Db`](crate::Db).

use super::db::PgDb;
use crate::error::StoreError;
use std::sync::Arc;

use crate::store::backend::{Backend, BoxFuture, DynBackend, Opener};
use crate::store::migrations::Migration;
use crate::store::pool::PoolStatus;
use crate::store::settings::StoreSettings;

/// How [`Db`](crate::Db) recognises and opens a PostgreSQL URL (`postgres://`,
/// `postgresql://`, or libpq's `host=... dbname=...` form).
pub(crate) const OPENER: Opener = Opener { accepts, connect };

fn accepts(url: &str) -> bool {
    url.starts_with("postgres://")
        || url.starts_with("postgresql://")
        || (!url.contains("://") && super::conninfo::is_key_value(url))
}

fn connect<'a>(
    url: &'a str,
    settings: &'a StoreSettings,
) -> BoxFuture<'a, Result<Arc<dyn DynBackend>, StoreError>> {
    Box::pin(
        async move { Ok(Arc::new(PgDb::connect(url, settings).await?) as Arc<dyn DynBackend>) },
    )
}

impl Backend for PgDb {
    const NAME: &'static str = "postgres";

    async fn migrate(&self) -> Result<(), StoreError> {
        PgDb::migrate(self).await
    }

    fn library_migrations(&self) -> Vec<Migration> {
        PgDb::library_migrations()
    }

    async fn migrate_with(&self, list: &[Migration]) -> Result<(), StoreError> {
        PgDb::migrate_with(self, list).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        PgDb::ping(self).await
    }

    async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        PgDb::pending_migrations(self).await
    }

    fn pool_status(&self) -> PoolStatus {
        PgDb::pool_status(self)
    }

    fn close(&self) {
        PgDb::close(self);
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

//! SQLite behind the store's seam: its [`Backend`] lifecycle, its
//! outbox and step journal as capabilities, and the line that registers it
//! with [`Db`](crate::Db).

use std::time::Duration;

use super::db::SqliteDb;
use crate::error::StoreError;
use std::sync::Arc;

use crate::store::backend::{Backend, BoxFuture, DynBackend, Opener};
use crate::store::migrations::Migration;
use crate::store::pool::PoolStatus;
use crate::store::settings::StoreSettings;

/// How [`Db`](crate::Db) recognises and opens a SQLite URL: `sqlite://PATH`
/// (relative to the working directory; `sqlite:///abs/path` for an
/// absolute one).
pub(crate) const OPENER: Opener = Opener { accepts, connect };

fn accepts(url: &str) -> bool {
    url.starts_with("sqlite://")
}

fn connect<'a>(
    url: &'a str,
    settings: &'a StoreSettings,
) -> BoxFuture<'a, Result<Arc<dyn DynBackend>, StoreError>> {
    Box::pin(async move {
        let path = url.strip_prefix("sqlite://").unwrap_or_default();
        if path.is_empty() {
            return Err(StoreError::Unsupported(
                "sqlite:// needs a file path".into(),
            ));
        }
        Ok(Arc::new(SqliteDb::connect(path, settings).await?) as Arc<dyn DynBackend>)
    })
}

impl Backend for SqliteDb {
    const NAME: &'static str = "sqlite";

    async fn migrate(&self) -> Result<(), StoreError> {
        SqliteDb::migrate(self).await
    }

    fn library_migrations(&self) -> Vec<Migration> {
        SqliteDb::library_migrations()
    }

    async fn migrate_with(&self, list: &[Migration]) -> Result<(), StoreError> {
        SqliteDb::migrate_with(self, list).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        SqliteDb::ping(self).await
    }

    async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        SqliteDb::pending_migrations(self).await
    }

    async fn ready(&self, within: Duration) -> Result<Vec<String>, StoreError> {
        SqliteDb::ready(self, within).await
    }

    fn group_commits(&self) -> Option<(u64, u64)> {
        Some(SqliteDb::group_commits(self))
    }

    fn pool_status(&self) -> PoolStatus {
        SqliteDb::pool_status(self)
    }

    fn close(&self) {
        SqliteDb::close(self);
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

//! SQLite behind the store's seam: its [`Backend`] lifecycle, its
//! outbox and step journal as capabilities, and the line that registers it
//! with [`Db`](crate::store::Db).

use std::time::Duration;

use super::db::SqliteDb;
use crate::error::StoreError;
use crate::store::backend::{Backend, BoxFuture, Opener};
use crate::store::migrations::Migration;
use crate::store::pool::PoolStatus;
use crate::store::{Db, StoreSettings};

/// How [`Db`] recognises and opens a SQLite URL: `sqlite://PATH`
/// (relative to the working directory; `sqlite:///abs/path` for an
/// absolute one).
pub(crate) const OPENER: Opener = Opener {
    name: SqliteDb::NAME,
    accepts,
    connect,
};

fn accepts(url: &str) -> bool {
    url.starts_with("sqlite://")
}

fn connect<'a>(url: &'a str, settings: &'a StoreSettings) -> BoxFuture<'a, Result<Db, StoreError>> {
    Box::pin(async move {
        let path = url.strip_prefix("sqlite://").unwrap_or_default();
        if path.is_empty() {
            return Err(StoreError::Unsupported(
                "sqlite:// needs a file path".into(),
            ));
        }
        Ok(Db::new(SqliteDb::connect(path, settings).await?))
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

#[cfg(feature = "outbox")]
mod outbox {
    use super::*;
    use crate::store::backend::OutboxStore;
    use crate::store::outbox::{
        OutboxEntry, OutboxMessage, OutboxOutcome, OutboxStats, Requeued, Settlement,
    };

    impl OutboxStore for SqliteDb {
        fn claim_outbox<'a>(
            &'a self,
            effects: &'a [String],
            limit: u32,
            lease_for: Duration,
        ) -> BoxFuture<'a, Result<Vec<OutboxMessage>, StoreError>> {
            Box::pin(SqliteDb::claim_outbox(self, effects, limit, lease_for))
        }

        fn settle_outbox<'a>(
            &'a self,
            message: &'a OutboxMessage,
            sent_key: Option<&'a str>,
            settlement: &'a Settlement,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(SqliteDb::settle_outbox(self, message, sent_key, settlement))
        }

        fn settle_outbox_batch<'a>(
            &'a self,
            outcomes: &'a [OutboxOutcome],
        ) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
            Box::pin(SqliteDb::settle_outbox_batch(self, outcomes))
        }

        fn outbox_stats(&self) -> BoxFuture<'_, Result<OutboxStats, StoreError>> {
            Box::pin(SqliteDb::outbox_stats(self))
        }

        fn outbox_list<'a>(
            &'a self,
            status: Option<&'a str>,
            limit: u32,
        ) -> BoxFuture<'a, Result<Vec<OutboxEntry>, StoreError>> {
            Box::pin(SqliteDb::outbox_list(self, status, limit))
        }

        fn outbox_retry(
            &self,
            id: Option<i64>,
            retention: Duration,
            force: bool,
        ) -> BoxFuture<'_, Result<Requeued, StoreError>> {
            Box::pin(SqliteDb::outbox_retry(self, id, retention, force))
        }
    }
}

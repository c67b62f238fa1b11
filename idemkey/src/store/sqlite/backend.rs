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

#[cfg(feature = "flow")]
mod journal {
    use idemkey_core::Fingerprint;
    use uuid::Uuid;

    use super::*;
    use crate::idempotency::{self, Done, Outcome, Policy, RecordKey};
    use crate::store::flow::{FlowRow, JournalStore, JournalWork, NextMessage, Recorded};
    use crate::store::sqlite::connection::{immediate, sqlite_error};
    use crate::store::sqlite::flow::SqliteJournal;
    use crate::store::sqlite::transaction::run_in_transaction;
    use crate::store::step::StepError;

    impl JournalStore for SqliteDb {
        fn flow_load<'a>(
            &'a self,
            scope: &'a str,
            id: Uuid,
        ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
            Box::pin(SqliteDb::flow_load(self, scope, id))
        }

        fn flow_find<'a>(
            &'a self,
            scope: &'a str,
            operation: &'a str,
            key: &'a str,
        ) -> BoxFuture<'a, Result<Option<Uuid>, StoreError>> {
            Box::pin(SqliteDb::flow_find(self, scope, operation, key))
        }

        fn flow_next<'a>(
            &'a self,
            scope: &'a str,
            id: Uuid,
        ) -> BoxFuture<'a, Result<Option<NextMessage>, StoreError>> {
            Box::pin(SqliteDb::flow_next(self, scope, id))
        }

        fn flow_resume<'a>(
            &'a self,
            scope: &'a str,
            id: Uuid,
            within: std::time::Duration,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                SqliteDb::flow_resume(self, scope, id, within)
                    .await
                    .map(drop)
            })
        }

        fn flow_close_window<'a>(
            &'a self,
            scope: &'a str,
            operation: &'a str,
            key: &'a str,
            id: Uuid,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                SqliteDb::flow_close_window(self, scope, operation, key, id)
                    .await
                    .map(drop)
            })
        }

        fn journal_start<'a>(
            &'a self,
            key: &'a RecordKey,
            fingerprint: Fingerprint,
            policy: Policy,
            _lock_timeout: Option<std::time::Duration>,
            work: Box<dyn JournalWork<Result<Done<FlowRow>, StepError>>>,
        ) -> BoxFuture<'a, Result<Outcome<FlowRow>, idempotency::Error<StepError>>> {
            let (key, store) = (key.clone(), self.clone());
            Box::pin(async move {
                self.with_conn(move |conn| {
                    Ok(run_in_transaction(
                        &store,
                        conn,
                        &key,
                        fingerprint,
                        &policy,
                        |tx| {
                            let j = SqliteJournal {
                                conn: tx.connection(),
                                tables: tx.tables(),
                            };
                            pollster::block_on(work.on_local(&j))
                        },
                    ))
                })
                .await?
            })
        }

        fn journal_record(
            &self,
            work: Box<dyn JournalWork<Result<Recorded, StepError>>>,
        ) -> BoxFuture<'_, Result<Result<Recorded, StepError>, StoreError>> {
            let tables = self.tables().clone();
            Box::pin(self.with_conn(move |conn| {
                let tx = immediate(conn)?;
                let j = SqliteJournal {
                    conn: &tx,
                    tables: &tables,
                };
                let result = pollster::block_on(work.on_local(&j));
                if matches!(result, Ok(Recorded::Moved)) {
                    tx.commit().map_err(sqlite_error)?;
                } else {
                    tx.rollback().map_err(sqlite_error)?;
                }
                Ok(result)
            }))
        }
    }
}

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

#[cfg(feature = "outbox")]
mod outbox {
    use std::time::Duration;

    use super::*;
    use crate::store::backend::OutboxStore;
    use crate::store::outbox::{
        OutboxEntry, OutboxMessage, OutboxOutcome, OutboxStats, Requeued, Settlement,
    };

    impl OutboxStore for PgDb {
        fn claim_outbox<'a>(
            &'a self,
            effects: &'a [String],
            limit: u32,
            lease_for: Duration,
        ) -> BoxFuture<'a, Result<Vec<OutboxMessage>, StoreError>> {
            Box::pin(PgDb::claim_outbox(self, effects, limit, lease_for))
        }

        fn settle_outbox<'a>(
            &'a self,
            message: &'a OutboxMessage,
            sent_key: Option<&'a str>,
            settlement: &'a Settlement,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(PgDb::settle_outbox(self, message, sent_key, settlement))
        }

        fn settle_outbox_batch<'a>(
            &'a self,
            outcomes: &'a [OutboxOutcome],
        ) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
            Box::pin(PgDb::settle_outbox_batch(self, outcomes))
        }

        fn outbox_stats(&self) -> BoxFuture<'_, Result<OutboxStats, StoreError>> {
            Box::pin(PgDb::outbox_stats(self))
        }

        fn outbox_list<'a>(
            &'a self,
            status: Option<&'a str>,
            limit: u32,
        ) -> BoxFuture<'a, Result<Vec<OutboxEntry>, StoreError>> {
            Box::pin(PgDb::outbox_list(self, status, limit))
        }

        fn outbox_retry(
            &self,
            id: Option<i64>,
            retention: Duration,
            force: bool,
        ) -> BoxFuture<'_, Result<Requeued, StoreError>> {
            Box::pin(PgDb::outbox_retry(self, id, retention, force))
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
    use crate::store::postgres::error::db_error;
    use crate::store::postgres::flow::PgJournal;
    use crate::store::postgres::transaction::run_in_transaction;
    use crate::store::step::StepError;

    impl JournalStore for PgDb {
        fn flow_load<'a>(
            &'a self,
            scope: &'a str,
            id: Uuid,
        ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
            Box::pin(PgDb::flow_load(self, scope, id))
        }

        fn flow_find<'a>(
            &'a self,
            scope: &'a str,
            operation: &'a str,
            key: &'a str,
        ) -> BoxFuture<'a, Result<Option<Uuid>, StoreError>> {
            Box::pin(PgDb::flow_find(self, scope, operation, key))
        }

        fn flow_next<'a>(
            &'a self,
            scope: &'a str,
            id: Uuid,
        ) -> BoxFuture<'a, Result<Option<NextMessage>, StoreError>> {
            Box::pin(PgDb::flow_next(self, scope, id))
        }

        fn flow_resume<'a>(
            &'a self,
            scope: &'a str,
            id: Uuid,
            within: std::time::Duration,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move { PgDb::flow_resume(self, scope, id, within).await.map(drop) })
        }

        fn flow_close_window<'a>(
            &'a self,
            scope: &'a str,
            operation: &'a str,
            key: &'a str,
            id: Uuid,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                PgDb::flow_close_window(self, scope, operation, key, id)
                    .await
                    .map(drop)
            })
        }

        fn journal_start<'a>(
            &'a self,
            key: &'a RecordKey,
            fingerprint: Fingerprint,
            policy: Policy,
            lock_timeout: Option<std::time::Duration>,
            work: Box<dyn JournalWork<Result<Done<FlowRow>, StepError>>>,
        ) -> BoxFuture<'a, Result<Outcome<FlowRow>, idempotency::Error<StepError>>> {
            Box::pin(async move {
                let mut client = self.client().await?;
                run_in_transaction(
                    self,
                    &mut client,
                    key,
                    fingerprint,
                    &policy,
                    lock_timeout,
                    |tx| {
                        Box::pin(async move {
                            let j = PgJournal {
                                tx: tx.transaction(),
                                tables: tx.tables(),
                            };
                            work.on_shared(&j).await
                        })
                    },
                )
                .await
            })
        }

        fn journal_record(
            &self,
            work: Box<dyn JournalWork<Result<Recorded, StepError>>>,
        ) -> BoxFuture<'_, Result<Result<Recorded, StepError>, StoreError>> {
            Box::pin(async move {
                let mut client = self.client().await?;
                let tx = client.transaction().await.map_err(db_error)?;
                let j = PgJournal {
                    tx: &tx,
                    tables: self.tables(),
                };
                let result = work.on_shared(&j).await;
                if matches!(result, Ok(Recorded::Moved)) {
                    tx.commit().await.map_err(db_error)?;
                } else {
                    tx.rollback().await.map_err(db_error)?;
                }
                Ok(result)
            })
        }
    }
}

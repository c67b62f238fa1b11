//! The step journal's store on PostgreSQL: a flow's execution row, its
//! position and its first transaction (the key's claim, the journal's
//! statements and the stored answer in one), as the flow runner reaches
//! them through [`JournalStore`].

use super::db::PgDb;
use super::error::db_error;
use super::flow::{PgJournal, load};
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey};
use crate::store::StoreError;
use crate::store::backend::BoxFuture;
use crate::store::flow::{FlowRow, NextMessage};
use crate::store::flow::{JournalStore, JournalWork, Recorded};
use crate::store::postgres::transaction::run_in_transaction;
use crate::store::step::StepError;
use idemkey_core::Fingerprint;
use tokio_postgres::types::Type;
use uuid::Uuid;

/// A flow that ended in its first transaction: its window, stored open,
/// counts from now.
const CLOSE_WINDOW: &str = include_str!("sql/journal_close_window.sql");
const FIND: &str = include_str!("sql/journal_find.sql");
const NEXT: &str = include_str!("sql/journal_next.sql");
/// The next step due now: a backoff cut short (a live claim is left
/// alone), or a dead letter younger than $3 ms sent back to pending with
/// its attempts kept (so the next one looks the effect up first).
const RESUME: &str = include_str!("sql/journal_resume.sql");

impl JournalStore for PgDb {
    fn flow_load<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            load(&**client, self.tables(), scope, id, false).await
        })
    }

    fn flow_find<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Uuid>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_typed(
                    &self.tables().render_static(FIND),
                    &[
                        (&scope, Type::TEXT),
                        (&operation, Type::TEXT),
                        (&key, Type::TEXT),
                    ],
                )
                .await
                .map_err(db_error)?
                .into_iter()
                .next();
            row.map(|r| r.try_get(0).map_err(db_error)).transpose()
        })
    }

    fn flow_next<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<NextMessage>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_typed(
                    &self.tables().render_static(NEXT),
                    &[(&scope, Type::TEXT), (&id.to_string(), Type::TEXT)],
                )
                .await
                .map_err(db_error)?
                .into_iter()
                .next();
            row.map(|r| {
                Ok(NextMessage {
                    status: r.try_get(0).map_err(db_error)?,
                    attempts: r.try_get(1).map_err(db_error)?,
                    last_error: r.try_get(2).map_err(db_error)?,
                    maybe_sent: r.try_get(3).map_err(db_error)?,
                })
            })
            .transpose()
        })
    }

    fn flow_resume<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
        revive_within: std::time::Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute_typed(
                    &self.tables().render_static(RESUME),
                    &[
                        (&scope, Type::TEXT),
                        (&id.to_string(), Type::TEXT),
                        (&crate::duration::millis(revive_within), Type::INT8),
                    ],
                )
                .await
                .map_err(db_error)
                .map(drop)
        })
    }

    /// The window of execution `id`'s record, ended in its first
    /// transaction, counted from now.
    fn flow_close_window<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute_typed(
                    &self.tables().render_static(CLOSE_WINDOW),
                    &[
                        (&scope, Type::TEXT),
                        (&operation, Type::TEXT),
                        (&key, Type::TEXT),
                        (&id.to_string(), Type::TEXT),
                    ],
                )
                .await
                .map_err(db_error)
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

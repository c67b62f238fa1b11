//! The outbox's statements on PostgreSQL: enqueue in a caller's
//! transaction, claim with `FOR UPDATE SKIP LOCKED` under a lease, settle a
//! batch of claims in one statement (each under its own lease), and the
//! operator's figures and listings.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row};
use uuid::Uuid;

use super::db::PgDb;
use super::error::db_error;
use super::send;
use crate::duration::from_system_time;
use crate::duration::millis;
use crate::idempotency::RecordKey;
use crate::store::backend::{BoxFuture, OutboxStore};
use crate::store::outbox::{
    OutboxEntry, OutboxMessage, OutboxOutcome, OutboxStats, Requeued, SettleColumns,
};
use crate::store::{StoreError, Tables};

const ENQUEUE: &str = include_str!("sql/enqueue.sql");
const CLAIM: &str = include_str!("sql/outbox_claim.sql");
const SETTLE: &str = include_str!("sql/outbox_settle.sql");
const STATS: &str = include_str!("sql/outbox_stats.sql");
const LIST: &str = include_str!("sql/outbox_list.sql");
const RETRY: &str = include_str!("sql/outbox_retry.sql");

/// Puts an effect in the outbox of `tables`, in the caller's open
/// transaction `tx`; returns the message's id. Reached through
/// [`super::PgTx::enqueue`], which carries the store's names.
pub(super) async fn enqueue(
    tx: &(impl GenericClient + Sync),
    tables: &Tables,
    key: &RecordKey,
    effect: &str,
    resource: Option<&str>,
    payload: &str,
) -> Result<i64, StoreError> {
    let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
    let rows = send::query_in(
        tx,
        &tables.render_static(ENQUEUE),
        &[
            (&scope, Type::TEXT),
            (&operation, Type::TEXT),
            (&k, Type::TEXT),
            (&effect, Type::TEXT),
            (&resource, Type::TEXT),
            (&payload, Type::TEXT),
        ],
    )
    .await
    .map_err(db_error)?;
    rows.first()
        .ok_or_else(|| StoreError::Unavailable("enqueue returned no row".into()))?
        .try_get("id")
        .map_err(db_error)
}

/// A message's age from the store's milliseconds (none read: zero).
fn age_of(ms: Option<i64>) -> Duration {
    Duration::from_millis(ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0))
}

fn message_from_row(row: &Row, lease: Uuid) -> Result<OutboxMessage, StoreError> {
    let attempts: i32 = row.try_get("attempts").map_err(db_error)?;
    Ok(OutboxMessage {
        id: row.try_get("id").map_err(db_error)?,
        scope: row.try_get("scope").map_err(db_error)?,
        operation: row.try_get("operation").map_err(db_error)?,
        key: row.try_get("key").map_err(db_error)?,
        effect: row.try_get("effect").map_err(db_error)?,
        resource_id: row.try_get("resource_id").map_err(db_error)?,
        payload: row.try_get("payload").map_err(db_error)?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        sent_key: row.try_get("downstream_key").map_err(db_error)?,
        lease,
        age: age_of(row.try_get::<_, Option<i64>>("age_ms").ok().flatten()),
    })
}

impl OutboxStore for PgDb {
    fn claim_outbox<'a>(
        &'a self,
        effects: &'a [String],
        limit: u32,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Vec<OutboxMessage>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let lease = Uuid::new_v4();
            let rows = client
                .query_typed(
                    &self.tables().render_static(CLAIM),
                    &[
                        (&i64::from(limit), Type::INT8),
                        (&millis(lease_for), Type::INT8),
                        (&lease, Type::UUID),
                        (&effects, Type::TEXT_ARRAY),
                    ],
                )
                .await
                .map_err(db_error)?;
            rows.iter()
                .map(|row| message_from_row(row, lease))
                .collect()
        })
    }

    /// One statement for the whole batch: its columns as arrays, with their
    /// types (one round trip, no prepare, also behind a transaction pooler).
    fn settle_outbox_batch<'a>(
        &'a self,
        outcomes: &'a [OutboxOutcome],
    ) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
        Box::pin(async move {
            let c = SettleColumns::of(outcomes);
            let client = self.client().await?;
            let rows = client
                .query_typed(
                    &self.tables().render_static(SETTLE),
                    &[
                        (&c.ids, Type::INT8_ARRAY),
                        (&c.leases, Type::UUID_ARRAY),
                        (&c.statuses, Type::TEXT_ARRAY),
                        (&c.results, Type::TEXT_ARRAY),
                        (&c.errors, Type::TEXT_ARRAY),
                        (&c.delays, Type::INT8_ARRAY),
                        (&c.keys, Type::TEXT_ARRAY),
                        (&c.scopes, Type::TEXT_ARRAY),
                        (&c.sent, Type::BOOL_ARRAY),
                    ],
                )
                .await
                .map_err(db_error)?;
            let mut settled = HashSet::with_capacity(rows.len());
            for row in &rows {
                let scope: &str = row.try_get(0).map_err(db_error)?;
                let id: i64 = row.try_get(1).map_err(db_error)?;
                settled.insert((scope, id));
            }
            Ok(outcomes
                .iter()
                .map(|o| settled.contains(&(o.message.scope.as_str(), o.message.id)))
                .collect())
        })
    }

    fn outbox_stats(&self) -> BoxFuture<'_, Result<OutboxStats, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = self
                .query_pooled(&client, &self.tables().render_static(STATS), &[])
                .await
                .map_err(db_error)?;
            let row = rows
                .first()
                .ok_or_else(|| StoreError::Unavailable("outbox stats returned no row".into()))?;
            let count = |name| -> Result<u64, StoreError> {
                let n: Option<i64> = row.try_get(name).map_err(db_error)?;
                Ok(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
            };
            Ok(OutboxStats {
                pending: count("pending")?,
                oldest_pending_ms: count("oldest_ms")?,
                dead: count("dead")?,
            })
        })
    }

    fn outbox_list<'a>(
        &'a self,
        status: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<OutboxEntry>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = self
                .query_pooled(
                    &client,
                    &self.tables().render_static(LIST),
                    &[(&status, Type::TEXT), (&i64::from(limit), Type::INT8)],
                )
                .await
                .map_err(db_error)?;
            rows.iter()
                .map(|row| {
                    let attempts: i32 = row.try_get("attempts").map_err(db_error)?;
                    let created: SystemTime = row.try_get("created_at").map_err(db_error)?;
                    Ok(OutboxEntry {
                        id: row.try_get("id").map_err(db_error)?,
                        scope: row.try_get("scope").map_err(db_error)?,
                        effect: row.try_get("effect").map_err(db_error)?,
                        resource_id: row.try_get("resource_id").map_err(db_error)?,
                        status: row.try_get("status").map_err(db_error)?,
                        attempts: u32::try_from(attempts).unwrap_or(0),
                        downstream_key: row.try_get("downstream_key").map_err(db_error)?,
                        result: row.try_get("result").map_err(db_error)?,
                        last_error: row.try_get("last_error").map_err(db_error)?,
                        created_at: from_system_time(created),
                    })
                })
                .collect()
        })
    }

    fn outbox_retry(
        &self,
        id: Option<i64>,
        retention: Duration,
        force: bool,
    ) -> BoxFuture<'_, Result<Requeued, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = self
                .query_pooled(
                    &client,
                    &self.tables().render_static(RETRY),
                    &[
                        (&id, Type::INT8),
                        (&millis(retention), Type::INT8),
                        (&force, Type::BOOL),
                    ],
                )
                .await
                .map_err(db_error)?;
            let row = rows
                .first()
                .ok_or_else(|| StoreError::Unavailable("outbox retry returned no row".into()))?;
            let requeued: i64 = row.try_get("requeued").map_err(db_error)?;
            Ok(Requeued {
                requeued: u64::try_from(requeued).unwrap_or(0),
                too_old: row.try_get("too_old").map_err(db_error)?,
            })
        })
    }
}

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
use crate::store::outbox::{
    OutboxEntry, OutboxMessage, OutboxOutcome, OutboxStats, Requeued, Settlement,
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

impl PgDb {
    pub(crate) async fn claim_outbox(
        &self,
        effects: &[String],
        limit: u32,
        lease_for: Duration,
    ) -> Result<Vec<OutboxMessage>, StoreError> {
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
    }

    pub(crate) async fn settle_outbox(
        &self,
        message: &OutboxMessage,
        sent_key: Option<&str>,
        settlement: &Settlement,
    ) -> Result<bool, StoreError> {
        let one = OutboxOutcome {
            message: message.clone(),
            sent_key: sent_key.map(str::to_owned),
            settlement: settlement.clone(),
        };
        Ok(self.settle_outbox_batch(&[one]).await? == [true])
    }

    /// One statement for the whole batch: its columns as arrays, with their
    /// types (one round trip, no prepare, also behind a transaction pooler).
    pub(crate) async fn settle_outbox_batch(
        &self,
        outcomes: &[OutboxOutcome],
    ) -> Result<Vec<bool>, StoreError> {
        let n = outcomes.len();
        let (mut ids, mut leases, mut statuses) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut results, mut errors, mut delays) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut keys, mut scopes, mut sent) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for outcome in outcomes {
            let (result, error, delay) = outcome.settlement.columns();
            ids.push(outcome.message.id);
            leases.push(outcome.message.lease);
            statuses.push(outcome.settlement.status());
            results.push(result);
            errors.push(error);
            delays.push(delay);
            keys.push(outcome.sent_key.as_deref());
            scopes.push(outcome.message.scope.as_str());
            sent.push(outcome.settlement.was_sent());
        }
        let client = self.client().await?;
        let rows = client
            .query_typed(
                &self.tables().render_static(SETTLE),
                &[
                    (&ids, Type::INT8_ARRAY),
                    (&leases, Type::UUID_ARRAY),
                    (&statuses, Type::TEXT_ARRAY),
                    (&results, Type::TEXT_ARRAY),
                    (&errors, Type::TEXT_ARRAY),
                    (&delays, Type::INT8_ARRAY),
                    (&keys, Type::TEXT_ARRAY),
                    (&scopes, Type::TEXT_ARRAY),
                    (&sent, Type::BOOL_ARRAY),
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
    }

    pub(crate) async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
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
    }

    pub(crate) async fn outbox_list(
        &self,
        status: Option<&str>,
        limit: u32,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
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
    }

    pub(crate) async fn outbox_retry(
        &self,
        id: Option<i64>,
        retention: Duration,
        force: bool,
    ) -> Result<Requeued, StoreError> {
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
    }
}

//! The outbox on sqlx: the tokio-postgres backend's statements (its
//! `.sql` files), enqueue in your transaction, claim under a lease, settle
//! a batch in one statement, and the operator's figures and listings.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use time::OffsetDateTime;
use uuid::Uuid;

use super::db::SqlxPgDb;
use super::error::sqlx_error;
use super::records::unix_millis;
use super::send::{query, rendered};
use crate::duration::millis;
use crate::idempotency::RecordKey;
use crate::store::StoreError;
use crate::store::backend::{BoxFuture, OutboxStore};
use crate::store::outbox::{
    OutboxEntry, OutboxMessage, OutboxOutcome, OutboxStats, Requeued, SettleColumns,
};

const ENQUEUE: &str = include_str!("../postgres/sql/enqueue.sql");
const CLAIM: &str = include_str!("../postgres/sql/outbox_claim.sql");
const SETTLE: &str = include_str!("../postgres/sql/outbox_settle.sql");
const STATS: &str = include_str!("../postgres/sql/outbox_stats.sql");
const LIST: &str = include_str!("../postgres/sql/outbox_list.sql");
const RETRY: &str = include_str!("../postgres/sql/outbox_retry.sql");

fn message_from_row(row: &PgRow, lease: Uuid) -> Result<OutboxMessage, StoreError> {
    let attempts: i32 = row.try_get("attempts").map_err(sqlx_error)?;
    let age: Option<i64> = row.try_get("age_ms").map_err(sqlx_error)?;
    Ok(OutboxMessage {
        id: row.try_get("id").map_err(sqlx_error)?,
        scope: row.try_get("scope").map_err(sqlx_error)?,
        operation: row.try_get("operation").map_err(sqlx_error)?,
        key: row.try_get("key").map_err(sqlx_error)?,
        effect: row.try_get("effect").map_err(sqlx_error)?,
        resource_id: row.try_get("resource_id").map_err(sqlx_error)?,
        payload: row.try_get("payload").map_err(sqlx_error)?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        sent_key: row.try_get("downstream_key").map_err(sqlx_error)?,
        lease,
        age: Duration::from_millis(age.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0)),
    })
}

impl SqlxPgDb {
    /// Puts an effect in this store's outbox on `conn` (an open
    /// transaction); returns the message's id.
    pub(super) async fn enqueue_on(
        &self,
        conn: &mut PgConnection,
        key: &RecordKey,
        effect: &str,
        resource: Option<&str>,
        payload: &str,
    ) -> Result<i64, StoreError> {
        query(&rendered(self.tables(), ENQUEUE), self.persistent())
            .bind(key.scope.as_str())
            .bind(key.operation.as_str())
            .bind(key.key.as_str())
            .bind(effect)
            .bind(resource)
            .bind(payload)
            .fetch_one(conn)
            .await
            .map_err(sqlx_error)?
            .try_get("id")
            .map_err(sqlx_error)
    }
}

impl OutboxStore for SqlxPgDb {
    /// Claims up to `limit` due messages of `effects` for `lease_for`.
    fn claim_outbox<'a>(
        &'a self,
        effects: &'a [String],
        limit: u32,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Vec<OutboxMessage>, StoreError>> {
        Box::pin(async move {
            let lease = Uuid::new_v4();
            let mut s = self.session().await?;
            let rows = query(&rendered(self.tables(), CLAIM), self.persistent())
                .bind(i64::from(limit))
                .bind(millis(lease_for))
                .bind(lease)
                .bind(effects)
                .fetch_all(s.conn())
                .await
                .map_err(sqlx_error)?;
            s.finish().await?;
            rows.iter()
                .map(|row| message_from_row(row, lease))
                .collect()
        })
    }

    /// Ends the claims of `outcomes` in one statement, each fenced by its
    /// own lease: for each, whether it was settled.
    fn settle_outbox_batch<'a>(
        &'a self,
        outcomes: &'a [OutboxOutcome],
    ) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
        Box::pin(async move {
            let c = SettleColumns::of(outcomes);
            let mut s = self.session().await?;
            let rows = query(&rendered(self.tables(), SETTLE), self.persistent())
                .bind(&c.ids)
                .bind(&c.leases)
                .bind(&c.statuses)
                .bind(&c.results)
                .bind(&c.errors)
                .bind(&c.delays)
                .bind(&c.keys)
                .bind(&c.scopes)
                .bind(&c.sent)
                .fetch_all(s.conn())
                .await
                .map_err(sqlx_error)?;
            s.finish().await?;
            let mut settled = HashSet::with_capacity(rows.len());
            for row in &rows {
                let scope: String = row.try_get(0).map_err(sqlx_error)?;
                let id: i64 = row.try_get(1).map_err(sqlx_error)?;
                settled.insert((scope, id));
            }
            Ok(outcomes
                .iter()
                .map(|o| settled.contains(&(o.message.scope.clone(), o.message.id)))
                .collect())
        })
    }

    /// The outbox's depth, oldest pending age and dead letters, at the
    /// database's clock.
    fn outbox_stats(&self) -> BoxFuture<'_, Result<OutboxStats, StoreError>> {
        Box::pin(async move {
            let mut s = self.session().await?;
            let row = query(&rendered(self.tables(), STATS), self.persistent())
                .fetch_one(s.conn())
                .await
                .map_err(sqlx_error)?;
            s.finish().await?;
            let count = |name| -> Result<u64, StoreError> {
                let n: Option<i64> = row.try_get(name).map_err(sqlx_error)?;
                Ok(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
            };
            Ok(OutboxStats {
                pending: count("pending")?,
                oldest_pending_ms: count("oldest_ms")?,
                dead: count("dead")?,
            })
        })
    }

    /// Messages, oldest first: all, or those of one status.
    fn outbox_list<'a>(
        &'a self,
        status: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<OutboxEntry>, StoreError>> {
        Box::pin(async move {
            let mut s = self.session().await?;
            let rows = query(&rendered(self.tables(), LIST), self.persistent())
                .bind(status)
                .bind(i64::from(limit))
                .fetch_all(s.conn())
                .await
                .map_err(sqlx_error)?;
            s.finish().await?;
            rows.iter()
                .map(|row| {
                    let attempts: i32 = row.try_get("attempts").map_err(sqlx_error)?;
                    let created: OffsetDateTime = row.try_get("created_at").map_err(sqlx_error)?;
                    Ok(OutboxEntry {
                        id: row.try_get("id").map_err(sqlx_error)?,
                        scope: row.try_get("scope").map_err(sqlx_error)?,
                        effect: row.try_get("effect").map_err(sqlx_error)?,
                        resource_id: row.try_get("resource_id").map_err(sqlx_error)?,
                        status: row.try_get("status").map_err(sqlx_error)?,
                        attempts: u32::try_from(attempts).unwrap_or(0),
                        downstream_key: row.try_get("downstream_key").map_err(sqlx_error)?,
                        result: row.try_get("result").map_err(sqlx_error)?,
                        last_error: row.try_get("last_error").map_err(sqlx_error)?,
                        created_at: unix_millis(created),
                    })
                })
                .collect()
        })
    }

    /// Sends dead or failed messages back to pending (those older than
    /// `retention` at the database's clock stay unless `force`).
    fn outbox_retry(
        &self,
        id: Option<i64>,
        retention: Duration,
        force: bool,
    ) -> BoxFuture<'_, Result<Requeued, StoreError>> {
        Box::pin(async move {
            let mut s = self.session().await?;
            let row = query(&rendered(self.tables(), RETRY), self.persistent())
                .bind(id)
                .bind(millis(retention))
                .bind(force)
                .fetch_one(s.conn())
                .await
                .map_err(sqlx_error)?;
            s.finish().await?;
            let requeued: i64 = row.try_get("requeued").map_err(sqlx_error)?;
            Ok(Requeued {
                requeued: u64::try_from(requeued).unwrap_or(0),
                too_old: row.try_get("too_old").map_err(sqlx_error)?,
            })
        })
    }
}

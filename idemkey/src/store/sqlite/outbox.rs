//! The outbox's statements on SQLite: claim under a lease, settle a batch
//! of claims in one transaction (each under its own lease), and the
//! operator's figures and listings. (Enqueueing runs in the caller's
//! transaction: [`super::SqliteTx::enqueue`].)

use std::time::Duration;

use rusqlite::{Connection, params};
use uuid::Uuid;

use super::connection::{immediate, sqlite_error};
use super::db::SqliteDb;
use crate::duration::millis;
use crate::idempotency::RecordKey;
use crate::store::backend::{BoxFuture, OutboxStore};
use crate::store::outbox::{OutboxEntry, OutboxMessage, OutboxOutcome, OutboxStats, Requeued};
use crate::store::{StoreError, Tables};
use idemkey_core::UnixMillis;

const ENQUEUE: &str = include_str!("sql/enqueue.sql");
const CLAIM: &str = include_str!("sql/outbox_claim.sql");
const SETTLE: &str = include_str!("sql/outbox_settle.sql");
const STATS: &str = include_str!("sql/outbox_stats.sql");
const LIST: &str = include_str!("sql/outbox_list.sql");
const RETRY: &str = include_str!("sql/outbox_retry.sql");
const RETRY_TOO_OLD: &str = include_str!("sql/outbox_retry_too_old.sql");

/// How long the figures wait for the connection before giving up.
const STATS_WAIT: Duration = Duration::from_millis(200);

/// Puts an effect in the outbox of `tables`, in the caller's open
/// transaction `conn`; returns the message's id. Reached through
/// [`super::SqliteTx::enqueue`], which carries the store's names.
pub(super) fn enqueue(
    conn: &Connection,
    tables: &Tables,
    key: &RecordKey,
    effect: &str,
    resource: Option<&str>,
    payload: &str,
) -> Result<i64, StoreError> {
    conn.prepare_cached(&tables.render_static(ENQUEUE))
        .and_then(|mut stmt| {
            stmt.execute(params![
                key.scope.as_str(),
                key.operation.as_str(),
                key.key.as_str(),
                effect,
                resource,
                payload
            ])
        })
        .map_err(sqlite_error)?;
    // The row just inserted on this connection (outbox has no trigger).
    Ok(conn.last_insert_rowid())
}

impl OutboxStore for SqliteDb {
    fn claim_outbox<'a>(
        &'a self,
        effects: &'a [String],
        limit: u32,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Vec<OutboxMessage>, StoreError>> {
        Box::pin(async move {
            let effects = serde_json::to_string(effects).unwrap_or_default();
            let lease_ms = millis(lease_for);
            let tables = self.tables.clone();
            self.with_conn(move |conn| {
                let lease = Uuid::new_v4();
                let tx = immediate(conn)?;
                let messages = tx
                    .prepare_cached(&tables.render_static(CLAIM))
                    .and_then(|mut stmt| {
                        stmt.query_map(
                            params![i64::from(limit), lease_ms, lease.to_string(), effects],
                            |row| {
                                let attempts: i64 = row.get(7)?;
                                Ok(OutboxMessage {
                                    id: row.get(0)?,
                                    scope: row.get(1)?,
                                    operation: row.get(2)?,
                                    key: row.get(3)?,
                                    effect: row.get(4)?,
                                    resource_id: row.get(5)?,
                                    payload: row.get(6)?,
                                    attempts: u32::try_from(attempts).unwrap_or(0),
                                    sent_key: row.get(8)?,
                                    lease,
                                    age: Duration::from_millis(
                                        u64::try_from(row.get::<_, i64>(9)?).unwrap_or(0),
                                    ),
                                })
                            },
                        )?
                        .collect::<rusqlite::Result<Vec<_>>>()
                    })
                    .map_err(sqlite_error)?;
                tx.commit().map_err(sqlite_error)?;
                Ok(messages)
            })
            .await
        })
    }

    /// The batch in one transaction: one commit (and sync) for all of
    /// them, each statement fenced by its own lease.
    fn settle_outbox_batch<'a>(
        &'a self,
        outcomes: &'a [OutboxOutcome],
    ) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
        Box::pin(async move {
            let outcomes = outcomes.to_vec();
            let tables = self.tables.clone();
            self.with_conn(move |conn| {
                let tx = immediate(conn)?;
                let settled = {
                    let mut stmt = tx
                        .prepare_cached(&tables.render_static(SETTLE))
                        .map_err(sqlite_error)?;
                    outcomes
                        .iter()
                        .map(|outcome| {
                            let (message, settlement) = (&outcome.message, &outcome.settlement);
                            let (result, error, delay) = settlement.columns();
                            stmt.execute(params![
                                message.id,
                                message.lease.to_string(),
                                settlement.status(),
                                result,
                                error,
                                delay,
                                outcome.sent_key,
                                i64::from(!settlement.was_sent()),
                            ])
                            .map(|n| n == 1)
                            .map_err(sqlite_error)
                        })
                        .collect::<Result<Vec<_>, _>>()?
                };
                tx.commit().map_err(sqlite_error)?;
                Ok(settled)
            })
            .await
        })
    }

    fn outbox_stats(&self) -> BoxFuture<'_, Result<OutboxStats, StoreError>> {
        Box::pin(async move {
            // For /metrics: never queue behind requests for the one connection.
            let tables = self.tables.clone();
            self.with_reader_within(STATS_WAIT, move |conn| {
                conn.prepare_cached(&tables.render_static(STATS))
                    .and_then(|mut stmt| {
                        stmt.query_row([], |row| {
                            let count = |i| -> rusqlite::Result<u64> {
                                let n: Option<i64> = row.get(i)?;
                                Ok(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
                            };
                            Ok(OutboxStats {
                                pending: count(0)?,
                                oldest_pending_ms: count(1)?,
                                dead: count(2)?,
                            })
                        })
                    })
                    .map_err(sqlite_error)
            })
            .await
        })
    }

    fn outbox_list<'a>(
        &'a self,
        status: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<OutboxEntry>, StoreError>> {
        Box::pin(async move {
            let status = status.map(str::to_owned);
            let tables = self.tables.clone();
            self.with_conn(move |conn| {
                conn.prepare_cached(&tables.render_static(LIST))
                    .and_then(|mut stmt| {
                        stmt.query_map(params![status, i64::from(limit)], |row| {
                            let attempts: i64 = row.get(5)?;
                            let created: i64 = row.get(9)?;
                            Ok(OutboxEntry {
                                id: row.get(0)?,
                                scope: row.get(1)?,
                                effect: row.get(2)?,
                                resource_id: row.get(3)?,
                                status: row.get(4)?,
                                attempts: u32::try_from(attempts).unwrap_or(0),
                                downstream_key: row.get(6)?,
                                result: row.get(7)?,
                                last_error: row.get(8)?,
                                created_at: UnixMillis(u64::try_from(created).unwrap_or(0)),
                            })
                        })?
                        .collect()
                    })
                    .map_err(sqlite_error)
            })
            .await
        })
    }

    fn outbox_retry(
        &self,
        id: Option<i64>,
        retention: Duration,
        force: bool,
    ) -> BoxFuture<'_, Result<Requeued, StoreError>> {
        Box::pin(async move {
            let retention = millis(retention);
            let tables = self.tables.clone();
            self.with_conn(move |conn| {
                let tx = immediate(conn)?;
                let too_old = tx
                    .prepare_cached(&tables.render_static(RETRY_TOO_OLD))
                    .and_then(|mut stmt| {
                        stmt.query_map(params![id, retention, force], |row| row.get(0))?
                            .collect::<rusqlite::Result<Vec<i64>>>()
                    })
                    .map_err(sqlite_error)?;
                let requeued = tx
                    .prepare_cached(&tables.render_static(RETRY))
                    .and_then(|mut stmt| stmt.execute(params![id, retention, force]))
                    .map_err(sqlite_error)?;
                tx.commit().map_err(sqlite_error)?;
                Ok(Requeued {
                    requeued: requeued as u64,
                    too_old,
                })
            })
            .await
        })
    }
}

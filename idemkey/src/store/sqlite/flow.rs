//! The step journal's statements on SQLite: the transitions of
//! [`crate::flow`] in a `BEGIN IMMEDIATE` transaction (which holds the
//! file's write lock, so two owners never record one step), and the reads
//! a state document needs. Blocking: the futures are ready when returned.

use std::future::ready;
use std::sync::Arc;

use serde_json::Value;

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::connection::{corrupt_in_row, sqlite_error};
use super::db::SqliteDb;
use crate::idempotency::StoredResponse;
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey};
use crate::store::Backend as _;
use crate::store::backend::BoxFuture;
use crate::store::flow::{FlowRow, FlowState, Journal, NextMessage, STEP_EFFECT, StepRow};
use crate::store::flow::{JournalStore, JournalWork, Recorded};
use crate::store::outbox::OutboxMessage;
use crate::store::sqlite::connection::immediate;
use crate::store::sqlite::transaction::run_in_savepoint;
use crate::store::step::{Local, LocalFn, StepContext, StepError};
use crate::store::{StoreError, Tables, decode_response};
use idemkey_core::Fingerprint;

const INSERT_FLOW: &str = "INSERT INTO idemkey_flows (id, scope, operation, key, flow, state, \
     position, input, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, \
     CAST(round(unixepoch('subsec') * 1000) AS INTEGER), \
     CAST(round(unixepoch('subsec') * 1000) AS INTEGER))";
/// Fenced by the claim: this lease token, and a lease not yet ended at the
/// store's clock (see the PostgreSQL statement).
const SETTLE: &str = "UPDATE outbox SET status = 'delivered', result = 'recorded', \
     downstream_key = ?3, settled_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER), \
     lease = NULL, lease_until = NULL \
     WHERE id = ?1 AND lease = ?2 AND status = 'pending' \
       AND lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)";
const INSERT_STEP: &str = "INSERT INTO idemkey_steps (scope, flow_id, idx, name, state, output, \
     attempts, downstream_key, recorded_at) VALUES (?8, ?1, ?2, ?3, ?4, ?5, ?6, ?7, \
     CAST(round(unixepoch('subsec') * 1000) AS INTEGER))";
/// The outbox's own enqueue: a step's message is an outbox message.
const ENQUEUE: &str = include_str!("sql/enqueue.sql");
const LOAD: &str = "SELECT id, scope, operation, key, flow, state, position, input, failed_step, \
     error, response_status, response_headers, response_body FROM idemkey_flows \
     WHERE scope = ?1 AND id = ?2";
const STEPS: &str = "SELECT idx, name, state, output, attempts, downstream_key FROM idemkey_steps \
                     WHERE scope = ?1 AND flow_id = ?2 ORDER BY idx";
const COMPENSATED: &str = "UPDATE idemkey_steps SET state = 'compensated', \
     compensated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) \
     WHERE scope = ?3 AND flow_id = ?1 AND idx = ?2 AND state = 'done'";
const UPDATE_FLOW: &str = "UPDATE idemkey_flows SET state = ?2, position = ?3, failed_step = ?4, \
     error = ?5, response_status = ?6, response_headers = ?7, response_body = ?8, \
     updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) \
     WHERE scope = ?9 AND id = ?1";
/// The replay window a flow's record asked for: its window less the open
/// one it was stored with ([`crate::store::flow::OPEN_WINDOW`]), or, for a
/// record stored before flows kept their window open, its whole window.
macro_rules! asked_window {
    () => {
        "(CASE WHEN replay_until - created_at >= 3155760000000 \
         THEN replay_until - created_at - 3155760000000 \
         ELSE replay_until - created_at END)"
    };
}
/// The final response, replayed for the window asked, counted from now
/// (the flow's end).
const FINISH_RECORD: &str = concat!(
    "UPDATE idempotency_records SET response_status = ?4, \
     response_headers = ?5, response_body = ?6, \
     replay_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ",
    asked_window!(),
    " WHERE scope = ?1 AND operation = ?2 AND key = ?3 AND resource_id = ?7 \
       AND status = 'completed'"
);
/// A flow that ended in its first transaction: its window, stored open,
/// counts from now.
const CLOSE_WINDOW: &str = concat!(
    "UPDATE idempotency_records \
     SET replay_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ",
    asked_window!(),
    " WHERE scope = ?1 AND operation = ?2 AND key = ?3 AND resource_id = ?4 \
       AND status = 'completed' AND replay_until - created_at >= 3155760000000"
);
const FIND: &str = "SELECT id FROM idemkey_flows WHERE scope = ?1 AND operation = ?2 AND key = ?3 \
                    ORDER BY created_at DESC, rowid DESC LIMIT 1";
const NEXT: &str = "SELECT status, attempts, last_error, \
     (attempts > 0 OR downstream_key IS NOT NULL) FROM outbox \
     WHERE scope = ?1 AND resource_id = ?2 AND effect = 'flow-step' \
       AND status IN ('pending', 'dead') ORDER BY id DESC LIMIT 1";
/// The next step due now: a backoff cut short (a live claim is left
/// alone), or a dead letter younger than ?3 ms sent back to pending with
/// its attempts kept (so the next one looks the effect up first).
const RESUME: &str = "UPDATE outbox SET available_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER), \
     status = 'pending', settled_at = NULL \
     WHERE scope = ?1 AND resource_id = ?2 AND effect = 'flow-step' \
       AND ((status = 'pending' \
             AND available_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) \
         OR (status = 'dead' \
             AND created_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?3))";

const TRIM: &str = "DELETE FROM idemkey_flows WHERE rowid IN (
        SELECT rowid FROM idemkey_flows
        WHERE state IN ('done', 'failed')
          AND updated_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1
        LIMIT ?2)";

/// Deletes up to `batch` executions that ended longer than `retention`
/// ago (their steps with them, by the foreign key), at the store's clock;
/// how many.
pub(crate) fn trim(
    conn: &Connection,
    tables: &Tables,
    retention: std::time::Duration,
    batch: u32,
) -> Result<u64, StoreError> {
    conn.prepare_cached(&tables.render_static(TRIM))
        .and_then(|mut stmt| {
            stmt.execute(params![
                crate::duration::millis(retention),
                i64::from(batch)
            ])
        })
        .map(|n| n as u64)
        .map_err(sqlite_error)
}

/// The journal on an open transaction.
pub(crate) struct SqliteJournal<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) tables: &'a Tables,
}

fn flow_from_row(row: &Row<'_>) -> rusqlite::Result<(FlowRow, String)> {
    let id: String = row.get(0)?;
    let state: String = row.get(5)?;
    let status: Option<i64> = row.get(10)?;
    let headers: Option<String> = row.get(11)?;
    let body: Option<Vec<u8>> = row.get(12)?;
    let response = decode_response(status, headers.as_deref(), body).map_err(corrupt_in_row)?;
    Ok((
        FlowRow {
            id: Uuid::try_parse(&id).unwrap_or_default(),
            scope: row.get(1)?,
            operation: row.get(2)?,
            key: row.get(3)?,
            flow: row.get(4)?,
            state: FlowState::parse(&state).unwrap_or(FlowState::Running),
            position: row.get(6)?,
            input: row.get(7)?,
            failed_step: row.get(8)?,
            error: row.get(9)?,
            response,
            steps: Vec::new(),
        },
        state,
    ))
}

fn load(
    conn: &Connection,
    tables: &Tables,
    scope: &str,
    id: Uuid,
) -> Result<Option<FlowRow>, StoreError> {
    let id_text = id.to_string();
    let found = conn
        .prepare_cached(&tables.render_static(LOAD))
        .and_then(|mut stmt| {
            stmt.query_row(params![scope, id_text], flow_from_row)
                .optional()
        })
        .map_err(sqlite_error)?;
    let Some((mut flow, state)) = found else {
        return Ok(None);
    };
    if FlowState::parse(&state).is_none() || flow.id != id {
        return Err(StoreError::Corrupt(format!(
            "flow {id_text}: state {state:?}"
        )));
    }
    flow.steps = conn
        .prepare_cached(&tables.render_static(STEPS))
        .and_then(|mut stmt| {
            stmt.query_map(params![scope, id_text], |r| {
                Ok(StepRow {
                    idx: r.get(0)?,
                    name: r.get(1)?,
                    state: r.get(2)?,
                    output: r.get(3)?,
                    attempts: r.get(4)?,
                    downstream_key: r.get(5)?,
                })
            })?
            .collect()
        })
        .map_err(sqlite_error)?;
    Ok(Some(flow))
}

impl SqliteJournal<'_> {
    fn exec(&self, sql: &'static str, args: impl rusqlite::Params) -> Result<usize, StoreError> {
        self.conn
            .prepare_cached(&self.tables.render_static(sql))
            .and_then(|mut stmt| stmt.execute(args))
            .map_err(sqlite_error)
    }
}

impl Journal for SqliteJournal<'_> {
    fn backend(&self) -> &'static str {
        SqliteDb::NAME
    }

    fn insert_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ready(
            self.conn
                .prepare_cached(&self.tables.render_static(INSERT_FLOW))
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        row.id.to_string(),
                        row.scope,
                        row.operation,
                        row.key,
                        row.flow,
                        row.state.as_str(),
                        row.position,
                        row.input
                    ])
                })
                .map(drop)
                .map_err(sqlite_error),
        ))
    }

    fn lock_flow<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
        Box::pin(ready(load(self.conn, self.tables, scope, id)))
    }

    fn settle<'a>(
        &'a self,
        message: &'a OutboxMessage,
        sent_key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(ready(
            self.conn
                .prepare_cached(&self.tables.render_static(SETTLE))
                .and_then(|mut stmt| {
                    stmt.execute(params![message.id, message.lease.to_string(), sent_key])
                })
                .map(|n| n == 1)
                .map_err(sqlite_error),
        ))
    }

    fn insert_step<'a>(
        &'a self,
        row: &'a FlowRow,
        step: &'a StepRow,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ready(
            self.conn
                .prepare_cached(&self.tables.render_static(INSERT_STEP))
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        row.id.to_string(),
                        step.idx,
                        step.name,
                        step.state,
                        step.output,
                        step.attempts,
                        step.downstream_key,
                        row.scope
                    ])
                })
                .map(drop)
                .map_err(sqlite_error),
        ))
    }

    fn compensated<'a>(
        &'a self,
        row: &'a FlowRow,
        idx: i32,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(ready(
            self.exec(COMPENSATED, params![row.id.to_string(), idx, row.scope])
                .map(|n| n == 1),
        ))
    }

    fn update_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>> {
        let status = row.response.as_ref().map(|r| i64::from(r.status));
        let headers = row.response.as_ref().map(StoredResponse::headers_json);
        let body = row.response.as_ref().and_then(|r| r.body.as_deref());
        Box::pin(ready(
            self.exec(
                UPDATE_FLOW,
                params![
                    row.id.to_string(),
                    row.state.as_str(),
                    row.position,
                    row.failed_step,
                    row.error,
                    status,
                    headers,
                    body,
                    row.scope
                ],
            )
            .map(drop),
        ))
    }

    fn enqueue<'a>(
        &'a self,
        row: &'a FlowRow,
        payload: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ready(
            self.conn
                .prepare_cached(&self.tables.render_static(ENQUEUE))
                .and_then(|mut stmt| {
                    // A step's message is found by its flow, not by its id.
                    stmt.execute(params![
                        row.scope,
                        row.operation,
                        row.key,
                        STEP_EFFECT,
                        row.id.to_string(),
                        payload
                    ])
                })
                .map(drop)
                .map_err(sqlite_error),
        ))
    }

    fn finish_record<'a>(
        &'a self,
        row: &'a FlowRow,
        response: &'a StoredResponse,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ready(
            self.exec(
                FINISH_RECORD,
                params![
                    row.scope,
                    row.operation,
                    row.key,
                    i64::from(response.status),
                    response.headers_json(),
                    response.body.as_deref(),
                    row.id.to_string()
                ],
            )
            .map(drop),
        ))
    }

    fn run_local<'a>(
        &'a self,
        f: &'a LocalFn,
        ctx: StepContext,
    ) -> BoxFuture<'a, Result<Value, StepError>> {
        // Run now, on the store's thread: the future holds only its result.
        Box::pin(ready(match f.downcast_ref::<SqliteLocalFn>() {
            Some(f) => f(self.conn, ctx),
            None => Err(StepError::Refused(format!(
                "step {} has no SQLite function",
                ctx.step
            ))),
        }))
    }
}

impl JournalStore for SqliteDb {
    fn flow_load<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let scope = scope.to_owned();
            self.with_reader(move |conn| load(conn, &tables, &scope, id))
                .await
        })
    }

    fn flow_find<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Uuid>, StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let args = (scope.to_owned(), operation.to_owned(), key.to_owned());
            self.with_reader(move |conn| {
                let id: Option<String> = conn
                    .prepare_cached(&tables.render_static(FIND))
                    .and_then(|mut stmt| {
                        stmt.query_row(params![args.0, args.1, args.2], |r| r.get(0))
                            .optional()
                    })
                    .map_err(sqlite_error)?;
                Ok(id.and_then(|id| Uuid::try_parse(&id).ok()))
            })
            .await
        })
    }

    fn flow_next<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<NextMessage>, StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let scope = scope.to_owned();
            self.with_reader(move |conn| {
                conn.prepare_cached(&tables.render_static(NEXT))
                    .and_then(|mut stmt| {
                        stmt.query_row(params![scope, id.to_string()], |r| {
                            Ok(NextMessage {
                                status: r.get(0)?,
                                attempts: r.get(1)?,
                                last_error: r.get(2)?,
                                maybe_sent: r.get(3)?,
                            })
                        })
                        .optional()
                    })
                    .map_err(sqlite_error)
            })
            .await
        })
    }

    fn flow_resume<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
        revive_within: std::time::Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let scope = scope.to_owned();
            let within = crate::duration::millis(revive_within);
            self.with_conn(move |conn| {
                conn.prepare_cached(&tables.render_static(RESUME))
                    .and_then(|mut stmt| stmt.execute(params![scope, id.to_string(), within]))
                    .map(|n| n as u64)
                    .map_err(sqlite_error)
            })
            .await
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
            let tables = self.tables().clone();
            let args = (scope.to_owned(), operation.to_owned(), key.to_owned());
            self.with_conn(move |conn| {
                conn.prepare_cached(&tables.render_static(CLOSE_WINDOW))
                    .and_then(|mut stmt| {
                        stmt.execute(params![args.0, args.1, args.2, id.to_string()])
                    })
                    .map(|n| n as u64)
                    .map_err(sqlite_error)
            })
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
        // Group-committed, as a new order is: its savepoint is kept only
        // when the first steps ran and the key's answer is stored, and the
        // caller is answered once the batch's one commit (one fsync) is
        // durable; the writer runs one transaction at a time either way.
        Box::pin(async move {
            self.group_commit(move |tx| {
                Ok(run_in_savepoint(
                    &store,
                    tx,
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

/// A SQLite local step's function, as [`Local::sqlite`] stores it.
type SqliteLocalFn =
    Arc<dyn Fn(&rusqlite::Connection, StepContext) -> Result<Value, StepError> + Send + Sync>;

impl Local {
    /// Its SQLite function, run in the open transaction (blocking, on the
    /// store's thread).
    #[must_use]
    pub fn sqlite<F>(self, f: F) -> Self
    where
        F: Fn(&rusqlite::Connection, StepContext) -> Result<Value, StepError>
            + Send
            + Sync
            + 'static,
    {
        let f: SqliteLocalFn = Arc::new(f);
        self.on(SqliteDb::NAME, Arc::new(f))
    }

    /// Its compensation on SQLite.
    #[must_use]
    pub fn sqlite_undo<F>(self, f: F) -> Self
    where
        F: Fn(&rusqlite::Connection, StepContext) -> Result<Value, StepError>
            + Send
            + Sync
            + 'static,
    {
        let f: SqliteLocalFn = Arc::new(f);
        self.undo_on(SqliteDb::NAME, Arc::new(f))
    }
}

//! The step journal on sqlx: the transitions of [`crate::flow`] in one
//! transaction, the reads a state document needs, and local steps whose
//! function receives the open transaction's connection
//! ([`Local::sqlx_postgres`]). The statements are the tokio-postgres
//! backend's (written there inline, so repeated here), every parameter
//! typed in the SQL.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use idemkey_core::Fingerprint;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, Row};
use tokio::sync::Mutex;
use uuid::Uuid;

use super::db::SqlxPgDb;
use super::error::sqlx_error;
use super::journal_sql::*;
use super::send::{query, rendered};
use super::transaction::run_in_transaction;
use crate::duration::millis;
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey, StoredResponse};
use crate::store::Backend as _;
use crate::store::backend::BoxFuture;
use crate::store::flow::{
    FlowRow, FlowState, Journal, JournalStore, JournalWork, NextMessage, Recorded, STEP_EFFECT,
    StepRow,
};
use crate::store::outbox::OutboxMessage;
use crate::store::step::{Local, LocalFn, StepContext, StepError};
use crate::store::{StoreError, decode_response};

/// The future a local step on sqlx returns: boxed, so that it may borrow
/// the connection.
pub type SqlxStepFuture<'t> = Pin<Box<dyn Future<Output = Result<Value, StepError>> + Send + 't>>;

/// A local step's function on sqlx, as [`Local::sqlx_postgres`] stores it.
type SqlxLocalFn =
    Arc<dyn for<'t> Fn(&'t mut PgConnection, StepContext) -> SqlxStepFuture<'t> + Send + Sync>;

impl Local {
    /// Its function on sqlx's PostgreSQL, run on the open transaction's
    /// connection (`sqlx::query(…).execute(&mut *conn)`).
    #[must_use]
    pub fn sqlx_postgres<F>(self, f: F) -> Self
    where
        F: for<'t> Fn(&'t mut PgConnection, StepContext) -> SqlxStepFuture<'t>
            + Send
            + Sync
            + 'static,
    {
        let f: SqlxLocalFn = Arc::new(f);
        self.on(SqlxPgDb::NAME, Arc::new(f))
    }

    /// Its compensation on sqlx's PostgreSQL.
    #[must_use]
    pub fn sqlx_postgres_undo<F>(self, f: F) -> Self
    where
        F: for<'t> Fn(&'t mut PgConnection, StepContext) -> SqlxStepFuture<'t>
            + Send
            + Sync
            + 'static,
    {
        let f: SqlxLocalFn = Arc::new(f);
        self.undo_on(SqlxPgDb::NAME, Arc::new(f))
    }
}

fn flow_from_row(row: &PgRow) -> Result<FlowRow, StoreError> {
    let state: String = row.try_get("state").map_err(sqlx_error)?;
    let status: Option<i32> = row.try_get("response_status").map_err(sqlx_error)?;
    let headers: Option<String> = row.try_get("response_headers").map_err(sqlx_error)?;
    let body: Option<Vec<u8>> = row.try_get("response_body").map_err(sqlx_error)?;
    let response = decode_response(status.map(i64::from), headers.as_deref(), body)?;
    Ok(FlowRow {
        id: row.try_get("id").map_err(sqlx_error)?,
        scope: row.try_get("scope").map_err(sqlx_error)?,
        operation: row.try_get("operation").map_err(sqlx_error)?,
        key: row.try_get("key").map_err(sqlx_error)?,
        flow: row.try_get("flow").map_err(sqlx_error)?,
        state: FlowState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("flow state {state:?}")))?,
        position: row.try_get("position").map_err(sqlx_error)?,
        input: row.try_get("input").map_err(sqlx_error)?,
        failed_step: row.try_get("failed_step").map_err(sqlx_error)?,
        error: row.try_get("error").map_err(sqlx_error)?,
        response,
        steps: Vec::new(),
    })
}

async fn load(
    db: &SqlxPgDb,
    conn: &mut PgConnection,
    scope: &str,
    id: Uuid,
    lock: bool,
) -> Result<Option<FlowRow>, StoreError> {
    let sql = if lock { LOAD_LOCKED } else { LOAD };
    let Some(row) = query(&rendered(db.tables(), sql), db.persistent())
        .bind(scope)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(sqlx_error)?
    else {
        return Ok(None);
    };
    let mut flow = flow_from_row(&row)?;
    let steps = query(&rendered(db.tables(), STEPS), db.persistent())
        .bind(scope)
        .bind(id)
        .fetch_all(conn)
        .await
        .map_err(sqlx_error)?;
    for step in &steps {
        flow.steps.push(StepRow {
            idx: step.try_get("idx").map_err(sqlx_error)?,
            name: step.try_get("name").map_err(sqlx_error)?,
            state: step.try_get("state").map_err(sqlx_error)?,
            output: step.try_get("output").map_err(sqlx_error)?,
            attempts: step.try_get("attempts").map_err(sqlx_error)?,
            downstream_key: step.try_get("downstream_key").map_err(sqlx_error)?,
        });
    }
    Ok(Some(flow))
}

/// The journal on one open transaction.
struct SqlxJournal<'a> {
    conn: Mutex<&'a mut PgConnection>,
    db: &'a SqlxPgDb,
}

impl SqlxJournal<'_> {
    /// Runs `sql` with `bind`'s parameters; how many rows it changed.
    async fn changed(
        &self,
        sql: &'static str,
        bind: impl FnOnce(
            sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>,
        )
            -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<u64, StoreError> {
        let mut conn = self.conn.lock().await;
        bind(query(
            &rendered(self.db.tables(), sql),
            self.db.persistent(),
        ))
        .execute(&mut **conn)
        .await
        .map(|done| done.rows_affected())
        .map_err(sqlx_error)
    }
}

impl Journal for SqlxJournal<'_> {
    fn backend(&self) -> &'static str {
        SqlxPgDb::NAME
    }

    fn insert_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.changed(INSERT_FLOW, |q| {
                q.bind(row.id)
                    .bind(&row.scope)
                    .bind(&row.operation)
                    .bind(&row.key)
                    .bind(&row.flow)
                    .bind(row.state.as_str())
                    .bind(row.position)
                    .bind(&row.input)
            })
            .await
            .map(drop)
        })
    }

    fn lock_flow<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
        Box::pin(async move { load(self.db, &mut **self.conn.lock().await, scope, id, true).await })
    }

    fn settle<'a>(
        &'a self,
        message: &'a OutboxMessage,
        sent_key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let n = self
                .changed(SETTLE, |q| {
                    q.bind(message.id)
                        .bind(message.lease)
                        .bind(sent_key)
                        .bind(&message.scope)
                })
                .await?;
            Ok(n == 1)
        })
    }

    fn insert_step<'a>(
        &'a self,
        row: &'a FlowRow,
        step: &'a StepRow,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.changed(INSERT_STEP, |q| {
                q.bind(row.id)
                    .bind(step.idx)
                    .bind(&step.name)
                    .bind(&step.state)
                    .bind(&step.output)
                    .bind(step.attempts)
                    .bind(&step.downstream_key)
                    .bind(&row.scope)
            })
            .await
            .map(drop)
        })
    }

    fn compensated<'a>(
        &'a self,
        row: &'a FlowRow,
        idx: i32,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let n = self
                .changed(COMPENSATED, |q| q.bind(row.id).bind(idx).bind(&row.scope))
                .await?;
            Ok(n == 1)
        })
    }

    fn update_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let response = row.response.as_ref();
            self.changed(UPDATE_FLOW, |q| {
                q.bind(row.id)
                    .bind(row.state.as_str())
                    .bind(row.position)
                    .bind(&row.failed_step)
                    .bind(&row.error)
                    .bind(response.map(|r| i32::from(r.status)))
                    .bind(response.map(StoredResponse::headers_json))
                    .bind(response.and_then(|r| r.body.as_deref()))
                    .bind(&row.scope)
            })
            .await
            .map(drop)
        })
    }

    fn enqueue<'a>(
        &'a self,
        row: &'a FlowRow,
        payload: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.changed(ENQUEUE, |q| {
                q.bind(&row.scope)
                    .bind(&row.operation)
                    .bind(&row.key)
                    .bind(STEP_EFFECT)
                    .bind(row.id.to_string())
                    .bind(payload)
            })
            .await
            .map(drop)
        })
    }

    fn finish_record<'a>(
        &'a self,
        row: &'a FlowRow,
        response: &'a StoredResponse,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.changed(FINISH_RECORD, |q| {
                q.bind(&row.scope)
                    .bind(&row.operation)
                    .bind(&row.key)
                    .bind(i32::from(response.status))
                    .bind(response.headers_json())
                    .bind(response.body.as_deref())
                    .bind(row.id.to_string())
            })
            .await
            .map(drop)
        })
    }

    fn run_local<'a>(
        &'a self,
        f: &'a LocalFn,
        ctx: StepContext,
    ) -> BoxFuture<'a, Result<Value, StepError>> {
        let Some(f) = f.downcast_ref::<SqlxLocalFn>() else {
            return Box::pin(std::future::ready(Err(StepError::Refused(format!(
                "step {} has no sqlx-postgres function",
                ctx.step
            )))));
        };
        Box::pin(async move {
            let mut conn = self.conn.lock().await;
            f(&mut conn, ctx).await
        })
    }
}

impl SqlxPgDb {
    /// `sql` on a connection of the pool; how many rows it changed.
    async fn pooled_change(
        &self,
        sql: &'static str,
        bind: impl FnOnce(
            sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>,
        )
            -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<(), StoreError> {
        let mut s = self.session().await?;
        bind(query(&rendered(self.tables(), sql), self.persistent()))
            .execute(s.conn())
            .await
            .map_err(sqlx_error)?;
        s.finish().await
    }
}

impl JournalStore for SqlxPgDb {
    fn flow_load<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
        Box::pin(async move {
            let mut s = self.session().await?;
            let row = load(self, s.conn(), scope, id, false).await?;
            s.finish().await?;
            Ok(row)
        })
    }

    fn flow_find<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Uuid>, StoreError>> {
        Box::pin(async move {
            let mut s = self.session().await?;
            let row = query(&rendered(self.tables(), FIND), self.persistent())
                .bind(scope)
                .bind(operation)
                .bind(key)
                .fetch_optional(s.conn())
                .await
                .map_err(sqlx_error)?;
            s.finish().await?;
            row.map(|r| r.try_get(0).map_err(sqlx_error)).transpose()
        })
    }

    fn flow_next<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<NextMessage>, StoreError>> {
        Box::pin(async move {
            let mut s = self.session().await?;
            let row = query(&rendered(self.tables(), NEXT), self.persistent())
                .bind(scope)
                .bind(id.to_string())
                .fetch_optional(s.conn())
                .await
                .map_err(sqlx_error)?;
            s.finish().await?;
            row.map(|r| {
                Ok(NextMessage {
                    status: r.try_get(0).map_err(sqlx_error)?,
                    attempts: r.try_get(1).map_err(sqlx_error)?,
                    last_error: r.try_get(2).map_err(sqlx_error)?,
                    maybe_sent: r.try_get(3).map_err(sqlx_error)?,
                })
            })
            .transpose()
        })
    }

    fn flow_resume<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
        within: std::time::Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.pooled_change(RESUME, move |q| {
            q.bind(scope).bind(id.to_string()).bind(millis(within))
        }))
    }

    fn flow_close_window<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.pooled_change(CLOSE_WINDOW, move |q| {
            q.bind(scope).bind(operation).bind(key).bind(id.to_string())
        }))
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
            let mut conn = self.pool().acquire().await.map_err(sqlx_error)?;
            run_in_transaction(
                self,
                &mut conn,
                key,
                fingerprint,
                &policy,
                lock_timeout,
                |mut tx| {
                    Box::pin(async move {
                        let db = tx.db();
                        let j = SqlxJournal {
                            conn: Mutex::new(&mut *tx),
                            db,
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
            let mut conn = self.pool().acquire().await.map_err(sqlx_error)?;
            let mut tx = conn.begin().await.map_err(sqlx_error)?;
            let result = {
                let j = SqlxJournal {
                    conn: Mutex::new(&mut *tx),
                    db: self,
                };
                work.on_shared(&j).await
            };
            if matches!(result, Ok(Recorded::Moved)) {
                tx.commit().await.map_err(sqlx_error)?;
            } else {
                tx.rollback().await.map_err(sqlx_error)?;
            }
            Ok(result)
        })
    }
}

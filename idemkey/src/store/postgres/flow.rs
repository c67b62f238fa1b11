//! The step journal's statements on PostgreSQL: the transitions of
//! [`crate::flow`] in a caller's transaction, and the reads a state
//! document needs. Statements go with their parameter types
//! (`*_typed`): one round trip each, no prepare, also behind a
//! transaction pooler. The execution's row is locked (`FOR UPDATE`) for the
//! whole recording transaction, so two owners never record one step.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row, Transaction};
use uuid::Uuid;

use super::db::PgDb;
use super::error::db_error;
use crate::idempotency::StoredResponse;
use crate::store::Backend as _;
use crate::store::backend::BoxFuture;
use crate::store::flow::{FlowRow, FlowState, Journal, STEP_EFFECT, StepRow};
use crate::store::outbox::OutboxMessage;
use crate::store::step::{Local, LocalFn, StepContext, StepError};
use crate::store::{StoreError, Tables, decode_response};

/// An execution's row, by scope and id (locked, the second, for a
/// recording transaction).
const LOAD: &str = include_str!("sql/journal_load.sql");
const LOAD_LOCKED: &str = include_str!("sql/journal_load_locked.sql");
const INSERT_FLOW: &str = include_str!("sql/journal_insert_flow.sql");
const STEPS: &str = include_str!("sql/journal_steps.sql");
/// Settles a step's message as recorded, fenced by its claim: this lease
/// token, and a lease not yet ended at the store's clock (an owner past its
/// lease records nothing, whether or not another worker claimed since).
const SETTLE: &str = include_str!("sql/journal_settle.sql");
const INSERT_STEP: &str = include_str!("sql/journal_insert_step.sql");
const COMPENSATED: &str = include_str!("sql/journal_compensated.sql");
const UPDATE_FLOW: &str = include_str!("sql/journal_update_flow.sql");
/// The outbox's own enqueue: a step's message is an outbox message.
const ENQUEUE: &str = include_str!("sql/enqueue.sql");
/// The final response, replayed for the window asked, counted from now
/// (the flow's end); maintenance looks at the record when it closes.
const FINISH_RECORD: &str = include_str!("sql/journal_finish_record.sql");

const TRIM: &str = include_str!("sql/journal_trim.sql");

/// Deletes up to `batch` executions that ended longer than `retention`
/// ago (their steps with them), at the store's clock; how many.
pub(crate) async fn trim(
    client: &impl GenericClient,
    tables: &Tables,
    retention: std::time::Duration,
    batch: u32,
) -> Result<u64, StoreError> {
    client
        .execute_typed(
            &tables.render_static(TRIM),
            &[
                (&crate::duration::millis(retention), Type::INT8),
                (&i64::from(batch), Type::INT8),
            ],
        )
        .await
        .map_err(db_error)
}

/// The journal on an open transaction.
pub(crate) struct PgJournal<'a, 'c> {
    pub(crate) tx: &'a Transaction<'c>,
    pub(crate) tables: &'a Tables,
}

fn flow_from_row(row: &Row) -> Result<FlowRow, StoreError> {
    let state: String = row.try_get("state").map_err(db_error)?;
    let status: Option<i32> = row.try_get("response_status").map_err(db_error)?;
    let headers: Option<String> = row.try_get("response_headers").map_err(db_error)?;
    let body: Option<Vec<u8>> = row.try_get("response_body").map_err(db_error)?;
    let response = decode_response(status.map(i64::from), headers.as_deref(), body)?;
    Ok(FlowRow {
        id: row.try_get("id").map_err(db_error)?,
        scope: row.try_get("scope").map_err(db_error)?,
        operation: row.try_get("operation").map_err(db_error)?,
        key: row.try_get("key").map_err(db_error)?,
        flow: row.try_get("flow").map_err(db_error)?,
        state: FlowState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("flow state {state:?}")))?,
        position: row.try_get("position").map_err(db_error)?,
        input: row.try_get("input").map_err(db_error)?,
        failed_step: row.try_get("failed_step").map_err(db_error)?,
        error: row.try_get("error").map_err(db_error)?,
        response,
        steps: Vec::new(),
    })
}

pub(super) async fn load(
    client: &impl GenericClient,
    tables: &Tables,
    scope: &str,
    id: Uuid,
    lock: bool,
) -> Result<Option<FlowRow>, StoreError> {
    let sql = if lock { LOAD_LOCKED } else { LOAD };
    let Some(row) = client
        .query_typed(
            &tables.render_static(sql),
            &[(&scope, Type::TEXT), (&id, Type::UUID)],
        )
        .await
        .map_err(db_error)?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let mut flow = flow_from_row(&row)?;
    let steps = client
        .query_typed(
            &tables.render_static(STEPS),
            &[(&scope, Type::TEXT), (&id, Type::UUID)],
        )
        .await
        .map_err(db_error)?;
    for step in &steps {
        flow.steps.push(StepRow {
            idx: step.try_get("idx").map_err(db_error)?,
            name: step.try_get("name").map_err(db_error)?,
            state: step.try_get("state").map_err(db_error)?,
            output: step.try_get("output").map_err(db_error)?,
            attempts: step.try_get("attempts").map_err(db_error)?,
            downstream_key: step.try_get("downstream_key").map_err(db_error)?,
        });
    }
    Ok(Some(flow))
}

impl Journal for PgJournal<'_, '_> {
    fn backend(&self) -> &'static str {
        PgDb::NAME
    }

    fn insert_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.tx
                .execute_typed(
                    &self.tables.render_static(INSERT_FLOW),
                    &[
                        (&row.id, Type::UUID),
                        (&row.scope, Type::TEXT),
                        (&row.operation, Type::TEXT),
                        (&row.key, Type::TEXT),
                        (&row.flow, Type::TEXT),
                        (&row.state.as_str(), Type::TEXT),
                        (&row.position, Type::INT4),
                        (&row.input, Type::TEXT),
                    ],
                )
                .await
                .map(drop)
                .map_err(db_error)
        })
    }

    fn lock_flow<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
        Box::pin(async move { load(self.tx, self.tables, scope, id, true).await })
    }

    fn settle<'a>(
        &'a self,
        message: &'a OutboxMessage,
        sent_key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let n = self
                .tx
                .execute_typed(
                    &self.tables.render_static(SETTLE),
                    &[
                        (&message.id, Type::INT8),
                        (&message.lease, Type::UUID),
                        (&sent_key, Type::TEXT),
                        (&message.scope, Type::TEXT),
                    ],
                )
                .await
                .map_err(db_error)?;
            Ok(n == 1)
        })
    }

    fn insert_step<'a>(
        &'a self,
        row: &'a FlowRow,
        step: &'a StepRow,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.tx
                .execute_typed(
                    &self.tables.render_static(INSERT_STEP),
                    &[
                        (&row.id, Type::UUID),
                        (&step.idx, Type::INT4),
                        (&step.name, Type::TEXT),
                        (&step.state, Type::TEXT),
                        (&step.output, Type::TEXT),
                        (&step.attempts, Type::INT4),
                        (&step.downstream_key, Type::TEXT),
                        (&row.scope, Type::TEXT),
                    ],
                )
                .await
                .map(drop)
                .map_err(db_error)
        })
    }

    fn compensated<'a>(
        &'a self,
        row: &'a FlowRow,
        idx: i32,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let n = self
                .tx
                .execute_typed(
                    &self.tables.render_static(COMPENSATED),
                    &[
                        (&row.id, Type::UUID),
                        (&idx, Type::INT4),
                        (&row.scope, Type::TEXT),
                    ],
                )
                .await
                .map_err(db_error)?;
            Ok(n == 1)
        })
    }

    fn update_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let status = row.response.as_ref().map(|r| i32::from(r.status));
            let headers = row.response.as_ref().map(StoredResponse::headers_json);
            let body = row.response.as_ref().and_then(|r| r.body.as_deref());
            self.tx
                .execute_typed(
                    &self.tables.render_static(UPDATE_FLOW),
                    &[
                        (&row.id, Type::UUID),
                        (&row.state.as_str(), Type::TEXT),
                        (&row.position, Type::INT4),
                        (&row.failed_step, Type::TEXT),
                        (&row.error, Type::TEXT),
                        (&status, Type::INT4),
                        (&headers, Type::TEXT),
                        (&body, Type::BYTEA),
                        (&row.scope, Type::TEXT),
                    ],
                )
                .await
                .map(drop)
                .map_err(db_error)
        })
    }

    fn enqueue<'a>(
        &'a self,
        row: &'a FlowRow,
        payload: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.tx
                .execute_typed(
                    &self.tables.render_static(ENQUEUE),
                    &[
                        (&row.scope, Type::TEXT),
                        (&row.operation, Type::TEXT),
                        (&row.key, Type::TEXT),
                        (&STEP_EFFECT, Type::TEXT),
                        (&row.id.to_string(), Type::TEXT),
                        (&payload, Type::TEXT),
                    ],
                )
                .await
                .map(drop)
                .map_err(db_error)
        })
    }

    fn finish_record<'a>(
        &'a self,
        row: &'a FlowRow,
        response: &'a StoredResponse,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.tx
                .execute_typed(
                    &self.tables.render_static(FINISH_RECORD),
                    &[
                        (&row.scope, Type::TEXT),
                        (&row.operation, Type::TEXT),
                        (&row.key, Type::TEXT),
                        (&i32::from(response.status), Type::INT4),
                        (&response.headers_json(), Type::TEXT),
                        (&response.body.as_deref(), Type::BYTEA),
                        (&row.id.to_string(), Type::TEXT),
                    ],
                )
                .await
                .map(drop)
                .map_err(db_error)
        })
    }

    fn run_local<'a>(
        &'a self,
        f: &'a LocalFn,
        ctx: StepContext,
    ) -> BoxFuture<'a, Result<Value, StepError>> {
        match f.downcast_ref::<PgLocalFn>() {
            Some(f) => f(self.tx, ctx),
            None => Box::pin(std::future::ready(Err(StepError::Refused(format!(
                "step {} has no PostgreSQL function",
                ctx.step
            ))))),
        }
    }
}

/// The future a PostgreSQL local step returns: boxed, so that it may borrow
/// the transaction.
pub type PgStepFuture<'t> = Pin<Box<dyn Future<Output = Result<Value, StepError>> + Send + 't>>;

/// A PostgreSQL local step's function, as [`Local::postgres`] stores it.
type PgLocalFn =
    Arc<dyn for<'t, 'c> Fn(&'t Transaction<'c>, StepContext) -> PgStepFuture<'t> + Send + Sync>;

impl Local {
    /// Its PostgreSQL function, run in the open transaction.
    #[must_use]
    pub fn postgres<F>(self, f: F) -> Self
    where
        F: for<'t, 'c> Fn(&'t Transaction<'c>, StepContext) -> PgStepFuture<'t>
            + Send
            + Sync
            + 'static,
    {
        let f: PgLocalFn = Arc::new(f);
        self.on(PgDb::NAME, Arc::new(f))
    }

    /// Its compensation on PostgreSQL.
    #[must_use]
    pub fn postgres_undo<F>(self, f: F) -> Self
    where
        F: for<'t, 'c> Fn(&'t Transaction<'c>, StepContext) -> PgStepFuture<'t>
            + Send
            + Sync
            + 'static,
    {
        let f: PgLocalFn = Arc::new(f);
        self.undo_on(PgDb::NAME, Arc::new(f))
    }
}

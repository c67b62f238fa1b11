//! The step journal as the stores read and write it: an execution's row,
//! its recorded steps, the pending step's message, and the transitions a
//! journal makes in one open transaction (each backend's statements).

use std::future::Future;

use uuid::Uuid;

use super::StoreError;
use super::outbox::OutboxMessage;
use crate::idempotency::StoredResponse;

/// The outbox effect that carries the steps of operations of several
/// steps.
pub const STEP_EFFECT: &str = "flow-step";

/// The replay window a flow's record is stored with while its execution
/// runs (100 years of 365.25 days: 36525 days), added to the one asked
/// for: an execution that has not ended is never past its window, so never
/// re-executed, and its end sets the window asked for, counted from then.
pub(crate) const OPEN_WINDOW: std::time::Duration = std::time::Duration::from_secs(36_525 * 86_400);

/// Where an execution is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowState {
    /// Steps still to run.
    Running,
    /// A step failed for good; the steps before it are being undone.
    Compensating,
    /// Every step done: its final response is stored.
    Done,
    /// A step failed for good and every compensation ran: its final
    /// response is stored.
    Failed,
}

impl FlowState {
    /// The name the journal stores.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Compensating => "compensating",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "running" => Self::Running,
            "compensating" => Self::Compensating,
            "done" => Self::Done,
            "failed" => Self::Failed,
            _ => return None,
        })
    }

    /// Whether it ended (its final response is stored).
    pub const fn ended(self) -> bool {
        matches!(self, Self::Done | Self::Failed)
    }
}

/// A step as the journal recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRow {
    /// Its place in the flow.
    pub idx: i32,
    /// Its name.
    pub name: String,
    /// `done`, `failed` or `compensated`.
    pub state: String,
    /// Its output (JSON) when done, its reason when failed.
    pub output: Option<String>,
    /// Attempts it took.
    pub attempts: i32,
    /// The downstream key it was sent with (external steps).
    pub downstream_key: Option<String>,
}

/// An execution's row and its recorded steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRow {
    /// Its id.
    pub id: Uuid,
    /// The key tuple it runs under.
    pub scope: String,
    /// The key's operation.
    pub operation: String,
    /// The client's key.
    pub key: String,
    /// The flow's name.
    pub flow: String,
    /// Where it is.
    pub state: FlowState,
    /// The step to run next (running) or to undo next (compensating).
    pub position: i32,
    /// The request's payload (JSON).
    pub input: String,
    /// The step that failed for good.
    pub failed_step: Option<String>,
    /// Its reason.
    pub error: Option<String>,
    /// The final response, once ended.
    pub response: Option<StoredResponse>,
    /// The steps recorded, by index.
    pub steps: Vec<StepRow>,
}

/// The pending message of an execution, as its state document shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NextMessage {
    /// `pending`, or `dead` when its attempts ran out.
    pub status: String,
    /// Attempts made so far.
    pub attempts: i32,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// Whether an earlier attempt may have reached the downstream (one was
    /// claimed, or recorded its downstream key): the next one looks the
    /// effect up first, as [`crate::store::outbox::OutboxMessage::maybe_sent`]
    /// will say when it is claimed. Stored, so a client reads it rather than
    /// guessing from the attempt count.
    pub maybe_sent: bool,
}

/// The journal's statements on one open transaction.
pub(crate) trait Journal {
    /// A new execution, `running` at its first step.
    fn insert_flow(&self, row: &FlowRow) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The execution (of `scope`) and its steps, locked until the
    /// transaction ends.
    fn lock_flow(
        &self,
        scope: &str,
        id: Uuid,
    ) -> impl Future<Output = Result<Option<FlowRow>, StoreError>> + Send;
    /// Settles `message` as delivered, if this claim still holds it: its
    /// lease token, with the lease not yet ended at the store's clock.
    fn settle(
        &self,
        message: &OutboxMessage,
        sent_key: Option<&str>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records a step (once: the primary key refuses a second recording).
    fn insert_step(
        &self,
        row: &FlowRow,
        step: &StepRow,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Marks a done step compensated; `false` when it was not `done`.
    fn compensated(
        &self,
        row: &FlowRow,
        idx: i32,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Writes the execution's state, position, failure and response.
    fn update_flow(&self, row: &FlowRow) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Puts a step's message in the outbox.
    fn enqueue(
        &self,
        row: &FlowRow,
        payload: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Makes the key's record replay the final response.
    fn finish_record(
        &self,
        row: &FlowRow,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The open PostgreSQL transaction, for a local step's function.
    #[cfg(feature = "postgres")]
    fn postgres(&self) -> Option<&tokio_postgres::Transaction<'_>> {
        None
    }
    /// The SQLite connection inside its open transaction, for a local
    /// step's function.
    #[cfg(feature = "sqlite")]
    fn sqlite(&self) -> Option<&rusqlite::Connection> {
        None
    }
}

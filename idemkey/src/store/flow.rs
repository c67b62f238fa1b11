//! The step journal as the stores read and write it: an execution's row,
//! its recorded steps, the pending step's message, and the transitions a
//! journal makes in one open transaction (each backend's statements).

use std::future::Future;

use idemkey_core::Fingerprint;
use serde_json::Value;
use uuid::Uuid;

use super::StoreError;
use super::boxed::BoxFuture;
use super::outbox::OutboxMessage;
use super::step::{LocalFn, StepContext, StepError};
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey, StoredResponse};

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

    #[allow(dead_code)] // For the backends' readers: none in a build without one.
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

/// How a recording ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// Committed; the execution moved on.
    Moved,
    /// Another owner moved the execution on, or took the message over:
    /// nothing was recorded.
    Fenced,
}

/// The journal's statements on one open transaction: what a backend's
/// journal implements (object-safe, so that the journal's transitions are
/// written once over `dyn Journal`).
pub(crate) trait Journal {
    /// The backend's name ([`Backend::NAME`](crate::store::Backend::NAME)):
    /// which of a local step's functions it runs.
    fn backend(&self) -> &'static str;
    /// A new execution, `running` at its first step.
    fn insert_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>>;
    /// The execution (of `scope`) and its steps, locked until the
    /// transaction ends.
    fn lock_flow<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>>;
    /// Settles `message` as delivered, if this claim still holds it: its
    /// lease token, with the lease not yet ended at the store's clock.
    fn settle<'a>(
        &'a self,
        message: &'a OutboxMessage,
        sent_key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Records a step (once: the primary key refuses a second recording).
    fn insert_step<'a>(
        &'a self,
        row: &'a FlowRow,
        step: &'a StepRow,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Marks a done step compensated; `false` when it was not `done`.
    fn compensated<'a>(
        &'a self,
        row: &'a FlowRow,
        idx: i32,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Writes the execution's state, position, failure and response.
    fn update_flow<'a>(&'a self, row: &'a FlowRow) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Puts a step's message in the outbox.
    fn enqueue<'a>(
        &'a self,
        row: &'a FlowRow,
        payload: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Makes the key's record replay the final response.
    fn finish_record<'a>(
        &'a self,
        row: &'a FlowRow,
        response: &'a StoredResponse,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Runs a local step's function `f` (as this backend's builder stored
    /// it, see [`crate::flow::Local`]) on the open transaction.
    fn run_local<'a>(
        &'a self,
        f: &'a LocalFn,
        ctx: StepContext,
    ) -> BoxFuture<'a, Result<Value, StepError>>;
}

/// Work on an open transaction's journal, handed to the backend: on a
/// journal shared across threads (an async driver) or one that stays on
/// its thread (a blocking one, run to completion there).
// A build with one backend calls one of the two.
#[allow(dead_code)]
pub(crate) trait JournalWork<T>: Send {
    /// On a journal that futures may hold across threads.
    fn on_shared<'j>(self: Box<Self>, j: &'j (dyn Journal + Sync + 'j)) -> BoxFuture<'j, T>;
    /// On a journal that stays on its thread.
    fn on_local<'j>(
        self: Box<Self>,
        j: &'j (dyn Journal + 'j),
    ) -> std::pin::Pin<Box<dyn Future<Output = T> + 'j>>;
}

/// A store's step journal: the capability [`Backend::journal`](crate::store::Backend::journal)
/// answers, all that `Flows` needs of a store.
pub(crate) trait JournalStore: Send + Sync {
    /// Execution `id` of `scope` and its steps.
    fn flow_load<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>>;
    /// The execution of a key tuple.
    fn flow_find<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Uuid>, StoreError>>;
    /// The pending message of execution `id`.
    fn flow_next<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<NextMessage>, StoreError>>;
    /// Makes execution `id`'s next step due now (reviving a dead one
    /// younger than `within`).
    fn flow_resume<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
        within: std::time::Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Starts the replay window of an execution that ended in its first
    /// transaction.
    fn flow_close_window<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// The first request: the engine in one new transaction (the key's
    /// claim, `work` on the journal, the stored response), committed only
    /// when its response is stored.
    fn journal_start<'a>(
        &'a self,
        key: &'a RecordKey,
        fingerprint: Fingerprint,
        policy: Policy,
        lock_timeout: Option<std::time::Duration>,
        work: Box<dyn JournalWork<Result<Done<FlowRow>, StepError>>>,
    ) -> BoxFuture<'a, Result<Outcome<FlowRow>, idempotency::Error<StepError>>>;
    /// `work` in a transaction of its own, committed only when the
    /// execution moved ([`Recorded::Moved`]).
    fn journal_record(
        &self,
        work: Box<dyn JournalWork<Result<Recorded, StepError>>>,
    ) -> BoxFuture<'_, Result<Result<Recorded, StepError>, StoreError>>;
}

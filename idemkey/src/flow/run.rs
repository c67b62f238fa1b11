//! [`Flows`]: the registered flows of a service on one store. It starts an
//! execution in the key's own transaction, answers retries and polls from
//! the journal, and runs the steps the outbox worker claims.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{Fingerprint, StepAction};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::declare::{Attempt, Flow, Kind, StepError};
use super::machine::{self, Action, Outcome as Step, Recorded, StepMessage};
use super::state::{FlowRow, FlowState, StateDocument};
use crate::Db;
use crate::idempotency::{Done, RecordKey, StoredResponse};
use crate::in_transaction::{Error, Options, Outcome};
use crate::outbox::{Delivery, MAX_RETRY_AFTER, Settled, Worker};
use crate::store::StoreError;
use crate::store::backend::BoxFuture;
use crate::store::flow::{Journal, JournalWork, OPEN_WINDOW, STEP_EFFECT};
use crate::store::in_transaction::finish;
use crate::store::outbox::OutboxMessage;

/// How executions answer and run.
#[derive(Clone, Debug)]
pub struct FlowSettings {
    /// How long the first request (and a retry) waits for the execution to
    /// end before answering `202` with its state: `0` answers at once.
    pub wait: Duration,
    /// The longest an external step's call may take before it counts as
    /// uncertain (looked up at the next attempt). Keep it under half the
    /// worker's lease, so a live worker's claim never ends under it.
    pub call_timeout: Duration,
    /// Where a client polls an execution: this prefix and its id.
    pub location_prefix: String,
    /// How long after its step's message was enqueued a retry of the key
    /// still revives a dead step (one more attempt, looking the effect up
    /// first). Keep it below the downstream's key retention by more than
    /// the worker's lease: a resend after the downstream forgot the key
    /// would apply the effect a second time.
    pub revive_within: Duration,
}

/// The default of [`FlowSettings::revive_within`]: 23 hours, an hour below
/// the 24 hours a payment provider keeps an idempotency key at least.
pub const DEFAULT_REVIVE_WITHIN: Duration = Duration::from_secs(23 * 3600);

impl Default for FlowSettings {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(2),
            call_timeout: Duration::from_secs(10),
            location_prefix: "/operations/".to_owned(),
            revive_within: DEFAULT_REVIVE_WITHIN,
        }
    }
}

/// The flows a service declared, on its store.
#[derive(Clone)]
pub struct Flows {
    db: Db,
    flows: Arc<HashMap<&'static str, Arc<Flow>>>,
    settings: FlowSettings,
    wake: Arc<Notify>,
    /// Downstreams (a flow's step and action) paused by their
    /// `Retry-After`, until when: in this process and its clones.
    pauses: Arc<Mutex<HashMap<String, Instant>>>,
}

impl std::fmt::Debug for Flows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flows")
            .field("flows", &self.flows.keys().collect::<Vec<_>>())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// An execution as a poll sees it.
#[derive(Clone, Debug)]
pub struct View {
    /// The journal's row.
    pub row: FlowRow,
    /// Its state document.
    pub document: StateDocument,
    /// The answer to send: the final response once ended, else the `202`
    /// state document.
    pub response: StoredResponse,
}

impl Flows {
    /// The flows `flows` on `db` (PostgreSQL or SQLite): each must have a
    /// function for this backend for every local step.
    pub fn new(db: Db, flows: Vec<Flow>, settings: FlowSettings) -> Result<Self, StoreError> {
        let mut map = HashMap::new();
        for flow in flows {
            flow.check(db.backend()).map_err(StoreError::Unsupported)?;
            if map.insert(flow.name, Arc::new(flow)).is_some() {
                return Err(StoreError::Unsupported("two flows of one name".into()));
            }
        }
        // A store without a journal (Redis) refuses flows here.
        db.journal()?;
        Ok(Self {
            db,
            flows: Arc::new(map),
            settings,
            wake: Arc::default(),
            pauses: Arc::default(),
        })
    }

    /// Shares `wake` with an outbox worker built elsewhere (another
    /// [`Flows`] of the same declarations attached to it, or its own
    /// [`Worker::with_waker`]): starting or resuming an execution here wakes
    /// that worker.
    #[must_use]
    pub fn with_waker(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// `worker` with the steps of these flows to run: it claims their
    /// messages with the others, and wakes as soon as an execution is
    /// started or resumed in this process.
    #[must_use]
    pub fn attach(&self, worker: Worker) -> Worker {
        let flows = self.clone();
        worker
            .with_waker(Arc::clone(&self.wake))
            .handle_settled(STEP_EFFECT, move |message| {
                let flows = flows.clone();
                async move { flows.run_step(message).await }
            })
    }

    /// The notifier an in-process worker waits on (when it was built with
    /// its own [`Worker::with_waker`], hand it this one).
    pub fn waker(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// How long the downstream of `flow`'s `step` (its run, or its
    /// compensation when `undo`) stays paused by its own `Retry-After`,
    /// if it is. Every other step keeps running.
    pub fn paused_for(&self, flow: &str, step: &str, undo: bool) -> Option<Duration> {
        let action = if undo {
            Action::Compensate
        } else {
            Action::Run
        };
        let until = *self.pauses.lock().get(&downstream(flow, step, action))?;
        until.checked_duration_since(Instant::now())
    }

    /// No new call to `name`'s downstream before `after` from now (up to
    /// [`MAX_RETRY_AFTER`]; a later end already set stays).
    fn pause(&self, name: String, after: Duration) {
        let until = Instant::now() + after.min(MAX_RETRY_AFTER);
        let mut pauses = self.pauses.lock();
        let now = Instant::now();
        pauses.retain(|_, t| *t > now);
        let end = pauses.entry(name).or_insert(until);
        *end = (*end).max(until);
    }

    fn flow(&self, name: &str) -> Result<&Arc<Flow>, StoreError> {
        self.flows
            .get(name)
            .ok_or_else(|| StoreError::Unsupported(format!("no flow named {name}")))
    }

    /// Runs the key's request: the first one claims the key, starts an
    /// execution of `flow` with `input` (the validated payload) and runs its
    /// leading local steps, all in one transaction with the next step's
    /// message; it answers the final response if the execution ends within
    /// [`FlowSettings::wait`], else `202` with the state document. A retry
    /// resumes the execution (its next step due now) and answers the same
    /// way; an ended one replays its final response.
    pub async fn start(
        &self,
        flow: &str,
        key: &RecordKey,
        fingerprint: Fingerprint,
        input: &Value,
        options: &Options,
    ) -> Result<Outcome, Error<StepError>> {
        let declared = Arc::clone(self.flow(flow)?);
        let row = FlowRow {
            id: Uuid::new_v4(),
            scope: key.scope.as_str().to_owned(),
            operation: key.operation.as_str().to_owned(),
            key: key.key.as_str().to_owned(),
            flow: declared.name.to_owned(),
            state: FlowState::Running,
            position: 0,
            input: input.to_string(),
            failed_step: None,
            error: None,
            response: None,
            steps: Vec::new(),
        };
        let location = format!("{}{}", self.settings.location_prefix, row.id);
        let mut policy = options.policy();
        // Replayed for as long as the execution runs, and the window asked
        // for from its end: a running execution is never re-executed.
        policy.replay_ttl = policy.replay_ttl.saturating_add(OPEN_WINDOW);
        let work = Box::new(Start {
            flow: declared,
            row,
            location,
        });
        let result = self
            .db
            .journal()?
            .journal_start(key, fingerprint, policy, options.lock_timeout, work)
            .await;
        let (ran, ended) = match &result {
            Ok(crate::idempotency::Outcome::Executed {
                value,
                stored: true,
                ..
            }) if value.state.ended() => (None, Some(value.id)),
            Ok(crate::idempotency::Outcome::Executed {
                value,
                stored: true,
                ..
            }) => (Some(value.id), None),
            _ => (None, None),
        };
        let outcome = finish(key, options, result)?;
        if let Some(id) = ended {
            // Ended in its first transaction: the window counts from now. A
            // failure leaves it open (replayed longer, never re-executed).
            let (scope, op, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
            let closed = match self.db.journal() {
                Ok(journal) => journal.flow_close_window(scope, op, k, id).await,
                Err(err) => Err(err),
            };
            if let Err(err) = closed {
                tracing::warn!(error = %err, "flow: its window stays open");
            }
        }
        match (outcome, ran) {
            (Outcome::Executed(accepted), Some(id)) => {
                self.wake.notify_one();
                if self.settings.wait.is_zero() {
                    // Answer at once: the transaction's own 202.
                    return Ok(Outcome::Executed(accepted));
                }
                Ok(match self.settle_within(key.scope.as_str(), id).await? {
                    Some(view) if view.row.state.ended() => Outcome::Executed(view.response),
                    _ => Outcome::Executed(accepted),
                })
            }
            (Outcome::Replayed(stored), _) => self.replayed(key, stored).await,
            (outcome, _) => Ok(outcome),
        }
    }

    /// A retry of a key whose execution exists: resumed, then answered
    /// from the journal.
    async fn replayed(
        &self,
        key: &RecordKey,
        stored: StoredResponse,
    ) -> Result<Outcome, Error<StepError>> {
        if stored.status != 202 {
            return Ok(Outcome::Replayed(stored));
        }
        let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
        let Some(id) = self.find(scope, operation, k).await? else {
            return Ok(Outcome::Replayed(stored));
        };
        self.resume(scope, id).await?;
        Ok(match self.settle_within(scope, id).await? {
            Some(view) => Outcome::Replayed(view.response),
            None => Outcome::Replayed(stored),
        })
    }

    /// Waits up to [`FlowSettings::wait`] for execution `id` to end,
    /// reading the journal at growing intervals (the worker may be another
    /// process's).
    async fn settle_within(&self, scope: &str, id: Uuid) -> Result<Option<View>, StoreError> {
        let deadline = tokio::time::Instant::now() + self.settings.wait;
        let mut pause = Duration::from_millis(5);
        loop {
            let view = self.view(scope, id).await?;
            let ended = view.as_ref().is_none_or(|v| v.row.state.ended());
            let now = tokio::time::Instant::now();
            if ended || now >= deadline {
                return Ok(view);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Execution `id` as `scope` may see it: `None` when it does not exist
    /// or is another scope's.
    pub async fn poll(&self, scope: &str, id: Uuid) -> Result<Option<View>, StoreError> {
        self.view(scope, id).await
    }

    async fn view(&self, scope: &str, id: Uuid) -> Result<Option<View>, StoreError> {
        let Some(row) = self.load(scope, id).await? else {
            return Ok(None);
        };
        let flow = self.flow(&row.flow)?;
        let next = if row.state.ended() {
            None
        } else {
            self.next(&row.scope, id).await?
        };
        let document = StateDocument::of(flow, &row, next.as_ref());
        let response = match (&row.response, row.state.ended()) {
            (Some(response), true) => response.clone(),
            _ => document.to_stored(&format!("{}{id}", self.settings.location_prefix)),
        };
        Ok(Some(View {
            row,
            document,
            response,
        }))
    }

    async fn load(&self, scope: &str, id: Uuid) -> Result<Option<FlowRow>, StoreError> {
        self.db.journal()?.flow_load(scope, id).await
    }

    async fn find(&self, scope: &str, op: &str, key: &str) -> Result<Option<Uuid>, StoreError> {
        self.db.journal()?.flow_find(scope, op, key).await
    }

    async fn next(
        &self,
        scope: &str,
        id: Uuid,
    ) -> Result<Option<super::state::NextMessage>, StoreError> {
        self.db.journal()?.flow_next(scope, id).await
    }

    /// Makes execution `id`'s next step due now (a backoff is cut short;
    /// a live claim is left alone; a dead step whose message is younger
    /// than [`FlowSettings::revive_within`] is revived, its attempts kept
    /// so that it looks the effect up first) and wakes the worker.
    pub async fn resume(&self, scope: &str, id: Uuid) -> Result<(), StoreError> {
        let within = self.settings.revive_within;
        self.db.journal()?.flow_resume(scope, id, within).await?;
        self.wake.notify_one();
        Ok(())
    }

    /// What a worker does with one claimed `flow-step` message, for custom
    /// workers and tests ([`Flows::attach`]'s worker calls it): runs the
    /// step and records it in its own transaction, fenced by the
    /// execution's position and this claim's lease ([`Settled::Recorded`];
    /// [`Settled::Fenced`] when the lease ended or the execution moved on),
    /// or hands the message back ([`Settled::Again`]) for the caller to
    /// settle.
    pub async fn run_step(&self, message: OutboxMessage) -> Result<Settled, StoreError> {
        let Ok(asked) = serde_json::from_str::<StepMessage>(&message.payload) else {
            return Ok(again(
                Delivery::Refused("malformed step message".into()),
                None,
            ));
        };
        let Ok(id) = machine::message_flow(&message) else {
            return Ok(again(
                Delivery::Refused("the message names no execution".into()),
                None,
            ));
        };
        let Some(row) = self.load(&message.scope, id).await? else {
            return Ok(again(Delivery::Refused("no such execution".into()), None));
        };
        let Ok(flow) = self.flow(&row.flow).cloned() else {
            return Ok(again(
                Delivery::Retry {
                    after: None,
                    reason: format!("flow {} is not declared in this process", row.flow),
                },
                None,
            ));
        };
        let idx = usize::try_from(asked.step).unwrap_or(usize::MAX);
        let Some(step) = flow.steps.get(idx) else {
            return Ok(again(Delivery::Refused("no such step".into()), None));
        };
        let attempts = message.attempts;
        let outcome = match &step.kind {
            Kind::Local(_) => Step::RunLocal { attempts },
            Kind::External(external) => {
                let name = downstream(flow.name, step.name, asked.action);
                let paused = self
                    .pauses
                    .lock()
                    .get(&name)
                    .and_then(|t| t.checked_duration_since(Instant::now()));
                if let Some(after) = paused {
                    return Ok(Settled::Paused { after });
                }
                let call = match asked.action {
                    Action::Run => Some(&external.run),
                    Action::Compensate => external.undo.as_ref(),
                };
                let ctx = machine::context(
                    &flow,
                    &row,
                    idx,
                    StepAction::from(asked.action),
                    attempts,
                    message.maybe_sent(),
                );
                let sent = Some(ctx.downstream_key().to_string());
                let attempt = match call {
                    Some(call) => tokio::time::timeout(self.settings.call_timeout, call(ctx))
                        .await
                        .unwrap_or_else(|_| {
                            Attempt::Uncertain(format!(
                                "no answer within {} ms",
                                self.settings.call_timeout.as_millis()
                            ))
                        }),
                    // No undo declared (a flow changed under a running
                    // compensation): never recorded `compensated` without
                    // its undo having run; retried, then a dead letter.
                    None => Attempt::Retry {
                        after: None,
                        reason: format!("step {} declares no undo", step.name),
                    },
                };
                match (attempt, asked.action) {
                    (Attempt::Done(output), _) => Step::Done {
                        output,
                        attempts,
                        sent_key: sent,
                    },
                    (Attempt::Refused(reason), Action::Run) => Step::Refused {
                        reason,
                        attempts,
                        sent_key: sent,
                    },
                    (Attempt::Refused(reason), Action::Compensate) => {
                        return Ok(again(
                            Delivery::Retry {
                                after: None,
                                reason,
                            },
                            sent,
                        ));
                    }
                    (Attempt::Retry { after, reason }, _) => {
                        if let Some(after) = after {
                            // Its downstream asked to wait: this step only.
                            self.pause(name, after);
                        }
                        return Ok(again(Delivery::Retry { after, reason }, sent));
                    }
                    (Attempt::Uncertain(reason), _) => {
                        return Ok(again(Delivery::Uncertain(reason), sent));
                    }
                }
            }
        };
        let recorded = self.record(&flow, &message, asked, outcome).await?;
        Ok(match recorded {
            Ok(Recorded::Moved) => {
                self.wake.notify_one();
                Settled::Recorded
            }
            Ok(Recorded::Fenced) => Settled::Fenced,
            Err(StepError::Retry(reason) | StepError::Refused(reason)) => again(
                Delivery::Retry {
                    after: None,
                    reason,
                },
                None,
            ),
        })
    }

    /// [`machine::record`] in a transaction of its own, committed only when
    /// the execution moved.
    async fn record(
        &self,
        flow: &Arc<Flow>,
        message: &OutboxMessage,
        asked: StepMessage,
        outcome: Step,
    ) -> Result<Result<Recorded, StepError>, StoreError> {
        let work = Box::new(Record {
            flow: Arc::clone(flow),
            message: message.clone(),
            asked,
            outcome,
        });
        self.db.journal()?.journal_record(work).await
    }
}

/// The name of the downstream a step (or its compensation) calls: what
/// its `Retry-After` pauses.
fn downstream(flow: &str, step: &str, action: Action) -> String {
    let action = match action {
        Action::Run => "run",
        Action::Compensate => "compensate",
    };
    format!("{flow}/{step}/{action}")
}

fn again(delivery: Delivery, sent_key: Option<String>) -> Settled {
    Settled::Again { delivery, sent_key }
}

/// The first request's transaction: the execution's row, its leading local
/// steps, and the next step's message (or its final response).
async fn start_in<J: Journal + ?Sized>(
    j: &J,
    flow: &Flow,
    mut row: FlowRow,
    location: &str,
) -> Result<Done<FlowRow>, StepError> {
    j.insert_flow(&row).await?;
    machine::proceed(j, flow, &mut row, true).await?;
    let response = match &row.response {
        Some(response) if row.state.ended() => response.clone(),
        _ => StateDocument::of(flow, &row, None).to_stored(location),
    };
    Ok(Done {
        response,
        resource: Some(row.id.to_string()),
        value: row,
    })
}

/// The first request's work on its transaction's journal.
struct Start {
    flow: Arc<Flow>,
    row: FlowRow,
    location: String,
}

impl JournalWork<Result<Done<FlowRow>, StepError>> for Start {
    fn on_shared<'j>(
        self: Box<Self>,
        j: &'j (dyn Journal + Sync + 'j),
    ) -> BoxFuture<'j, Result<Done<FlowRow>, StepError>> {
        Box::pin(async move { start_in(j, &self.flow, self.row, &self.location).await })
    }

    fn on_local<'j>(
        self: Box<Self>,
        j: &'j (dyn Journal + 'j),
    ) -> Pin<Box<dyn Future<Output = Result<Done<FlowRow>, StepError>> + 'j>> {
        Box::pin(async move { start_in(j, &self.flow, self.row, &self.location).await })
    }
}

/// A claimed step's recording, on its own transaction's journal.
struct Record {
    flow: Arc<Flow>,
    message: OutboxMessage,
    asked: StepMessage,
    outcome: Step,
}

impl JournalWork<Result<Recorded, StepError>> for Record {
    fn on_shared<'j>(
        self: Box<Self>,
        j: &'j (dyn Journal + Sync + 'j),
    ) -> BoxFuture<'j, Result<Recorded, StepError>> {
        Box::pin(async move {
            machine::record(j, &self.flow, &self.message, self.asked, self.outcome).await
        })
    }

    fn on_local<'j>(
        self: Box<Self>,
        j: &'j (dyn Journal + 'j),
    ) -> Pin<Box<dyn Future<Output = Result<Recorded, StepError>> + 'j>> {
        Box::pin(async move {
            machine::record(j, &self.flow, &self.message, self.asked, self.outcome).await
        })
    }
}

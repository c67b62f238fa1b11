//! The journal's transitions, written once for every store: what one open
//! transaction records for a step's outcome, and where the execution goes
//! next (the next step's message, a compensation's, or the final
//! response). Every transition is fenced: it applies only while the
//! execution is where its caller saw it and the caller's claim on the
//! step's message still holds.

use idemkey_core::StepAction;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::declare::{Failure, Flow, Kind, Local, StepContext, StepError};
use crate::idempotency::StoredResponse;
pub(crate) use crate::store::flow::Recorded;
use crate::store::flow::{FlowRow, FlowState, Journal, StepRow};
use crate::store::outbox::OutboxMessage;

/// What a step's message asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StepMessage {
    pub(crate) step: i32,
    pub(crate) action: Action,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
    Run,
    Compensate,
}

impl From<Action> for StepAction {
    fn from(action: Action) -> Self {
        match action {
            Action::Run => Self::Run,
            Action::Compensate => Self::Compensate,
        }
    }
}

/// Runs a local step (or, `undo`, its compensation) on the journal's open
/// transaction, with the function the flow declared for its backend.
async fn run_local<J: Journal + ?Sized>(
    j: &J,
    local: &Local,
    undo: bool,
    ctx: StepContext,
) -> Result<Value, StepError> {
    match local.function(j.backend(), undo) {
        Some(f) => j.run_local(f, ctx).await,
        // Never recorded `compensated` without its undo having run
        // (`Flows::new` refuses such a flow; this is the last guard).
        None if undo => Err(StepError::Retry(format!(
            "step {} has no {} undo",
            ctx.step,
            j.backend()
        ))),
        None => Err(StepError::Refused(format!(
            "step {} has no {} function",
            ctx.step,
            j.backend()
        ))),
    }
}

/// The context of step `idx` of `row`.
pub(crate) fn context(
    flow: &Flow,
    row: &FlowRow,
    idx: usize,
    action: StepAction,
    attempt: u32,
    maybe_sent: bool,
) -> StepContext {
    let outputs = row
        .steps
        .iter()
        .filter(|s| s.state != "failed")
        .filter_map(|s| {
            let value = s
                .output
                .as_deref()
                .and_then(|o| serde_json::from_str(o).ok())?;
            Some((s.name.clone(), value))
        })
        .collect();
    StepContext {
        flow_id: row.id,
        scope: row.scope.clone(),
        operation: row.operation.clone(),
        key: row.key.clone(),
        step: flow.steps.get(idx).map_or("", |s| s.name),
        action,
        input: serde_json::from_str(&row.input).unwrap_or(Value::Null),
        outputs,
        attempt,
        maybe_sent,
        failure: row.failed_step.clone().map(|step| Failure {
            step,
            reason: row.error.clone().unwrap_or_default(),
        }),
    }
}

/// What a claimed step came to, to be recorded.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    /// The step (or its compensation) is done, with this output.
    Done {
        output: Value,
        attempts: u32,
        sent_key: Option<String>,
    },
    /// The step failed for good.
    Refused {
        reason: String,
        attempts: u32,
        sent_key: Option<String>,
    },
    /// A local step: run it in the recording transaction.
    RunLocal { attempts: u32 },
}

/// Records `outcome` of `message`'s step in the open transaction `j`:
/// fenced by the execution's position and the message's claim, then on to
/// the next step.
pub(crate) async fn record<J: Journal + ?Sized>(
    j: &J,
    flow: &Flow,
    message: &OutboxMessage,
    asked: StepMessage,
    outcome: Outcome,
) -> Result<Recorded, StepError> {
    let Some(mut row) = j.lock_flow(&message.scope, message_flow(message)?).await? else {
        return Ok(Recorded::Fenced);
    };
    let expected = match asked.action {
        Action::Run => FlowState::Running,
        Action::Compensate => FlowState::Compensating,
    };
    if row.state != expected || row.position != asked.step {
        return Ok(Recorded::Fenced);
    }
    let idx = usize::try_from(asked.step).unwrap_or(usize::MAX);
    let Some(step) = flow.steps.get(idx) else {
        return Err(StepError::Retry(format!(
            "flow {} has no step {idx}",
            flow.name
        )));
    };
    let sent_key = match &outcome {
        Outcome::Done { sent_key, .. } | Outcome::Refused { sent_key, .. } => sent_key.clone(),
        Outcome::RunLocal { .. } => None,
    };
    if !j.settle(message, sent_key.as_deref()).await? {
        return Ok(Recorded::Fenced);
    }
    let outcome = match (outcome, &step.kind) {
        (Outcome::RunLocal { attempts }, Kind::Local(local)) => {
            let undo = asked.action == Action::Compensate;
            let ctx = context(flow, &row, idx, asked.action.into(), attempts, false);
            match run_local(j, local, undo, ctx).await {
                Ok(output) => Outcome::Done {
                    output,
                    attempts,
                    sent_key: None,
                },
                Err(StepError::Refused(reason)) if !undo => Outcome::Refused {
                    reason,
                    attempts,
                    sent_key: None,
                },
                Err(StepError::Refused(reason) | StepError::Retry(reason)) => {
                    return Err(StepError::Retry(reason));
                }
            }
        }
        (outcome, _) => outcome,
    };
    match (asked.action, outcome) {
        (
            Action::Run,
            Outcome::Done {
                output,
                attempts,
                sent_key,
            },
        ) => {
            done(j, &mut row, idx, step.name, &output, attempts, sent_key).await?;
        }
        (
            Action::Run,
            Outcome::Refused {
                reason,
                attempts,
                sent_key,
            },
        ) => {
            refused(j, &mut row, idx, step.name, reason, attempts, sent_key).await?;
        }
        (Action::Compensate, Outcome::Done { .. }) => {
            if !j.compensated(&row, asked.step).await? {
                return Ok(Recorded::Fenced);
            }
        }
        (Action::Compensate, _) | (_, Outcome::RunLocal { .. }) => {
            return Err(StepError::Retry("a compensation cannot be refused".into()));
        }
    }
    proceed(j, flow, &mut row, false).await?;
    Ok(Recorded::Moved)
}

/// The execution a step's message belongs to.
pub(crate) fn message_flow(message: &OutboxMessage) -> Result<Uuid, StepError> {
    message
        .resource_id
        .as_deref()
        .and_then(|id| Uuid::try_parse(id).ok())
        .ok_or_else(|| StepError::Retry(format!("step message {} names no execution", message.id)))
}

async fn done<J: Journal + ?Sized>(
    j: &J,
    row: &mut FlowRow,
    idx: usize,
    name: &str,
    output: &Value,
    attempts: u32,
    sent_key: Option<String>,
) -> Result<(), StepError> {
    let step = StepRow {
        idx: i32::try_from(idx).unwrap_or(i32::MAX),
        name: name.to_owned(),
        state: "done".into(),
        output: Some(output.to_string()),
        attempts: i32::try_from(attempts).unwrap_or(i32::MAX),
        downstream_key: sent_key,
    };
    j.insert_step(row, &step).await?;
    row.steps.push(step);
    row.position = row.position.saturating_add(1);
    Ok(())
}

async fn refused<J: Journal + ?Sized>(
    j: &J,
    row: &mut FlowRow,
    idx: usize,
    name: &str,
    reason: String,
    attempts: u32,
    sent_key: Option<String>,
) -> Result<(), StepError> {
    let step = StepRow {
        idx: i32::try_from(idx).unwrap_or(i32::MAX),
        name: name.to_owned(),
        state: "failed".into(),
        output: Some(serde_json::Value::String(reason.clone()).to_string()),
        attempts: i32::try_from(attempts).unwrap_or(i32::MAX),
        downstream_key: sent_key,
    };
    j.insert_step(row, &step).await?;
    row.steps.push(step);
    row.state = FlowState::Compensating;
    row.failed_step = Some(name.to_owned());
    row.error = Some(reason);
    Ok(())
}

/// Moves `row` on from where it is: the next step's (or compensation's)
/// message, or the final response. `inline` (the first request's
/// transaction) runs local steps and local compensations right here;
/// otherwise each gets its own message, so each is its own recovery point.
pub(crate) async fn proceed<J: Journal + ?Sized>(
    j: &J,
    flow: &Flow,
    row: &mut FlowRow,
    inline: bool,
) -> Result<(), StepError> {
    loop {
        match row.state {
            FlowState::Running => {
                let idx = usize::try_from(row.position).unwrap_or(usize::MAX);
                let Some(step) = flow.steps.get(idx) else {
                    row.state = FlowState::Done;
                    let ctx = context(flow, row, idx, StepAction::Run, 1, false);
                    return end(j, row, (flow.done)(&ctx), inline).await;
                };
                match (&step.kind, inline) {
                    (Kind::Local(local), true) => {
                        let ctx = context(flow, row, idx, StepAction::Run, 1, false);
                        match run_local(j, local, false, ctx).await {
                            Ok(output) => done(j, row, idx, step.name, &output, 1, None).await?,
                            Err(StepError::Refused(reason)) => {
                                refused(j, row, idx, step.name, reason, 1, None).await?;
                            }
                            Err(err) => return Err(err),
                        }
                    }
                    _ => return next_message(j, row, Action::Run).await,
                }
            }
            FlowState::Compensating => {
                // The highest done step below the position that can be
                // undone; the others stay as they are.
                let below = row.position;
                let next = row
                    .steps
                    .iter()
                    .filter(|s| s.idx < below && s.state == "done")
                    .filter(|s| {
                        usize::try_from(s.idx)
                            .ok()
                            .and_then(|i| flow.steps.get(i))
                            .is_some_and(super::declare::Step::compensable)
                    })
                    .map(|s| s.idx)
                    .max();
                let Some(target) = next else {
                    row.state = FlowState::Failed;
                    let ctx = context(flow, row, 0, StepAction::Compensate, 1, false);
                    return end(j, row, (flow.failed)(&ctx), inline).await;
                };
                row.position = target;
                let idx = usize::try_from(target).unwrap_or(usize::MAX);
                match flow.steps.get(idx).map(|s| &s.kind) {
                    Some(Kind::Local(local)) if inline => {
                        let ctx = context(flow, row, idx, StepAction::Compensate, 1, false);
                        run_local(j, local, true, ctx).await?;
                        if !j.compensated(row, target).await? {
                            return Err(StepError::Retry("the step to undo moved".into()));
                        }
                        if let Some(s) = row.steps.iter_mut().find(|s| s.idx == target) {
                            s.state = "compensated".into();
                        }
                    }
                    _ => return next_message(j, row, Action::Compensate).await,
                }
            }
            FlowState::Done | FlowState::Failed => return Ok(()),
        }
    }
}

async fn next_message<J: Journal + ?Sized>(
    j: &J,
    row: &FlowRow,
    action: Action,
) -> Result<(), StepError> {
    let payload = serde_json::to_string(&StepMessage {
        step: row.position,
        action,
    })
    .map_err(|err| StepError::Retry(err.to_string()))?;
    j.enqueue(row, &payload).await?;
    j.update_flow(row).await?;
    Ok(())
}

async fn end<J: Journal + ?Sized>(
    j: &J,
    row: &mut FlowRow,
    response: StoredResponse,
    inline: bool,
) -> Result<(), StepError> {
    if !inline {
        j.finish_record(row, &response).await?;
    }
    row.response = Some(response);
    j.update_flow(row).await?;
    Ok(())
}

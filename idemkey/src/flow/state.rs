//! An execution as the journal holds it, and the state document a client
//! gets while it runs: stable step names and states, one shape on every
//! store.

use serde::Serialize;
use uuid::Uuid;

use super::declare::{Flow, Kind, TYPE_BASE};
use crate::idempotency::StoredResponse;
pub use crate::store::flow::{FlowRow, FlowState, NextMessage, StepRow};

/// One step in the state document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepView {
    /// Its stable name.
    pub name: &'static str,
    /// `pending`, `running`, `done`, `failed`, `compensating`,
    /// `compensated` or `dead` (its attempts ran out: an operator retries
    /// it).
    pub state: &'static str,
    /// Attempts so far, when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i32>,
    /// Whether the running step's earlier attempt may have reached the
    /// downstream (its answer was lost, or its worker died while sending):
    /// its next attempt looks the effect up by the step's key before
    /// sending again. Read from the step's outbox message, so a client
    /// shows it as the server decides it, never guessed from `attempts`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub maybe_sent: bool,
}

/// The state document: what a `202` answers and a poll returns while the
/// operation runs. RFC 9457's members (`type`, `title`, `status`,
/// `detail`, `code`) plus the operation's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StateDocument {
    /// `…/problems/operation-in-progress` (or `-failed` / `-done`).
    #[serde(rename = "type")]
    pub type_uri: String,
    /// A short human summary.
    pub title: &'static str,
    /// The HTTP status it is sent with.
    pub status: u16,
    /// What to do next.
    pub detail: String,
    /// `operation-in-progress`, `operation-compensating`, `operation-done`
    /// or `operation-failed`.
    pub code: &'static str,
    /// The flow's name.
    pub operation: &'static str,
    /// The execution's id.
    pub id: Uuid,
    /// `running`, `compensating`, `done` or `failed`.
    pub state: FlowState,
    /// The step running or being undone, when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<&'static str>,
    /// Every step of the flow, in order.
    pub steps: Vec<StepView>,
    /// The step that failed for good, when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
}

impl StateDocument {
    /// The document of `row` (a run of `flow`), its pending message `next`
    /// (if any).
    pub fn of(flow: &Flow, row: &FlowRow, next: Option<&NextMessage>) -> Self {
        let position = usize::try_from(row.position).unwrap_or(0);
        let steps: Vec<StepView> = flow
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let recorded = row
                    .steps
                    .iter()
                    .find(|s| usize::try_from(s.idx).ok() == Some(i));
                let current = i == position && !row.state.ended();
                let state = match (recorded.map(|r| r.state.as_str()), row.state) {
                    (Some("done"), FlowState::Compensating) if current => "compensating",
                    (Some("done"), _) => "done",
                    (Some("failed"), _) => "failed",
                    (Some(_), _) => "compensated",
                    (None, FlowState::Running) if current => match next {
                        Some(m) if m.status == "dead" => "dead",
                        Some(m) if m.attempts > 0 => "running",
                        _ => "pending",
                    },
                    (None, _) => "pending",
                };
                let attempts = match recorded {
                    Some(r) => Some(r.attempts),
                    None if current => next.map(|m| m.attempts).filter(|a| *a > 0),
                    None => None,
                };
                // Only an external step sends anything; a recorded step
                // has no attempt to come.
                let maybe_sent = recorded.is_none()
                    && current
                    && matches!(step.kind, Kind::External(_))
                    && next.is_some_and(|m| m.maybe_sent);
                StepView {
                    name: step.name,
                    state,
                    attempts,
                    maybe_sent,
                }
            })
            .collect();
        let step = (!row.state.ended())
            .then(|| flow.steps.get(position).map(|s| s.name))
            .flatten();
        let (code, title, detail) = match row.state {
            FlowState::Running => (
                "operation-in-progress",
                "Operation in progress",
                "The operation was accepted and is running. Poll the Location, or send the same request with the same Idempotency-Key: it resumes where it stopped and never repeats a step.",
            ),
            FlowState::Compensating => (
                "operation-compensating",
                "Operation failed; undoing its steps",
                "A step failed for good; the steps before it are being undone. Poll the Location for the final answer.",
            ),
            FlowState::Done => ("operation-done", "Operation done", "Every step is done."),
            FlowState::Failed => (
                "operation-failed",
                "Operation failed",
                "A step failed for good and the steps before it were undone.",
            ),
        };
        Self {
            type_uri: format!("{TYPE_BASE}{code}"),
            title,
            status: 202,
            detail: detail.to_owned(),
            code,
            operation: flow.name,
            id: row.id,
            state: row.state,
            step,
            steps,
            failed_step: row.failed_step.clone(),
        }
    }

    /// As a `202 Accepted` response with `Location` (where to poll).
    pub fn to_stored(&self, location: &str) -> StoredResponse {
        let body = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        StoredResponse::new(self.status, body)
            .with_header("content-type", "application/json")
            .with_header("location", location)
    }
}

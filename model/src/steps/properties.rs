//! The step journal's properties: safety in every reachable state (ghost
//! variables carry what happened on the way), the end of every run, and
//! reachability checks that keep the bounds honest.

use std::cmp::Ordering;

use stateright::Property;

use super::protocol::StepJournal;
use super::state::{FlowState, State, StepAction, StepState, Worker};
use super::{FLOW, STEPS};

/// (a) Each step's effect and each compensation is applied at most once:
/// at its downstream per step key, in the store for a local step.
pub const AT_MOST_ONCE: &str = "steps: each effect and compensation applied at most once";
/// (b) Only the owner of the message's current lease records a step: a
/// fenced-out owner (lease lost, position moved on) records nothing.
pub const NO_FENCED_OUT_RECORDING: &str = "steps: no step recorded by a fenced-out owner";
/// (c) Every accepted operation ends `done` or `failed` with nothing
/// pending: no message, no worker busy. The model is acyclic (every event
/// draws a token, moves a phase on or spends a fault), so each maximal
/// run is finite: this is "the worker eventually runs uninterrupted".
pub const FINISHES: &str = "steps: every accepted operation ends done or failed";
/// (c) At the end, the journal is the truth about the effects: a `done`
/// flow has every step done and nothing compensated; a `failed` flow names
/// its refused step and has every done compensable step compensated; each
/// applied effect is recorded, and each recorded one applied.
pub const ENDS_CONSISTENT: &str = "steps: at the end, every done compensable step is compensated";
/// Compensations run in reverse order: never one while a lower step is
/// already compensated.
pub const REVERSE_ORDER: &str = "steps: compensations in reverse order";
/// Reachability checks that keep the bounds honest: each must be found.
pub const REACHES: [&str; 7] = [
    "steps sometimes: a take-over while the first owner still runs",
    "steps sometimes: a lost answer, then a lookup that finds the effect",
    "steps sometimes: a fenced-out owner's recording rolled back",
    "steps sometimes: a compensation ran",
    "steps sometimes: refund then release (two compensations)",
    "steps sometimes: the flow is done",
    "steps sometimes: the client gets the final response by a replay",
];

/// Whether a reachability check applies to `model`: two compensations need
/// a refusable `confirm`.
pub fn applies(model: &StepJournal, name: &str) -> bool {
    model.bounds.confirm_refusable || name != REACHES[4]
}

/// Every property of the step journal.
pub fn all() -> Vec<Property<StepJournal>> {
    vec![
        Property::always(AT_MOST_ONCE, |_: &StepJournal, s: &State| {
            s.ghost.applied.iter().flatten().all(|&n| n <= 1)
        }),
        Property::always(NO_FENCED_OUT_RECORDING, |_: &StepJournal, s: &State| {
            !s.ghost.fenced_out_recorded
        }),
        Property::eventually(FINISHES, |_: &StepJournal, s: &State| finished(s)),
        Property::always(ENDS_CONSISTENT, |_: &StepJournal, s: &State| {
            !finished(s) || consistent(s)
        }),
        Property::always(REVERSE_ORDER, |_: &StepJournal, s: &State| {
            !s.ghost.out_of_order
        }),
        Property::sometimes(REACHES[0], |_: &StepJournal, s: &State| s.ghost.taken_over),
        Property::sometimes(REACHES[1], |_: &StepJournal, s: &State| {
            s.ghost.lost_then_found
        }),
        Property::sometimes(REACHES[2], |_: &StepJournal, s: &State| s.ghost.fenced),
        Property::sometimes(REACHES[3], |_: &StepJournal, s: &State| {
            s.ghost.compensated != 0
        }),
        Property::sometimes(REACHES[4], |_: &StepJournal, s: &State| {
            s.ghost.compensated.count_ones() >= 2
        }),
        Property::sometimes(REACHES[5], |_: &StepJournal, s: &State| {
            s.flow.is_some_and(|f| f.state == FlowState::Done)
        }),
        Property::sometimes(REACHES[6], |_: &StepJournal, s: &State| {
            s.client.answer.is_some()
        }),
    ]
}

/// The flow has its final response and nothing is left to do: no message,
/// no worker busy. Stable once true (only replays follow), which is what
/// stateright's `eventually` needs to be exact on a DAG of states.
pub fn finished(s: &State) -> bool {
    s.flow.is_some_and(|f| f.state.is_final())
        && s.message.is_none()
        && s.workers.iter().all(|w| *w == Worker::Idle)
}

/// The journal of a finished flow against the effects applied.
fn consistent(s: &State) -> bool {
    let Some(flow) = s.flow else { return false };
    let rows_ok = match flow.state {
        FlowState::Done => s.steps.iter().all(|r| *r == Some(StepState::Done)),
        FlowState::Failed => flow.failed_step.is_some_and(|failed| {
            (0..STEPS).all(|j| {
                s.steps[j]
                    == match j.cmp(&usize::from(failed)) {
                        Ordering::Less if FLOW[j].compensable => Some(StepState::Compensated),
                        Ordering::Less => Some(StepState::Done),
                        Ordering::Equal => Some(StepState::Failed),
                        Ordering::Greater => None,
                    }
            })
        }),
        FlowState::Running | FlowState::Compensating => false,
    };
    let effects_ok = (0..STEPS).all(|j| {
        let ran = matches!(s.steps[j], Some(StepState::Done | StepState::Compensated));
        let undone = s.steps[j] == Some(StepState::Compensated);
        s.ghost.applied[j][StepAction::Run.index()] == u8::from(ran)
            && s.ghost.applied[j][StepAction::Compensate.index()] == u8::from(undone)
    });
    rows_ok && effects_ok
}

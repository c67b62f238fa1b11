//! Names for the step journal's transitions, so that samples of its paths
//! can be chosen to cover more of them ([`crate::cover`]).

use super::FLOW;
use super::bounds::Event;
use super::protocol::StepJournal;
use super::state::{State, Worker};
use crate::walk::Transitions;

impl Transitions for StepJournal {
    fn transition(before: &State, event: &Event, after: &State) -> Option<String> {
        let phase = |s: &State, w: u8| phase_name(s.workers[usize::from(w)]);
        let flow = |s: &State| {
            s.flow
                .map_or("none".to_owned(), |f| format!("{:?}", f.state))
        };
        Some(match *event {
            Event::Send => format!("send: {} -> {}", flow(before), flow(after)),
            Event::Claim(w) => format!(
                "claim -> {}{}",
                phase(after, w),
                if after.ghost.taken_over && !before.ghost.taken_over {
                    " (take-over)"
                } else {
                    ""
                }
            ),
            Event::Lookup(w) => format!("lookup -> {}", phase(after, w)),
            Event::Call {
                worker,
                refused,
                lost,
            } => format!(
                "call {} refused={refused} lost={lost} -> {}",
                step_of(before.workers[usize::from(worker)]),
                phase(after, worker)
            ),
            Event::Commit(w) => {
                let recorded = before.steps != after.steps;
                format!(
                    "commit {} {}: {} -> {}",
                    step_of(before.workers[usize::from(w)]),
                    if recorded {
                        "recorded"
                    } else {
                        "nothing recorded"
                    },
                    flow(before),
                    flow(after)
                )
            }
            Event::Crash(w) => format!("crash in {}", phase(before, w)),
            Event::Expire => return None,
        })
    }
}

fn phase_name(worker: Worker) -> String {
    format!("{worker:?}")
        .split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn step_of(worker: Worker) -> String {
    match (worker.job(), worker) {
        (Some(job), _) => format!(
            "{} {}",
            FLOW[usize::from(job.step)].name,
            job.action.as_str()
        ),
        (None, Worker::Uncertain { .. }) => "after a lost answer".to_owned(),
        (None, _) => "idle".to_owned(),
    }
}

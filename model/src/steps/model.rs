//! The step journal as a stateright [`Model`]: which events each state
//! enables (bounded faults make every run finite) and its properties.

use stateright::Model;

use super::bounds::Event;
use super::protocol::{CRASH, EXPIRE, LOSE, StepJournal};
use super::state::{Job, State, Worker};

impl Model for StepJournal {
    type State = State;
    type Action = Event;

    fn init_states(&self) -> Vec<State> {
        vec![self.init()]
    }

    fn actions(&self, state: &State, events: &mut Vec<Event>) {
        if state.client.answer.is_none() && state.client.sent < self.bounds.sends {
            events.push(Event::Send);
        }
        for (w, worker) in (0u8..).zip(&state.workers) {
            match *worker {
                Worker::Idle => {
                    if state.message.is_some_and(|m| m.lease.is_none()) {
                        events.push(Event::Claim(w));
                    }
                    continue;
                }
                Worker::Lookup(_) => events.push(Event::Lookup(w)),
                Worker::Calling(Job { step, action, .. }) => {
                    let may_refuse = self.refusable(step, action)
                        && (self.bounds.defect.applies_repeats()
                            || state.downstream[usize::from(step)][action.index()].is_none());
                    let may_lose = self.fault(state, LOSE);
                    for (refused, lost) in
                        [(false, false), (true, false), (false, true), (true, true)]
                    {
                        if (!refused || may_refuse) && (!lost || may_lose) {
                            events.push(Event::Call {
                                worker: w,
                                refused,
                                lost,
                            });
                        }
                    }
                }
                Worker::Recording(..) | Worker::Uncertain { .. } => {
                    events.push(Event::Commit(w));
                }
            }
            if self.fault(state, CRASH) {
                events.push(Event::Crash(w));
            }
        }
        if self.fault(state, EXPIRE) && state.message.is_some_and(|m| m.lease.is_some()) {
            events.push(Event::Expire);
        }
    }

    fn next_state(&self, last: &State, event: Event) -> Option<State> {
        self.apply(last, event)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        super::properties::all()
    }
}

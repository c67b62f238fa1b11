//! The protocol as a stateright [`Model`]: its actions, its transitions and
//! the properties it must keep.

use stateright::Model;

use crate::bounds::Action;
use crate::protocol::{CRASH, LOSE, Protocol, TEMPORARY};
use crate::state::{Phase, State};

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.init()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let b = &self.bounds;
        let fault = |kind: usize| state.faults[kind] < b.faults[kind];
        for (server, phase) in (0u8..).zip(&state.servers) {
            match phase {
                Phase::Idle => {
                    for (client, c) in (0u8..).zip(&state.clients) {
                        if c.answer.is_none() && c.sent < b.sends {
                            actions.push(Action::Send { client, server });
                        }
                    }
                }
                Phase::Respond { .. } => {
                    actions.push(Action::Deliver(server));
                    if fault(LOSE) {
                        actions.push(Action::Lose(server));
                    }
                }
                Phase::Effect { .. } => {
                    actions.push(Action::Effect { server, ok: true });
                    if fault(TEMPORARY) {
                        actions.push(Action::Effect { server, ok: false });
                    }
                }
                _ => actions.push(Action::Step(server)),
            }
            if fault(CRASH) && !matches!(phase, Phase::Idle | Phase::Respond { .. }) {
                actions.push(Action::Crash(server));
            }
        }
        if state.clock < b.last_tick {
            actions.push(Action::Tick);
        }
        actions.push(Action::Trim);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.apply(last, action)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        crate::properties::all()
    }
}

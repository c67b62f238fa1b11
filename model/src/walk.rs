//! Seeded random walks through the model: a sample of the paths the
//! checker explores, for replay against the real stores.

use stateright::Model;

use crate::protocol::{Action, Protocol};
use crate::state::State;

/// One path: the states, and the action taken from each (the last state
/// has none).
#[derive(Clone, Debug)]
pub struct Walk {
    /// The states visited, starting with the initial one.
    pub states: Vec<State>,
    /// `actions[i]` leads from `states[i]` to `states[i + 1]`.
    pub actions: Vec<Action>,
}

impl Walk {
    /// The path that `actions` take from the initial state, as far as each
    /// action is one the model allows (a counterexample of another model
    /// stops where this one disagrees).
    pub fn follow(model: &Protocol, actions: &[Action]) -> Self {
        let mut states = vec![model.init()];
        let mut taken = Vec::new();
        for &action in actions {
            let last = states.last().expect("the initial state");
            let mut allowed = Vec::new();
            model.actions(last, &mut allowed);
            let Some(next) = allowed
                .contains(&action)
                .then(|| model.next_state(last, action))
                .flatten()
            else {
                break;
            };
            states.push(next);
            taken.push(action);
        }
        Self {
            states,
            actions: taken,
        }
    }
}

/// `count` walks of at most `steps` actions, each choosing among the
/// enabled actions with a generator seeded by `seed` (the same seed gives
/// the same walks).
pub fn walks(model: &Protocol, seed: u64, count: usize, steps: usize) -> Vec<Walk> {
    let mut rng = seed.max(1);
    let mut next = move || {
        // xorshift64: enough to pick among a dozen actions reproducibly.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    (0..count)
        .map(|_| {
            let mut walk = Walk {
                states: vec![model.init()],
                actions: Vec::new(),
            };
            for _ in 0..steps {
                let last = walk.states.last().expect("the initial state");
                let steps = model.next_steps(last);
                if steps.is_empty() {
                    break;
                }
                let pick = usize::try_from(next() % steps.len() as u64).unwrap_or(0);
                let (action, state) = steps.into_iter().nth(pick).expect("in range");
                walk.actions.push(action);
                walk.states.push(state);
            }
            walk
        })
        .collect()
}

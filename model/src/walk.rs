//! Seeded random walks through a model: a sample of the paths the checker
//! explores, for replay against the real stores. Generic over the model,
//! so the records protocol ([`Protocol`]) and the step journal
//! ([`crate::steps::StepJournal`]) export their paths the same way: the
//! states visited and the actions (events) taken between them.

use std::collections::BTreeSet;
use std::fmt;

use stateright::Model;

use crate::bounds::Action;
use crate::protocol::Protocol;
use crate::state::{Answer, Phase, State};

/// One path: the states, and the action taken from each (the last state
/// has none).
pub struct Walk<M: Model = Protocol> {
    /// The states visited, starting with the initial one.
    pub states: Vec<M::State>,
    /// `actions[i]` leads from `states[i]` to `states[i + 1]`.
    pub actions: Vec<M::Action>,
}

impl<M: Model> Clone for Walk<M>
where
    M::State: Clone,
    M::Action: Clone,
{
    fn clone(&self) -> Self {
        Self {
            states: self.states.clone(),
            actions: self.actions.clone(),
        }
    }
}

impl<M: Model> fmt::Debug for Walk<M>
where
    M::State: fmt::Debug,
    M::Action: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Walk")
            .field("states", &self.states)
            .field("actions", &self.actions)
            .finish()
    }
}

impl<M: Model> Walk<M>
where
    M::State: Clone,
    M::Action: Clone + PartialEq,
{
    /// The path that `actions` take from the (first) initial state, as far
    /// as each action is one the model allows (a counterexample of another
    /// model stops where this one disagrees).
    pub fn follow(model: &M, actions: &[M::Action]) -> Self {
        let mut states = vec![first_state(model)];
        let mut taken = Vec::new();
        for action in actions {
            let last = states.last().expect("the initial state");
            let mut allowed = Vec::new();
            model.actions(last, &mut allowed);
            let Some(next) = allowed
                .contains(action)
                .then(|| model.next_state(last, action.clone()))
                .flatten()
            else {
                break;
            };
            states.push(next);
            taken.push(action.clone());
        }
        Self {
            states,
            actions: taken,
        }
    }

    /// The path's first `steps` actions (all of it when it is shorter).
    pub fn prefix(&self, steps: usize) -> Self {
        let steps = steps.min(self.actions.len());
        Self {
            states: self.states[..=steps].to_vec(),
            actions: self.actions[..steps].to_vec(),
        }
    }
}

fn first_state<M: Model>(model: &M) -> M::State {
    model
        .init_states()
        .into_iter()
        .next()
        .expect("a model has an initial state")
}

/// `count` walks of at most `steps` actions, each choosing among the
/// enabled actions with a generator seeded by `seed` (the same seed gives
/// the same walks).
pub fn walks<M: Model>(model: &M, seed: u64, count: usize, steps: usize) -> Vec<Walk<M>> {
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
                states: vec![first_state(model)],
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

/// A model whose steps can be named, so a sample of walks can be chosen to
/// cover more of them ([`cover`]).
pub trait Transitions: Model {
    /// What `action` did from `before` to `after`, or `None` for a step
    /// not worth covering.
    fn transition(
        before: &Self::State,
        action: &Self::Action,
        after: &Self::State,
    ) -> Option<String>;
}

impl Transitions for Protocol {
    fn transition(before: &State, action: &Action, after: &State) -> Option<String> {
        transition(before, *action, after)
    }
}

/// What one step of a walk did to the protocol: the server's phase before
/// and after (with the answer's kind), or the row before and after a trim.
/// Walks that cover more of these make a better sample.
pub fn transition(before: &State, action: Action, after: &State) -> Option<String> {
    let phase = |p: &Phase| match p {
        Phase::Respond { answer, .. } => format!("respond {}", answer_kind(*answer)),
        other => format!("{other:?}")
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    };
    let row = |s: &State| {
        s.row.map_or("none".to_owned(), |r| {
            format!("{:?}", r.status)
                .split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_owned()
        })
    };
    match action {
        Action::Step(server) => {
            let s = usize::from(server);
            Some(format!(
                "{} -> {}",
                phase(&before.servers[s]),
                phase(&after.servers[s])
            ))
        }
        Action::Trim => Some(format!("trim {} -> {}", row(before), row(after))),
        _ => None,
    }
}

fn answer_kind(answer: Answer) -> String {
    match answer {
        Answer::Executed { stored, .. } => format!("executed stored={stored}"),
        Answer::Replayed { .. } => "replayed".to_owned(),
        Answer::Rejected(r) => format!("{r:?}"),
        Answer::Temporary => "temporary".to_owned(),
        Answer::Unavailable => "unavailable".to_owned(),
    }
}

/// `count` walks picked from `pool` seeded random walks, each time the one
/// that adds the most [`Transitions::transition`]s not yet covered.
pub fn covering<M: Transitions>(
    model: &M,
    seed: u64,
    pool: usize,
    count: usize,
    steps: usize,
) -> Vec<Walk<M>> {
    cover(walks(model, seed, pool, steps), count)
}

/// `count` walks picked from `pool`, each time the one that adds the most
/// [`Transitions::transition`]s not yet covered (e.g. from walks cut to what
/// a store can follow).
pub fn cover<M: Transitions>(pool: Vec<Walk<M>>, count: usize) -> Vec<Walk<M>> {
    let mut candidates: Vec<(Walk<M>, BTreeSet<String>)> = pool
        .into_iter()
        .map(|walk| {
            let seen = transitions(&walk);
            (walk, seen)
        })
        .collect();
    let mut covered = BTreeSet::new();
    let mut picked = Vec::new();
    while picked.len() < count && !candidates.is_empty() {
        let best = (0..candidates.len())
            .max_by_key(|&i| {
                let new = candidates[i].1.difference(&covered).count();
                (new, std::cmp::Reverse(i))
            })
            .expect("a candidate");
        let (walk, seen) = candidates.swap_remove(best);
        covered.extend(seen);
        picked.push(walk);
    }
    picked
}

/// The transitions `walk` makes.
pub fn transitions<M: Transitions>(walk: &Walk<M>) -> BTreeSet<String> {
    walk.actions
        .iter()
        .enumerate()
        .filter_map(|(i, a)| M::transition(&walk.states[i], a, &walk.states[i + 1]))
        .collect()
}

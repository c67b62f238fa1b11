//! The step journal's transitions: the key's first transaction, a
//! worker's claim, lookup, call and fenced recording transaction,
//! compensation in reverse order, and the faults.

use super::bounds::{Bounds, Defect, Event};
use super::state::{
    Client, Flow, FlowState, Ghost, Job, Message, Outcome, State, StepAction, StepIndex, StepState,
    Worker,
};
use super::{CONFIRM, FLOW, STEPS};

/// The model: the step journal of one flow within [`Bounds`].
#[derive(Clone, Debug)]
pub struct StepJournal {
    /// The bounds.
    pub bounds: Bounds,
}

pub(super) const CRASH: usize = 0;
pub(super) const EXPIRE: usize = 1;
pub(super) const LOSE: usize = 2;

impl StepJournal {
    /// The model of `bounds`.
    pub const fn new(bounds: Bounds) -> Self {
        Self { bounds }
    }

    /// The initial world: nothing stored, idle workers, the client yet to
    /// send.
    pub fn init(&self) -> State {
        State {
            flow: None,
            steps: [None; STEPS],
            message: None,
            next_token: 0,
            workers: vec![Worker::Idle; usize::from(self.bounds.workers)],
            client: Client {
                sent: 0,
                answer: None,
            },
            downstream: [[None; 2]; STEPS],
            faults: [0; 3],
            ghost: Ghost::default(),
        }
    }

    /// Whether the downstream of `step` may refuse its run for good.
    pub fn refusable(&self, step: StepIndex, action: StepAction) -> bool {
        action == StepAction::Run
            && (FLOW[usize::from(step)].refusable
                || (self.bounds.confirm_refusable && step == CONFIRM))
    }

    pub(super) fn fault(&self, state: &State, kind: usize) -> bool {
        state.faults[kind] < self.bounds.faults[kind]
    }

    /// The key's first transaction: claim the key, run the local steps at
    /// the head (`reserve`), record them, write the flow row, enqueue the
    /// first external step's message, answer 202. One commit: a crash
    /// before it leaves nothing, so the client's retry runs it again.
    fn first_transaction(state: &mut State) {
        let mut step = 0;
        while usize::from(step) < STEPS && FLOW[usize::from(step)].local {
            state.ghost.applied[usize::from(step)][StepAction::Run.index()] += 1;
            state.steps[usize::from(step)] = Some(StepState::Done);
            step += 1;
        }
        state.flow = Some(Flow {
            state: FlowState::Running,
            position: step,
            failed_step: None,
        });
        Self::enqueue_or_finish(state, step, StepAction::Run);
    }

    /// Enqueue the message of `step` (settling the current one), or, past
    /// the last step, finish the flow: state done, the final response in
    /// the flow row and the idempotency record.
    fn enqueue_or_finish(state: &mut State, step: StepIndex, action: StepAction) {
        if usize::from(step) < STEPS {
            state.message = Some(Message {
                step,
                action,
                lease: None,
                attempts: 0,
            });
        } else {
            state.message = None;
            if let Some(flow) = &mut state.flow {
                flow.state = FlowState::Done;
            }
        }
    }

    /// After step `below` failed or was compensated: enqueue the
    /// compensation of the highest done step under it that has one, or end
    /// the flow `failed` (final response written) when none is left.
    fn compensate_below(&self, state: &mut State, below: StepIndex) {
        let done = |j: &StepIndex| {
            FLOW[usize::from(*j)].compensable
                && state.steps[usize::from(*j)] == Some(StepState::Done)
        };
        let next = if self.bounds.defect == Defect::ForwardCompensation {
            (0..STEPS as StepIndex).find(done)
        } else {
            (0..below).rev().find(done)
        };
        let Some(flow) = &mut state.flow else { return };
        match next {
            Some(j) => {
                flow.state = FlowState::Compensating;
                flow.position = j;
                state.message = Some(Message {
                    step: j,
                    action: StepAction::Compensate,
                    lease: None,
                    attempts: 0,
                });
            }
            None => {
                flow.state = FlowState::Failed;
                state.message = None;
            }
        }
    }

    /// A worker claims the pending message with a fresh token; from the
    /// second attempt on, an external step is looked up first.
    fn claim(&self, state: &mut State, worker: usize) -> Option<()> {
        let message = state.message.as_mut()?;
        if state.workers[worker] != Worker::Idle || message.lease.is_some() {
            return None;
        }
        let token = state.next_token;
        state.next_token += 1;
        message.lease = Some(token);
        message.attempts += 1;
        let (step, action, attempts) = (message.step, message.action, message.attempts);
        // Another worker still runs an earlier claim of this message.
        if state
            .workers
            .iter()
            .filter_map(Worker::job)
            .any(|job| job.step == step && job.action == action)
        {
            state.ghost.taken_over = true;
        }
        let job = Job {
            token,
            step,
            action,
        };
        let look_up = attempts > 1 && self.bounds.defect != Defect::NoLookupNoDedupe;
        state.workers[worker] = if FLOW[usize::from(step)].local {
            Worker::Recording(job, Outcome::Ok)
        } else if look_up {
            Worker::Lookup(job)
        } else {
            Worker::Calling(job)
        };
        Some(())
    }

    /// The lookup by step key: what an earlier attempt's call did, if the
    /// downstream has it; otherwise the worker calls.
    fn lookup(state: &mut State, worker: usize) -> Option<()> {
        let Worker::Lookup(job) = state.workers[worker] else {
            return None;
        };
        let found = state.downstream[usize::from(job.step)][job.action.index()];
        state.workers[worker] = match found {
            Some(outcome) => {
                if state.ghost.lost & key_bit(job.step, job.action) != 0 {
                    state.ghost.lost_then_found = true;
                }
                Worker::Recording(job, outcome)
            }
            None => Worker::Calling(job),
        };
        Some(())
    }

    /// The call with the step key. A deduplicating downstream answers a
    /// key it has seen with what it did then; a new key is applied, or
    /// refused for good. The answer may be lost after the downstream acted.
    fn call(&self, state: &mut State, worker: usize, refused: bool, lost: bool) -> Option<()> {
        let Worker::Calling(job) = state.workers[worker] else {
            return None;
        };
        let Job { step, action, .. } = job;
        let (s, a) = (usize::from(step), action.index());
        let seen = state.downstream[s][a];
        let outcome = match seen {
            Some(outcome) if !self.bounds.defect.applies_repeats() => {
                if refused {
                    return None; // the answer is the one it gave
                }
                outcome
            }
            _ if refused => {
                if !self.refusable(step, action) {
                    return None;
                }
                Outcome::Declined
            }
            _ => {
                state.ghost.applied[s][a] = state.ghost.applied[s][a].saturating_add(1);
                Outcome::Ok
            }
        };
        state.downstream[s][a] = Some(seen.unwrap_or(outcome));
        state.workers[worker] = if lost {
            state.faults[LOSE] += 1;
            state.ghost.lost |= key_bit(step, action);
            Worker::Uncertain { token: job.token }
        } else {
            Worker::Recording(job, outcome)
        };
        Some(())
    }

    /// The worker's transaction: the fenced recording, or putting the
    /// message back to pending after a lost answer.
    fn commit(&self, state: &mut State, worker: usize) -> Option<()> {
        let ours = |state: &State, token| state.message.is_some_and(|m| m.lease == Some(token));
        match state.workers[worker] {
            Worker::Uncertain { token } => {
                if ours(state, token) {
                    if self.bounds.defect == Defect::DeadLetterOnLostAnswer {
                        state.message = None;
                    } else if let Some(message) = &mut state.message {
                        message.lease = None;
                    }
                }
            }
            Worker::Recording(
                Job {
                    token,
                    step,
                    action,
                },
                outcome,
            ) => {
                let expected = match action {
                    StepAction::Run => FlowState::Running,
                    StepAction::Compensate => FlowState::Compensating,
                };
                let fence = ours(state, token)
                    && state
                        .flow
                        .is_some_and(|f| f.position == step && f.state == expected);
                if fence || self.bounds.defect == Defect::NoFence {
                    let current = ours(state, token);
                    if self.record(state, step, action, outcome) {
                        state.ghost.fenced_out_recorded |= !current;
                    }
                } else {
                    state.ghost.fenced = true;
                }
            }
            _ => return None,
        }
        state.workers[worker] = Worker::Idle;
        Some(())
    }

    /// The recording transaction's body once the fence passed: the local
    /// step's SQL, the step row, and the next message or the flow's end.
    /// False when the step rows' primary key refuses it (rolled back).
    fn record(
        &self,
        state: &mut State,
        step: StepIndex,
        action: StepAction,
        outcome: Outcome,
    ) -> bool {
        let (s, a) = (usize::from(step), action.index());
        let local = FLOW[s].local;
        match (action, outcome) {
            (StepAction::Run, _) if state.steps[s].is_some() => return false,
            (StepAction::Run, Outcome::Ok) => {
                state.steps[s] = Some(StepState::Done);
                if let Some(flow) = &mut state.flow {
                    flow.position = step + 1;
                }
                Self::enqueue_or_finish(state, step + 1, StepAction::Run);
            }
            (StepAction::Run, Outcome::Declined) => {
                state.steps[s] = Some(StepState::Failed);
                if let Some(flow) = &mut state.flow {
                    flow.failed_step = Some(step);
                }
                self.compensate_below(state, step);
            }
            (StepAction::Compensate, _) => {
                // `UPDATE idemkey_steps SET state = 'compensated' WHERE
                // (flow_id, idx)`: the fence is what keeps it to once.
                state.steps[s] = Some(StepState::Compensated);
                if state.ghost.compensated & ((1 << step) - 1) != 0 {
                    state.ghost.out_of_order = true;
                }
                state.ghost.compensated |= 1 << step;
                self.compensate_below(state, step);
            }
        }
        let undo_skipped = action == StepAction::Compensate
            && self.bounds.defect == Defect::CompensatedWithoutUndo;
        if local && outcome == Outcome::Ok && !undo_skipped {
            state.ghost.applied[s][a] = state.ghost.applied[s][a].saturating_add(1);
        }
        true
    }

    /// The state after `event`, or `None` when it is not enabled.
    pub(super) fn apply(&self, last: &State, event: Event) -> Option<State> {
        let mut state = last.clone();
        match event {
            Event::Send => {
                if state.client.answer.is_some() || state.client.sent >= self.bounds.sends {
                    return None;
                }
                state.client.sent += 1;
                match state.flow {
                    None => Self::first_transaction(&mut state),
                    // A replay: the final response like any completed key.
                    Some(flow) if flow.state.is_final() => state.client.answer = Some(flow.state),
                    // A replay while the flow runs: 202 with the state
                    // document, and the pending message made due now (due
                    // already: the model has no backoff).
                    Some(_) => {}
                }
            }
            Event::Claim(w) => self.claim(&mut state, usize::from(w))?,
            Event::Lookup(w) => Self::lookup(&mut state, usize::from(w))?,
            Event::Call {
                worker,
                refused,
                lost,
            } => self.call(&mut state, usize::from(worker), refused, lost)?,
            Event::Commit(w) => self.commit(&mut state, usize::from(w))?,
            Event::Crash(w) => {
                let token = state.workers[usize::from(w)].token()?;
                state.workers[usize::from(w)] = Worker::Idle;
                state.faults[CRASH] += 1;
                // Its lease ends in the store's time; nothing acts on the
                // message meanwhile, so it ends here.
                if let Some(message) = &mut state.message
                    && message.lease == Some(token)
                {
                    message.lease = None;
                }
            }
            Event::Expire => {
                let message = state.message.as_mut()?;
                message.lease?;
                message.lease = None;
                state.faults[EXPIRE] += 1;
            }
        }
        Some(state)
    }
}

/// One bit per step key, for the ghost.
pub(super) const fn key_bit(step: StepIndex, action: StepAction) -> u8 {
    1 << (step * 2 + action.index() as u8)
}

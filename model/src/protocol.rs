//! The engine's steps as transitions: each [`Action::Step`] is one call of
//! the `Records` trait (claim, take-over, complete, release) or a
//! transaction's commit; the rest are the effect, the network, crashes,
//! the store's clock and trim.

use idemkey_core::{Decision, ExpiryPolicy, UnixMillis, decide};

use crate::bounds::{ATTEMPTS, Action, Bounds, Mode};
use crate::state::{
    Answer, Client, Ghost, Phase, Redo, Rejection, Row, State, Status, fingerprint,
};

/// The model: the engine's records protocol within [`Bounds`].
#[derive(Clone, Debug)]
pub struct Protocol {
    /// The bounds.
    pub bounds: Bounds,
}

pub(crate) const CRASH: usize = 0;
pub(crate) const LOSE: usize = 1;
pub(crate) const TEMPORARY: usize = 2;

impl Protocol {
    /// The model of `bounds`.
    pub const fn new(bounds: Bounds) -> Self {
        Self { bounds }
    }

    fn lease(&self) -> bool {
        self.bounds.mode == Mode::Lease
    }

    /// Who else's open transaction holds the row lock.
    fn locked_by_other(state: &State, server: u8) -> bool {
        state.lock.is_some_and(|holder| holder != server)
    }

    /// An effect runs (lease mode) or commits (transactional mode) under
    /// `token`: record it in the ghost.
    fn effect_happens(&self, state: &mut State, token: u8) {
        let clock = state.clock;
        let g = &mut state.ghost;
        g.ran |= 1 << token;
        if state
            .row
            .is_some_and(|row| row.token != token && row.live_result(clock))
        {
            g.twice = true;
        }
    }

    /// A request acquires the key to run its effect: under `reject` that
    /// must never happen once the key's result is past its window (while
    /// the key is remembered).
    fn acquired(&self, state: &mut State) {
        if state.ghost.expired && self.bounds.expiry == ExpiryPolicy::Reject {
            state.ghost.ran_after_window = true;
        }
    }

    /// `row` replaces the key's row: a completed row inside its window
    /// must never be replaced.
    fn write(state: &mut State, row: Option<Row>) {
        if let Some(old) = state.row
            && old.live_result(state.clock)
            && row != Some(old)
        {
            state.ghost.overwritten = true;
        }
        if row.is_none_or(|r| matches!(r.status, Status::Completed { .. })) {
            // Forgotten, or a new result with a window of its own.
            state.ghost.expired = false;
        }
        state.row = row;
    }

    fn new_token(state: &mut State, payload: u8) -> u8 {
        let token = state.next_token;
        assert!(token < 32, "the ghost keeps 32 claims");
        state.next_token += 1;
        if payload == 1 {
            state.ghost.payload_1 |= 1 << token;
        }
        token
    }

    /// Claim `token` now holds the key (a won claim or take-over): the row
    /// is written (lease mode) or held by the open transaction, and the
    /// effect may run.
    fn hold(&self, state: &mut State, server: u8, client: u8, token: u8) -> Phase {
        self.acquired(state);
        let lease_until = state.clock + self.bounds.lease;
        let row = Row {
            payload: state.clients[usize::from(client)].payload,
            token,
            status: Status::InFlight { lease_until },
            created: state.clock,
        };
        let pending = if self.lease() {
            Self::write(state, Some(row));
            None
        } else {
            state.lock = Some(server);
            Some(row)
        };
        Phase::Effect {
            client,
            token,
            lease_until,
            pending,
        }
    }

    /// A claim that found the row changed: claim again, or give up.
    const fn changed(client: u8, changes: u8) -> Phase {
        if changes + 1 < ATTEMPTS {
            Phase::Claim {
                client,
                changes: changes + 1,
            }
        } else {
            Phase::Respond {
                client,
                answer: Answer::Unavailable,
            }
        }
    }

    /// What the engine's `step` does with the row a claim found, at the
    /// store's clock, through the core's `decide`.
    pub fn decide(&self, row: &Row, payload: u8, clock: u8) -> Decision {
        decide(
            row.stored(),
            fingerprint(payload),
            UnixMillis(clock.into()),
            self.bounds.expiry,
        )
    }

    /// `Records::claim`, then the engine's `step` on what it found.
    fn claim(&self, state: &mut State, server: u8, client: u8, changes: u8) -> Option<Phase> {
        let payload = state.clients[usize::from(client)].payload;
        let Some(row) = state.row else {
            // An uncommitted claim of another transaction: the insert
            // waits for it.
            if Self::locked_by_other(state, server) {
                return None;
            }
            let token = Self::new_token(state, payload);
            return Some(self.hold(state, server, client, token));
        };
        // The claim's token is drawn (and lost) even when the key is taken.
        let token = Self::new_token(state, payload);
        let respond = |answer| Phase::Respond { client, answer };
        Some(match self.decide(&row, payload, state.clock) {
            Decision::Replay => respond(Answer::Replayed { effect: row.token }),
            Decision::Reused => respond(Answer::Rejected(Rejection::Reused)),
            Decision::Expired => respond(Answer::Rejected(Rejection::Expired)),
            Decision::InProgress { .. } => respond(Answer::Rejected(Rejection::InProgress)),
            decision @ (Decision::TakeOver | Decision::Reexecute) => Phase::TakeOver {
                client,
                changes,
                previous: row,
                token,
                redo: if decision == Decision::TakeOver {
                    Redo::TakeOver
                } else {
                    Redo::Reexecute
                },
            },
            // `decide` answers Execute only when nothing is stored.
            Decision::Execute => Self::changed(client, changes),
            // The engine answers 503 to a decision it does not know.
            _ => respond(Answer::Unavailable),
        })
    }

    /// `Records::take_over`: only while the row carries the previous
    /// claim's token and state.
    fn take_over(
        &self,
        state: &mut State,
        server: u8,
        (client, changes, previous, token): (u8, u8, Row, u8),
    ) -> Option<Phase> {
        if Self::locked_by_other(state, server) {
            return None; // the UPDATE waits for the row lock
        }
        let matches = state.row.is_some_and(|row| {
            row.token == previous.token
                && (self.bounds.stale_take_over || same_state(&row, &previous))
        });
        if !matches {
            return Some(Self::changed(client, changes));
        }
        Some(self.hold(state, server, client, token))
    }

    /// `Records::complete` (lease mode): only while the row is this
    /// claim's and in flight.
    fn complete(state: &mut State, client: u8, token: u8, replay_until: u8) -> Phase {
        let ours = state
            .row
            .is_some_and(|row| row.token == token && matches!(row.status, Status::InFlight { .. }));
        if ours {
            let row = state.row.map(|row| Row {
                status: Status::Completed { replay_until },
                ..row
            });
            Self::write(state, row);
            state.ghost.stored |= 1 << token;
        }
        Phase::Respond {
            client,
            answer: Answer::Executed {
                effect: token,
                stored: ours,
            },
        }
    }

    fn step(&self, state: &mut State, server: u8) -> Option<Phase> {
        let window = self.bounds.window;
        Some(match state.servers[usize::from(server)] {
            Phase::Claim { client, changes } => self.claim(state, server, client, changes)?,
            Phase::TakeOver {
                client,
                changes,
                previous,
                token,
                ..
            } => self.take_over(state, server, (client, changes, previous, token))?,
            Phase::Complete {
                client,
                token,
                pending: None,
                ..
            } => Self::complete(state, client, token, state.clock + window),
            Phase::Complete {
                client,
                token,
                pending: Some(row),
                ..
            } => {
                // The transaction stores the response and commits: the
                // effect and the result become visible together.
                self.effect_happens(state, token);
                Self::write(
                    state,
                    Some(Row {
                        status: Status::Completed {
                            replay_until: state.clock + window,
                        },
                        ..row
                    }),
                );
                state.lock = None;
                state.ghost.stored |= 1 << token;
                Phase::Respond {
                    client,
                    answer: Answer::Executed {
                        effect: token,
                        stored: true,
                    },
                }
            }
            Phase::Release { client, token, .. } => {
                let ours = state.row.is_some_and(|row| {
                    row.token == token && matches!(row.status, Status::InFlight { .. })
                });
                if ours {
                    Self::write(state, None);
                }
                Phase::Respond {
                    client,
                    answer: Answer::Temporary,
                }
            }
            Phase::Idle | Phase::Effect { .. } | Phase::Respond { .. } => return None,
        })
    }

    fn effect(&self, state: &mut State, server: u8, ok: bool) -> Option<Phase> {
        let Phase::Effect {
            client,
            token,
            lease_until,
            pending,
        } = state.servers[usize::from(server)]
        else {
            return None;
        };
        if self.lease() {
            self.effect_happens(state, token);
        }
        Some(match (ok, pending) {
            (true, _) => Phase::Complete {
                client,
                token,
                lease_until,
                pending,
            },
            (false, None) => Phase::Release {
                client,
                token,
                lease_until,
            },
            (false, Some(_)) => {
                // The caller rolls the transaction back.
                state.lock = None;
                Phase::Respond {
                    client,
                    answer: Answer::Temporary,
                }
            }
        })
    }

    /// A maintenance round at the store's clock.
    fn trim(&self, state: &mut State) -> bool {
        let Some(row) = state.row else { return false };
        if state.lock.is_some() {
            return false; // SKIP LOCKED
        }
        let (clock, retention) = (state.clock, self.bounds.retention);
        let mut next = Some(row);
        if let Status::Completed { replay_until } = row.status
            && replay_until <= clock
        {
            next = Some(Row {
                status: Status::Tombstone,
                ..row
            });
        }
        next = next.filter(|row| match row.status {
            Status::Tombstone => row.created + retention >= clock,
            Status::InFlight { lease_until } => lease_until + retention >= clock,
            Status::Completed { .. } => true,
        });
        if next == state.row {
            return false;
        }
        Self::write(state, next);
        if next.is_some() {
            state.ghost.expired = true; // a tombstone
        }
        true
    }

    /// The state after `action`, ignoring the bounds on sends and the
    /// clock (the fair runs of the liveness check go past them).
    pub(crate) fn apply(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Send { client, server } => {
                let c = &mut state.clients[usize::from(client)];
                if c.answer.is_some() || state.servers[usize::from(server)] != Phase::Idle {
                    return None;
                }
                c.sent += 1;
                state.servers[usize::from(server)] = Phase::Claim { client, changes: 0 };
            }
            Action::Step(server) => {
                let phase = self.step(&mut state, server)?;
                state.servers[usize::from(server)] = phase;
            }
            Action::Effect { server, ok } => {
                let phase = self.effect(&mut state, server, ok)?;
                state.servers[usize::from(server)] = phase;
                if !ok {
                    state.faults[TEMPORARY] += 1;
                }
            }
            Action::Deliver(server) | Action::Lose(server) => {
                let Phase::Respond { client, answer } = state.servers[usize::from(server)] else {
                    return None;
                };
                state.servers[usize::from(server)] = Phase::Idle;
                if action == Action::Lose(server) {
                    state.faults[LOSE] += 1;
                } else if answer.is_final() {
                    state.clients[usize::from(client)].answer = Some(answer);
                }
            }
            Action::Crash(server) => {
                let phase = state.servers[usize::from(server)];
                if matches!(phase, Phase::Idle | Phase::Respond { .. }) {
                    return None;
                }
                if state.lock == Some(server) {
                    state.lock = None;
                }
                state.servers[usize::from(server)] = Phase::Idle;
                state.faults[CRASH] += 1;
            }
            Action::Tick => {
                state.clock += 1;
                if state.row.is_some_and(|row| {
                    matches!(row.status, Status::Completed { replay_until } if replay_until <= state.clock)
                }) {
                    state.ghost.expired = true;
                }
            }
            Action::Trim => {
                if !self.trim(&mut state) {
                    return None;
                }
            }
        }
        Some(state)
    }

    /// The initial world: no row, idle servers, clients yet to send.
    pub fn init(&self) -> State {
        State {
            clock: 0,
            row: None,
            lock: None,
            next_token: 0,
            servers: vec![Phase::Idle; usize::from(self.bounds.servers)],
            clients: self
                .bounds
                .payloads
                .iter()
                .map(|&payload| Client {
                    payload,
                    sent: 0,
                    answer: None,
                })
                .collect(),
            faults: [0; 3],
            ghost: Ghost::default(),
        }
    }
}

/// Whether `row`'s status is the kind `previous` had (what the fixed
/// take-over compares besides the token).
pub fn same_state(row: &Row, previous: &Row) -> bool {
    std::mem::discriminant(&row.status) == std::mem::discriminant(&previous.status)
}

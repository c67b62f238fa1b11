//! The properties the checker proves, each a predicate over every
//! reachable state (the ghost variables carry what happened on the way).

use idemkey_core::ExpiryPolicy;
use stateright::Property;

use crate::bounds::{Action, Mode};
use crate::protocol::Protocol;
use crate::state::{Answer, Phase, Rejection, State};

/// Transactional mode: the effect commits at most once per key and window.
pub const AT_MOST_ONCE_PER_KEY: &str = "transactional: the effect commits at most once per key";
/// Transactional mode: every success a client receives is a stored result.
pub const ACKNOWLEDGED_IS_STORED: &str =
    "transactional: every acknowledged success is the one stored";
/// Lease mode: no two claims with live leases hold the key, so the effect
/// runs at most once per lease.
pub const ONE_EFFECT_PER_LEASE: &str = "lease: the effect runs at most once per lease";
/// Both modes: a completed record is never changed inside its window.
pub const NEVER_OVERWRITTEN: &str = "no completed record is ever overwritten";
/// Lease mode: every result a client receives comes from an effect that
/// ran (so after a crash the effect still happens at least once).
pub const AT_LEAST_ONCE: &str = "lease: every result comes from an effect that ran";
/// Both modes: a client of the other payload never receives the result.
pub const OTHER_PAYLOAD_REJECTED: &str = "another payload never receives the stored result";
/// Policy `reject`: no request acquires the key to run its effect after
/// the window, while the key is kept. (A lease-mode server paused past its
/// lease may still run an effect it acquired earlier: leases do not fence.)
pub const NOTHING_AFTER_WINDOW: &str = "reject: nothing executes after the window";
/// Liveness under fairness: from every state, once faults stop and the
/// servers get to run, a client that keeps retrying gets a final answer,
/// and a success is the stored result.
pub const RETRYING_CLIENT_ANSWERED: &str =
    "a retrying client eventually receives the stored result";

/// Reachability checks that keep the bounds honest: each must be found.
pub const REACHES: [&str; 6] = [
    "sometimes: a replay",
    "sometimes: a take-over after a lease",
    "sometimes: 422 for the other payload",
    "sometimes: a crash after the effect",
    "sometimes: the window ends",
    "sometimes: a tombstone is kept",
];

/// Whether a reachability check applies to `mode`: a transaction never
/// commits a claim, so nothing is taken over after a lease there.
pub fn applies(mode: Mode, name: &str) -> bool {
    mode == Mode::Lease || name != REACHES[1]
}

/// Every property of the model.
pub fn all() -> Vec<Property<Protocol>> {
    vec![
        Property::always(AT_MOST_ONCE_PER_KEY, |m: &Protocol, s: &State| {
            m.bounds.mode != Mode::Transactional || !s.ghost.twice
        }),
        Property::always(ACKNOWLEDGED_IS_STORED, |m: &Protocol, s: &State| {
            m.bounds.mode != Mode::Transactional
                || answers(s).all(|a| match a {
                    Answer::Executed { effect, stored } => {
                        stored && s.ghost.stored & (1 << effect) != 0
                    }
                    Answer::Replayed { effect } => s.ghost.stored & (1 << effect) != 0,
                    _ => true,
                })
        }),
        Property::always(ONE_EFFECT_PER_LEASE, |m: &Protocol, s: &State| {
            m.bounds.mode != Mode::Lease
                || s.servers
                    .iter()
                    .filter_map(Phase::holding)
                    .filter(|&(_, lease_until)| s.clock < lease_until)
                    .count()
                    <= 1
        }),
        Property::always(NEVER_OVERWRITTEN, |_: &Protocol, s: &State| {
            !s.ghost.overwritten
        }),
        Property::always(AT_LEAST_ONCE, |m: &Protocol, s: &State| {
            m.bounds.mode != Mode::Lease
                || answers(s).all(|a| match a {
                    Answer::Executed { effect, .. } | Answer::Replayed { effect } => {
                        s.ghost.ran & (1 << effect) != 0
                    }
                    _ => true,
                })
        }),
        Property::always(OTHER_PAYLOAD_REJECTED, |_: &Protocol, s: &State| {
            s.clients.iter().all(|c| match c.answer {
                Some(Answer::Replayed { effect }) => s.ghost.payload_of(effect) == c.payload,
                _ => true,
            })
        }),
        Property::always(NOTHING_AFTER_WINDOW, |m: &Protocol, s: &State| {
            m.bounds.expiry != ExpiryPolicy::Reject || !s.ghost.ran_after_window
        }),
        Property::always(RETRYING_CLIENT_ANSWERED, |m: &Protocol, s: &State| {
            (0u8..)
                .zip(&s.clients)
                .filter(|(_, c)| c.answer.is_none())
                .all(|(client, _)| fair_run_answers(m, s, client))
        }),
        Property::sometimes(REACHES[0], |_: &Protocol, s: &State| {
            answers(s).any(|a| matches!(a, Answer::Replayed { .. }))
        }),
        Property::sometimes(REACHES[1], |_: &Protocol, s: &State| {
            s.servers.iter().any(|p| {
                matches!(p, Phase::TakeOver { previous, .. }
                    if matches!(previous.status, crate::state::Status::InFlight { .. }))
            })
        }),
        Property::sometimes(REACHES[2], |_: &Protocol, s: &State| {
            answers(s).any(|a| a == Answer::Rejected(Rejection::Reused))
        }),
        Property::sometimes(REACHES[3], |m: &Protocol, s: &State| {
            // In a transaction the crash rolls the effect back with it.
            s.faults[0] > 0
                && (m.bounds.mode == Mode::Transactional || s.ghost.ran != s.ghost.stored)
        }),
        Property::sometimes(REACHES[4], |_: &Protocol, s: &State| s.ghost.expired),
        Property::sometimes(REACHES[5], |_: &Protocol, s: &State| {
            s.row
                .is_some_and(|r| r.status == crate::state::Status::Tombstone)
        }),
    ]
}

/// The final answers clients hold.
fn answers(s: &State) -> impl Iterator<Item = Answer> + '_ {
    s.clients.iter().filter_map(|c| c.answer)
}

/// Runs the world fairly from `s`: no more faults, every busy server gets
/// its next step, answers are delivered, and `client` retries on an idle
/// server after each 409/503 once the clock moved on. True when `client`
/// ends with a final answer, and any success it got is a stored result.
pub fn fair_run_answers(m: &Protocol, s: &State, client: u8) -> bool {
    let mut state = s.clone();
    // Enough for every server to finish and the client to retry past any
    // lease; a run that needs more is a livelock.
    for _ in 0..64 {
        if let Some(answer) = state.clients[usize::from(client)].answer {
            return match answer {
                Answer::Executed {
                    effect,
                    stored: true,
                }
                | Answer::Replayed { effect } => state.ghost.stored & (1 << effect) != 0,
                Answer::Executed { stored: false, .. } => m.bounds.mode == Mode::Lease,
                _ => true,
            };
        }
        state = fair_step(m, &state, client);
    }
    false
}

fn fair_step(m: &Protocol, s: &State, client: u8) -> State {
    for (server, phase) in (0u8..).zip(&s.servers) {
        let action = match phase {
            Phase::Idle => continue,
            Phase::Respond { .. } => Action::Deliver(server),
            Phase::Effect { .. } => Action::Effect { server, ok: true },
            _ => Action::Step(server),
        };
        if let Some(next) = m.apply(s, action) {
            return next;
        }
    }
    // Every server is idle (or waits on a lock no one will release, which
    // the transaction's crash already released): the client waits for the
    // clock to move, then retries.
    let waited = m.apply(s, Action::Tick).unwrap_or_else(|| s.clone());
    m.apply(&waited, Action::Send { client, server: 0 })
        .unwrap_or(waited)
}

//! # The step journal of a multi-step operation
//!
//! A model of how the library runs an operation that declares a flow
//! (ordered steps), checked exhaustively like the records protocol: the
//! key's first transaction claims the key, runs the local steps at the
//! head, records them, writes the flow row and enqueues the next step's
//! outbox message (the recovery point) before answering 202; workers claim
//! that message under a lease (a fresh token per claim), call the step's
//! downstream with the step key (looking the effect up first from the
//! second attempt on), and record the step in a transaction fenced by
//! (the message's lease is still theirs) AND (`flow.position` = the step)
//! AND (the flow's state); a step refused for good turns the flow to
//! compensation, which undoes the done steps in reverse order, each in its
//! own fenced transaction, and ends the flow `failed`.
//!
//! The flow is [`FLOW`]: `reserve` (local, compensable: runs in the first
//! transaction, undone by a worker's transaction), `charge` (external,
//! compensable by a refund, may be declined), `confirm` (external; may be
//! refused too when [`Bounds::confirm_refusable`], so that two
//! compensations run and their order is checked).
//!
//! The world: one client (sends, then retries the key), [`Bounds::workers`]
//! workers, a downstream per external step that deduplicates by the step
//! key (a call under a key it has seen is not applied again and gets the
//! answer it got then), and the store, whose transactions are atomic.
//! Nondeterminism: any claim's lease may end while its owner still runs
//! (another worker takes the message over), a worker may crash anywhere
//! (its lease just ends), an answer may be lost after the downstream
//! acted (the worker is uncertain: the message goes back to pending and
//! the next attempt looks the effect up first), and `charge` may be
//! declined. Faults are bounded ([`Bounds::faults`]), so every run ends,
//! and the liveness property is checked on the runs' ends. Left out: the
//! backoff and the dead letter (no run exhausts its attempts within the
//! fault bounds), temporary failures that apply nothing (a lost answer
//! covers the uncertain case), and the clock beyond ending leases.
//!
//! ## Paths, for replay against the library
//!
//! A path is a [`crate::Walk`]`<`[`StepJournal`]`>`: the states visited and
//! the [`Event`]s between them, from [`crate::Walk::follow`] (a
//! counterexample's events), [`crate::walks`] (seeded random walks) or
//! [`crate::cover`] (a sample covering more transitions, named by
//! [`crate::Transitions`]). Each event is one piece of the library's work:
//!
//! | event | the library |
//! |---|---|
//! | `Send`, no flow yet | the key's first transaction: claim, `reserve`'s SQL and step row, flow row (`running`, position 1), the `charge` message, 202 |
//! | `Send`, flow running | replay: the 202 state document; the pending message made due now |
//! | `Send`, flow final | replay: the final response |
//! | `Claim(w)` | worker `w` claims the message: fresh lease token, attempts + 1 |
//! | `Lookup(w)` | look the effect up at the downstream by the step key (attempts > 1) |
//! | `Call { w, refused, lost }` | call the downstream with the step key; it applies, answers a seen key's answer, or declines (`refused`); `lost`: the worker gets no answer |
//! | `Commit(w)`, answered | the recording transaction: the fence, a local step's SQL, the step row (`done`, `failed`, `compensated`), then the next message, compensation's next, or the final response; settles the message. Fenced out: rolled back |
//! | `Commit(w)`, answer lost | the message back to pending (fenced by the token), for a retry |
//! | `Crash(w)` | the worker stops; its lease ends in the store's time |
//! | `Expire` | the store's clock passes the message's lease while its owner still runs |
//!
//! After each event the store's rows to compare are [`State::flow`],
//! [`State::steps`] and [`State::message`]; a downstream's are
//! [`State::downstream`]; what a replay answers is [`Client::answer`].

mod bounds;
mod model;
mod paths;
pub mod properties;
mod protocol;
mod state;

pub use bounds::{Bounds, Defect, Event};
pub use protocol::StepJournal;
pub use state::{
    Client, Flow, FlowState, Ghost, Job, Message, Outcome, PerKey, State, StepAction, StepIndex,
    StepState, Worker,
};

/// How many steps the flow has.
pub const STEPS: usize = 3;
/// `reserve`'s index: local, compensable.
pub const RESERVE: StepIndex = 0;
/// `charge`'s index: external, refunded on compensation, may be declined.
pub const CHARGE: StepIndex = 1;
/// `confirm`'s index: external, last.
pub const CONFIRM: StepIndex = 2;

/// One step of the flow, as the flow declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepSpec {
    /// Its name.
    pub name: &'static str,
    /// Runs in a store transaction (rather than at a downstream).
    pub local: bool,
    /// Has a compensation.
    pub compensable: bool,
    /// Its downstream may refuse it for good.
    pub refusable: bool,
}

/// The flow the model runs: local `reserve`, external `charge` (refunded
/// on compensation, may be declined), external `confirm`.
pub const FLOW: [StepSpec; STEPS] = [
    StepSpec {
        name: "reserve",
        local: true,
        compensable: true,
        refusable: false,
    },
    StepSpec {
        name: "charge",
        local: false,
        compensable: true,
        refusable: true,
    },
    StepSpec {
        name: "confirm",
        local: false,
        compensable: false,
        refusable: false,
    },
];

//! The size of the step journal's world (workers, sends, faults), the
//! defects the checker must catch, and the events between states.

/// A defect put back into the protocol, for the mutation checks: the
/// checker must find a violation with each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// The protocol as designed.
    None,
    /// The recording transaction commits without its fence (message lease
    /// still ours, `flow.position = step`, flow state); the step rows'
    /// primary key stays.
    NoFence,
    /// The worker calls again without looking the effect up first, and
    /// the downstream applies every call (it does not deduplicate by the
    /// step key).
    NoLookupNoDedupe,
    /// The worker looks up first, but the downstream applies every call:
    /// shows that the lookup alone does not make a take-over safe (the new
    /// owner's lookup can come before the old owner's call).
    NoDedupe,
    /// Compensation undoes the lowest done step first, then the next
    /// higher one.
    ForwardCompensation,
    /// After a lost answer the message is dead-lettered instead of going
    /// back to pending: the flow is stuck (as when attempts run out, which
    /// the fault bounds keep the protocol as designed from).
    DeadLetterOnLostAnswer,
    /// A local step's compensation is recorded `compensated` without its
    /// undo having run (as when the undo for the store's backend is
    /// missing and counts as done): the journal says the reservation was
    /// released, the store still holds it.
    CompensatedWithoutUndo,
}

impl Defect {
    /// Whether the downstream applies a call under a step key it has seen.
    pub const fn applies_repeats(self) -> bool {
        matches!(self, Self::NoLookupNoDedupe | Self::NoDedupe)
    }
}

/// The size of the world the checker explores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Workers handling the outbox.
    pub workers: u8,
    /// Requests the client sends at most (the first runs the first
    /// transaction, the others replay).
    pub sends: u8,
    /// At most: worker crashes, leases ended while their owner still runs
    /// (take-overs), lost answers.
    pub faults: [u8; 3],
    /// Whether `confirm` may be refused too, so that two compensations run
    /// (refund, then release): the reverse order is only checked then.
    pub confirm_refusable: bool,
    /// The defect to find, if any.
    pub defect: Defect,
}

impl Bounds {
    /// The bounds checked in CI: two workers, a client sending twice, up
    /// to three faults of each kind (so a step can be taken over, lost and
    /// crashed in one run), and both `charge` and `confirm` refusable.
    pub const fn small() -> Self {
        Self {
            workers: 2,
            sends: 2,
            faults: [3, 3, 3],
            confirm_refusable: true,
            defect: Defect::None,
        }
    }
}

/// One event: what a path of the step journal is a list of. Each is one
/// thing the library does (a transaction, a downstream call) or one fault;
/// [`crate::steps`] maps each to the library's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The client sends the request: the first time, the key's first
    /// transaction (claim, `reserve`, its step row, the flow row, the
    /// `charge` message, 202); later, a replay (202 and resume while the
    /// flow runs, the final response once it has one).
    Send,
    /// The worker claims the pending message under a fresh lease token.
    Claim(u8),
    /// The worker looks the effect up at the downstream by the step key.
    Lookup(u8),
    /// The worker calls the downstream with the step key.
    Call {
        /// The worker.
        worker: u8,
        /// The downstream refuses for good (`charge` declined).
        refused: bool,
        /// The answer is lost: the worker cannot tell whether it applied.
        lost: bool,
    },
    /// The worker's next transaction: the fenced recording (and a local
    /// step's SQL), or after a lost answer putting the message back to
    /// pending.
    Commit(u8),
    /// The worker crashes; its claim is left to expire.
    Crash(u8),
    /// The store's clock passes the message's lease while its owner still
    /// runs: the lease is no longer the owner's (its fence fails even
    /// before another claim), and another worker may take the message over.
    Expire,
}

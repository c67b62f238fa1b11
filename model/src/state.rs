//! What the model's world holds: the store's one row and clock, each
//! server's place in the engine, each client's answer, and ghost variables
//! that only the properties read.

use idemkey_core::{Fingerprint, Stored, UnixMillis};

/// The state column of the key's row, with the deadline that goes with it
/// (in ticks of the store's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// A claim whose effect runs; another request may take it over from
    /// `lease_until` on.
    InFlight {
        /// First tick at which the lease is over.
        lease_until: u8,
    },
    /// The response is stored and replayed before `replay_until`.
    Completed {
        /// First tick at which the window is over.
        replay_until: u8,
    },
    /// The response was trimmed; the fingerprint stays until retention ends.
    Tombstone,
}

/// The key's committed row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    /// Which of the two payloads claimed it (0 or 1).
    pub payload: u8,
    /// The claim that wrote it last; a completed row's effect is this
    /// claim's effect.
    pub token: u8,
    /// Its state.
    pub status: Status,
    /// The tick it was claimed at (retention counts from here).
    pub created: u8,
}

/// The two fingerprints of the model's two payloads.
pub fn fingerprint(payload: u8) -> Fingerprint {
    Fingerprint::from_bytes([payload; 32])
}

impl Row {
    /// The row in the core's terms, for [`idemkey_core::decide`].
    pub fn stored(&self) -> Stored {
        let fingerprint = fingerprint(self.payload);
        match self.status {
            Status::InFlight { lease_until } => Stored::InFlight {
                fingerprint,
                lease_until: UnixMillis(lease_until.into()),
            },
            Status::Completed { replay_until } => Stored::Completed {
                fingerprint,
                replay_until: UnixMillis(replay_until.into()),
            },
            Status::Tombstone => Stored::Tombstone { fingerprint },
        }
    }

    /// Whether the row holds a result still replayed at `clock`.
    pub fn live_result(&self, clock: u8) -> bool {
        matches!(self.status, Status::Completed { replay_until } if clock < replay_until)
    }
}

/// Why a request was answered without running anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// 409: another claim's lease is not over.
    InProgress,
    /// 422: the key is bound to the other payload.
    Reused,
    /// 410: the window is over (policy `reject`).
    Expired,
}

/// What a server answers a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The effect of claim `effect` ran; `stored` says whether its
    /// response is the key's stored result.
    Executed {
        /// The claim the effect ran under.
        effect: u8,
        /// Whether `complete` stored it.
        stored: bool,
    },
    /// The stored response of claim `effect`, sent again.
    Replayed {
        /// The claim whose effect is stored.
        effect: u8,
    },
    /// 409, 410 or 422.
    Rejected(Rejection),
    /// The effect answered a temporary status: the claim was released (or
    /// the transaction rolled back), so a retry runs again.
    Temporary,
    /// 503: the row kept changing under three claims in a row.
    Unavailable,
}

impl Answer {
    /// Whether a client stops retrying on this answer.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            Self::Executed { .. }
                | Self::Replayed { .. }
                | Self::Rejected(Rejection::Reused | Rejection::Expired)
        )
    }
}

/// Why an existing row is replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Redo {
    /// An in-flight claim whose lease is over.
    TakeOver,
    /// A result past its window under `reexecute`.
    Reexecute,
}

/// Where one server is in the engine's `run` for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No request.
    Idle,
    /// Next: `Records::claim` with a fresh token (`changes` claims so far
    /// found the row changed under them).
    Claim {
        /// Whose request.
        client: u8,
        /// Rows that changed under this request so far (the engine gives
        /// up with 503 at three).
        changes: u8,
    },
    /// Next: `Records::take_over` of `previous` with claim `token`.
    TakeOver {
        /// Whose request.
        client: u8,
        /// Rows that changed under this request so far.
        changes: u8,
        /// The row the decision was made on.
        previous: Row,
        /// The new claim.
        token: u8,
        /// Why.
        redo: Redo,
    },
    /// Next: the effect, under claim `token`, whose lease ends at
    /// `lease_until`. In a transaction `pending` is the uncommitted row.
    Effect {
        /// Whose request.
        client: u8,
        /// The claim.
        token: u8,
        /// The claim's own lease end.
        lease_until: u8,
        /// The row the transaction wrote (transactional mode only).
        pending: Option<Row>,
    },
    /// The effect ran; next: `Records::complete` (lease mode) or the
    /// transaction's commit, with `pending` its completed row.
    Complete {
        /// Whose request.
        client: u8,
        /// The claim.
        token: u8,
        /// The claim's own lease end.
        lease_until: u8,
        /// The row the transaction wrote (transactional mode only).
        pending: Option<Row>,
    },
    /// The effect answered a temporary status; next: `Records::release`.
    Release {
        /// Whose request.
        client: u8,
        /// The claim.
        token: u8,
        /// The claim's own lease end.
        lease_until: u8,
    },
    /// Next: the answer reaches the client, or is lost.
    Respond {
        /// Whose request.
        client: u8,
        /// The answer.
        answer: Answer,
    },
}

impl Phase {
    /// The claim this server holds while its effect may run, with its own
    /// lease end (lease mode).
    pub const fn holding(&self) -> Option<(u8, u8)> {
        match *self {
            Self::Effect {
                token, lease_until, ..
            }
            | Self::Complete {
                token, lease_until, ..
            }
            | Self::Release {
                token, lease_until, ..
            } => Some((token, lease_until)),
            _ => None,
        }
    }
}

/// One client retrying one logical operation with the shared key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Which payload it sends (0 or 1).
    pub payload: u8,
    /// Requests sent so far.
    pub sent: u8,
    /// Its final answer, once it has one.
    pub answer: Option<Answer>,
}

/// Facts about the history that the properties check; the protocol never
/// reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Claims whose effect ran (lease mode) or committed (transactional
    /// mode), one bit per claim token.
    pub ran: u32,
    /// Claims whose response was stored as the key's result.
    pub stored: u32,
    /// Claims made with payload 1 (the others carry payload 0).
    pub payload_1: u32,
    /// An effect ran or committed while the key held a result inside its
    /// window.
    pub twice: bool,
    /// A completed row was changed inside its window.
    pub overwritten: bool,
    /// The key's result passed its window and is still remembered.
    pub expired: bool,
    /// A request acquired the key to run its effect while `expired` held.
    pub ran_after_window: bool,
}

impl Ghost {
    /// The payload claim `token` was made with.
    pub const fn payload_of(&self, token: u8) -> u8 {
        ((self.payload_1 >> token) & 1) as u8
    }
}

/// The whole world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The store's clock, in ticks.
    pub clock: u8,
    /// The key's committed row.
    pub row: Option<Row>,
    /// The server whose open transaction holds the key's row lock
    /// (transactional mode).
    pub lock: Option<u8>,
    /// The next claim token.
    pub next_token: u8,
    /// Each server's place.
    pub servers: Vec<Phase>,
    /// Each client.
    pub clients: Vec<Client>,
    /// Faults used so far: crashes, lost responses, temporary statuses.
    pub faults: [u8; 3],
    /// What the properties read.
    pub ghost: Ghost,
}

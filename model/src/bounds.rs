//! The size of the world the checker explores (clients, servers, sends,
//! faults, ticks), the protocol's knobs, and the transitions between states.

use idemkey_core::ExpiryPolicy;

/// How many claims one request makes when the row keeps changing under it
/// (the engine's `ATTEMPTS`).
pub const ATTEMPTS: u8 = 3;

/// Where the effect lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The effect commits with the record (the order route,
    /// `in_transaction`): a claim is invisible until its transaction
    /// commits, and a concurrent claimant waits on the row lock.
    Transactional,
    /// The effect runs outside the store (the tower layer): each call of
    /// the trait is its own short transaction.
    Lease,
}

/// The size of the world the checker explores, and the protocol's knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Where the effect lives.
    pub mode: Mode,
    /// What a key past its window means.
    pub expiry: ExpiryPolicy,
    /// One payload (0 or 1) per client; all share one key.
    pub payloads: Vec<u8>,
    /// Server instances.
    pub servers: u8,
    /// Requests each client sends at most.
    pub sends: u8,
    /// Server crashes, lost responses and temporary statuses, at most.
    pub faults: [u8; 3],
    /// The store's clock stops here.
    pub last_tick: u8,
    /// A claim's lease, in ticks.
    pub lease: u8,
    /// The replay window, in ticks.
    pub window: u8,
    /// How long a tombstone (or an abandoned claim past its lease) is kept.
    pub retention: u8,
    /// The defect to find: a take-over that matches only the claim token,
    /// not the state it decided on.
    pub stale_take_over: bool,
}

impl Bounds {
    /// The bounds checked in CI: two clients (one per payload) sending
    /// twice each, two servers, one fault of each kind, six ticks with a
    /// one-tick lease, a two-tick window and a three-tick retention (from
    /// the claim, so a tombstone lives a tick or two).
    pub fn small(mode: Mode, expiry: ExpiryPolicy) -> Self {
        Self {
            mode,
            expiry,
            payloads: vec![0, 1],
            servers: 2,
            sends: 2,
            faults: [1, 1, 1],
            last_tick: 6,
            lease: 1,
            window: 2,
            retention: 3,
            stale_take_over: false,
        }
    }
}

/// One transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client sends its request (again) to an idle server.
    Send {
        /// The client.
        client: u8,
        /// The server.
        server: u8,
    },
    /// The server's next call of the records store (or commit).
    Step(u8),
    /// The server runs the effect; `ok` is false when it answers a
    /// temporary status.
    Effect {
        /// The server.
        server: u8,
        /// Whether the status is final.
        ok: bool,
    },
    /// The server's answer reaches its client.
    Deliver(u8),
    /// The server's answer is lost.
    Lose(u8),
    /// The server crashes (its transaction, if any, rolls back).
    Crash(u8),
    /// The store's clock advances one tick.
    Tick,
    /// A maintenance round: trim results past their window, delete
    /// tombstones and abandoned claims past retention.
    Trim,
}

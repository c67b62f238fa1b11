//! # idemkey-model
//!
//! A model of the idempotency engine's records protocol, checked
//! exhaustively with [`stateright`] for small bounds: clients retrying one
//! logical operation with one key, server instances running the engine's
//! steps (claim, `decide`, take-over, effect, complete, release), the
//! records store (one row and the store's clock), and faults (a server
//! crashes at any step, a response is lost, an effect answers a temporary
//! status, the clock advances past leases and windows, trim runs). Both
//! modes ([`Mode`]) and both expiry policies.
//!
//! The decisions are the core's own [`idemkey_core::decide`]; each
//! [`Action::Step`] is one method of the server's `Records` trait, so a
//! path of the model is a test case for a real store (the crate's
//! `replay` test runs them against PostgreSQL, SQLite, Redis and Redis
//! Cluster, and the transactional mode's against `in_transaction` on
//! PostgreSQL and SQLite). `docs/protocol.md`
//! states the properties, the bounds and how long the check takes.
//!
//! [`steps`] models the step journal of a multi-step operation (a flow of
//! local and external steps run by outbox workers under leases, fenced
//! recordings, compensation in reverse order) the same way, and exports
//! its paths as the same [`Walk`]s: lists of events, for a replay against
//! the library.
//!
//! ```
//! use idemkey_core::ExpiryPolicy;
//! use idemkey_model::{Bounds, Mode, Protocol};
//! use stateright::{Checker as _, Model as _};
//!
//! let mut bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reject);
//! bounds.payloads = vec![0];
//! bounds.last_tick = 2;
//! let checker = Protocol::new(bounds).checker().spawn_bfs().join();
//! checker.assert_no_discovery(idemkey_model::properties::NEVER_OVERWRITTEN);
//! ```

mod bounds;
mod model;
pub mod properties;
mod protocol;
mod state;
pub mod steps;
mod verdict;
mod walk;

pub use bounds::{ATTEMPTS, Action, Bounds, Mode};
pub use protocol::{Protocol, same_state};
pub use state::{Answer, Client, Ghost, Phase, Redo, Rejection, Row, State, Status, fingerprint};
pub use verdict::{Broken, broken};
pub use walk::{Transitions, Walk, cover, covering, transition, transitions, walks};

//! The order service's outbox: its charge delivery to the payment provider
//! and the `worker` and `outbox` commands. The outbox itself and its
//! worker are the library's ([`idemkey::outbox`]).

mod args;
mod charge;

pub use args::{OutboxArgs, OutboxCommand, WorkerArgs};
pub use charge::{CHARGE, charge_delivery};

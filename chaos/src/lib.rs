//! # idemkey-chaos
//!
//! The fault and load suite of idemkey (issue 7): a load driver whose
//! clients keep one key per logical operation and retry with the core's
//! [`RetryPolicy`](idemkey_core::RetryPolicy); fault injectors (process
//! kills, database crashes, a connection-cutting proxy, lock waits, a
//! failover to a synchronous standby, hostile HTTP input, and in the
//! `payments` scenario killed outbox workers and a payment provider that
//! fails, loses responses and restarts, and in `multi-step` purchases of
//! several steps under one key through killed workers and servers); and a
//! history checker that compares every answer the clients saw with what the
//! database holds.
//!
//! Each scenario starts its own throwaway PostgreSQL (idemkey-testkit) and
//! real `idemkey-server` processes, found next to this program (or at
//! `$IDEMKEY_SERVER_BIN`). Run them with
//! `cargo run -p idemkey-chaos --release -- --size small all`; see
//! `docs/reliability.md`.

pub mod checker;
pub mod driver;
pub mod hostile;
mod kit;
pub mod multistep;
pub mod payments;
pub mod payments_check;
pub mod proxy;
pub mod replication;
pub mod rng;
pub mod scenarios;
pub mod servers;

pub use checker::Report;
pub use scenarios::{ALL, Size, run};

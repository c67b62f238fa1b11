//! Payments outside our database: a payment provider to talk to and the
//! HTTP client that talks to it.
//!
//! - [`provider`]: `idemkey-server provider`, a payment provider
//!   **simulator** for tests and the demo: real HTTP, its charges in its own
//!   SQL table, protected by our own [`IdempotencyLayer`](crate::layer::IdempotencyLayer)
//!   scoped by the caller's bearer secret, with fault switches (fail, lose
//!   the response after charging, latency, declined amounts) that make the
//!   uncertain outcomes of a real provider happen on purpose.
//! - [`client`]: [`ProviderClient`](client::ProviderClient), which sends a
//!   charge under an idempotency key or looks it up, and classifies every
//!   outcome as charged, not found, declined, safe to retry, or
//!   **uncertain** (sent, but no answer: look it up before sending again).

pub mod client;
mod faults;
pub mod provider;

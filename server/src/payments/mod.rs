//! Payments outside our database: the HTTP client that talks to a payment
//! provider ([`client::ProviderClient`]), which sends a charge under an
//! idempotency key or looks it up, and classifies every outcome as
//! charged, not found, declined, safe to retry, or **uncertain** (sent, but
//! no answer: look it up before sending again). The provider the tests and
//! the demo talk to is the simulator crate, `idemkey-provider-sim`.

pub mod client;

//! The order service's outbox effect: the charge, delivered to the payment
//! provider. The outbox itself and its worker are the library's
//! ([`idemkey::outbox`]); the `worker` and `outbox` commands' flags are in
//! [`crate::config`].

mod charge;

pub use charge::{CHARGE, charge_delivery};

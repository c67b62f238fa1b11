//! # idemkey-edge
//!
//! A Cloudflare Worker (workers-rs) in front of the idemkey origin. For
//! `POST /orders` it runs the core's checks in the core's order (bearer token
//! present, `Idempotency-Key`, `Content-Type`, body size, body shape) and
//! answers any failure with the core's problem, byte for byte what the origin
//! sends for the same request; everything else, and every request that
//! passes, goes to `ORIGIN_URL` unchanged (method, path, query, headers,
//! body), and the origin's response comes back unchanged. It adds no trust:
//! the origin verifies the token and checks everything again.
//!
//! The decisions live in [`gate`] and [`selftest`], plain Rust that the host
//! tests run; the Worker glue (`glue.rs`) only exists on `wasm32` and moves
//! bytes between the runtime and those modules.
//!
//! Worker variables: `ORIGIN_URL` (required), `KEY_PROFILE` (`strict`,
//! `lenient` or `uuid`; default `lenient`, as the origin's `--key-profile`),
//! `EDGE_SELFTEST` (`1` enables [`selftest::SELFTEST_PATH`]; tests only).

pub mod gate;
pub mod selftest;

#[cfg(target_arch = "wasm32")]
mod glue;

//! # idemkey
//!
//! `Idempotency-Key` for Rust HTTP services: a client keeps one key per
//! logical operation, and a retry of a request whose response was lost
//! replays the stored result instead of acting twice, across processes and
//! restarts. Every rule (key syntax, fingerprint, decision table, problem
//! documents) comes from [`idemkey_core`]; one engine ([`idempotency`])
//! applies it for every front end over any [`Records`]
//! store.
//!
//! Four ways in, each behind its features:
//!
//! | you want | use | features |
//! |---|---|---|
//! | effects outside your database (a call to another service), any axum/tower app | `layer::IdempotencyLayer` (lease mode) | `layer` + a store: `postgres`, `sqlite` or `redis` |
//! | your effect and the key's result in **one** transaction of your database | `in_transaction` | `postgres` or `sqlite` |
//! | an effect that leaves your database, delivered at least once and deduplicated downstream | `outbox` and its `Worker` | `outbox` + `postgres` or `sqlite` |
//! | one key for an operation of several steps in several systems, each step once, retries resuming | `flow::Flows` | `flow` + `postgres` or `sqlite` |
//!
//! `serve` adds a connection-capped accept loop, `clap` the settings'
//! `ValueEnum`s. A user pays only for what they turn on: the engine, the
//! stores and `in_transaction` compile without axum, hyper and tower;
//! `axum` adds the `IntoResponse` conveniences and middleware (`layer`
//! turns it on); `metrics` sends the counters to the `metrics` facade;
//! `postgres-tls` adds TLS to PostgreSQL. TLS is opt-in, as in sqlx: it is
//! 17 crates a database on a private network or a socket does not need,
//! and a TLS URL (`sslmode=require` and up) on a build without it is
//! refused with an error that names the feature. The README's "What it
//! costs to add" counts the crates.
//!
//! The library migrates only its own tables (`idempotency_records`,
//! `outbox` and the step journal with those features), optionally under a prefix
//! ([`store::Tables`]); see [`store::migrations`].
#![cfg_attr(docsrs, feature(doc_cfg))]
// A build without any store has nothing to call its store code with.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "redis")),
    allow(unused_variables, dead_code)
)]

pub mod duration;
pub mod error;
#[cfg(all(feature = "flow", any(feature = "postgres", feature = "sqlite")))]
pub mod flow;
pub mod idempotency;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod in_transaction;
#[cfg(feature = "layer")]
pub mod layer;
#[cfg(feature = "serve")]
pub mod load_shed;
pub mod maintenance;
pub mod metrics;
#[cfg(feature = "outbox")]
pub mod outbox;
#[cfg(feature = "axum")]
pub mod problems;
#[cfg(feature = "axum")]
pub mod request_id;
#[cfg(feature = "axum")]
pub mod request_log;
#[cfg(feature = "serve")]
pub mod serve;
pub mod store;

pub use error::StoreError;
pub use idempotency::Records;
pub use store::Db;

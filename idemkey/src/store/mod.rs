//! The stores of idempotency records, behind one seam.
//!
//! The seam (here, outside every backend's folder) is what the engine, the
//! Layer, `in_transaction`, the outbox worker, the step journal and the trim
//! use: [`Backend`] (a store's lifecycle, on top of
//! [`Records`](crate::idempotency::Records)) and its capabilities, the
//! outbox (`OutboxStore`), the step journal (with `flow`) and
//! [`Transactional`] (the transaction `in_transaction` joins, typed by the
//! backend's own `Tx`). The rules every store keeps are written here once:
//! the table names ([`Tables`]), the decoding of a stored response
//! ([`decode_response`]: malformed is [`StoreError::Corrupt`]) and the
//! migration runner ([`migrations`]); how statements are sent to
//! PostgreSQL for the pooler in front is `postgres/send.rs`, and each
//! statement reads the database's own clock.
//!
//! Each backend is one folder behind one cargo feature (`postgres/`,
//! `sqlite/`, `redis/`), holding its statements (each in a `.sql` file next
//! to its code), its migrations and its implementations of the seam.
//! [`Db`](crate::Db), opened from a URL, holds any of them type-erased and is the one
//! registration point. **A new backend (a MySQL store, say) is one new
//! folder here, one feature line in `Cargo.toml`, its `mod` line below and
//! one line in `db.rs`'s registration list**: nothing else matches on the
//! backend. An application reaches its own backend's SQL through
//! [`Db::backend_as`](crate::Db::backend_as).

pub(crate) mod backend;
mod boxed;
pub(crate) mod db;
#[cfg(feature = "flow")]
pub(crate) mod flow;
pub(crate) mod in_transaction;
pub mod migrations;
#[cfg(feature = "outbox")]
pub(crate) mod outbox;
mod pool;
mod settings;
#[cfg(feature = "flow")]
pub(crate) mod step;
pub(crate) mod stored;
mod tables;

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(feature = "sqlx-postgres")]
pub mod sqlx_postgres;

pub(crate) use crate::error::StoreError;
#[cfg(feature = "outbox")]
pub use backend::OutboxStore;
pub use backend::{Backend, BoxFuture, Effect, Transactional};
pub use db::DEFAULT_DATABASE_URL;
pub use pool::PoolStatus;
pub use settings::{PgPooler, RedisSettings, StoreSettings};
pub use stored::decode_response;
pub use tables::Tables;

//! The stores of idempotency records: one folder per backend behind its
//! cargo feature (`postgres`, `sqlite`, `redis`), each holding its
//! [`Records`](crate::idempotency::Records) implementation, its statements
//! (every statement in a `.sql` file next to its code) and the migrations
//! of the tables the library owns ([`migrations`]), behind one [`Db`] enum
//! opened from a URL. Nothing outside this module matches on the backend.

pub(crate) mod backend;
mod boxed;
mod db;
#[cfg(feature = "flow")]
pub mod flow;
pub(crate) mod in_transaction;
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub mod migrations;
#[cfg(feature = "outbox")]
pub mod outbox;
mod pool;
mod settings;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod statements;
#[cfg(feature = "flow")]
pub(crate) mod step;
mod stored;
pub mod tables;

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(feature = "sqlx-postgres")]
pub mod sqlx_postgres;

pub use crate::duration::{from_system_time, millis, to_system_time};
pub use crate::error::StoreError;
#[cfg(feature = "outbox")]
pub use backend::OutboxStore;
pub use backend::{Backend, BoxFuture, Effect, Transactional};
pub use db::{DEFAULT_DATABASE_URL, Db};
pub use pool::PoolStatus;
#[cfg(feature = "postgres")]
pub use postgres::PgDb;
#[cfg(feature = "redis")]
pub use redis::RedisDb;
pub use settings::{DEFAULT_SQLITE_READERS, PgPooler, RedisSettings, StoreSettings};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteDb;
pub use stored::decode_response;
pub use tables::Tables;

/// The settings of [`Db::open`] (named for the backend that has most).
pub type PgSettings = StoreSettings;

//! The stores of idempotency records: one folder per backend behind its
//! cargo feature (`postgres`, `sqlite`, `redis`), each holding its
//! [`Records`](crate::idempotency::Records) implementation, its statements
//! (every statement in a `.sql` file next to its code) and the migrations
//! of the tables the library owns ([`migrations`]), behind one [`Db`] enum
//! opened from a URL. Nothing outside this module matches on the backend.

pub(crate) mod backend;
mod db;
#[cfg(all(
    feature = "flow",
    any(feature = "postgres", feature = "sqlite", feature = "sqlx-postgres")
))]
pub mod flow;
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub mod migrations;
#[cfg(feature = "outbox")]
pub mod outbox;
mod pool;
mod settings;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod statements;
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
pub use backend::{Backend, BoxFuture, Opener};
pub use db::{DEFAULT_DATABASE_URL, Db};
pub use pool::PoolStatus;
#[cfg(feature = "postgres")]
pub use postgres::PgDb;
#[cfg(feature = "redis")]
pub use redis::{RedisDb, RedisSettings};
pub use settings::{DEFAULT_SQLITE_READERS, PgPooler, StoreSettings};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteDb;
pub use stored::decode_response;
pub use tables::Tables;

/// The settings of [`Db::open`] (named for the backend that has most).
pub type PgSettings = StoreSettings;

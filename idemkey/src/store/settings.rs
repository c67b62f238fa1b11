//! How [`Db::open`](super::Db::open) connects: pool bounds and timeouts,
//! what sits in front of PostgreSQL, the names of the library's tables and
//! the Redis store's settings.

use std::time::Duration;

use super::Tables;

/// Connection and timeout settings of a store; each backend reads the
/// fields that concern it.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// Largest number of connections.
    pub pool_size: usize,
    /// How long a request waits for a free connection (then 503).
    pub pool_wait: Duration,
    /// PostgreSQL: `lock_timeout` of every session (then 409).
    pub lock_timeout: Duration,
    /// PostgreSQL: `statement_timeout` of every session (then 503).
    pub statement_timeout: Duration,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// PostgreSQL: what sits between us and the server (decides how the
    /// timeouts are set).
    pub pooler: PgPooler,
    /// SQLite only: read-only connections for the calls that only read, so
    /// they need not wait for the writer (0: they share its connection).
    pub sqlite_readers: usize,
    /// The names of the library's tables (a prefix; the default keeps
    /// `idempotency_records` and `outbox`).
    pub tables: Tables,
    /// PostgreSQL: the `application_name` of the connections, unless the
    /// URL names one.
    pub application_name: &'static str,
    /// The Redis store's settings.
    #[cfg(feature = "redis")]
    pub redis: super::RedisSettings,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            pool_size: 10,
            pool_wait: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            pooler: PgPooler::None,
            sqlite_readers: DEFAULT_SQLITE_READERS,
            tables: Tables::default(),
            application_name: "idemkey",
            #[cfg(feature = "redis")]
            redis: super::RedisSettings::default(),
        }
    }
}

/// Default number of SQLite's read-only connections.
pub const DEFAULT_SQLITE_READERS: usize = 2;

/// What sits between idemkey and PostgreSQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PgPooler {
    /// Nothing, or a pooler in session mode that passes the startup
    /// parameter `options` on: the timeouts go in every connection's
    /// startup packet and the order route's statements are prepared once
    /// per connection.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`):
    /// unnamed statements only and no startup `options`; `lock_timeout` and
    /// `statement_timeout` must be set on the role or database
    /// (`ALTER ROLE … SET`), checked at start.
    Transaction,
}

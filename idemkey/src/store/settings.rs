//! How [`Db::open`](crate::Db::open) connects: pool bounds and timeouts,
//! what sits in front of PostgreSQL, the names of the library's tables and
//! the Redis store's settings.

use std::path::PathBuf;
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
    /// The Redis store's settings (read by the Redis backend only).
    pub redis: RedisSettings,
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
            redis: RedisSettings::default(),
        }
    }
}

/// Default number of SQLite's read-only connections.
pub(crate) const DEFAULT_SQLITE_READERS: usize = 2;

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

/// Settings of the Redis store (`RedisDb`, with the `redis` feature).
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// Replicas that must hold a claim or a completion before the request
    /// goes on (`WAIT n timeout`); 0 sends no `WAIT`.
    pub wait_replicas: u32,
    /// How long `WAIT` may take before the call fails.
    pub wait_timeout: Duration,
    /// How long a record is kept after its lease (abandoned claims) or
    /// after its creation (completed records, at least until their window
    /// ends): the retention trim applies on the SQL stores.
    pub retention: Duration,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// Time allowed for one reply.
    pub response_timeout: Duration,
    /// PEM file of the certificate authorities a `rediss://` server's
    /// certificate must chain to, instead of the system's roots.
    pub ca_file: Option<PathBuf>,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            retention: Duration::from_secs(30 * 86_400),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            ca_file: None,
        }
    }
}

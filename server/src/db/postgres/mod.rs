//! PostgreSQL: a deadpool pool of tokio-postgres connections, the records
//! store, the order statements and versioned migrations.
//!
//! Every connection starts with `lock_timeout` and `statement_timeout` set in
//! its startup packet (no per-request `SET`), and the order route's
//! statements are prepared once per connection (`prepare_cached`), so a new
//! order and a replay each cost one round trip in the common case.

use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, Timeouts,
};
use tokio_postgres::error::SqlState;
use tracing::{info, warn};

use super::{PoolStatus, StoreError};

mod accounts;
mod conninfo;
mod orders;
mod records;
mod tls;
mod transaction;

pub(crate) use conninfo::is_key_value;
pub use records::PgRecords;
pub use transaction::{run_in_transaction, set_lock_timeout};

/// Versioned migrations, applied in order, each once.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("migrations/0001_init.sql")),
    (
        2,
        "idempotency_leases",
        include_str!("migrations/0002_idempotency_leases.sql"),
    ),
    (
        3,
        "one_records_table",
        include_str!("migrations/0003_one_records_table.sql"),
    ),
    (
        4,
        "token_management",
        include_str!("migrations/0004_token_management.sql"),
    ),
    (
        5,
        "account_first_keys",
        include_str!("migrations/0005_account_first_keys.sql"),
    ),
];

/// Key of the advisory lock that serialises migrations between processes.
const MIGRATION_LOCK: i64 = 0x6964_656d_6b65_7901; // "idemkey" + 1

/// Connection and timeout settings of a [`PgDb`].
#[derive(Clone, Debug)]
pub struct PgSettings {
    /// Largest number of connections.
    pub pool_size: usize,
    /// How long a request waits for a free connection (then 503).
    pub pool_wait: Duration,
    /// `lock_timeout` of every session (then 409).
    pub lock_timeout: Duration,
    /// `statement_timeout` of every session (then 503).
    pub statement_timeout: Duration,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
}

impl Default for PgSettings {
    fn default() -> Self {
        Self {
            pool_size: 10,
            pool_wait: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// The PostgreSQL database.
#[derive(Clone)]
pub struct PgDb {
    pool: Pool,
}

impl std::fmt::Debug for PgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDb")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl PgDb {
    /// Builds the pool for `url` (connections open lazily) and applies
    /// pending migrations.
    pub async fn connect(url: &str, settings: &PgSettings) -> Result<Self, StoreError> {
        let (mut config, tls) = tls::configure(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid database URL: {e}")))?;
        conninfo::add_options(
            &mut config,
            &format!(
                "-c lock_timeout={} -c statement_timeout={}",
                settings.lock_timeout.as_millis(),
                settings.statement_timeout.as_millis()
            ),
        );
        config.connect_timeout(settings.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("idemkey-server");
        }
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size)
            .runtime(Runtime::Tokio1)
            .timeouts(Timeouts {
                wait: Some(settings.pool_wait),
                create: Some(settings.connect_timeout),
                recycle: Some(settings.connect_timeout),
            })
            .build()
            .map_err(|e| StoreError::Unavailable(format!("pool: {e}")))?;
        let db = Self { pool };
        db.migrate().await?;
        Ok(db)
    }

    /// Applies pending migrations under an advisory lock, so that two
    /// processes starting at once apply each migration exactly once.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(db_error)?;
        let result = async {
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (
                         version integer PRIMARY KEY,
                         name text NOT NULL,
                         applied_at timestamptz NOT NULL DEFAULT now())",
                )
                .await?;
            for (version, name, sql) in MIGRATIONS {
                let done = client
                    .query_opt(
                        "SELECT 1 FROM schema_migrations WHERE version = $1",
                        &[version],
                    )
                    .await?
                    .is_some();
                if done {
                    continue;
                }
                let tx = client.transaction().await?;
                tx.batch_execute(sql).await?;
                tx.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    &[version, name],
                )
                .await?;
                tx.commit().await?;
                info!(version, name, "applied migration");
            }
            Ok::<(), tokio_postgres::Error>(())
        }
        .await;
        let unlock = client
            .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
            .await;
        result.map_err(db_error)?;
        unlock.map_err(db_error)?;
        Ok(())
    }

    /// The pool, for callers that run their own statements next to ours
    /// (e.g. [`crate::in_transaction`]).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(super) fn pool_status(&self) -> PoolStatus {
        let status = self.pool.status();
        PoolStatus {
            max_size: status.max_size,
            size: status.size,
            available: status.available,
            waiting: status.waiting,
        }
    }

    pub(super) fn close(&self) {
        self.pool.close();
    }

    pub(super) async fn pending_migrations(&self) -> Result<Vec<i64>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT version FROM schema_migrations", &[])
            .await
            .map_err(db_error)?;
        let applied: Vec<i32> = rows.iter().map(|row| row.get(0)).collect();
        Ok(MIGRATIONS
            .iter()
            .filter(|(version, _, _)| !applied.contains(version))
            .map(|(version, _, _)| i64::from(*version))
            .collect())
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.map_err(db_error)?;
        Ok(())
    }
}

/// Maps a database error by SQLSTATE (never by message text). The message
/// goes to the log without the server's DETAIL, which may quote row values.
pub(crate) fn db_error(err: tokio_postgres::Error) -> StoreError {
    if let Some(db) = err.as_db_error() {
        if *db.code() == SqlState::LOCK_NOT_AVAILABLE {
            return StoreError::LockTimeout;
        }
        warn!(
            sqlstate = db.code().code(),
            message = db.message(),
            "database error"
        );
        return StoreError::Unavailable(format!("{}: {}", db.code().code(), db.message()));
    }
    let message = tls::describe(&err);
    warn!(closed = err.is_closed(), error = %message, "database connection error");
    StoreError::Unavailable(message)
}

fn pool_error(err: PoolError) -> StoreError {
    match err {
        PoolError::Backend(e) => db_error(e),
        other => {
            warn!(error = %other, "connection pool error");
            StoreError::Unavailable(other.to_string())
        }
    }
}

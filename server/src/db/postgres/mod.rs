//! PostgreSQL: a deadpool pool of tokio-postgres connections, the records
//! store, the order statements and versioned migrations.
//!
//! Every direct connection starts with `lock_timeout` and `statement_timeout`
//! set in its startup packet (no per-request `SET`), and the order route's
//! statements are prepared once per connection (`prepare_cached`), so a new
//! order and a replay each cost one round trip in the common case. Behind a
//! transaction pooler ([`PgPooler::Transaction`]) no statement depends on
//! the session: all are unnamed (`query_typed`, still one round trip).

use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, Timeouts,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tracing::{info, warn};

use super::{PoolStatus, StoreError};

mod accounts;
mod charges;
mod conninfo;
mod orders;
mod outbox;
mod pooler;
mod records;
mod tls;
mod transaction;

pub(crate) use conninfo::is_key_value;
pub use outbox::enqueue;
pub use pooler::PgPooler;
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
    (6, "payments", include_str!("migrations/0006_payments.sql")),
    (
        7,
        "provider_charges",
        include_str!("migrations/0007_provider_charges.sql"),
    ),
    (
        8,
        "provider_requests",
        include_str!("migrations/0008_provider_requests.sql"),
    ),
];

/// The limits of the migration transaction, in place of the request
/// timeouts (`--lock-timeout`, `--statement-timeout`): generous, but a start
/// that waits on a stuck migration still ends.
const MIGRATION_TIMEOUTS: &str =
    "SET LOCAL lock_timeout = '15min'; SET LOCAL statement_timeout = '15min'";

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
    /// What sits between us and PostgreSQL (decides how the timeouts are
    /// set).
    pub pooler: PgPooler,
    /// SQLite only: read-only connections for the calls that only read, so
    /// they need not wait for the writer (0: they share its connection).
    pub sqlite_readers: usize,
}

impl Default for PgSettings {
    fn default() -> Self {
        Self {
            pool_size: 10,
            pool_wait: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            pooler: PgPooler::None,
            sqlite_readers: crate::db::sqlite::DEFAULT_READERS,
        }
    }
}

/// The PostgreSQL database.
#[derive(Clone)]
pub struct PgDb {
    pool: Pool,
    pooler: PgPooler,
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
        // Behind a transaction-mode pooler nothing may be sent as startup
        // options (see pooler.rs); otherwise ours follow the URL's own.
        if let Some(options) = pooler::startup_options(settings) {
            conninfo::add_options(&mut config, &options);
        }
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
        let db = Self {
            pool,
            pooler: settings.pooler,
        };
        pooler::check_timeouts(&*db.client().await?, settings).await?;
        db.migrate().await?;
        Ok(db)
    }

    /// Applies pending migrations in one transaction under a
    /// transaction-level advisory lock, so that two processes starting at
    /// once apply each migration exactly once; the lock ends with the
    /// transaction, also behind a transaction pooler (a session-level lock
    /// would stay on whichever server connection the pooler picked).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // The request timeouts are not for migrations: a migration of a big
        // table, or a process waiting for another one's, takes longer.
        tx.batch_execute(MIGRATION_TIMEOUTS)
            .await
            .map_err(db_error)?;
        tx.execute_typed(
            "SELECT pg_advisory_xact_lock($1)",
            &[(&MIGRATION_LOCK, Type::INT8)],
        )
        .await
        .map_err(db_error)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version integer PRIMARY KEY,
                 name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(db_error)?;
        let applied = applied_versions(&*tx).await?;
        let mut done = Vec::new();
        for (version, name, sql) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            tx.batch_execute(sql).await.map_err(db_error)?;
            tx.execute_typed(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                &[(version, Type::INT4), (name, Type::TEXT)],
            )
            .await
            .map_err(db_error)?;
            done.push((version, name));
        }
        tx.commit().await.map_err(db_error)?;
        for (version, name) in done {
            info!(version, name, "applied migration");
        }
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
        let applied = applied_versions(&**client).await?;
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

/// The migrations a database has applied.
async fn applied_versions(
    client: &impl tokio_postgres::GenericClient,
) -> Result<Vec<i32>, StoreError> {
    let rows = client
        .query_typed("SELECT version FROM schema_migrations", &[])
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|row| row.try_get(0).map_err(db_error))
        .collect()
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

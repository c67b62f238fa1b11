//! [`SqlxPgDb`]: an sqlx pool (yours, or one opened from a URL), the
//! store's table names and pooler, and the library's migration runner.

use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool, Row};
use tracing::info;

use super::error::sqlx_error;
use super::send::{self, Session};
use crate::error::StoreError;
use crate::store::migrations::{self, Known, Migration};
use crate::store::{PgPooler, PoolStatus, StoreSettings, Tables};

/// The limits of the migration transaction, in place of the request
/// timeouts: generous, but a start that waits on a stuck migration ends.
const MIGRATION_TIMEOUTS: &str = "SET LOCAL lock_timeout = '15min'; \
     SET LOCAL statement_timeout = '15min'; SET LOCAL client_min_messages = warning";

/// Key of the advisory lock that serialises migrations between processes:
/// the tokio-postgres backend's, so the two backends share one database.
const MIGRATION_LOCK: i64 = 0x6964_656d_6b65_7901;

/// What a relation of an adopted table's name is (kind, columns, primary
/// key), as the tokio-postgres backend reads it.
const RELATION: &str = "SELECT c.relkind::text,
        ARRAY(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
        ARRAY(SELECT a.attname::text FROM pg_index i
              CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.n)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relname = $1";

/// The PostgreSQL database through an [`sqlx::PgPool`].
#[derive(Clone)]
pub struct SqlxPgDb {
    pool: PgPool,
    pooler: PgPooler,
    tables: Tables,
    pub(super) sql: Arc<Statements>,
    known: Known,
}

impl std::fmt::Debug for SqlxPgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlxPgDb")
            .field("tables", &self.tables)
            .field("pooler", &self.pooler)
            .finish_non_exhaustive()
    }
}

/// The records statements of the tokio-postgres backend, in a store's
/// table names.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) claim: sqlx::SqlStr,
    pub(super) read: sqlx::SqlStr,
    pub(super) take_over: sqlx::SqlStr,
    pub(super) complete: sqlx::SqlStr,
    pub(super) release: sqlx::SqlStr,
    pub(super) trim: sqlx::SqlStr,
}

impl Statements {
    fn new(tables: &Tables) -> Self {
        let r = |text| send::rendered(tables, text);
        Self {
            claim: r(include_str!("../postgres/sql/claim.sql")),
            read: r(include_str!("../postgres/sql/read.sql")),
            take_over: r(include_str!("../postgres/sql/take_over.sql")),
            complete: r(include_str!("../postgres/sql/complete.sql")),
            release: r(include_str!("../postgres/sql/release.sql")),
            trim: r(include_str!("../postgres/sql/trim.sql")),
        }
    }
}

impl SqlxPgDb {
    /// The store on `pool`, a pool of yours: its connections are used as
    /// they are (their timeouts are yours to set). Behind a transaction
    /// pooler say so in `settings.pooler`: every statement then goes
    /// unnamed. [`SqlxPgDb::migrate`] applies the library's migrations.
    pub fn from_pool(pool: PgPool, settings: &StoreSettings) -> Self {
        Self {
            pool,
            pooler: settings.pooler,
            sql: Arc::new(Statements::new(&settings.tables)),
            tables: settings.tables.clone(),
            known: Known::default(),
        }
    }

    /// Opens a pool for `url` (`postgres://…`) with `settings`: on a
    /// direct path every session gets `lock_timeout` and
    /// `statement_timeout` in its startup packet; behind a transaction
    /// pooler nothing is sent that the pooler refuses or that outlives a
    /// transaction (no startup options, no statement cache), and the
    /// role's timeouts must be set (checked here).
    pub async fn connect(url: &str, settings: &StoreSettings) -> Result<Self, StoreError> {
        let mut options = PgConnectOptions::from_str(url)
            .map_err(|_| StoreError::Unavailable("invalid database URL".into()))?;
        if options.get_application_name().is_none() {
            options = options.application_name(settings.application_name);
        }
        options = match settings.pooler {
            PgPooler::None => options.options([
                (
                    "lock_timeout",
                    settings.lock_timeout.as_millis().to_string(),
                ),
                (
                    "statement_timeout",
                    settings.statement_timeout.as_millis().to_string(),
                ),
                // As the tokio-postgres backend's sessions (see its
                // pooler.rs): cached plans stay on the indexes.
                ("enable_seqscan", "off".to_owned()),
                ("plan_cache_mode", "force_generic_plan".to_owned()),
            ]),
            PgPooler::Transaction => options.statement_cache_capacity(0).extra_float_digits(None),
        };
        let pool = PgPoolOptions::new()
            .max_connections(u32::try_from(settings.pool_size).unwrap_or(u32::MAX))
            .acquire_timeout(settings.pool_wait)
            .connect_with(options)
            .await
            .map_err(sqlx_error)?;
        let db = Self::from_pool(pool, settings);
        db.check_timeouts(settings).await?;
        Ok(db)
    }

    /// Refuses sessions whose lock or statement waits are unbounded
    /// (`0`): behind a pooler the role's settings apply, and a direct
    /// session whose startup options a pooler dropped has none.
    async fn check_timeouts(&self, settings: &StoreSettings) -> Result<(), StoreError> {
        let mut session = Session::open(&self.pool, self.pooler).await?;
        let row = sqlx::query(
            "SELECT (SELECT setting::int8 FROM pg_settings WHERE name = 'lock_timeout'),
                    (SELECT setting::int8 FROM pg_settings WHERE name = 'statement_timeout')",
        )
        .persistent(false)
        .fetch_one(session.conn())
        .await
        .map_err(sqlx_error)?;
        session.finish().await?;
        let lock: i64 = row.try_get(0).map_err(sqlx_error)?;
        let statement: i64 = row.try_get(1).map_err(sqlx_error)?;
        let sent = settings.pooler == PgPooler::None;
        let arrived = u128::from(lock.unsigned_abs()) == settings.lock_timeout.as_millis()
            && u128::from(statement.unsigned_abs()) == settings.statement_timeout.as_millis();
        if (sent && !arrived) || lock == 0 || statement == 0 {
            return Err(StoreError::Unavailable(format!(
                "sessions have lock_timeout = {lock} ms and statement_timeout = {statement} ms: \
                 a pooler dropped the startup options, or (behind a transaction pooler) the \
                 role has no timeouts; set them on the role (docs/pgbouncer.md)"
            )));
        }
        Ok(())
    }

    /// The pool, for statements of your own next to ours.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The names of the library's tables in this database.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// What sits between this store and PostgreSQL.
    pub fn pooler(&self) -> PgPooler {
        self.pooler
    }

    /// Whether this store's statements may be named and cached.
    pub(super) fn persistent(&self) -> bool {
        send::persistent(self.pooler)
    }

    /// A connection of the pool for one call (see [`Session`]).
    pub(super) async fn session(&self) -> Result<Session, StoreError> {
        Session::open(&self.pool, self.pooler).await
    }

    /// Applies the library's pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(&Self::library_migrations()).await
    }

    /// The library's own migrations: the tokio-postgres backend's, so
    /// either backend finds the other's tables up to date.
    pub fn library_migrations() -> Vec<Migration> {
        migrations::library(
            (
                include_str!("../postgres/migrations/records_0001.sql"),
                &[
                    (
                        "maintenance index a completion leaves alone",
                        include_str!("../postgres/migrations/records_0002.sql"),
                    ),
                    (
                        "invariants in a trigger",
                        include_str!("../postgres/migrations/records_0003.sql"),
                    ),
                    (
                        "checks a long prefix left behind",
                        include_str!("../postgres/migrations/records_0004.sql"),
                    ),
                ],
            ),
            (
                include_str!("../postgres/migrations/outbox_0001.sql"),
                &[(
                    "flow-step index",
                    include_str!("../postgres/migrations/outbox_0002.sql"),
                )],
            ),
            (include_str!("../postgres/migrations/steps_0001.sql"), &[]),
            &["scope", "id"],
        )
    }

    /// Applies the pending migrations of `list` in one transaction under a
    /// transaction-level advisory lock (the tokio-postgres backend's), so
    /// processes starting at once apply each exactly once, also behind a
    /// transaction pooler.
    pub async fn migrate_with(&self, list: &[Migration]) -> Result<(), StoreError> {
        self.known.add(list);
        let mut tx = self.pool.begin().await.map_err(sqlx_error)?;
        tx.execute(sqlx::raw_sql(MIGRATION_TIMEOUTS))
            .await
            .map_err(sqlx_error)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .persistent(false)
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(sqlx_error)?;
        let book = self.tables.migrations();
        tx.execute(sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {book} (
                 component text NOT NULL,
                 version integer NOT NULL,
                 name text NOT NULL,
                 adopted boolean NOT NULL DEFAULT false,
                 applied_at timestamptz NOT NULL DEFAULT now(),
                 PRIMARY KEY (component, version))"
        ))))
        .await
        .map_err(sqlx_error)?;
        let applied = applied_migrations(&mut tx, &book).await?;
        let mut done = Vec::new();
        for m in list {
            if applied
                .iter()
                .any(|(c, v)| c == m.component && *v == m.version)
            {
                continue;
            }
            let adopted = match m.adopt {
                Some(adopt) => self.adoptable(&mut tx, adopt).await?,
                None => false,
            };
            if !adopted {
                tx.execute(sqlx::raw_sql(AssertSqlSafe(self.tables.render(m.sql))))
                    .await
                    .map_err(sqlx_error)?;
            }
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {book} (component, version, name, adopted) VALUES ($1, $2, $3, $4)"
            )))
            .persistent(false)
            .bind(m.component)
            .bind(m.version)
            .bind(m.name)
            .bind(adopted)
            .execute(&mut *tx)
            .await
            .map_err(sqlx_error)?;
            done.push((m.label(), m.name, adopted));
        }
        tx.commit().await.map_err(sqlx_error)?;
        for (migration, name, adopted) in done {
            info!(migration, name, adopted, "applied migration");
        }
        Ok(())
    }

    /// Whether `adopt`'s table already exists as its migration makes it;
    /// anything else of that name is [`StoreError::Corrupt`].
    async fn adoptable(
        &self,
        conn: &mut sqlx::PgConnection,
        adopt: migrations::Adopt,
    ) -> Result<bool, StoreError> {
        let table = self.tables.render(adopt.table);
        let Some(row) = sqlx::query(RELATION)
            .persistent(false)
            .bind(&table)
            .fetch_optional(conn)
            .await
            .map_err(sqlx_error)?
        else {
            return Ok(false);
        };
        let kind: String = row.try_get(0).map_err(sqlx_error)?;
        let columns: Vec<String> = row.try_get(1).map_err(sqlx_error)?;
        let key: Vec<String> = row.try_get(2).map_err(sqlx_error)?;
        match migrations::misfit(adopt, kind == "r" || kind == "p", &columns, &key) {
            None => Ok(true),
            Some(why) => Err(StoreError::Corrupt(format!(
                "{table} exists but is not the table idemkey makes ({why}): choose a table prefix"
            ))),
        }
    }

    /// The migrations this store was asked to apply that the database has
    /// not applied, as `component/version`.
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        let mut session = self.session().await?;
        let applied = applied_migrations(session.conn(), &self.tables.migrations()).await?;
        session.finish().await?;
        Ok(self
            .known
            .all()
            .iter()
            .filter(|m| {
                !applied
                    .iter()
                    .any(|(c, v)| c == m.component && *v == m.version)
            })
            .map(Migration::label)
            .collect())
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.pool
            .execute(sqlx::raw_sql("SELECT 1"))
            .await
            .map(drop)
            .map_err(sqlx_error)
    }

    /// The connection pool's figures.
    pub fn pool_status(&self) -> PoolStatus {
        let size = usize::try_from(self.pool.size()).unwrap_or(usize::MAX);
        PoolStatus {
            max_size: usize::try_from(self.pool.options().get_max_connections())
                .unwrap_or(usize::MAX),
            size,
            available: self.pool.num_idle(),
            waiting: 0,
        }
    }

    /// Closes the pool's connections (at shutdown), without waiting.
    pub fn close(&self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let pool = self.pool.clone();
            drop(runtime.spawn(async move { pool.close().await }));
        }
    }
}

use sqlx::AssertSqlSafe;

/// The `(component, version)` pairs a database has applied; none when the
/// bookkeeping table does not exist yet.
async fn applied_migrations(
    conn: &mut sqlx::PgConnection,
    book: &str,
) -> Result<Vec<(String, i32)>, StoreError> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .persistent(false)
        .bind(book)
        .fetch_one(&mut *conn)
        .await
        .map_err(sqlx_error)?;
    if !exists {
        return Ok(Vec::new());
    }
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT component, version FROM {book}"
    )))
    .persistent(false)
    .fetch_all(conn)
    .await
    .map_err(sqlx_error)
}

//! [`PgDb`]: the pool, its session settings and the migrations of the
//! library's tables.

use std::sync::Arc;

use deadpool_postgres::{
    ClientWrapper, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime, Timeouts,
};
use tokio_postgres::Row;
use tokio_postgres::types::Type;
use tracing::info;

use super::error::{db_error, pool_error};
use super::statements::Statements;
use super::{conninfo, pooler, send, tls};
use crate::error::StoreError;
use crate::store::migrations::{self, Known, Migration};
use crate::store::{PgPooler, PoolStatus, StoreSettings as PgSettings, Tables};

/// The limits of the migration transaction, in place of the request
/// timeouts (`--lock-timeout`, `--statement-timeout`): generous, but a start
/// that waits on a stuck migration still ends.
const MIGRATION_TIMEOUTS: &str = "SET LOCAL lock_timeout = '15min'; SET LOCAL statement_timeout = '15min'; \
     SET LOCAL client_min_messages = warning";

/// Key of the advisory lock that serialises migrations between processes.
const MIGRATION_LOCK: i64 = 0x6964_656d_6b65_7901; // "idemkey" + 1

/// The PostgreSQL database.
#[derive(Clone)]
pub struct PgDb {
    pool: Pool,
    pooler: PgPooler,
    tables: Tables,
    pub(super) sql: Arc<Statements>,
    known: Known,
}

impl std::fmt::Debug for PgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDb")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl PgDb {
    /// Builds the pool for `url` (connections open lazily) and checks the
    /// session's timeouts; [`PgDb::migrate`] applies the library's
    /// migrations.
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
            config.application_name(settings.application_name);
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
            sql: Arc::new(Statements::new(&settings.tables)),
            tables: settings.tables.clone(),
            known: Known::default(),
        };
        let first = db
            .pool
            .get()
            .await
            .map_err(|e| pooler::connect_error(e, settings))?;
        pooler::check_timeouts(&first, settings).await?;
        Ok(db)
    }

    /// Applies the library's pending migrations (see
    /// [`crate::store::migrations`]).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(&Self::library_migrations()).await
    }

    /// The library's own migrations on this backend: an application that
    /// migrates its tables too passes them with its own to one
    /// `migrate_with`, so one transaction applies all or none.
    pub fn library_migrations() -> Vec<Migration> {
        migrations::library(
            (
                include_str!("migrations/records_0001.sql"),
                &[
                    (
                        "maintenance index a completion leaves alone",
                        include_str!("migrations/records_0002.sql"),
                    ),
                    (
                        "invariants in a trigger",
                        include_str!("migrations/records_0003.sql"),
                    ),
                    (
                        "checks a long prefix left behind",
                        include_str!("migrations/records_0004.sql"),
                    ),
                ],
            ),
            (
                include_str!("migrations/outbox_0001.sql"),
                &[(
                    "flow-step index",
                    include_str!("migrations/outbox_0002.sql"),
                )],
            ),
            (include_str!("migrations/steps_0001.sql"), &[]),
            &["scope", "id"],
        )
    }

    /// Applies the pending migrations of `list` in one transaction under a
    /// transaction-level advisory lock, so that two processes starting at
    /// once apply each migration exactly once; the lock ends with the
    /// transaction, also behind a transaction pooler (a session-level lock
    /// would stay on whichever server connection the pooler picked). An
    /// application runs its own components through it; the store's
    /// readiness check then covers them too. (Kept by hand: sqlx's migrator
    /// locks with the session-level `pg_advisory_lock`, which a transaction
    /// pooler leaves on whichever server connection it picked.)
    pub async fn migrate_with(&self, list: &[Migration]) -> Result<(), StoreError> {
        self.known.add(list);
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
        let book = self.tables.migrations();
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {book} (
                 component text NOT NULL,
                 version integer NOT NULL,
                 name text NOT NULL,
                 adopted boolean NOT NULL DEFAULT false,
                 applied_at timestamptz NOT NULL DEFAULT now(),
                 PRIMARY KEY (component, version))"
        ))
        .await
        .map_err(db_error)?;
        let applied = applied_migrations(&*tx, &book).await?;
        let mut done = Vec::new();
        for m in list {
            if applied
                .iter()
                .any(|(c, v)| c == m.component && *v == m.version)
            {
                continue;
            }
            let adopted = match m.adopt {
                Some(adopt) => self.adoptable(&tx, adopt).await?,
                None => false,
            };
            if !adopted {
                tx.batch_execute(&self.tables.render(m.sql))
                    .await
                    .map_err(db_error)?;
            }
            tx.execute_typed(
                &format!(
                    "INSERT INTO {book} (component, version, name, adopted) VALUES ($1, $2, $3, $4)"
                ),
                &[
                    (&m.component, Type::TEXT),
                    (&m.version, Type::INT4),
                    (&m.name, Type::TEXT),
                    (&adopted, Type::BOOL),
                ],
            )
            .await
            .map_err(db_error)?;
            done.push((m.label(), m.name, adopted));
        }
        tx.commit().await.map_err(db_error)?;
        for (migration, name, adopted) in done {
            info!(migration, name, adopted, "applied migration");
        }
        Ok(())
    }

    /// Whether `adopt`'s table already exists as the migration would have
    /// made it: a base (or partitioned) table with every column of
    /// [`migrations::Adopt::columns`] and the primary key it names.
    /// Anything else of that name (a view, an application's own table) is
    /// [`StoreError::Corrupt`].
    async fn adoptable(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        adopt: migrations::Adopt,
    ) -> Result<bool, StoreError> {
        let table = self.tables.render(adopt.table);
        let rows = send::query_in(
            tx,
            "SELECT c.relkind::text,
                        ARRAY(SELECT a.attname::text FROM pg_attribute a
                              WHERE a.attrelid = c.oid AND a.attnum > 0
                                AND NOT a.attisdropped),
                        ARRAY(SELECT a.attname::text
                              FROM pg_index i
                              CROSS JOIN LATERAL unnest(i.indkey::int2[])
                                   WITH ORDINALITY AS k(attnum, n)
                              JOIN pg_attribute a
                                ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                              WHERE i.indrelid = c.oid AND i.indisprimary
                              ORDER BY k.n)
                 FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relname = $1",
            &[(&table, Type::TEXT)],
        )
        .await
        .map_err(db_error)?;
        let Some(row) = rows.first() else {
            return Ok(false);
        };
        let kind: String = row.try_get(0).map_err(db_error)?;
        let columns: Vec<String> = row.try_get(1).map_err(db_error)?;
        let key: Vec<String> = row.try_get(2).map_err(db_error)?;
        let base_table = kind == "r" || kind == "p";
        match migrations::misfit(adopt, base_table, &columns, &key) {
            None => Ok(true),
            Some(why) => Err(StoreError::Corrupt(format!(
                "{table} exists but is not the table idemkey makes ({why}): choose a table prefix"
            ))),
        }
    }

    /// The names of the library's tables in this database.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// What sits between this store and PostgreSQL.
    pub fn pooler(&self) -> PgPooler {
        self.pooler
    }

    /// The pool, for callers that run their own statements next to ours
    /// (e.g. [`crate::in_transaction`]).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The connection pool's figures.
    pub fn pool_status(&self) -> PoolStatus {
        let status = self.pool.status();
        PoolStatus {
            max_size: status.max_size,
            size: status.size,
            available: status.available,
            waiting: status.waiting,
        }
    }

    /// Closes the pool's connections (at shutdown).
    pub fn close(&self) {
        self.pool.close();
    }

    /// The migrations this store was asked to apply that the database has
    /// not applied (empty when it is up to date), as `component/version`.
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let applied = applied_migrations(&**client, &self.tables.migrations()).await?;
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

    /// A connection of the pool, waiting at most the pool's wait.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.map_err(db_error)?;
        Ok(())
    }
}

/// The `(component, version)` pairs a database has applied; none when
/// the bookkeeping table does not exist yet.
async fn applied_migrations(
    client: &(impl tokio_postgres::GenericClient + Sync),
    book: &str,
) -> Result<Vec<(String, i32)>, StoreError> {
    let exists = send::query_in(
        client,
        "SELECT to_regclass($1) IS NOT NULL",
        &[(&book, Type::TEXT)],
    )
    .await
    .map_err(db_error)?
    .first()
    .map(|row| row.try_get::<_, bool>(0))
    .transpose()
    .map_err(db_error)?
    .unwrap_or(false);
    if !exists {
        return Ok(Vec::new());
    }
    let rows = send::query_in(
        client,
        &format!("SELECT component, version FROM {book}"),
        &[],
    )
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get(0).map_err(db_error)?,
                row.try_get(1).map_err(db_error)?,
            ))
        })
        .collect()
}

/// How the store's own connections send a statement: decided in
/// the `send` module, from the store's pooler.
impl PgDb {
    /// `sql`'s rows on `conn`, one of this store's own connections
    /// ([`PgDb::client`]): prepared once per connection on a direct path,
    /// unnamed behind a transaction pooler. The driver's error is returned
    /// as is, for a caller that looks at it (e.g. a constraint's name).
    pub async fn query_pooled(
        &self,
        conn: &Object,
        sql: &str,
        params: &[send::Param<'_>],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let client: &tokio_postgres::Client = conn;
        send::rows(self.cache(conn), client, sql, params).await
    }

    /// [`PgDb::query_pooled`] for a statement that returns no rows: how many it
    /// changed.
    pub async fn execute_pooled(
        &self,
        conn: &Object,
        sql: &str,
        params: &[send::Param<'_>],
    ) -> Result<u64, tokio_postgres::Error> {
        let client: &tokio_postgres::Client = conn;
        send::changed(self.cache(conn), client, sql, params).await
    }

    /// The connection's statement cache, where a named statement lives as
    /// long as the connection: only with no transaction pooler between.
    pub(super) fn cache<'a>(&self, conn: &'a Object) -> Option<&'a ClientWrapper> {
        (self.pooler() == PgPooler::None).then_some(&**conn)
    }
}

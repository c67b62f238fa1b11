//! The PostgreSQL backend: a deadpool pool of tokio-postgres connections,
//! named SQL statements next to this file, versioned migrations.
//!
//! Every connection starts with `lock_timeout` and `statement_timeout` set in
//! its startup packet (no per-request `SET`), and statements are prepared
//! once per connection (`prepare_cached`), so a new order and a replay each
//! cost one round trip in the common case.

use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, Timeouts,
};
use idemkey_core::{Fingerprint, IdempotencyKey, OperationId, UnixMillis};
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, Row};
use tracing::{info, warn};
use uuid::Uuid;

use super::{
    AccountId, Authed, CreateOutcome, Order, OrderDraft, OrderStore, Record, ReexecuteOutcome,
    StoreError, StoreFault, StoredResponse, TokenHash, TrimReport, from_system_time,
    stored_from_columns, to_system_time,
};

const CREATE_ORDER: &str = include_str!("postgres/create_order.sql");
const REEXECUTE_ORDER: &str = include_str!("postgres/reexecute_order.sql");
const RECORD: &str = include_str!("postgres/record.sql");
const ORDER: &str = include_str!("postgres/order.sql");
const RECENT_ORDERS: &str = include_str!("postgres/recent_orders.sql");
const TRIM: &str = include_str!("postgres/trim.sql");

/// Versioned migrations, applied in order, each once.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("postgres/0001_init.sql")),
    (
        2,
        "idempotency_leases",
        include_str!("postgres/0002_idempotency_leases.sql"),
    ),
];

/// Key of the advisory lock that serialises migrations between processes.
const MIGRATION_LOCK: i64 = 0x6964_656d_6b65_7901; // "idemkey" + 1

/// Connection and timeout settings of a [`PgStore`].
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

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl PgStore {
    /// Builds the pool for `url` (connections open lazily) and applies
    /// pending migrations.
    pub async fn connect(url: &str, settings: &PgSettings) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Unavailable(format!("invalid database URL: {e}")))?;
        config.options(format!(
            "-c lock_timeout={} -c statement_timeout={}",
            settings.lock_timeout.as_millis(),
            settings.statement_timeout.as_millis()
        ));
        config.connect_timeout(settings.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("idemkey-server");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
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
        let store = Self { pool };
        store.migrate().await?;
        Ok(store)
    }

    /// Applies pending migrations under an advisory lock, so that two
    /// processes starting at once apply each migration exactly once.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
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

    /// The pool, for metrics and shutdown.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Versions of this build's migrations that the database has not
    /// applied (empty when it is up to date); an error when the database
    /// does not answer or has no migration table.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>, StoreError> {
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

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    async fn read_record(
        &self,
        client: &deadpool_postgres::Object,
        token: TokenHash,
        operation: &str,
        key: &str,
    ) -> Result<Authed<Option<Record>>, StoreError> {
        let stmt = client.prepare_cached(RECORD).await.map_err(db_error)?;
        let row = client
            .query_opt(&stmt, &[&&token.0[..], &operation, &key])
            .await
            .map_err(db_error)?;
        match row {
            None => Ok(Authed::Unauthorized),
            Some(row) => Ok(Authed::Ok(record_from_row(&row)?)),
        }
    }
}

fn draft_params(draft: &OrderDraft) -> (Vec<u8>, String, i32) {
    (
        draft.fingerprint.as_bytes().to_vec(),
        draft.response.headers_json(),
        i32::from(draft.quantity),
    )
}

impl OrderStore for PgStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.map_err(db_error)?;
        Ok(())
    }

    async fn create_account(&self, name: &str, token: TokenHash) -> Result<AccountId, StoreError> {
        let mut client = self.client().await?;
        let id = Uuid::new_v4();
        let tx = client.transaction().await.map_err(db_error)?;
        tx.execute(
            "INSERT INTO accounts (id, name) VALUES ($1, $2)",
            &[&id, &name],
        )
        .await
        .map_err(db_error)?;
        tx.execute(
            "INSERT INTO api_tokens (token_hash, account_id) VALUES ($1, $2)",
            &[&&token.0[..], &id],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(AccountId(id))
    }

    async fn add_named_token(&self, name: &str, token: TokenHash) -> Result<AccountId, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // Two processes starting in demo mode at once make one account.
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&name])
            .await
            .map_err(db_error)?;
        let existing = tx
            .query_opt(
                "SELECT id FROM accounts WHERE name = $1 ORDER BY created_at, id LIMIT 1",
                &[&name],
            )
            .await
            .map_err(db_error)?;
        let id: Uuid = match existing {
            Some(row) => row.try_get(0).map_err(db_error)?,
            None => {
                let id = Uuid::new_v4();
                tx.execute(
                    "INSERT INTO accounts (id, name) VALUES ($1, $2)",
                    &[&id, &name],
                )
                .await
                .map_err(db_error)?;
                id
            }
        };
        tx.execute(
            "INSERT INTO api_tokens (token_hash, account_id) VALUES ($1, $2)",
            &[&&token.0[..], &id],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(AccountId(id))
    }

    async fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        fault: Option<StoreFault>,
    ) -> Result<CreateOutcome, StoreError> {
        let mut client = self.client().await?;
        let (fingerprint, headers, quantity) = draft_params(draft);
        let created_at = to_system_time(draft.created_at);
        let replay_until = to_system_time(draft.replay_until);
        let (operation, key) = (draft.operation.as_str(), draft.key.as_str());
        let stmt = client
            .prepare_cached(CREATE_ORDER)
            .await
            .map_err(db_error)?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
            &&token.0[..],
            &operation,
            &key,
            &fingerprint,
            &draft.response.body,
            &headers,
            &created_at,
            &replay_until,
            &draft.order_id,
            &draft.sku,
            &quantity,
        ];
        if fault == Some(StoreFault::FailStoringResult) {
            // The same statement inside an explicit transaction, then a write
            // to the stored result that the schema refuses: the database
            // itself fails while storing the result, and everything rolls back.
            let tx = client.transaction().await.map_err(db_error)?;
            tx.query(&stmt, &params).await.map_err(db_error)?;
            let failure = tx
                .execute(
                    "UPDATE idempotency_records SET response_status = 0
                     WHERE operation = $1 AND key = $2 AND resource_id = $3",
                    &[&operation, &key, &draft.order_id.to_string()],
                )
                .await;
            drop(tx);
            return Err(failure.map_or_else(db_error, |_| {
                StoreError::Unavailable("injected fault did not fail".into())
            }));
        }
        let rows = client.query(&stmt, &params).await.map_err(db_error)?;
        if let Some(row) = rows.first() {
            let outcome: &str = row.try_get("outcome").map_err(db_error)?;
            return match outcome {
                "created" => Ok(CreateOutcome::Created),
                "unauthorized" => Ok(CreateOutcome::Unauthorized),
                _ => Ok(CreateOutcome::Existing(record_from_row(row)?.ok_or_else(
                    || StoreError::Unavailable("existing record without columns".into()),
                )?)),
            };
        }
        // The claim waited for a concurrent claimant that committed: this
        // statement's snapshot could not see its row. A new statement can.
        match self.read_record(&client, token, operation, key).await? {
            Authed::Unauthorized => Ok(CreateOutcome::Unauthorized),
            Authed::Ok(Some(record)) => Ok(CreateOutcome::Existing(record)),
            // Deleted between the two statements (tombstone purge): let the
            // client retry; the next attempt claims the key afresh.
            Authed::Ok(None) => Err(StoreError::Unavailable(
                "record vanished between claim and read".into(),
            )),
        }
    }

    async fn reexecute_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        now: UnixMillis,
    ) -> Result<ReexecuteOutcome, StoreError> {
        let client = self.client().await?;
        let (fingerprint, headers, quantity) = draft_params(draft);
        let (created_at, replay_until, now) = (
            to_system_time(draft.created_at),
            to_system_time(draft.replay_until),
            to_system_time(now),
        );
        let stmt = client
            .prepare_cached(REEXECUTE_ORDER)
            .await
            .map_err(db_error)?;
        let row = client
            .query_one(
                &stmt,
                &[
                    &&token.0[..],
                    &draft.operation.as_str(),
                    &draft.key.as_str(),
                    &fingerprint,
                    &draft.response.body,
                    &headers,
                    &created_at,
                    &replay_until,
                    &draft.order_id,
                    &draft.sku,
                    &quantity,
                    &now,
                ],
            )
            .await
            .map_err(db_error)?;
        let known: bool = row.try_get("known").map_err(db_error)?;
        let inserted: i64 = row.try_get("inserted").map_err(db_error)?;
        Ok(match (known, inserted) {
            (false, _) => ReexecuteOutcome::Unauthorized,
            (true, 0) => ReexecuteOutcome::Changed,
            (true, _) => ReexecuteOutcome::Replaced,
        })
    }

    async fn order(&self, token: TokenHash, id: Uuid) -> Result<Authed<Option<Order>>, StoreError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(ORDER).await.map_err(db_error)?;
        let Some(row) = client
            .query_opt(&stmt, &[&&token.0[..], &id])
            .await
            .map_err(db_error)?
        else {
            return Ok(Authed::Unauthorized);
        };
        let id: Option<Uuid> = row.try_get("id").map_err(db_error)?;
        let Some(id) = id else {
            return Ok(Authed::Ok(None));
        };
        let quantity: i32 = row.try_get("quantity").map_err(db_error)?;
        Ok(Authed::Ok(Some(Order {
            id,
            sku: row.try_get("sku").map_err(db_error)?,
            quantity: u8::try_from(quantity)
                .map_err(|_| StoreError::Unavailable("quantity out of range".into()))?,
            created_at: from_system_time(row.try_get("created_at").map_err(db_error)?),
        })))
    }

    async fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> Result<Authed<Vec<Order>>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(RECENT_ORDERS)
            .await
            .map_err(db_error)?;
        let rows = client
            .query(&stmt, &[&&token.0[..], &i64::from(limit)])
            .await
            .map_err(db_error)?;
        if rows.is_empty() {
            return Ok(Authed::Unauthorized);
        }
        let mut orders = Vec::with_capacity(rows.len());
        for row in rows {
            let id: Option<Uuid> = row.try_get("id").map_err(db_error)?;
            let Some(id) = id else { continue };
            let quantity: i32 = row.try_get("quantity").map_err(db_error)?;
            orders.push(Order {
                id,
                sku: row.try_get("sku").map_err(db_error)?,
                quantity: u8::try_from(quantity)
                    .map_err(|_| StoreError::Unavailable("quantity out of range".into()))?,
                created_at: from_system_time(row.try_get("created_at").map_err(db_error)?),
            });
        }
        Ok(Authed::Ok(orders))
    }

    async fn record(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> Result<Authed<Option<Record>>, StoreError> {
        let client = self.client().await?;
        self.read_record(&client, token, operation.as_str(), key.as_str())
            .await
    }

    async fn trim(
        &self,
        now: UnixMillis,
        forget_before: UnixMillis,
        batch: u32,
    ) -> Result<TrimReport, StoreError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(TRIM).await.map_err(db_error)?;
        let row = client
            .query_one(
                &stmt,
                &[
                    &to_system_time(now),
                    &to_system_time(forget_before),
                    &i64::from(batch),
                ],
            )
            .await
            .map_err(db_error)?;
        let trimmed: i64 = row.try_get("trimmed").map_err(db_error)?;
        let deleted: i64 = row.try_get("deleted").map_err(db_error)?;
        Ok(TrimReport {
            trimmed: trimmed.unsigned_abs(),
            deleted: deleted.unsigned_abs(),
        })
    }
}

/// Reads a record from a row of `create_order.sql` or `record.sql`;
/// `None` when the row carries no record (no `fingerprint`).
fn record_from_row(row: &Row) -> Result<Option<Record>, StoreError> {
    let fingerprint: Option<Vec<u8>> = row.try_get("fingerprint").map_err(db_error)?;
    let Some(fingerprint) = fingerprint else {
        return Ok(None);
    };
    let fingerprint: [u8; 32] = fingerprint
        .try_into()
        .map_err(|_| StoreError::Unavailable("fingerprint is not 32 bytes".into()))?;
    let fingerprint = Fingerprint::from_bytes(fingerprint);
    let status: String = row.try_get("status").map_err(db_error)?;
    let replay_until = from_system_time(row.try_get("replay_until").map_err(db_error)?);
    let created_at = from_system_time(row.try_get("created_at").map_err(db_error)?);
    let lease_until: Option<std::time::SystemTime> =
        row.try_get("lease_until").map_err(db_error)?;
    let response_status: Option<i32> = row.try_get("response_status").map_err(db_error)?;
    let headers: Option<String> = row.try_get("response_headers").map_err(db_error)?;
    let body: Option<String> = row.try_get("response_body").map_err(db_error)?;
    let response = match (response_status, body) {
        (Some(status), Some(body)) => Some(StoredResponse {
            status: u16::try_from(status)
                .map_err(|_| StoreError::Unavailable("stored status out of range".into()))?,
            headers: headers
                .as_deref()
                .map(StoredResponse::headers_from_json)
                .unwrap_or_default(),
            body,
        }),
        _ => None,
    };
    Ok(Some(Record {
        stored: stored_from_columns(
            &status,
            fingerprint,
            replay_until,
            lease_until.map(from_system_time),
        ),
        response,
        resource_id: row.try_get("resource_id").map_err(db_error)?,
        created_at,
        replay_until,
    }))
}

/// Maps a database error by SQLSTATE (never by message text). The message
/// goes to the log without the server's DETAIL, which may quote row values.
fn db_error(err: tokio_postgres::Error) -> StoreError {
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
    warn!(closed = err.is_closed(), error = %err, "database connection error");
    StoreError::Unavailable(err.to_string())
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

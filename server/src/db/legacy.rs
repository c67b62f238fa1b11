//! Databases of earlier versions, which kept one `schema_migrations` list
//! for the records, the orders and the outbox together. A database that has
//! that list but not its last shared version is brought up to it with the
//! statements of those versions, as they were; then the library and the
//! order service adopt the tables it made (see
//! [`idemkey::store::migrations`]). A new database never gets the list.

use idemkey::StoreError;
use idemkey::store::postgres::{db_error, execute_in, query_in};
use idemkey::store::sqlite::sqlite_error;
use rusqlite::{OptionalExtension as _, params};
use tokio_postgres::types::Type;

use super::{PgOrders, SqliteOrders};

/// The versions of the shared list that made the tables adopted today.
const POSTGRES: &[(i32, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("postgres/migrations/legacy/0001_init.sql"),
    ),
    (
        2,
        "idempotency_leases",
        include_str!("postgres/migrations/legacy/0002_idempotency_leases.sql"),
    ),
    (
        3,
        "one_records_table",
        include_str!("postgres/migrations/legacy/0003_one_records_table.sql"),
    ),
    (
        4,
        "token_management",
        include_str!("postgres/migrations/legacy/0004_token_management.sql"),
    ),
    (
        5,
        "account_first_keys",
        include_str!("postgres/migrations/legacy/0005_account_first_keys.sql"),
    ),
    (
        6,
        "payments",
        include_str!("postgres/migrations/legacy/0006_payments.sql"),
    ),
];

/// The same versions on SQLite.
const SQLITE: &[(i32, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("sqlite/migrations/legacy/0001_init.sql"),
    ),
    (
        2,
        "idempotency_leases",
        include_str!("sqlite/migrations/legacy/0002_idempotency_leases.sql"),
    ),
    (
        3,
        "one_records_table",
        include_str!("sqlite/migrations/legacy/0003_one_records_table.sql"),
    ),
    (
        4,
        "token_management",
        include_str!("sqlite/migrations/legacy/0004_token_management.sql"),
    ),
    (
        5,
        "account_first_keys",
        include_str!("sqlite/migrations/legacy/0005_account_first_keys.sql"),
    ),
    (
        6,
        "payments",
        include_str!("sqlite/migrations/legacy/0006_payments.sql"),
    ),
];

/// Key of the advisory lock the earlier versions migrated under.
const LEGACY_LOCK: i64 = 0x6964_656d_6b65_7901;

/// Brings a PostgreSQL database that has the shared list up to its last
/// version; a database without the list is left alone.
pub async fn postgres(db: &PgOrders) -> Result<(), StoreError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await.map_err(db_error)?;
    tx.batch_execute("SET LOCAL lock_timeout = '15min'; SET LOCAL statement_timeout = '15min'")
        .await
        .map_err(db_error)?;
    tx.execute_typed(
        "SELECT pg_advisory_xact_lock($1)",
        &[(&LEGACY_LOCK, Type::INT8)],
    )
    .await
    .map_err(db_error)?;
    let listed = query_in(
        &*tx,
        "SELECT to_regclass('schema_migrations') IS NOT NULL",
        &[],
    )
    .await
    .map_err(db_error)?
    .first()
    .is_some_and(|row| row.get::<_, bool>(0));
    if !listed {
        return Ok(());
    }
    let applied: Vec<i32> = query_in(&*tx, "SELECT version FROM schema_migrations", &[])
        .await
        .map_err(db_error)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for (version, name, sql) in POSTGRES {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql).await.map_err(db_error)?;
        execute_in(
            &*tx,
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[(version, Type::INT4), (name, Type::TEXT)],
        )
        .await
        .map_err(db_error)?;
        tracing::info!(version, name, "applied an earlier version's migration");
    }
    tx.commit().await.map_err(db_error)
}

/// [`postgres`] on SQLite.
pub async fn sqlite(db: &SqliteOrders) -> Result<(), StoreError> {
    db.with_conn(|conn| {
        let tx = idemkey::store::sqlite::immediate(conn)?;
        let listed = tx
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'",
                [],
                |_| Ok(()),
            )
            .optional()
            .map_err(sqlite_error)?
            .is_some();
        if !listed {
            return Ok(());
        }
        for (version, name, sql) in SQLITE {
            let done = tx
                .query_row(
                    "SELECT 1 FROM schema_migrations WHERE version = ?1",
                    [version],
                    |_| Ok(()),
                )
                .optional()
                .map_err(sqlite_error)?
                .is_some();
            if done {
                continue;
            }
            tx.execute_batch(sql).map_err(sqlite_error)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (?1, ?2)",
                params![version, name],
            )
            .map_err(sqlite_error)?;
            tracing::info!(
                version,
                name,
                "applied an earlier version's SQLite migration"
            );
        }
        tx.commit().map_err(sqlite_error)
    })
    .await
}

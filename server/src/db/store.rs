//! [`Db`]: the order service's database (PostgreSQL or SQLite), its
//! migrations and its calls, over the library's store.

use std::time::Duration;

use idemkey::StoreError;
use idemkey::idempotency::{Policy, Read};
use idemkey::store::migrations::{Adopt, Migration};
use idemkey::store::postgres::PgDb;
use idemkey::store::sqlite::SqliteDb;
use idemkey::store::{PoolStatus, StoreSettings};
use idemkey_core::{IdempotencyKey, OperationId};
use uuid::Uuid;

use super::caller::{Authed, TokenHash};
use super::legacy;
use super::order::{Order, OrderAttempt, OrderDraft, Price};
use super::postgres::PgOrders;
use super::sqlite::SqliteOrders;

/// The database used when none is given: a file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://idemkey.db";

/// The order service's migrations (one component, `orders`): its tables in
/// their current shape. A database made by an earlier version already has
/// them (adopted; see [`legacy`]).
pub(crate) fn migrations(backend: &str) -> [Migration; 4] {
    let (sql, purchases, charge_message, stripes) = if backend == "postgres" {
        (
            include_str!("postgres/migrations/orders_0001.sql"),
            include_str!("postgres/migrations/orders_0002.sql"),
            include_str!("postgres/migrations/orders_0003.sql"),
            include_str!("postgres/migrations/orders_0004.sql"),
        )
    } else {
        (
            include_str!("sqlite/migrations/orders_0001.sql"),
            include_str!("sqlite/migrations/orders_0002.sql"),
            include_str!("sqlite/migrations/orders_0003.sql"),
            include_str!("sqlite/migrations/orders_0004.sql"),
        )
    };
    [
        Migration {
            component: "orders",
            version: 1,
            name: "orders",
            sql,
            adopt: Some(Adopt {
                table: "orders",
                // What the legacy schema's orders had by its last version
                // (its key changed on the way, so it is not checked).
                columns: &[
                    "id",
                    "account_id",
                    "sku",
                    "quantity",
                    "created_at",
                    "reference",
                ],
                primary_key: &[],
            }),
        },
        Migration {
            component: "orders",
            version: 2,
            name: "purchases",
            sql: purchases,
            adopt: None,
        },
        Migration {
            component: "orders",
            version: 3,
            name: "charge message",
            sql: charge_message,
            adopt: None,
        },
        Migration {
            component: "orders",
            version: 4,
            name: "stock stripes",
            sql: stripes,
            adopt: None,
        },
    ]
}

/// The order service's database.
#[derive(Clone, Debug)]
pub enum Db {
    /// PostgreSQL: the shared, multi-instance store.
    Postgres(PgOrders),
    /// SQLite: the embedded, single-host store.
    Sqlite(SqliteOrders),
}

impl Db {
    /// Opens the database a URL names (`postgres://…`, libpq's `host=…`
    /// form, or `sqlite://PATH`) and applies pending migrations: an earlier
    /// version's list first, then the library's, then the order service's.
    /// A Redis URL is [`StoreError::Unsupported`]: orders need a database
    /// transaction.
    pub async fn open(url: &str, settings: &StoreSettings) -> Result<Self, StoreError> {
        let settings = StoreSettings {
            application_name: "idemkey-server",
            ..settings.clone()
        };
        let store = idemkey::Db::connect(url, &settings).await?;
        let db = if let Some(db) = store.backend_as::<PgDb>() {
            Self::Postgres(PgOrders::new(db.clone()))
        } else if let Some(db) = store.backend_as::<SqliteDb>() {
            Self::Sqlite(SqliteOrders::new(db.clone()))
        } else {
            return Err(StoreError::Unsupported(
                "Redis serves the idempotency layer (lease mode) only: the order service \
                 keeps each order and its key's record in one database transaction, which \
                 Redis cannot join; use postgres:// or sqlite://"
                    .into(),
            ));
        };
        db.migrate().await?;
        Ok(db)
    }

    /// Applies every pending migration (see [`Db::open`]).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(db) => legacy::postgres(db).await?,
            Self::Sqlite(db) => legacy::sqlite(db).await?,
        }
        // The library's components and the order service's in one
        // transaction: all are applied, by one process, or none.
        let store = self.store();
        let mut all = store.library_migrations();
        all.extend(migrations(self.backend()));
        store.migrate_with(&all).await
    }

    /// The library's store over the same connections (for the Layer, the
    /// outbox worker and maintenance).
    pub fn store(&self) -> idemkey::Db {
        match self {
            Self::Postgres(db) => idemkey::Db::new(PgDb::clone(db)),
            Self::Sqlite(db) => idemkey::Db::new(SqliteDb::clone(db)),
        }
    }

    /// `postgres` or `sqlite`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }

    /// SQLite only: `(batches, orders)` of new orders group-committed so
    /// far (one fsync per batch).
    pub fn order_batches(&self) -> Option<(u64, u64)> {
        match self {
            Self::Sqlite(db) => Some(db.group_commits()),
            Self::Postgres(_) => None,
        }
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(db) => db.ping().await,
            Self::Sqlite(db) => db.ping().await,
        }
    }

    /// This build's migrations that the database has not applied, as
    /// `component/version` (empty when it is up to date).
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        match self {
            Self::Postgres(db) => db.pending_migrations().await,
            Self::Sqlite(db) => db.pending_migrations().await,
        }
    }

    /// `/readyz`'s question: the pending migrations, answered within
    /// `within` or [`StoreError::Unavailable`].
    pub async fn ready(&self, within: Duration) -> Result<Vec<String>, StoreError> {
        self.store().ready(within).await
    }

    /// The connection pool's figures.
    pub fn pool_status(&self) -> PoolStatus {
        match self {
            Self::Postgres(db) => db.pool_status(),
            Self::Sqlite(db) => db.pool_status(),
        }
    }

    /// Closes the pool's connections (at shutdown).
    pub fn close(&self) {
        match self {
            Self::Postgres(db) => db.close(),
            Self::Sqlite(db) => db.close(),
        }
    }

    /// Creates the draft's order with its key's record in one transaction,
    /// or answers from what the key holds: the order route's front end.
    pub async fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        policy: &Policy,
    ) -> Result<Authed<OrderAttempt>, StoreError> {
        match self {
            Self::Postgres(db) => db.create_order(token, draft, policy).await,
            Self::Sqlite(db) => db.create_order(token, draft, policy).await,
        }
    }

    /// The account a live token belongs to (one statement).
    pub async fn account(&self, token: TokenHash) -> Result<Authed<super::AccountId>, StoreError> {
        match self {
            Self::Postgres(db) => db.account(token).await,
            Self::Sqlite(db) => db.account(token).await,
        }
    }

    /// The catalogue: every sku with its price.
    pub async fn products(&self) -> Result<Vec<(String, Price)>, StoreError> {
        match self {
            Self::Postgres(db) => db.products().await,
            Self::Sqlite(db) => db.products().await,
        }
    }

    /// The caller's order with this id, if it is theirs.
    pub async fn order(
        &self,
        token: TokenHash,
        id: Uuid,
    ) -> Result<Authed<Option<Order>>, StoreError> {
        match self {
            Self::Postgres(db) => db.order(token, id).await,
            Self::Sqlite(db) => db.order(token, id).await,
        }
    }

    /// The caller's newest orders, newest first, at most `limit`.
    pub async fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> Result<Authed<Vec<Order>>, StoreError> {
        match self {
            Self::Postgres(db) => db.recent_orders(token, limit).await,
            Self::Sqlite(db) => db.recent_orders(token, limit).await,
        }
    }

    /// What the caller's account holds for `(operation, key)`, with the
    /// store's clock.
    pub async fn lookup(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> Result<Authed<Read>, StoreError> {
        match self {
            Self::Postgres(db) => db.lookup(token, operation, key).await,
            Self::Sqlite(db) => db.lookup(token, operation, key).await,
        }
    }
}

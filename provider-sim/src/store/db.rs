//! [`Db`]: the simulator's database and its migrations.

use idemkey::StoreError;
use idemkey::store::migrations::{Adopt, Migration};
use idemkey::store::{PgDb, SqliteDb};
use uuid::Uuid;

use super::charge::{Charge, ChargeWrite, NewCharge, ProviderRequest, RequestKind};
use super::{postgres, sqlite};

/// Why Redis holds no charges.
pub const CHARGES_NEED_SQL: &str = "the payment provider keeps its charges in a SQL store: \
     use postgres://... or sqlite://PATH, not Redis";

/// The simulator's database: its charges and request log, and the records
/// of its idempotency layer (the library's table) beside them.
#[derive(Clone, Debug)]
pub enum Db {
    /// PostgreSQL.
    Postgres(PgDb),
    /// SQLite.
    Sqlite(SqliteDb),
}

/// The one place that matches on the backend: `$method` of its charges.
macro_rules! each {
    ($self:expr, $method:ident($($arg:expr),*)) => {
        match $self {
            Db::Postgres(db) => postgres::Charges(db).$method($($arg),*).await,
            Db::Sqlite(db) => sqlite::Charges(db).$method($($arg),*).await,
        }
    };
}

/// The simulator's migrations (component `provider-sim`); a database of an
/// earlier version, which kept them in one list with the order service's,
/// already has both tables (adopted).
fn migrations(backend: &str) -> [Migration; 2] {
    let (charges, requests) = if backend == "postgres" {
        (
            include_str!("postgres/0007_provider_charges.sql"),
            include_str!("postgres/0008_provider_requests.sql"),
        )
    } else {
        (
            include_str!("sqlite/0007_provider_charges.sql"),
            include_str!("sqlite/0008_provider_requests.sql"),
        )
    };
    [
        Migration {
            component: "provider-sim",
            version: 1,
            name: "provider_charges",
            sql: charges,
            adopt: Some(Adopt {
                table: "provider_charges",
                column: "order_id",
            }),
        },
        Migration {
            component: "provider-sim",
            version: 2,
            name: "provider_requests",
            sql: requests,
            adopt: Some(Adopt {
                table: "provider_requests",
                column: "kind",
            }),
        },
    ]
}

impl Db {
    /// Opens the database a URL names (PostgreSQL or SQLite) and applies the
    /// library's migrations and the simulator's.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let settings = idemkey::store::StoreSettings {
            application_name: "idemkey-provider-sim",
            ..idemkey::store::StoreSettings::default()
        };
        let store = idemkey::Db::connect(url, &settings).await?;
        // The library's components and the simulator's in one transaction.
        let mut all = store.library_migrations();
        all.extend(migrations(store.backend()));
        store.migrate_with(&all).await?;
        match store {
            idemkey::Db::Postgres(db) => Ok(Self::Postgres(db)),
            idemkey::Db::Sqlite(db) => Ok(Self::Sqlite(db)),
            _ => Err(StoreError::Unsupported(CHARGES_NEED_SQL.into())),
        }
    }

    /// The library's store over the same connections (for the layer).
    pub fn store(&self) -> idemkey::Db {
        match self {
            Self::Postgres(db) => idemkey::Db::Postgres(db.clone()),
            Self::Sqlite(db) => idemkey::Db::Sqlite(db.clone()),
        }
    }

    /// Makes the charge of `(scope, key)` in one transaction, or returns the
    /// one the key already has.
    pub async fn insert_charge(&self, charge: &NewCharge) -> Result<ChargeWrite, StoreError> {
        each!(self, insert_charge(charge))
    }

    /// The scope's charge made under `key`, if any.
    pub async fn charge(&self, scope: &str, key: &str) -> Result<Option<Charge>, StoreError> {
        each!(self, charge(scope, key))
    }

    /// Every charge of the scope, oldest first.
    pub async fn charges(&self, scope: &str) -> Result<Vec<Charge>, StoreError> {
        each!(self, charges(scope))
    }

    /// Logs one request of the scope (or one run of the charge handler,
    /// with its order) in the provider's request log.
    pub async fn log_provider_request(
        &self,
        scope: &str,
        kind: RequestKind,
        key: &str,
        order_id: Option<Uuid>,
    ) -> Result<(), StoreError> {
        each!(self, log_provider_request(scope, kind, key, order_id))
    }

    /// The scope's request log, in arrival order.
    pub async fn provider_requests(&self, scope: &str) -> Result<Vec<ProviderRequest>, StoreError> {
        each!(self, provider_requests(scope))
    }
}

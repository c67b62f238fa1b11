//! The charges of the payment provider simulator (see the [crate docs](crate)): one row per
//! `(scope, idempotency key)`, guarded by a unique constraint, so even a
//! request the provider's idempotency layer runs again (after its lease)
//! finds the charge it made instead of making a second one. Only the SQL
//! stores hold charges: [`Db`] has no Redis variant.
//!
//! The provider also logs every request it gets and every run of its
//! charge handler ([`ProviderRequest`]): the unique key above hides a second
//! charge request under one key, the log shows it.

use idemkey_core::UnixMillis;
use uuid::Uuid;

use idemkey::StoreError;
use idemkey::store::migrations::{Adopt, Migration};
use idemkey::store::{PgDb, SqliteDb};

mod postgres;
mod sqlite;

/// A charge as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    /// Its id (shown as `ch_` and the simple UUID).
    pub id: Uuid,
    /// The idempotency key it was made under (its characters, unquoted).
    pub idempotency_key: String,
    /// The order it pays for.
    pub order_id: Uuid,
    /// The amount, in cents.
    pub amount_cents: i64,
    /// ISO 4217 code, e.g. `EUR`.
    pub currency: String,
    /// When it was made, at the database's clock.
    pub created_at: UnixMillis,
}

/// A charge to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCharge {
    /// Whose charge it is: the provider's caller (see
    /// [`crate::payments::provider`]).
    pub scope: String,
    /// The request's idempotency key (its characters, unquoted).
    pub idempotency_key: String,
    /// The order it pays for.
    pub order_id: Uuid,
    /// The amount, in cents (positive).
    pub amount_cents: i64,
    /// ISO 4217 code, three capital letters.
    pub currency: String,
}

/// What [`Db::insert_charge`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChargeWrite {
    /// A new charge.
    Created(Charge),
    /// The key already had this charge; nothing was written.
    Existing(Charge),
}

/// What one row of the provider's request log records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// A `POST /charges` arrived (before any fault was drawn).
    Request,
    /// A `GET /charges/{key}` arrived (before any fault was drawn).
    Lookup,
    /// The charge handler ran: a request reached the charge's write (it
    /// made the charge or found the key's one).
    Charge,
}

impl RequestKind {
    /// The kind as stored: `request`, `lookup` or `charge`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Lookup => "lookup",
            Self::Charge => "charge",
        }
    }
}

/// One row of the provider's request log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRequest {
    /// Its place in arrival order.
    pub seq: i64,
    /// `request`, `lookup` or `charge` ([`RequestKind::as_str`]).
    pub kind: String,
    /// The key it named (its characters, unquoted).
    pub idempotency_key: String,
    /// The order of a `charge` run.
    pub order_id: Option<Uuid>,
    /// When it was logged, at the database's clock.
    pub created_at: UnixMillis,
}

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
        let store = idemkey::Db::open(url, &settings).await?;
        store.migrate_with(&migrations(store.backend())).await?;
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

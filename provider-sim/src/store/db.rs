//! [`Db`]: the simulator's database and its migrations.

use idemkey::StoreError;
use idemkey::store::migrations::{Adopt, Migration};
use idemkey::store::postgres::PgDb;
use idemkey::store::sqlite::SqliteDb;
use uuid::Uuid;

use super::charge::{Charge, ChargeWrite, Endpoint, NewCharge, ProviderRequest, RequestKind};
use super::confirmation::{Confirmation, ConfirmationWrite, NewConfirmation};
use super::refund::{NewRefund, Refund, RefundWrite};
use super::{postgres, sqlite};

/// Why Redis holds no charges.
pub const CHARGES_NEED_SQL: &str = "the payment provider keeps its charges in a SQL store: \
     use postgres://... or sqlite://PATH, not Redis";

/// The simulator's database: its charges, confirmations, refunds and
/// request log, and the records of its idempotency layers (the library's
/// table) beside them.
#[derive(Clone, Debug)]
pub enum Db {
    /// PostgreSQL.
    Postgres(PgDb),
    /// SQLite.
    Sqlite(SqliteDb),
}

/// The one place that matches on the backend: `$method` of its statements.
macro_rules! each {
    ($self:expr, $method:ident($($arg:expr),*)) => {
        match $self {
            Db::Postgres(db) => postgres::Statements(db).$method($($arg),*).await,
            Db::Sqlite(db) => sqlite::Statements(db).$method($($arg),*).await,
        }
    };
}

/// The simulator's migrations (component `provider-sim`); a database of an
/// earlier version, which kept them in one list with the order service's,
/// already has the first two versions' tables (adopted). Version 3 (the
/// confirmations, the refunds and the request log's effects) came after
/// that list, so it is always applied.
fn migrations(backend: &str) -> [Migration; 3] {
    let (charges, requests, effects) = if backend == "postgres" {
        (
            include_str!("postgres/0007_provider_charges.sql"),
            include_str!("postgres/0008_provider_requests.sql"),
            include_str!("postgres/v3_confirmations_refunds.sql"),
        )
    } else {
        (
            include_str!("sqlite/0007_provider_charges.sql"),
            include_str!("sqlite/0008_provider_requests.sql"),
            include_str!("sqlite/v3_confirmations_refunds.sql"),
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
                columns: &[
                    "scope",
                    "idempotency_key",
                    "id",
                    "order_id",
                    "amount_cents",
                    "currency",
                    "created_at",
                ],
                primary_key: &["scope", "idempotency_key"],
            }),
        },
        Migration {
            component: "provider-sim",
            version: 2,
            name: "provider_requests",
            sql: requests,
            adopt: Some(Adopt {
                table: "provider_requests",
                // The key differs by backend (`seq` alone on SQLite).
                columns: &[
                    "scope",
                    "seq",
                    "kind",
                    "idempotency_key",
                    "order_id",
                    "created_at",
                ],
                primary_key: &[],
            }),
        },
        Migration {
            component: "provider-sim",
            version: 3,
            name: "confirmations_refunds",
            sql: effects,
            adopt: None,
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
        if let Some(db) = store.backend_as::<idemkey::store::postgres::PgDb>() {
            return Ok(Self::Postgres(db.clone()));
        }
        if let Some(db) = store.backend_as::<idemkey::store::sqlite::SqliteDb>() {
            return Ok(Self::Sqlite(db.clone()));
        }
        Err(StoreError::Unsupported(CHARGES_NEED_SQL.into()))
    }

    /// The library's store over the same connections (for the layer).
    pub fn store(&self) -> idemkey::Db {
        match self {
            Self::Postgres(db) => idemkey::Db::new(db.clone()),
            Self::Sqlite(db) => idemkey::Db::new(db.clone()),
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

    /// Makes the confirmation of `(scope, key)` in one transaction, or
    /// returns the one the key already has.
    pub async fn insert_confirmation(
        &self,
        confirmation: &NewConfirmation,
    ) -> Result<ConfirmationWrite, StoreError> {
        each!(self, insert_confirmation(confirmation))
    }

    /// The scope's confirmation made under `key`, if any.
    pub async fn confirmation(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<Confirmation>, StoreError> {
        each!(self, confirmation(scope, key))
    }

    /// Every confirmation of the scope, oldest first.
    pub async fn confirmations(&self, scope: &str) -> Result<Vec<Confirmation>, StoreError> {
        each!(self, confirmations(scope))
    }

    /// Refunds a charge of the scope under `(scope, key)`, or says why not
    /// ([`RefundWrite`]): the key's refund comes first, then the charge,
    /// then the charge's one refund. At most one refund per key and one per
    /// charge, whatever runs at once (the unique keys decide).
    pub async fn insert_refund(&self, refund: &NewRefund) -> Result<RefundWrite, StoreError> {
        each!(self, insert_refund(refund))
    }

    /// The scope's refund made under `key`, if any.
    pub async fn refund(&self, scope: &str, key: &str) -> Result<Option<Refund>, StoreError> {
        each!(self, refund(scope, key))
    }

    /// Every refund of the scope, oldest first.
    pub async fn refunds(&self, scope: &str) -> Result<Vec<Refund>, StoreError> {
        each!(self, refunds(scope))
    }

    /// Logs one request of the scope about one effect (or one run of that
    /// effect's handler, with its order) in the provider's request log.
    pub async fn log_provider_request(
        &self,
        scope: &str,
        effect: Endpoint,
        kind: RequestKind,
        key: &str,
        order_id: Option<Uuid>,
    ) -> Result<(), StoreError> {
        each!(
            self,
            log_provider_request(scope, effect, kind, key, order_id)
        )
    }

    /// The scope's request log about one effect (every effect's with
    /// `None`), in arrival order.
    pub async fn provider_requests(
        &self,
        scope: &str,
        effect: Option<Endpoint>,
    ) -> Result<Vec<ProviderRequest>, StoreError> {
        each!(self, provider_requests(scope, effect))
    }
}

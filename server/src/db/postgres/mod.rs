//! The order service's statements on postgres: accounts, tokens, orders and
//! products, over the library's store.

use std::ops::Deref;

mod accounts;
mod orders;
pub(crate) mod purchases;

use idemkey::store::postgres::PgDb;

/// The order statements over the library's PostgreSQL store (its pool, its
/// records and outbox).
#[derive(Clone, Debug)]
pub struct PgOrders(PgDb);

impl PgOrders {
    pub(super) fn new(db: PgDb) -> Self {
        Self(db)
    }
}

impl Deref for PgOrders {
    type Target = PgDb;

    fn deref(&self) -> &PgDb {
        &self.0
    }
}

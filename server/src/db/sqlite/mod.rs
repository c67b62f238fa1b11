//! The order service's statements on sqlite: accounts, tokens, orders and
//! products, over the library's store.

use std::ops::Deref;

mod accounts;
mod orders;
pub(crate) mod purchases;

use idemkey::store::sqlite::SqliteDb;

/// The order statements over the library's SQLite store (its connections,
/// its group commit, its records and outbox).
#[derive(Clone, Debug)]
pub struct SqliteOrders(SqliteDb);

impl SqliteOrders {
    pub(super) fn new(db: SqliteDb) -> Self {
        Self(db)
    }
}

impl Deref for SqliteOrders {
    type Target = SqliteDb;

    fn deref(&self) -> &SqliteDb {
        &self.0
    }
}

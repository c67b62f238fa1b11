//! PostgreSQL through sqlx: the records store, `in_transaction` inside a
//! `sqlx::Transaction<'_, Postgres>` of your own, and the outbox, on an
//! [`sqlx::PgPool`], for services that already reach PostgreSQL through
//! sqlx and cannot share a tokio-postgres transaction.
//!
//! It keeps the same tables and migrations as the tokio-postgres backend
//! (the two can share one database), with the library's own migration
//! runner (sqlx's migrator stays yours), and runs the same statements (the
//! `.sql` files of that backend, included, not copied): every time is the
//! database's clock. How a statement is sent follows the store's
//! [`PgPooler`](crate::store::PgPooler) (see its `send` module).

mod backend;
mod db;
mod error;
#[cfg(feature = "flow")]
mod flow;
#[cfg(feature = "flow")]
mod journal_sql;
#[cfg(feature = "outbox")]
mod outbox;
mod records;
mod send;
mod transaction;

pub(crate) use backend::OPENER;
pub use db::SqlxPgDb;
pub use error::sqlx_error;
#[cfg(feature = "flow")]
pub use flow::SqlxStepFuture;
pub use records::SqlxPgRecords;
pub use transaction::{SqlxEffect, SqlxTx, sqlx_in_transaction};

//! PostgreSQL: a deadpool pool of tokio-postgres connections, the records
//! store, the outbox and the migrations of the library's tables.
//!
//! Every direct connection starts with `lock_timeout` and `statement_timeout`
//! set in its startup packet (no per-request `SET`), and hot statements are
//! prepared once per connection (`prepare_cached`), so a claim or a replay
//! costs one round trip in the common case. Behind a
//! transaction pooler ([`PgPooler::Transaction`](crate::store::PgPooler::Transaction)) no statement depends on
//! the session: all are unnamed (`query_typed`, still one round trip).
//! Its `send` module is the one place that decides how a statement goes.
//!
//! Everything that touches the library's tables is reached through the
//! store ([`PgDb`], or the [`PgTx`] a transaction's effect receives), so it
//! uses the store's [`Tables`](crate::store::Tables): no function here picks
//! the default names on its own.

mod backend;
mod conninfo;
mod db;
mod error;
#[cfg(feature = "flow")]
pub(crate) mod flow;
mod in_transaction;
#[cfg(feature = "flow")]
mod journal;
#[cfg(feature = "outbox")]
mod outbox;
mod pooler;
mod records;
mod send;
mod statements;
mod tls;
mod transaction;

pub(crate) use backend::OPENER;
pub use db::PgDb;
pub use error::db_error;
#[cfg(feature = "flow")]
pub use flow::PgStepFuture;
pub use in_transaction::pg_in_transaction;
pub use records::{PgRecords, read_from_row};
pub use send::{Param, execute_in, query_in};
pub use transaction::{PgEffect, PgResponseFuture, PgTx, run_in_transaction};

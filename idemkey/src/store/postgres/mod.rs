//! PostgreSQL: a deadpool pool of tokio-postgres connections, the records
//! store, the outbox and the migrations of the library's tables.
//!
//! Every direct connection starts with `lock_timeout` and `statement_timeout`
//! set in its startup packet (no per-request `SET`), and hot statements are
//! prepared once per connection (`prepare_cached`), so a claim or a replay
//! costs one round trip in the common case. Behind a
//! transaction pooler ([`PgPooler::Transaction`](crate::store::PgPooler::Transaction)) no statement depends on
//! the session: all are unnamed (`query_typed`, still one round trip).

mod conninfo;
mod db;
mod error;
#[cfg(feature = "flow")]
pub(crate) mod flow;
#[cfg(feature = "outbox")]
mod outbox;
mod pooler;
mod records;
mod statements;
mod tls;
mod transaction;

pub(crate) use conninfo::is_key_value;
pub use db::PgDb;
pub use error::db_error;
#[cfg(feature = "flow")]
pub(crate) use flow::PgJournal;
#[cfg(feature = "outbox")]
pub use outbox::enqueue;
pub use records::{PgRecords, read_from_row};
pub use transaction::{run_in_transaction, set_lock_timeout};

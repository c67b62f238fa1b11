//! The flags that say where the data lives, shared by every command.

use clap::Args;

use crate::db::PgPooler;

/// Where the data lives.
#[derive(Clone, Debug, Args)]
pub struct DatabaseArgs {
    /// postgres://user@host:5432/db (TLS: ?sslmode=verify-full&sslrootcert=FILE,
    /// as in libpq) or sqlite://PATH; default sqlite://idemkey.db in the
    /// working directory.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// PostgreSQL only: `transaction` behind a pooler in transaction mode
    /// (PgBouncer's pool_mode = transaction); the timeouts then come from
    /// the role's settings (docs/pgbouncer.md).
    #[arg(long, env = "IDEMKEY_PG_POOLER", value_enum, default_value_t = PgPooler::None)]
    pub pg_pooler: PgPooler,
}

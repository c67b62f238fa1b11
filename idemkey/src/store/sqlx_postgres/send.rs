//! How this store sends a statement, decided from its
//! [`PgPooler`] as the tokio-postgres backend's `send.rs` and `pooler.rs`
//! decide:
//! - directly (or through a session pooler), a statement is named and
//!   cached per connection by sqlx (`persistent(true)`): parsed and
//!   planned once, then one round trip;
//! - behind a transaction pooler (PgBouncer `pool_mode = transaction`),
//!   nothing may outlive a transaction: every statement is unnamed
//!   (`persistent(false)`; the store's own pool also has no statement
//!   cache). sqlx sends an unnamed statement in two round trips (parse,
//!   then bind and execute), each ended by a `Sync`: outside a transaction
//!   the pooler may hand the second to another server connection, so on
//!   the pool each call runs in a transaction of its own ([`Session`]),
//!   which keeps one server connection throughout.

use std::borrow::Cow;
use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, PgConnection, PgPool, Postgres, SqlSafeStr, SqlStr, Transaction};

use super::error::sqlx_error;
use crate::store::{PgPooler, StoreError, Tables};

/// `text` (written with the default table names) in `tables`' names,
/// ready to send and cheap to clone.
pub(super) fn rendered(tables: &Tables, text: &'static str) -> SqlStr {
    match tables.render_static(text) {
        Cow::Borrowed(text) => text.into_sql_str(),
        Cow::Owned(text) => AssertSqlSafe(Arc::<str>::from(text)).into_sql_str(),
    }
}

/// A query of `sql`: named and cached per connection when `persistent`,
/// unnamed otherwise (see the module docs).
pub(super) fn query(sql: &SqlStr, persistent: bool) -> Query<'static, Postgres, PgArguments> {
    sqlx::query(sql.clone()).persistent(persistent)
}

/// Whether statements may be named and cached per connection.
pub(super) fn persistent(pooler: PgPooler) -> bool {
    pooler == PgPooler::None
}

/// A connection of the pool for one call: the connection itself on a
/// direct path, a transaction of it behind a transaction pooler (see the
/// module docs). Dropped without [`Session::finish`], a transaction rolls
/// back.
pub(super) enum Session {
    Direct(PoolConnection<Postgres>),
    Pinned(Transaction<'static, Postgres>),
}

impl Session {
    pub(super) async fn open(pool: &PgPool, pooler: PgPooler) -> Result<Self, StoreError> {
        Ok(match pooler {
            PgPooler::None => Self::Direct(pool.acquire().await.map_err(sqlx_error)?),
            PgPooler::Transaction => Self::Pinned(pool.begin().await.map_err(sqlx_error)?),
        })
    }

    pub(super) fn conn(&mut self) -> &mut PgConnection {
        match self {
            Self::Direct(conn) => conn,
            Self::Pinned(tx) => tx,
        }
    }

    /// Commits the call's transaction, if it has one.
    pub(super) async fn finish(self) -> Result<(), StoreError> {
        match self {
            Self::Direct(_) => Ok(()),
            Self::Pinned(tx) => tx.commit().await.map_err(sqlx_error),
        }
    }
}

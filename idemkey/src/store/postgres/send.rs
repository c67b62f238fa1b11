//! How a statement is sent to PostgreSQL: the **one place** that decides
//! it, from the store's [`PgPooler`].
//!
//! - On one of the pool's own connections with nothing between
//!   ([`PgPooler::None`]): prepared once per connection (deadpool's
//!   statement cache), then one round trip with nothing to parse or plan.
//! - Behind a transaction pooler ([`PgPooler::Transaction`]), and on an
//!   open transaction or a client that is not the pool's: unnamed, with its
//!   parameter types (`query_typed`, parse + bind + execute in one round
//!   trip). A named statement lives on one server connection, and a pooler
//!   in transaction mode may run the next transaction, or the next message
//!   of an autocommit statement, on another: PgBouncer 1.18 then answers
//!   `prepared statement "s7" does not exist` or `already exists`.
//!
//! The rule, checked by `scripts/test.d/16-unnamed-statements.sh`: outside
//! this file, no PostgreSQL code of the library or the order service calls
//! the driver's forms that name a statement (`query`, `query_one`,
//! `query_opt`, `query_raw`, `execute`, `prepare*`); they go through
//! [`PgDb::query_pooled`], [`PgDb::execute_pooled`], [`query_in`] or [`execute_in`] (the
//! unnamed `*_typed` forms and `batch_execute` are allowed everywhere).

use deadpool_postgres::{ClientWrapper, Object};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

use super::db::PgDb;
use crate::store::PgPooler;

/// A parameter with its type: what an unnamed statement needs to be sent
/// without a separate prepare.
pub type Param<'a> = (&'a (dyn ToSql + Sync), Type);

impl PgDb {
    /// `sql`'s rows on `conn`, one of this store's own connections
    /// ([`PgDb::client`]): prepared once per connection on a direct path,
    /// unnamed behind a transaction pooler. The driver's error is returned
    /// as is, for a caller that looks at it (e.g. a constraint's name).
    pub async fn query_pooled(
        &self,
        conn: &Object,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let client: &tokio_postgres::Client = conn;
        rows(self.cache(conn), client, sql, params).await
    }

    /// [`PgDb::query_pooled`] for a statement that returns no rows: how many it
    /// changed.
    pub async fn execute_pooled(
        &self,
        conn: &Object,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<u64, tokio_postgres::Error> {
        let client: &tokio_postgres::Client = conn;
        changed(self.cache(conn), client, sql, params).await
    }

    /// The connection's statement cache, where a named statement lives as
    /// long as the connection: only with no transaction pooler between.
    pub(super) fn cache<'a>(&self, conn: &'a Object) -> Option<&'a ClientWrapper> {
        (self.pooler() == PgPooler::None).then_some(&**conn)
    }
}

/// `sql`'s rows on an open transaction (or any client that is not one of
/// the pool's own connections): always unnamed, so it behaves the same
/// behind a transaction pooler.
pub async fn query_in(
    client: &(impl GenericClient + Sync),
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    client.query_typed(sql, params).await
}

/// [`query_in`] for a statement that returns no rows: how many it changed.
pub async fn execute_in(
    client: &(impl GenericClient + Sync),
    sql: &str,
    params: &[Param<'_>],
) -> Result<u64, tokio_postgres::Error> {
    client.execute_typed(sql, params).await
}

/// `sql`'s rows on `client`, prepared in `cache` when there is one.
pub(super) async fn rows<C: GenericClient + Sync>(
    cache: Option<&ClientWrapper>,
    client: &C,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    match cache {
        Some(conn) => {
            let (statement, values) = prepared(conn, sql, params).await?;
            conn.query(&statement, &values).await
        }
        None => client.query_typed(sql, params).await,
    }
}

/// [`rows`] for a statement that returns none.
pub(super) async fn changed<C: GenericClient + Sync>(
    cache: Option<&ClientWrapper>,
    client: &C,
    sql: &str,
    params: &[Param<'_>],
) -> Result<u64, tokio_postgres::Error> {
    match cache {
        Some(conn) => {
            let (statement, values) = prepared(conn, sql, params).await?;
            conn.execute(&statement, &values).await
        }
        None => client.execute_typed(sql, params).await,
    }
}

/// `sql` prepared on `conn` (once per connection and parameter types) and
/// the values to bind to it.
async fn prepared<'p>(
    conn: &ClientWrapper,
    sql: &str,
    params: &[Param<'p>],
) -> Result<(tokio_postgres::Statement, Vec<&'p (dyn ToSql + Sync)>), tokio_postgres::Error> {
    let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
    let statement = conn.prepare_typed_cached(sql, &types).await?;
    Ok((statement, params.iter().map(|(value, _)| *value).collect()))
}

//! Running behind a connection pooler in transaction mode (PgBouncer's
//! `pool_mode = transaction`), where consecutive transactions of one client
//! connection may run on different server connections.
//!
//! What idemkey needs from a session, and how each survives the pooler:
//! - statements: on a direct connection the order route and the pool's
//!   records store prepare their statements once per connection (planning
//!   costs more than running them); behind a transaction pooler every statement is
//!   unnamed (`query_typed`, parse + bind + execute in one round trip),
//!   since a named one lives on one server connection and PgBouncer 1.18
//!   does not track them (`prepared statement "s5" does not exist`);
//! - the migration lock: `pg_advisory_xact_lock`, released by the
//!   transaction that holds it, never a session-level advisory lock;
//! - `lock_timeout` and `statement_timeout`: sent as the startup parameter
//!   `options` on a direct connection; PgBouncer refuses that parameter
//!   (`unsupported startup parameter: options`) or, listed in
//!   `ignore_startup_parameters`, drops it silently. Behind a pooler they
//!   come from the role's or database's settings, which this module checks.

use deadpool_postgres::PoolError;
use tokio_postgres::Client;
use tracing::{info, warn};

use super::error::{db_error, pool_error};
use crate::store::{PgPooler, StoreError, StoreSettings as PgSettings};

/// The startup `options` of every session, where the connection path lets
/// them through: the timeouts, `enable_seqscan=off` and
/// `plan_cache_mode=force_generic_plan`.
///
/// Every statement idemkey runs finds its rows through an index (the
/// records' primary key, the trim's partial indexes, the orders' account
/// index), and the order route's statements are prepared once per
/// connection. Prepared on tables whose statistics say "empty" (a new
/// deployment, or a trim that emptied them, then ANALYZE), PostgreSQL caches
/// a generic plan that scans `idempotency_records` sequentially, and keeps
/// it until the next ANALYZE: one full scan per order, quadratic in the
/// table's size. With sequential scans off the planner takes an index
/// whatever the statistics say; that it also takes the index's leading
/// column is the statements' part: they bind the caller's account as a
/// scalar subquery, never as a join column (see `create_order.sql`). Left
/// to choose (`auto`), a connection
/// decides at a statement's sixth execution, from the statistics of that
/// moment, between that generic plan and planning every execution anew;
/// for the fused order statement the second costs PostgreSQL twice the CPU
/// per order (1.2 against 0.6 ms, pgbench). So the generic plan is forced:
/// no statement of idemkey needs its values to find its index (partial
/// indexes are matched by constants in the SQL, never by parameters). Behind a
/// transaction pooler every statement is unnamed and planned with its
/// values, so no plan is cached there.
pub(super) fn startup_options(settings: &PgSettings) -> Option<String> {
    (settings.pooler == PgPooler::None).then(|| {
        format!(
            "-c lock_timeout={} -c statement_timeout={} -c enable_seqscan=off \
             -c plan_cache_mode=force_generic_plan",
            settings.lock_timeout.as_millis(),
            settings.statement_timeout.as_millis()
        )
    })
}

/// The first connection's failure as a [`StoreError`], with the advice a
/// pooler's refusal calls for: PgBouncer refuses the startup parameter
/// `options` that a direct connection sends (`unsupported startup
/// parameter: options`), so a user who forgot `--pg-pooler transaction`
/// is told to use it. (Recognised by its text: PgBouncer's SQLSTATE,
/// `08P01`, stands for every protocol violation.)
pub(super) fn connect_error(err: PoolError, settings: &PgSettings) -> StoreError {
    if settings.pooler == PgPooler::None
        && let PoolError::Backend(e) = &err
        && let Some(db) = e.as_db_error()
        && db.message().contains("unsupported startup parameter")
    {
        return StoreError::Unavailable(format!(
            "{}: {}: a connection pooler (PgBouncer in transaction mode) refuses the timeouts \
             a direct connection sends; behind it, use --pg-pooler transaction \
             (StoreSettings::pooler = PgPooler::Transaction) and set the timeouts on the role \
             (docs/pgbouncer.md)",
            db.code().code(),
            db.message(),
        ));
    }
    pool_error(err)
}

/// Checks at start that the sessions get bounded timeouts. Direct: that
/// the startup `options` arrived (a pooler told to ignore them drops them
/// silently). Behind a transaction pooler: refuses to go on when the
/// database leaves either timeout off (a lock or statement could then wait
/// forever), and says so when its values differ from the configured ones
/// (those are not sent and do not apply).
pub(super) async fn check_timeouts(
    client: &Client,
    settings: &PgSettings,
) -> Result<(), StoreError> {
    let row = client
        .query_typed_one(
            "SELECT current_setting('lock_timeout') AS lock_timeout,
                    current_setting('statement_timeout') AS statement_timeout,
                    current_user AS role, current_database() AS database,
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout') AS lock_ms,
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout')
                        AS statement_ms",
            &[],
        )
        .await
        .map_err(db_error)?;
    let text = |name: &str| row.try_get::<_, String>(name).map_err(db_error);
    let ms = |name: &str| row.try_get::<_, i64>(name).map_err(db_error);
    let (lock_ms, statement_ms) = (ms("lock_ms")?, ms("statement_ms")?);
    let (role, database) = (text("role")?, text("database")?);
    // Compared in whole milliseconds, the unit both are sent in.
    let configured = u128::from(lock_ms.unsigned_abs()) == settings.lock_timeout.as_millis()
        && u128::from(statement_ms.unsigned_abs()) == settings.statement_timeout.as_millis();
    if settings.pooler == PgPooler::None {
        if configured {
            return Ok(());
        }
        return Err(StoreError::Unavailable(format!(
            "the timeouts sent at connection (startup parameter options) did not reach \
             PostgreSQL: it reports lock_timeout = {} and statement_timeout = {}; a pooler \
             dropped them (PgBouncer's ignore_startup_parameters): behind a pooler, use \
             --pg-pooler transaction (docs/pgbouncer.md)",
            text("lock_timeout")?,
            text("statement_timeout")?,
        )));
    }
    if lock_ms == 0 || statement_ms == 0 {
        return Err(StoreError::Unavailable(format!(
            "behind a transaction pooler (--pg-pooler transaction) the timeouts cannot be sent \
             per connection, and the database leaves lock_timeout = {} and statement_timeout = {} \
             (0 waits forever); set them on the role, directly on PostgreSQL: ALTER ROLE \"{role}\" \
             IN DATABASE \"{database}\" SET lock_timeout = '{}ms'; ALTER ROLE \"{role}\" IN \
             DATABASE \"{database}\" SET statement_timeout = '{}ms'; then let the pooler reconnect \
             (PgBouncer: RECONNECT)",
            text("lock_timeout")?,
            text("statement_timeout")?,
            settings.lock_timeout.as_millis(),
            settings.statement_timeout.as_millis(),
        )));
    }
    if !configured {
        warn!(
            database_lock_timeout_ms = lock_ms,
            database_statement_timeout_ms = statement_ms,
            configured_lock_timeout_ms = settings.lock_timeout.as_millis(),
            configured_statement_timeout_ms = settings.statement_timeout.as_millis(),
            "behind a transaction pooler the database's timeouts apply, not the configured ones"
        );
    } else {
        info!(
            lock_timeout_ms = lock_ms,
            statement_timeout_ms = statement_ms,
            "behind a transaction pooler: the role's timeouts apply"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_sessions_get_the_planner_settings_and_pooled_ones_nothing() {
        let direct = startup_options(&PgSettings::default()).expect("options on a direct path");
        for setting in ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"] {
            assert!(direct.contains(&format!("-c {setting}")), "{direct}");
        }
        let pooled = PgSettings {
            pooler: PgPooler::Transaction,
            ..PgSettings::default()
        };
        assert_eq!(startup_options(&pooled), None);
    }
}

//! The migration runner on SQLite: the bookkeeping table, adoption of
//! tables an earlier version made, and what is pending.

use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};
use tracing::info;

use super::connection::sqlite_error;
use crate::error::StoreError;
use crate::store::Tables;
use crate::store::migrations::{self, Migration};

/// The migrations of `known` that `conn`'s file has not applied.
pub(super) fn pending_in(
    conn: &Connection,
    tables: &Tables,
    known: &[Migration],
) -> Result<Vec<String>, StoreError> {
    let applied = applied_in(conn, &tables.migrations()).map_err(sqlite_error)?;
    Ok(known
        .iter()
        .filter(|m| {
            !applied
                .iter()
                .any(|(c, v)| c == m.component && *v == m.version)
        })
        .map(Migration::label)
        .collect())
}

/// The `(component, version)` pairs applied; none before the bookkeeping
/// table exists.
fn applied_in(conn: &Connection, book: &str) -> rusqlite::Result<Vec<(String, i32)>> {
    let exists = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [book],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(&format!("SELECT component, version FROM {book}"))?;
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect()
}

/// Applies `list`'s pending migrations in one `BEGIN IMMEDIATE` transaction.
pub(super) fn migrate_in(
    conn: &mut Connection,
    tables: &Tables,
    list: &[Migration],
) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let book = tables.migrations();
    tx.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {book} (
             component TEXT NOT NULL,
             version INTEGER NOT NULL,
             name TEXT NOT NULL,
             adopted INTEGER NOT NULL DEFAULT 0,
             applied_at INTEGER NOT NULL DEFAULT (unixepoch()),
             PRIMARY KEY (component, version))"
    ))?;
    let applied = applied_in(&tx, &book)?;
    for m in list {
        if applied
            .iter()
            .any(|(c, v)| c == m.component && *v == m.version)
        {
            continue;
        }
        let adopted = match m.adopt {
            Some(adopt) => adoptable(&tx, tables, adopt)?,
            None => false,
        };
        if !adopted {
            tx.execute_batch(&tables.render(m.sql))?;
        }
        tx.execute(
            &format!(
                "INSERT INTO {book} (component, version, name, adopted) VALUES (?1, ?2, ?3, ?4)"
            ),
            params![m.component, m.version, m.name, adopted],
        )?;
        info!(
            migration = m.label(),
            name = m.name,
            adopted,
            "applied SQLite migration"
        );
    }
    tx.commit()
}

/// Whether `adopt`'s table exists with its marker column; a table of that
/// name without it is someone else's.
fn adoptable(
    conn: &Connection,
    tables: &Tables,
    adopt: migrations::Adopt,
) -> rusqlite::Result<bool> {
    let table = tables.render(adopt.table);
    let exists = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [&table],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !exists {
        return Ok(false);
    }
    let marked = conn
        .query_row(
            "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
            params![table, adopt.column],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if marked {
        Ok(true)
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(format!(
                "table {table} exists but was not made by idemkey: choose a table prefix"
            )),
        ))
    }
}

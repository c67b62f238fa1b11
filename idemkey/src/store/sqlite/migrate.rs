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

/// Whether `adopt`'s table exists as the migration would have made it: a
/// table (not a view) with every column of [`migrations::Adopt::columns`]
/// and the primary key it names. Anything else of that name is someone
/// else's.
fn adoptable(
    conn: &Connection,
    tables: &Tables,
    adopt: migrations::Adopt,
) -> rusqlite::Result<bool> {
    let table = tables.render(adopt.table);
    let Some(kind) = conn
        .query_row(
            "SELECT type FROM sqlite_master WHERE name = ?1 AND type IN ('table', 'view')",
            [&table],
            |row| row.get::<_, String>(0),
        )
        .optional()?
    else {
        return Ok(false);
    };
    let mut stmt = conn.prepare("SELECT name, pk FROM pragma_table_info(?1)")?;
    let info = stmt
        .query_map([&table], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut key: Vec<_> = info.iter().filter(|(_, pk)| *pk > 0).collect();
    key.sort_by_key(|(_, pk)| *pk);
    let key: Vec<String> = key.into_iter().map(|(name, _)| name.clone()).collect();
    let columns: Vec<String> = info.into_iter().map(|(name, _)| name).collect();
    match migrations::misfit(adopt, kind == "table", &columns, &key) {
        None => Ok(true),
        Some(why) => Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(format!(
                "{table} exists but is not the table idemkey makes ({why}): choose a table prefix"
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteDb;

    /// Whether SQLite's program for `sql` fills a temporary table (what an
    /// `IN` list of three or more constants costs each run).
    fn fills_a_temporary_table(conn: &Connection, sql: &str) -> bool {
        let mut stmt = conn.prepare(&format!("EXPLAIN {sql}")).expect("explain");
        let ops: Vec<String> = stmt
            .query_map([], |row| row.get(1))
            .expect("program")
            .collect::<Result<_, _>>()
            .expect("opcodes");
        ops.iter().any(|op| op == "OpenEphemeral")
    }

    const RECORD: &str = "INSERT INTO idempotency_records
        (scope, operation, key, fingerprint, claim, status, response_status, response_headers,
         response_body, created_at, replay_until)
        VALUES ('acct', 'POST /orders:v1', 'k1', zeroblob(32), zeroblob(16), 'completed', 201,
                '[]', X'7B7D', 1, 2)";
    const MESSAGE: &str = "INSERT INTO outbox
        (id, scope, operation, key, effect, resource_id, payload, available_at, created_at)
        VALUES (7, 'acct', 'POST /orders:v1', 'k1', 'charge', 'order-1', '{}', 1, 1)";

    const FLOW: &str = "INSERT INTO idemkey_flows
        (id, scope, operation, key, flow, state, position, input, created_at, updated_at)
        VALUES ('f1', 'acct', 'POST /purchases:v1', 'k1', 'purchase', 'running', 1, '{}', 1, 1)";
    const STEP: &str = "INSERT INTO idemkey_steps
        (scope, flow_id, idx, name, state, output, recorded_at)
        VALUES ('acct', 'f1', 0, 'reserve', 'done', '{}', 1)";

    /// A file of the first versions, with a record, a message and a flow
    /// with a step, keeps them all (the message its id) through the status
    /// checks' rebuild, whose tables still refuse an unknown status (and a
    /// step cascades with its flow) and whose inserts no longer fill a
    /// temporary table.
    #[test]
    fn the_status_checks_rebuild_keeps_rows_and_refuses_unknown_status() {
        let mut conn = Connection::open_in_memory().expect("open");
        // As every store's connection (`connection.rs`): the rebuild must
        // not cascade.
        conn.execute_batch("PRAGMA foreign_keys = ON")
            .expect("pragma");
        let tables = Tables::default();
        let all = SqliteDb::library_migrations();
        let first: Vec<Migration> = all.iter().filter(|m| m.version == 1).copied().collect();
        migrate_in(&mut conn, &tables, &first).expect("first versions");
        for insert in [RECORD, MESSAGE, FLOW, STEP] {
            assert!(fills_a_temporary_table(&conn, insert), "{insert}");
        }
        conn.execute_batch(&format!("{RECORD}; {MESSAGE}; {FLOW}; {STEP};"))
            .expect("rows");

        migrate_in(&mut conn, &tables, &all).expect("upgrade");
        assert!(
            pending_in(&conn, &tables, &all)
                .expect("pending")
                .is_empty()
        );
        let kept: (String, i64, Vec<u8>) = conn
            .query_row(
                "SELECT r.key, m.id, r.response_body FROM idempotency_records r
                 JOIN outbox m ON m.key = r.key",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .expect("the record and its message");
        assert_eq!(kept, ("k1".to_owned(), 7, b"{}".to_vec()));
        let step: String = conn
            .query_row(
                "SELECT f.flow || '/' || s.name FROM idemkey_flows f
                 JOIN idemkey_steps s ON s.scope = f.scope AND s.flow_id = f.id",
                [],
                |row| row.get(0),
            )
            .expect("the flow and its step");
        assert_eq!(step, "purchase/reserve");
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL
                 AND tbl_name IN ('idempotency_records', 'outbox', 'idemkey_flows')",
                [],
                |row| row.get(0),
            )
            .expect("indexes");
        assert_eq!(indexes, 9, "three indexes on each table");

        let fresh = RECORD.replace("'k1'", "'k2'");
        let message = MESSAGE.replace("(7,", "(8,");
        let flow = FLOW.replace("'f1'", "'f2'");
        let step = STEP.replace("'f1'", "'f2'");
        for insert in [&fresh, &message, &flow, &step] {
            assert!(!fills_a_temporary_table(&conn, insert), "{insert}");
        }
        for bad in [
            fresh.replace("'completed'", "'done'"),
            "UPDATE outbox SET status = 'lost' WHERE id = 7".to_owned(),
            "UPDATE idemkey_flows SET state = 'paused' WHERE id = 'f1'".to_owned(),
            "UPDATE idemkey_steps SET state = 'skipped' WHERE flow_id = 'f1'".to_owned(),
            STEP.replace("'f1', 0", "'no-such-flow', 0"),
        ] {
            let err = conn.execute_batch(&bad).expect_err("an unknown status");
            assert_eq!(
                err.sqlite_error_code(),
                Some(rusqlite::ErrorCode::ConstraintViolation),
                "{err}"
            );
        }
        conn.execute_batch(&format!("{fresh}; {message}; {flow}; {step};"))
            .expect("known statuses");
        // The step still belongs to its flow: it goes with it.
        conn.execute_batch("DELETE FROM idemkey_flows WHERE id = 'f1'")
            .expect("delete a flow");
        let steps: i64 = conn
            .query_row("SELECT count(*) FROM idemkey_steps", [], |row| row.get(0))
            .expect("steps");
        assert_eq!(steps, 1, "only the second flow's step is left");
    }
}

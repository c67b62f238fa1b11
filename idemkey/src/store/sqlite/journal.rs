//! The step journal's store on SQLite: a flow's execution row, its
//! position and its first transaction (the key's claim, the journal's
//! statements and the stored answer in one), as the flow runner reaches
//! them through [`JournalStore`].

use super::connection::sqlite_error;
use super::db::SqliteDb;
use super::flow::{CLOSE_WINDOW, SqliteJournal, load};
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey};
use crate::store::StoreError;
use crate::store::backend::BoxFuture;
use crate::store::flow::{FlowRow, NextMessage};
use crate::store::flow::{JournalStore, JournalWork, Recorded};
use crate::store::sqlite::connection::immediate;
use crate::store::sqlite::transaction::run_in_savepoint;
use crate::store::step::StepError;
use idemkey_core::Fingerprint;
use rusqlite::{OptionalExtension, params};
use uuid::Uuid;

const FIND: &str = "SELECT id FROM idemkey_flows WHERE scope = ?1 AND operation = ?2 AND key = ?3 \
                    ORDER BY created_at DESC, rowid DESC LIMIT 1";
const NEXT: &str = "SELECT status, attempts, last_error, \
     (attempts > 0 OR downstream_key IS NOT NULL) FROM outbox \
     WHERE scope = ?1 AND resource_id = ?2 AND effect = 'flow-step' \
       AND status IN ('pending', 'dead') ORDER BY id DESC LIMIT 1";
/// The next step due now: a backoff cut short (a live claim is left
/// alone), or a dead letter younger than ?3 ms sent back to pending with
/// its attempts kept (so the next one looks the effect up first).
const RESUME: &str = "UPDATE outbox SET available_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER), \
     status = 'pending', settled_at = NULL \
     WHERE scope = ?1 AND resource_id = ?2 AND effect = 'flow-step' \
       AND ((status = 'pending' \
             AND available_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) \
         OR (status = 'dead' \
             AND created_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?3))";

impl JournalStore for SqliteDb {
    fn flow_load<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<FlowRow>, StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let scope = scope.to_owned();
            self.with_reader(move |conn| load(conn, &tables, &scope, id))
                .await
        })
    }

    fn flow_find<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Uuid>, StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let args = (scope.to_owned(), operation.to_owned(), key.to_owned());
            self.with_reader(move |conn| {
                let id: Option<String> = conn
                    .prepare_cached(&tables.render_static(FIND))
                    .and_then(|mut stmt| {
                        stmt.query_row(params![args.0, args.1, args.2], |r| r.get(0))
                            .optional()
                    })
                    .map_err(sqlite_error)?;
                Ok(id.and_then(|id| Uuid::try_parse(&id).ok()))
            })
            .await
        })
    }

    fn flow_next<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<Option<NextMessage>, StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let scope = scope.to_owned();
            self.with_reader(move |conn| {
                conn.prepare_cached(&tables.render_static(NEXT))
                    .and_then(|mut stmt| {
                        stmt.query_row(params![scope, id.to_string()], |r| {
                            Ok(NextMessage {
                                status: r.get(0)?,
                                attempts: r.get(1)?,
                                last_error: r.get(2)?,
                                maybe_sent: r.get(3)?,
                            })
                        })
                        .optional()
                    })
                    .map_err(sqlite_error)
            })
            .await
        })
    }

    fn flow_resume<'a>(
        &'a self,
        scope: &'a str,
        id: Uuid,
        revive_within: std::time::Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let scope = scope.to_owned();
            let within = crate::duration::millis(revive_within);
            self.with_conn(move |conn| {
                conn.prepare_cached(&tables.render_static(RESUME))
                    .and_then(|mut stmt| stmt.execute(params![scope, id.to_string(), within]))
                    .map(|n| n as u64)
                    .map_err(sqlite_error)
            })
            .await
            .map(drop)
        })
    }

    /// The window of execution `id`'s record, ended in its first
    /// transaction, counted from now.
    fn flow_close_window<'a>(
        &'a self,
        scope: &'a str,
        operation: &'a str,
        key: &'a str,
        id: Uuid,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let tables = self.tables().clone();
            let args = (scope.to_owned(), operation.to_owned(), key.to_owned());
            self.with_conn(move |conn| {
                conn.prepare_cached(&tables.render_static(CLOSE_WINDOW))
                    .and_then(|mut stmt| {
                        stmt.execute(params![args.0, args.1, args.2, id.to_string()])
                    })
                    .map(|n| n as u64)
                    .map_err(sqlite_error)
            })
            .await
            .map(drop)
        })
    }

    fn journal_start<'a>(
        &'a self,
        key: &'a RecordKey,
        fingerprint: Fingerprint,
        policy: Policy,
        _lock_timeout: Option<std::time::Duration>,
        work: Box<dyn JournalWork<Result<Done<FlowRow>, StepError>>>,
    ) -> BoxFuture<'a, Result<Outcome<FlowRow>, idempotency::Error<StepError>>> {
        let (key, store) = (key.clone(), self.clone());
        // Group-committed, as a new order is: its savepoint is kept only
        // when the first steps ran and the key's answer is stored, and the
        // caller is answered once the batch's one commit (one fsync) is
        // durable; the writer runs one transaction at a time either way.
        Box::pin(async move {
            self.group_commit(move |tx| {
                Ok(run_in_savepoint(
                    &store,
                    tx,
                    &key,
                    fingerprint,
                    &policy,
                    |tx| {
                        let j = SqliteJournal {
                            conn: tx.connection(),
                            tables: tx.tables(),
                        };
                        pollster::block_on(work.on_local(&j))
                    },
                ))
            })
            .await?
        })
    }

    fn journal_record(
        &self,
        work: Box<dyn JournalWork<Result<Recorded, StepError>>>,
    ) -> BoxFuture<'_, Result<Result<Recorded, StepError>, StoreError>> {
        let tables = self.tables().clone();
        Box::pin(self.with_conn(move |conn| {
            let tx = immediate(conn)?;
            let j = SqliteJournal {
                conn: &tx,
                tables: &tables,
            };
            let result = pollster::block_on(work.on_local(&j));
            if matches!(result, Ok(Recorded::Moved)) {
                tx.commit().map_err(sqlite_error)?;
            } else {
                tx.rollback().map_err(sqlite_error)?;
            }
            Ok(result)
        }))
    }
}

//! The engine inside one SQLite `BEGIN IMMEDIATE` transaction: the claim,
//! the caller's effect and the stored response commit together, or nothing
//! does.

use idemkey_core::Fingerprint;
use rusqlite::Connection;

use super::{SqliteRecords, immediate, sqlite_error};
use crate::idempotency::{self, Done, Outcome, Policy, RecordKey};

/// Runs [`idempotency::run`] in a new `BEGIN IMMEDIATE` transaction of
/// `conn`, `effect` receiving the open transaction. Blocking: call it on a
/// blocking thread. Commits only when the effect ran and its response is
/// stored; a replay, a rejection, a temporary status or an error rolls
/// everything back.
pub fn run_in_transaction<T, E, F>(
    conn: &mut Connection,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    F: FnOnce(&rusqlite::Transaction<'_>) -> Result<Done<T>, E>,
{
    let tx = immediate(conn)?;
    let open = &tx;
    // Every step is synchronous (SQLite is local and the transaction holds
    // the write lock), so the engine's future completes without waiting.
    let outcome = pollster::block_on(idempotency::run(
        &SqliteRecords(open),
        key,
        fingerprint,
        policy,
        async move || effect(open),
    ))?;
    if matches!(outcome, Outcome::Executed { stored: true, .. }) {
        tx.commit().map_err(sqlite_error)?;
    } else {
        tx.rollback().map_err(sqlite_error)?;
    }
    Ok(outcome)
}

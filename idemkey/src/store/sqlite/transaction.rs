//! The engine inside one SQLite `BEGIN IMMEDIATE` transaction (or one
//! savepoint of a batch's transaction): the claim, the caller's effect and
//! the stored response commit together, or nothing does.

use std::ops::Deref;

use idemkey_core::Fingerprint;
use rusqlite::Connection;

use super::connection::{immediate, sqlite_error};
use super::records::SqliteRecords;
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
    let outcome = run_engine(&tx, key, fingerprint, policy, effect)?;
    if matches!(outcome, Outcome::Executed { stored: true, .. }) {
        tx.commit().map_err(sqlite_error)?;
    } else {
        tx.rollback().map_err(sqlite_error)?;
    }
    Ok(outcome)
}

/// [`run_in_transaction`] inside a savepoint of the open transaction `tx`
/// (a batch of `group_commit`): the savepoint is released only when
/// the effect ran and its response is stored, and rolled back otherwise, so
/// one order's failure leaves its batch-mates' work in place.
pub fn run_in_savepoint<T, E, F>(
    tx: &mut rusqlite::Transaction<'_>,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    F: FnOnce(&Connection) -> Result<Done<T>, E>,
{
    let savepoint = tx.savepoint().map_err(sqlite_error)?;
    // Dropped on an error: rolled back to and released.
    let outcome = run_engine(&savepoint, key, fingerprint, policy, |sp| effect(sp))?;
    if matches!(outcome, Outcome::Executed { stored: true, .. }) {
        savepoint.commit().map_err(sqlite_error)?;
    } else {
        let mut savepoint = savepoint;
        savepoint.rollback().map_err(sqlite_error)?;
    }
    Ok(outcome)
}

/// The engine on an open transaction or savepoint `open`. Every step is
/// synchronous (SQLite is local and the transaction holds the write lock),
/// so the engine's future completes without waiting.
fn run_engine<'c, C, T, E, F>(
    open: &'c C,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    effect: F,
) -> Result<Outcome<T>, idempotency::Error<E>>
where
    C: Deref<Target = Connection>,
    F: FnOnce(&'c C) -> Result<Done<T>, E>,
{
    pollster::block_on(idempotency::run(
        &SqliteRecords::new(open),
        key,
        fingerprint,
        policy,
        async move || effect(open),
    ))
}

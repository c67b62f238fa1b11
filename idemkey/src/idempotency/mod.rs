//! One idempotency engine for every front end.
//!
//! `in_transaction` (the caller's effect in the records' transaction), the
//! tower `layer` (lease mode, effects outside the database) and an
//! application's own route are thin front ends: each reads its request,
//! builds a [`RecordKey`] and a fingerprint, and calls [`run`] (or, with a
//! read already in hand from a fused statement or a cache, [`answer_for`]). The engine claims the key through a
//! [`Records`] store, asks [`idemkey_core::decide`] what an existing record
//! means (at the store's clock), takes over or answers, runs the effect,
//! and stores or releases its response. Stores live under [`crate::store`].

mod engine;
mod records;
mod response;

pub use engine::{
    Answer, DEFAULT_RETRY_AFTER, Done, Error, Mode, Outcome, Policy, Source, Step, answer_for,
    response_not_stored, run, step,
};
pub use records::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, Scope, TrimReport, state_name,
    stored_from_columns,
};
pub use response::StoredResponse;

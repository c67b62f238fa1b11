//! The records protocol every store implements: one row per
//! `(scope, operation, key)`, guarded by the primary key, and every write
//! after the first guarded by the row's [`ClaimToken`] **and** its state, so
//! a compare-and-swap decided on a row can never overwrite that row once it
//! has changed (completed, trimmed, taken over by someone else).
//!
//! Time is the store's: a claim's lease, a record's replay window and the
//! instant [`Read::now`] that decisions are made at all come from the
//! database's clock inside the statement, never from an application
//! server's clock, so servers whose clocks disagree still agree on every
//! lease and window.

use std::future::Future;
use std::time::Duration;

use idemkey_core::{Fingerprint, IdempotencyKey, OperationId, Stored, UnixMillis};
use uuid::Uuid;

use super::StoredResponse;
use crate::store::StoreError;

/// Whose records these are: an authenticated account, or a tenant a
/// front end derived from authentication. Keys of two scopes never meet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope(String);

impl Scope {
    /// A scope named by the caller's front end (e.g. a tenant id from an
    /// authentication layer); empty names are refused.
    pub fn new(name: impl Into<String>) -> Option<Self> {
        let name = name.into();
        (!name.is_empty()).then_some(Self(name))
    }

    /// The scope of an account known by its UUID (its hyphenated form).
    pub fn account(account: Uuid) -> Self {
        Self(account.to_string())
    }

    /// The name as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The primary key of a record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordKey {
    /// Whose record it is.
    pub scope: Scope,
    /// The versioned operation the key was sent to.
    pub operation: OperationId,
    /// The client's key.
    pub key: IdempotencyKey,
}

/// The identity of one claim. A new one is drawn for every claim and
/// take-over, so a request whose claim was taken over can no longer
/// complete or release the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimToken(pub Uuid);

impl ClaimToken {
    /// A fresh random token.
    pub fn random() -> Self {
        Self(Uuid::new_v4())
    }
}

/// A claim to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewClaim {
    /// The claim's identity.
    pub token: ClaimToken,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// How long, from the store's clock, before another request may take
    /// the claim over.
    pub lease: Duration,
    /// The replay window the completion will give: when a store's
    /// maintenance first needs to look at the record.
    pub replay_ttl: Duration,
}

/// One record as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record in the core's terms, ready for [`idemkey_core::decide`].
    pub stored: Stored,
    /// The claim that last wrote the row.
    pub token: ClaimToken,
    /// The stored response (completed records only).
    pub response: Option<StoredResponse>,
    /// The resource the operation created, if the front end named one.
    pub resource_id: Option<String>,
    /// When the record was claimed (store clock).
    pub created_at: UnixMillis,
    /// End of the replay window (completed records and tombstones).
    pub replay_until: Option<UnixMillis>,
}

/// The state column of a record, as the guards of [`Records::take_over`]
/// compare it.
pub const fn state_name(stored: &Stored) -> &'static str {
    match stored {
        Stored::Nothing => "nothing",
        Stored::InFlight { .. } => "in_flight",
        Stored::Completed { .. } => "completed",
        Stored::Tombstone { .. } => "tombstone",
    }
}

/// Builds the core's view of a record from its columns.
pub fn stored_from_columns(
    state: &str,
    fingerprint: Fingerprint,
    lease_until: Option<UnixMillis>,
    replay_until: Option<UnixMillis>,
) -> Stored {
    match (state, lease_until, replay_until) {
        ("in_flight", Some(lease_until), _) => Stored::InFlight {
            fingerprint,
            lease_until,
        },
        ("completed", _, Some(replay_until)) => Stored::Completed {
            fingerprint,
            replay_until,
        },
        // A tombstone, or a row the schema forbids: keep only what is
        // certain, the fingerprint.
        _ => Stored::Tombstone { fingerprint },
    }
}

/// What a key holds, and the store's clock when it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The store's clock at the read: the instant decisions are made at.
    pub now: UnixMillis,
    /// The record, if any.
    pub record: Option<Record>,
}

/// What [`Records::claim`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// The new claim holds the key.
    Won,
    /// The key is taken; this is what it holds.
    Taken(Read),
}

/// How much one pass of [`Records::trim`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Completed records whose window is over, turned into tombstones.
    pub trimmed: u64,
    /// Tombstones (and abandoned claims) past their retention, deleted;
    /// with flows, also the executions that ended longer ago than it.
    pub deleted: u64,
    /// Records looked at too early and given a later time to be looked at
    /// again (stores that schedule their maintenance, as PostgreSQL's).
    pub rescheduled: u64,
}

/// Storage of idempotency records. Implemented by each backend for its
/// connection pool (each call its own short transaction: lease mode) and
/// for an open transaction (the caller's effect in the same transaction).
///
/// Every method answers from the store's clock. A backend keeps these
/// promises, which the integration suite checks on each backend:
/// - [`claim`](Records::claim) inserts an in-flight row, or reads the row
///   that holds the key (in a fresh snapshot, so a concurrent claimant's
///   committed row is seen);
/// - [`take_over`](Records::take_over), [`complete`](Records::complete) and
///   [`release`](Records::release) change the row only while it still
///   carries the given claim token and the state the caller decided on,
///   and say whether they did.
///
/// An application may implement it too, e.g. to wrap another store. This
/// wrapper counts the calls and delegates each of the six methods (the
/// default [`expires_records`](Records::expires_records) can be left out,
/// or delegated as well when the inner store may be Redis):
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
///
/// use idemkey::StoreError;
/// use idemkey::idempotency::{
///     ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse,
///     TrimReport,
/// };
///
/// /// Any store, with its calls counted.
/// #[derive(Clone)]
/// struct Counting<R> {
///     inner: R,
///     calls: Arc<AtomicUsize>,
/// }
///
/// impl<R> Counting<R> {
///     fn count(&self) {
///         self.calls.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// impl<R: Records + Sync> Records for Counting<R> {
///     async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
///         self.count();
///         self.inner.claim(key, claim).await
///     }
///
///     async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
///         self.count();
///         self.inner.read(key).await
///     }
///
///     async fn take_over(
///         &self,
///         key: &RecordKey,
///         previous: &Record,
///         claim: &NewClaim,
///     ) -> Result<bool, StoreError> {
///         self.count();
///         self.inner.take_over(key, previous, claim).await
///     }
///
///     async fn complete(
///         &self,
///         key: &RecordKey,
///         token: ClaimToken,
///         response: &StoredResponse,
///         replay_ttl: Duration,
///         resource_id: Option<&str>,
///     ) -> Result<bool, StoreError> {
///         self.count();
///         self.inner.complete(key, token, response, replay_ttl, resource_id).await
///     }
///
///     async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
///         self.count();
///         self.inner.release(key, token).await
///     }
///
///     async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
///         self.count();
///         self.inner.trim(retention, batch).await
///     }
/// }
///
/// // What the layer asks of its store: a wrapper of any such store is one.
/// fn layer_ready<R: Records + Clone + Send + Sync + 'static>() {}
/// fn wraps<R: Records + Clone + Send + Sync + 'static>() {
///     layer_ready::<Counting<R>>();
/// }
/// ```
///
/// With the `layer` feature, the wrapper serves the idempotency layer as
/// any store does: `IdempotencyLayer::new(Counting { inner: db, calls },
/// |_| Some("tenant".into()))`, over a `SqliteDb` `db` for instance.
pub trait Records {
    /// Inserts an in-flight claim, or reads what holds the key.
    fn claim(
        &self,
        key: &RecordKey,
        claim: &NewClaim,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send;

    /// What the key holds now.
    fn read(&self, key: &RecordKey) -> impl Future<Output = Result<Read, StoreError>> + Send;

    /// Replaces `previous` (an in-flight claim whose lease is over, or a
    /// record past its window under `reexecute`) with a new claim, only if
    /// the row still carries `previous`'s token and state.
    fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Stores the response of the in-flight claim `token`, replayed for
    /// `replay_ttl` from the store's clock.
    fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes the in-flight claim `token`, so that a retry runs again.
    fn release(
        &self,
        key: &RecordKey,
        token: ClaimToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// One maintenance batch: up to `batch` completed records past their
    /// window become tombstones, and up to `batch` tombstones and abandoned
    /// claims older than `retention` are deleted.
    fn trim(
        &self,
        retention: Duration,
        batch: u32,
    ) -> impl Future<Output = Result<TrimReport, StoreError>> + Send;

    /// Whether the store expires records by itself (Redis's TTLs), so no
    /// trim task need run over it.
    fn expires_records(&self) -> bool {
        false
    }
}

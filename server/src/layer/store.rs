//! The lease store contract: what [`IdempotencyLayer`](super::IdempotencyLayer)
//! needs from a database, whatever the backend.
//!
//! One row per `(scope, operation, key)`, guarded by the primary key. Every
//! write after the first is conditional on the row's [`ClaimToken`], the
//! identity of the claim that wrote it, so two requests that both decided
//! to take over an expired lease (or to re-execute an expired record) race
//! on one conditional `UPDATE` and exactly one wins; the loser reads the row
//! again and decides again. A backend must keep these promises, which the
//! integration suite checks on each backend:
//!
//! - [`LeaseStore::claim`] inserts an in-flight row and commits it before
//!   returning (the handler runs outside any transaction), or returns the
//!   row that is already there;
//! - [`LeaseStore::take_over`], [`LeaseStore::complete`] and
//!   [`LeaseStore::release`] change the row only if it still carries the
//!   given claim token, and say whether they did.
//!
//! The store never decides: the layer feeds what it returns to
//! [`idemkey_core::decide`].

use std::future::Future;

use axum::body::Bytes;
use idemkey_core::{Fingerprint, IdempotencyKey, OperationId, Stored, UnixMillis};
use uuid::Uuid;

pub use crate::store::StoreError;

use super::postgres::PgLeaseStore;
use super::sqlite::SqliteLeaseStore;

/// The primary key of a lease record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseKey {
    /// Whose record it is: the account or tenant the scope function chose.
    pub scope: String,
    /// The operation the layer guards.
    pub operation: OperationId,
    /// The client's idempotency key.
    pub key: IdempotencyKey,
}

/// The identity of one claim. A new one is drawn for every claim, take-over
/// and re-execution, so a request whose lease was taken over can no longer
/// complete or release the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimToken(pub Uuid);

impl ClaimToken {
    /// A fresh random token.
    pub fn random() -> Self {
        Self(Uuid::new_v4())
    }
}

/// A claim to write: who claims, for which request, until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewClaim {
    /// The claim's identity.
    pub token: ClaimToken,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// When the claim is made.
    pub now: UnixMillis,
    /// When another request may take the claim over.
    pub lease_until: UnixMillis,
}

/// A response as the layer stores it for replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseResponse {
    /// HTTP status.
    pub status: u16,
    /// The allow-listed headers: lowercase names and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte; `None` when it was larger than the layer's
    /// cap and was not stored (see the layer's documentation).
    pub body: Option<Bytes>,
}

impl LeaseResponse {
    /// The headers as the JSON text stored in the row.
    pub fn headers_json(&self) -> String {
        serde_json::to_string(&self.headers).unwrap_or_else(|_| "[]".to_owned())
    }

    /// Reads headers stored by [`LeaseResponse::headers_json`].
    pub fn headers_from_json(json: &str) -> Vec<(String, String)> {
        serde_json::from_str(json).unwrap_or_default()
    }
}

/// A row as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The row in the core's terms, ready for [`idemkey_core::decide`].
    pub stored: Stored,
    /// The claim that last wrote the row.
    pub token: ClaimToken,
    /// The stored response (completed rows only).
    pub response: Option<LeaseResponse>,
}

/// What [`LeaseStore::claim`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The claim is committed: run the handler.
    Claimed,
    /// The key is taken; this is what the row holds.
    Existing(LeaseRecord),
}

/// Builds the core's view of a row from its columns.
pub(crate) fn stored_from_row(
    status: &str,
    fingerprint: Fingerprint,
    lease_until: Option<UnixMillis>,
    replay_until: Option<UnixMillis>,
) -> Stored {
    match (status, lease_until, replay_until) {
        ("in_flight", Some(lease_until), _) => Stored::InFlight {
            fingerprint,
            lease_until,
        },
        ("completed", _, Some(replay_until)) => Stored::Completed {
            fingerprint,
            replay_until,
        },
        // The schema forbids anything else; if it happens, keep only what
        // is certain: the fingerprint.
        _ => Stored::Tombstone { fingerprint },
    }
}

/// Storage for lease-mode idempotency, implemented by each backend.
pub trait LeaseStore: Clone + Send + Sync + 'static {
    /// Inserts an in-flight row for `key` and commits it, or returns the row
    /// that is already there.
    fn claim(
        &self,
        key: &LeaseKey,
        claim: &NewClaim,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Replaces the row with a new in-flight claim, only if it still carries
    /// `previous` (an expired lease, or a record past its replay window
    /// under the `reexecute` policy). `false`: someone else changed it first.
    fn take_over(
        &self,
        key: &LeaseKey,
        previous: ClaimToken,
        claim: &NewClaim,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Stores the response of the claim `token` and ends its lease; the
    /// response is replayed strictly before `replay_until`. `false`: the
    /// claim was taken over meanwhile and nothing was written.
    fn complete(
        &self,
        key: &LeaseKey,
        token: ClaimToken,
        response: &LeaseResponse,
        replay_until: UnixMillis,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes the in-flight row of the claim `token`, so the client may
    /// retry. `false`: the claim was no longer there.
    fn release(
        &self,
        key: &LeaseKey,
        token: ClaimToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A lease store chosen at run time (e.g. from a database URL).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyLeaseStore {
    /// PostgreSQL.
    Postgres(PgLeaseStore),
    /// SQLite.
    Sqlite(SqliteLeaseStore),
}

impl LeaseStore for AnyLeaseStore {
    async fn claim(&self, key: &LeaseKey, claim: &NewClaim) -> Result<ClaimOutcome, StoreError> {
        match self {
            Self::Postgres(s) => s.claim(key, claim).await,
            Self::Sqlite(s) => s.claim(key, claim).await,
        }
    }

    async fn take_over(
        &self,
        key: &LeaseKey,
        previous: ClaimToken,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        match self {
            Self::Postgres(s) => s.take_over(key, previous, claim).await,
            Self::Sqlite(s) => s.take_over(key, previous, claim).await,
        }
    }

    async fn complete(
        &self,
        key: &LeaseKey,
        token: ClaimToken,
        response: &LeaseResponse,
        replay_until: UnixMillis,
    ) -> Result<bool, StoreError> {
        match self {
            Self::Postgres(s) => s.complete(key, token, response, replay_until).await,
            Self::Sqlite(s) => s.complete(key, token, response, replay_until).await,
        }
    }

    async fn release(&self, key: &LeaseKey, token: ClaimToken) -> Result<bool, StoreError> {
        match self {
            Self::Postgres(s) => s.release(key, token).await,
            Self::Sqlite(s) => s.release(key, token).await,
        }
    }
}

impl AnyLeaseStore {
    /// Opens the store a URL names: `postgres://…` or `postgresql://…` for
    /// PostgreSQL (migrations applied), `sqlite://PATH` for an SQLite file
    /// (created and migrated if needed).
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let store = PgLeaseStore::connect(url, &crate::store::PgSettings::default()).await?;
            Ok(Self::Postgres(store))
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::Unavailable(
                    "sqlite:// needs a file path".to_owned(),
                ));
            }
            Ok(Self::Sqlite(SqliteLeaseStore::open(path).await?))
        } else {
            // The URL may hold a password: never repeat it.
            Err(StoreError::Unavailable(
                "unsupported database URL: use postgres://… or sqlite://PATH".to_owned(),
            ))
        }
    }
}

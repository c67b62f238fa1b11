//! The store contract: what the routes need from a database, whatever the
//! backend.
//!
//! Every call that acts for a caller takes the caller's [`TokenHash`] and
//! resolves the account in the same statement (or transaction) as the work
//! itself, so authentication costs no extra round trip. A backend must keep
//! these promises, which the integration suite checks for each backend:
//!
//! - [`OrderStore::create_order`] claims `(account, operation, key)`, inserts
//!   the order and stores its response in **one** transaction, guarded by the
//!   primary key of the idempotency records; it either creates everything or
//!   nothing, and when the key is already taken it returns what is stored;
//! - [`OrderStore::reexecute_order`] replaces an expired record and inserts
//!   the new order in one transaction, and only if the record is still the
//!   expired one the caller decided on;
//! - nothing is stored for a call that fails.
//!
//! The store never decides: the routes feed what it returns to
//! [`idemkey_core::decide`].

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemkey_core::{Fingerprint, IdempotencyKey, OperationId, Stored, UnixMillis};
use thiserror::Error;
use uuid::Uuid;

pub mod postgres;
pub mod sqlite;

pub use postgres::{PgSettings, PgStore};
pub use sqlite::SqliteStore;

/// SHA-256 of an API token: the only form in which tokens are stored.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash(pub [u8; 32]);

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Even the hash stays out of logs.
        f.write_str("TokenHash(..)")
    }
}

/// An account's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AccountId(pub Uuid);

/// A response as stored for replay: status, the allow-listed headers and
/// the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, as sent.
    pub body: String,
}

impl StoredResponse {
    /// The headers as the JSON text stored in the record.
    pub fn headers_json(&self) -> String {
        serde_json::to_string(&self.headers).unwrap_or_else(|_| "[]".to_owned())
    }

    /// Reads headers stored by [`StoredResponse::headers_json`].
    pub fn headers_from_json(json: &str) -> Vec<(String, String)> {
        serde_json::from_str(json).unwrap_or_default()
    }
}

/// A new order, ready to be written: everything the response says is
/// already known (id and `created_at` are chosen before the statement runs).
#[derive(Clone, Debug)]
pub struct OrderDraft {
    /// The operation, part of the record's key.
    pub operation: OperationId,
    /// The idempotency key.
    pub key: IdempotencyKey,
    /// The validated payload's fingerprint.
    pub fingerprint: Fingerprint,
    /// The new order's id (UUIDv4).
    pub order_id: Uuid,
    /// Stock-keeping unit.
    pub sku: String,
    /// Quantity.
    pub quantity: u8,
    /// Creation time of the order and of the record.
    pub created_at: UnixMillis,
    /// The response may be replayed strictly before this instant.
    pub replay_until: UnixMillis,
    /// The 201 response to store.
    pub response: StoredResponse,
}

/// One idempotency record as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record in the core's terms, ready for [`idemkey_core::decide`].
    pub stored: Stored,
    /// The stored response (completed records only).
    pub response: Option<StoredResponse>,
    /// The resource the operation created (the order id), if any.
    pub resource_id: Option<String>,
    /// When the record was written.
    pub created_at: UnixMillis,
    /// End of the replay window.
    pub replay_until: UnixMillis,
}

/// What [`OrderStore::create_order`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The order and its record were committed.
    Created,
    /// The key was already taken; this is what is stored.
    Existing(Record),
    /// The token belongs to no account; nothing was written.
    Unauthorized,
}

/// What [`OrderStore::reexecute_order`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReexecuteOutcome {
    /// The old record was replaced and the new order committed.
    Replaced,
    /// The record is no longer the expired one (another request replaced or
    /// removed it): read it again and decide again.
    Changed,
    /// The token belongs to no account.
    Unauthorized,
}

/// The answer to a read for a caller: either the token is unknown, or the
/// result for the caller's account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authed<T> {
    /// The token belongs to no account.
    Unauthorized,
    /// The caller's result.
    Ok(T),
}

/// An order as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// Its id.
    pub id: Uuid,
    /// Stock-keeping unit.
    pub sku: String,
    /// Quantity.
    pub quantity: u8,
    /// Creation time.
    pub created_at: UnixMillis,
}

/// How much one pass of [`OrderStore::trim`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Completed records turned into tombstones.
    pub trimmed: u64,
    /// Tombstones deleted.
    pub deleted: u64,
}

/// Faults a test can inject into a store call (see `--test-faults`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFault {
    /// Fail while storing the result: the whole transaction rolls back.
    FailStoringResult,
}

/// Why a store call failed. Messages go to logs only, never to clients.
#[derive(Clone, Debug, Error)]
pub enum StoreError {
    /// A lock wait exceeded `lock_timeout`: another request holds the key.
    #[error("lock wait timed out")]
    LockTimeout,
    /// The database is unreachable, timed out, or the outcome is unknown.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

/// The operations the routes need, implemented by each backend.
pub trait OrderStore: Send + Sync + 'static {
    /// Checks that the database answers.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Creates an account and stores the hash of its first token.
    fn create_account(
        &self,
        name: &str,
        token: TokenHash,
    ) -> impl Future<Output = Result<AccountId, StoreError>> + Send;

    /// Adds a token to the oldest account called `name`, creating the
    /// account when there is none (the demo account).
    fn add_named_token(
        &self,
        name: &str,
        token: TokenHash,
    ) -> impl Future<Output = Result<AccountId, StoreError>> + Send;

    /// Claims the draft's key, inserts the order and stores its response in
    /// one transaction; or returns what is stored under the key.
    fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        fault: Option<StoreFault>,
    ) -> impl Future<Output = Result<CreateOutcome, StoreError>> + Send;

    /// Replaces the record of an expired key (same fingerprint; replay window
    /// over at `now`, or a tombstone) with the draft's, and inserts the new
    /// order, in one transaction.
    fn reexecute_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        now: UnixMillis,
    ) -> impl Future<Output = Result<ReexecuteOutcome, StoreError>> + Send;

    /// The caller's order with this id, if it is theirs.
    fn order(
        &self,
        token: TokenHash,
        id: Uuid,
    ) -> impl Future<Output = Result<Authed<Option<Order>>, StoreError>> + Send;

    /// The caller's newest orders, newest first, at most `limit`.
    fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> impl Future<Output = Result<Authed<Vec<Order>>, StoreError>> + Send;

    /// What the caller's account holds for `(operation, key)`.
    fn record(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Authed<Option<Record>>, StoreError>> + Send;

    /// One batch of maintenance: turns up to `batch` completed records whose
    /// replay window ended by `now` into tombstones, and deletes up to
    /// `batch` tombstones created before `forget_before`.
    fn trim(
        &self,
        now: UnixMillis,
        forget_before: UnixMillis,
        batch: u32,
    ) -> impl Future<Output = Result<TrimReport, StoreError>> + Send;
}

/// The backend chosen at start-up.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyStore {
    /// PostgreSQL: the shared, multi-instance store.
    Postgres(PgStore),
    /// SQLite: the embedded, single-host store.
    Sqlite(SqliteStore),
}

/// The database used when none is given: a file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://idemkey.db";

impl AnyStore {
    /// Opens the store a URL names, applying pending migrations:
    /// `postgres://...` (or `postgresql://`) or `sqlite://PATH` (relative to
    /// the working directory; `sqlite:///abs/path` for an absolute one).
    pub async fn open(url: &str, settings: &PgSettings) -> Result<Self, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(PgStore::connect(url, settings).await?))
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::Unavailable(
                    "sqlite:// needs a file path".into(),
                ));
            }
            Ok(Self::Sqlite(SqliteStore::open(path).await?))
        } else {
            Err(StoreError::Unavailable(
                "unknown database URL: use postgres://... or sqlite://PATH".into(),
            ))
        }
    }

    /// `postgres` or `sqlite`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }
}

impl OrderStore for AnyStore {
    async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(s) => s.ping().await,
            Self::Sqlite(s) => s.ping().await,
        }
    }

    async fn create_account(&self, name: &str, token: TokenHash) -> Result<AccountId, StoreError> {
        match self {
            Self::Postgres(s) => s.create_account(name, token).await,
            Self::Sqlite(s) => s.create_account(name, token).await,
        }
    }

    async fn add_named_token(&self, name: &str, token: TokenHash) -> Result<AccountId, StoreError> {
        match self {
            Self::Postgres(s) => s.add_named_token(name, token).await,
            Self::Sqlite(s) => s.add_named_token(name, token).await,
        }
    }

    async fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        fault: Option<StoreFault>,
    ) -> Result<CreateOutcome, StoreError> {
        match self {
            Self::Postgres(s) => s.create_order(token, draft, fault).await,
            Self::Sqlite(s) => s.create_order(token, draft, fault).await,
        }
    }

    async fn reexecute_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        now: UnixMillis,
    ) -> Result<ReexecuteOutcome, StoreError> {
        match self {
            Self::Postgres(s) => s.reexecute_order(token, draft, now).await,
            Self::Sqlite(s) => s.reexecute_order(token, draft, now).await,
        }
    }

    async fn order(&self, token: TokenHash, id: Uuid) -> Result<Authed<Option<Order>>, StoreError> {
        match self {
            Self::Postgres(s) => s.order(token, id).await,
            Self::Sqlite(s) => s.order(token, id).await,
        }
    }

    async fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> Result<Authed<Vec<Order>>, StoreError> {
        match self {
            Self::Postgres(s) => s.recent_orders(token, limit).await,
            Self::Sqlite(s) => s.recent_orders(token, limit).await,
        }
    }

    async fn record(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> Result<Authed<Option<Record>>, StoreError> {
        match self {
            Self::Postgres(s) => s.record(token, operation, key).await,
            Self::Sqlite(s) => s.record(token, operation, key).await,
        }
    }

    async fn trim(
        &self,
        now: UnixMillis,
        forget_before: UnixMillis,
        batch: u32,
    ) -> Result<TrimReport, StoreError> {
        match self {
            Self::Postgres(s) => s.trim(now, forget_before, batch).await,
            Self::Sqlite(s) => s.trim(now, forget_before, batch).await,
        }
    }
}

/// Milliseconds since the epoch as a [`SystemTime`].
pub fn to_system_time(t: UnixMillis) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t.0)
}

/// A [`SystemTime`] as milliseconds since the epoch (0 before the epoch).
pub fn from_system_time(t: SystemTime) -> UnixMillis {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    UnixMillis(ms)
}

/// Builds the core's view of a record from its stored columns.
pub fn stored_from_columns(
    status: &str,
    fingerprint: Fingerprint,
    replay_until: UnixMillis,
    lease_until: Option<UnixMillis>,
) -> Stored {
    match (status, lease_until) {
        ("in_flight", Some(lease_until)) => Stored::InFlight {
            fingerprint,
            lease_until,
        },
        ("completed", _) => Stored::Completed {
            fingerprint,
            replay_until,
        },
        // A tombstone, or an in-flight row without a lease (which the schema
        // forbids): either way only the fingerprint is left to decide on.
        _ => Stored::Tombstone { fingerprint },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trips_through_system_time() {
        let t = UnixMillis(1_764_700_000_123);
        assert_eq!(from_system_time(to_system_time(t)), t);
    }

    #[test]
    fn headers_round_trip_through_json() {
        let r = StoredResponse {
            status: 201,
            headers: vec![("location".into(), "/orders/x".into())],
            body: "{}".into(),
        };
        assert_eq!(
            StoredResponse::headers_from_json(&r.headers_json()),
            r.headers
        );
    }

    #[test]
    fn token_hash_debug_hides_the_bytes() {
        assert_eq!(format!("{:?}", TokenHash([7; 32])), "TokenHash(..)");
    }
}

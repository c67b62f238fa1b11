//! Why a store call failed, in terms a caller can act on.

use thiserror::Error;

/// Why a store call failed. Messages go to logs only, never to clients.
///
/// The variants tell a passing failure (retry later: [`Unavailable`],
/// [`LockTimeout`], [`Unconfirmed`]) from one that will not pass
/// ([`Unsupported`], [`Conflict`], [`Corrupt`]).
///
/// [`Unavailable`]: StoreError::Unavailable
/// [`LockTimeout`]: StoreError::LockTimeout
/// [`Unconfirmed`]: StoreError::Unconfirmed
/// [`Unsupported`]: StoreError::Unsupported
/// [`Conflict`]: StoreError::Conflict
/// [`Corrupt`]: StoreError::Corrupt
#[derive(Clone, Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A lock wait exceeded `lock_timeout`: another request holds the key.
    #[error("lock wait timed out")]
    LockTimeout,
    /// The database is unreachable, timed out, or the outcome is unknown:
    /// a passing failure, answered 503 with `Retry-After`.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The write may have reached the store, which could not confirm that
    /// it would survive a failover (fewer Redis replicas than asked for
    /// acknowledged it in time, or the call failed with the write in
    /// flight): a completion that must not be acknowledged to the client,
    /// since a failover may still lose it.
    #[error("write not confirmed: {0}")]
    Unconfirmed(String),
    /// The store cannot do this at all (a configuration or URL it does not
    /// accept, a capability its backend lacks): retrying will not help.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A constraint refused the write (e.g. a unique value another row
    /// holds): the request conflicts with what is stored.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A stored row or value cannot be read back as the library wrote it
    /// (a malformed record, a schema another program changed).
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether the same call may succeed later (the store is busy, down or
    /// could not confirm): what a caller retries, or answers 503 for.
    pub const fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::LockTimeout | Self::Unavailable(_) | Self::Unconfirmed(_)
        )
    }
}

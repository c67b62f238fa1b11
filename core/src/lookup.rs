//! What `GET /operations/{key}` reports about an operation, from what the
//! store holds: the client's way to reconcile after a 410, an exhausted retry
//! budget or a reload, without ever starting a new operation blindly.
//!
//! Pure like [`decide`](crate::decide): the store reads the row (and `now`,
//! from its own clock), the core names the state, the adapter answers.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::decision::{Stored, UnixMillis};
use crate::order::PURCHASE_OPERATION;

/// Where a key's operation is looked up: `/operations/{key}` for an order,
/// with `?operation=purchases` for a purchase (the server scopes a key to
/// its operation, so a purchase's key looked up as an order's is
/// `unknown`). `key_value` is the key's unquoted value; every byte outside
/// RFC 3986's unreserved set is percent-encoded, as JavaScript's
/// `encodeURIComponent` does. One rule for every client, so none guesses it.
///
/// ```
/// use idemkey_core::{ORDER_OPERATION, PURCHASE_OPERATION, lookup_path};
/// assert_eq!(lookup_path(ORDER_OPERATION.as_str(), "a b"), "/operations/a%20b");
/// assert_eq!(lookup_path(PURCHASE_OPERATION.as_str(), "k-1"), "/operations/k-1?operation=purchases");
/// ```
pub fn lookup_path(operation: &str, key_value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut path = String::from("/operations/");
    for byte in key_value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            path.push(char::from(byte));
        } else {
            path.push('%');
            path.push(char::from(HEX[usize::from(byte >> 4)]));
            path.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
    if operation == PURCHASE_OPERATION.as_str() {
        path.push_str("?operation=purchases");
    }
    path
}

/// What became of an operation, as the lookup endpoint reports it.
///
/// Clients act on it (DESIGN.md, section 7): `unknown` means "not committed
/// yet", so inside the replay window they resend the same key, never a new
/// one; `in_progress` means wait and look again; `completed` means the
/// stored response can still be replayed; `expired` means the operation
/// happened but its response is no longer replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupState {
    /// No record: the operation never committed (or its record was deleted
    /// after the tombstone's retention).
    Unknown,
    /// A claim is held by a request whose handler has not stored a result.
    InProgress,
    /// Completed, and its response is replayed to the same key and payload.
    Completed,
    /// Completed, but its replay window is over (or only a tombstone is left).
    Expired,
}

impl LookupState {
    /// Every state, in the order of an operation's life.
    pub const ALL: [LookupState; 4] = [
        Self::Unknown,
        Self::InProgress,
        Self::Completed,
        Self::Expired,
    ];

    /// The word the lookup endpoint sends: `unknown`, `in_progress`,
    /// `completed` or `expired` (the same as its serde form).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Expired => "expired",
        }
    }

    /// The state of an operation whose store holds `stored`, at `now` (the
    /// store's clock). Nothing → `Unknown`; in flight → `InProgress`, whatever
    /// its lease (a claim whose lease is over still has no result: the next
    /// request with the key takes it over); completed with `now <
    /// replay_until` → `Completed`, the same boundary as [`decide`]'s replay;
    /// completed after the window, or a tombstone → `Expired`.
    ///
    /// ```
    /// use idemkey_core::{Fingerprint, LookupState, OperationId, Stored, UnixMillis};
    /// let fp = Fingerprint::of_json(&OperationId::from_static("POST /orders:v1"), "{}").unwrap();
    /// let done = Stored::Completed { fingerprint: fp, replay_until: UnixMillis(2_000) };
    /// assert_eq!(LookupState::of(done, UnixMillis(1_999)), LookupState::Completed);
    /// assert_eq!(LookupState::of(done, UnixMillis(2_000)).as_str(), "expired");
    /// assert_eq!(LookupState::of(Stored::Nothing, UnixMillis(0)), LookupState::Unknown);
    /// ```
    ///
    /// [`decide`]: crate::decide
    pub fn of(stored: Stored, now: UnixMillis) -> Self {
        match stored {
            Stored::Nothing => Self::Unknown,
            Stored::InFlight { .. } => Self::InProgress,
            Stored::Completed { replay_until, .. } if now < replay_until => Self::Completed,
            Stored::Completed { .. } | Stored::Tombstone { .. } => Self::Expired,
        }
    }
}

impl fmt::Display for LookupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ExpiryPolicy, Fingerprint, OperationId, decide};

    fn fp() -> Fingerprint {
        Fingerprint::of_json(&OperationId::from_static("POST /x:v1"), "1").unwrap()
    }

    #[test]
    fn words_match_serde() {
        for state in LookupState::ALL {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::from(state.as_str())
            );
            assert_eq!(state.to_string(), state.as_str());
            let back: LookupState = serde_json::from_value(state.as_str().into()).unwrap();
            assert_eq!(back, state);
        }
    }

    #[test]
    fn each_state_of_the_store() {
        let fingerprint = fp();
        let flight = Stored::InFlight {
            fingerprint,
            lease_until: UnixMillis(10_000),
        };
        let done = Stored::Completed {
            fingerprint,
            replay_until: UnixMillis(10_000),
        };
        let tomb = Stored::Tombstone { fingerprint };
        let of = LookupState::of;
        assert_eq!(of(Stored::Nothing, UnixMillis(5)), LookupState::Unknown);
        assert_eq!(of(flight, UnixMillis(0)), LookupState::InProgress);
        assert_eq!(of(flight, UnixMillis(99_000)), LookupState::InProgress);
        assert_eq!(of(done, UnixMillis(9_999)), LookupState::Completed);
        assert_eq!(of(done, UnixMillis(10_000)), LookupState::Expired);
        assert_eq!(of(tomb, UnixMillis(0)), LookupState::Expired);
    }

    #[test]
    fn completed_exactly_when_decide_replays() {
        let fingerprint = fp();
        for now in [0, 9_999, 10_000, 10_001] {
            let done = Stored::Completed {
                fingerprint,
                replay_until: UnixMillis(10_000),
            };
            let replays = decide(done, fingerprint, UnixMillis(now), ExpiryPolicy::Reject)
                == crate::Decision::Replay;
            assert_eq!(
                LookupState::of(done, UnixMillis(now)) == LookupState::Completed,
                replays,
                "{now}"
            );
        }
    }
}

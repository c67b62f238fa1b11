//! The decision table: what to do with a request, given what the store holds
//! for its `(account, operation, key)`, the request's fingerprint and `now`.
//!
//! Pure and total: the store reads the row, the core decides, the adapter acts.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::problem::Problem;

/// A point in time, in milliseconds since the Unix epoch. The core never
/// reads a clock: every adapter reads its own in one place and passes it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// `self + ms`, saturating.
    #[must_use]
    pub const fn plus_millis(self, ms: u64) -> Self {
        Self(self.0.saturating_add(ms))
    }

    /// Milliseconds from `self` until `later` (0 if `later` is not later).
    pub const fn millis_until(self, later: UnixMillis) -> u64 {
        later.0.saturating_sub(self.0)
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// What the store holds for one `(account, operation, key)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Stored {
    /// No record.
    Nothing,
    /// A claim whose handler is running (lease mode), until `lease_until`.
    InFlight {
        /// The claimant's fingerprint.
        fingerprint: Fingerprint,
        /// When the claim may be taken over.
        lease_until: UnixMillis,
    },
    /// A finished request whose response is stored.
    Completed {
        /// The original request's fingerprint.
        fingerprint: Fingerprint,
        /// The response may be replayed strictly before this instant.
        replay_until: UnixMillis,
    },
    /// A trimmed record: the response is gone, the fingerprint (and the
    /// resource it created) kept so that reuse and expiry are still answered.
    Tombstone {
        /// The original request's fingerprint.
        fingerprint: Fingerprint,
    },
}

/// What happens when a key is sent again after its replay window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpiryPolicy {
    /// Answer 410 and execute nothing (the article's policy).
    #[default]
    Reject,
    /// Execute the request anew, as if the key were new (Stripe's policy).
    Reexecute,
}

impl ExpiryPolicy {
    /// `reject` or `reexecute`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Reexecute => "reexecute",
        }
    }
}

impl std::str::FromStr for ExpiryPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "reject" => Ok(Self::Reject),
            "reexecute" => Ok(Self::Reexecute),
            other => Err(format!(
                "unknown expiry policy {other:?}: expected reject or reexecute"
            )),
        }
    }
}

/// What to do with the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decision {
    /// Nothing stored: run the handler and record its result.
    Execute,
    /// A claim's lease is over (its holder crashed): take it over and run.
    TakeOver,
    /// The replay window is over and the policy is `reexecute`: run anew,
    /// replacing the old record.
    Reexecute,
    /// Send the stored response again, marked `Idempotent-Replayed: true`.
    Replay,
    /// 422: the key is bound to another payload.
    Reused,
    /// 409: another request holds the key; retry after this many seconds (>= 1).
    InProgress {
        /// Seconds left on the lease, rounded up, at least 1.
        retry_after_secs: u64,
    },
    /// 410: the replay window is over and the policy is `reject`.
    Expired,
}

impl Decision {
    /// Whether the handler runs (execute, take over, re-execute).
    pub const fn executes(self) -> bool {
        matches!(self, Self::Execute | Self::TakeOver | Self::Reexecute)
    }

    /// The problem to answer with, for a rejection; `lookup` is where the
    /// client can look the operation up (used by 410).
    pub fn problem(self, lookup: Option<String>) -> Option<Problem> {
        match self {
            Self::Reused => Some(Problem::key_reused()),
            Self::InProgress { retry_after_secs } => Some(Problem::in_progress(retry_after_secs)),
            Self::Expired => Some(Problem::key_expired(lookup)),
            Self::Execute | Self::TakeOver | Self::Reexecute | Self::Replay => None,
        }
    }

    /// The snake_case name used in metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Execute => "execute",
            Self::TakeOver => "take_over",
            Self::Reexecute => "reexecute",
            Self::Replay => "replay",
            Self::Reused => "reused",
            Self::InProgress { .. } => "in_progress",
            Self::Expired => "expired",
        }
    }
}

/// Seconds from `now` to `deadline`, rounded up, at least 1: the value of a
/// `Retry-After` for a lease.
pub const fn retry_after_secs(now: UnixMillis, deadline: UnixMillis) -> u64 {
    let ms = now.millis_until(deadline);
    let secs = ms.div_ceil(1000);
    if secs == 0 { 1 } else { secs }
}

/// Decides what to do with a request (DESIGN.md, section 5).
///
/// ```
/// use idemkey_core::{decide, Decision, ExpiryPolicy, Fingerprint, OperationId, Stored, UnixMillis};
/// let op = OperationId::from_static("POST /orders:v1");
/// let fp = Fingerprint::of_json(&op, r#"{"sku":"A","quantity":1}"#).unwrap();
/// let now = UnixMillis(1_000);
/// let stored = Stored::Completed { fingerprint: fp, replay_until: UnixMillis(2_000) };
/// assert_eq!(decide(stored, fp, now, ExpiryPolicy::Reject), Decision::Replay);
/// assert_eq!(decide(Stored::Nothing, fp, now, ExpiryPolicy::Reject), Decision::Execute);
/// ```
pub fn decide(
    stored: Stored,
    request: Fingerprint,
    now: UnixMillis,
    policy: ExpiryPolicy,
) -> Decision {
    match stored {
        // draft-ietf-httpapi-idempotency-key-header, section 2.6, "First time
        // request": "The resource server SHOULD process the request normally
        // and respond with an appropriate response and status code."
        Stored::Nothing => Decision::Execute,

        // Section 2.7: "If there is an attempt to reuse an idempotency key
        // with a different request payload, the resource server SHOULD reply
        // with a HTTP 422 status code with body containing a link pointing to
        // relevant documentation." At any age, and while the first request
        // still runs.
        Stored::InFlight { fingerprint, .. }
        | Stored::Completed { fingerprint, .. }
        | Stored::Tombstone { fingerprint }
            if fingerprint != request =>
        {
            Decision::Reused
        }

        // Section 2.6, "Concurrent Request": "The request was retried before
        // the original request completed. The resource server MUST respond
        // with a resource conflict error." Section 2.7: "... SHOULD reply with
        // an HTTP 409 status code with body containing problem description."
        Stored::InFlight { lease_until, .. } if now < lease_until => Decision::InProgress {
            retry_after_secs: retry_after_secs(now, lease_until),
        },

        // The holder's lease is over: it crashed or gave up without storing a
        // result, so nothing was recorded and the request runs again.
        Stored::InFlight { .. } => Decision::TakeOver,

        // Section 2.6, "Retry": "The request was retried after the original
        // request completed. The resource server SHOULD respond with the
        // result of the previously completed operation, success or an error."
        Stored::Completed { replay_until, .. } if now < replay_until => Decision::Replay,

        // Section 2.3: "The resource MAY enforce time based idempotency keys,
        // thus, be able to purge or delete a key upon its expiry. The resource
        // server SHOULD define such expiration policy and publish it in the
        // documentation."
        Stored::Completed { .. } | Stored::Tombstone { .. } => match policy {
            ExpiryPolicy::Reject => Decision::Expired,
            ExpiryPolicy::Reexecute => Decision::Reexecute,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OperationId;

    fn fps() -> (Fingerprint, Fingerprint) {
        let op = OperationId::from_static("POST /orders:v1");
        (
            Fingerprint::of_json(&op, "1").unwrap(),
            Fingerprint::of_json(&op, "2").unwrap(),
        )
    }

    #[test]
    fn in_flight_retry_after_rounds_up() {
        let (a, _) = fps();
        let stored = Stored::InFlight {
            fingerprint: a,
            lease_until: UnixMillis(10_001),
        };
        assert_eq!(
            decide(stored, a, UnixMillis(8_000), ExpiryPolicy::Reject),
            Decision::InProgress {
                retry_after_secs: 3
            }
        );
        assert_eq!(
            decide(stored, a, UnixMillis(10_000), ExpiryPolicy::Reject),
            Decision::InProgress {
                retry_after_secs: 1
            }
        );
        assert_eq!(
            decide(stored, a, UnixMillis(10_001), ExpiryPolicy::Reject),
            Decision::TakeOver
        );
    }

    #[test]
    fn reuse_wins_over_expiry() {
        let (a, b) = fps();
        let stored = Stored::Tombstone { fingerprint: a };
        assert_eq!(
            decide(stored, b, UnixMillis(0), ExpiryPolicy::Reexecute),
            Decision::Reused
        );
    }
}

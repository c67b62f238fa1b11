//! What a client does when the lookup of its operation answers `unknown`.
//!
//! `unknown` (`GET /operations/{key}` found no record of the key for this
//! account) does not mean "failed": a request that is still on its way, held
//! back by a proxy or a slow network, may commit after the lookup. Starting
//! a new operation (a new key) because of it is how a second order appears.
//! Resending **the same key** is safe for as long as the server would still
//! find the original's record, were it to commit:
//!
//! - the server keeps a record for at least the published replay window
//!   after it commits (`replay_until = commit time + window`, then a
//!   tombstone), and the commit comes after the first send;
//! - so a lookup made less than one window after the first send that finds
//!   nothing means nothing had committed yet, and a resend with the same key
//!   either executes the operation once or meets the late original's record
//!   (replay, 409 while in flight, 422 never: same payload);
//! - past the window, `unknown` may also mean "committed long ago, and its
//!   record is gone": a resend could create a second effect. Only then is
//!   the operation handed to the application, as needing a decision.
//!
//! Elapsed time is measured on the client's own clock (first send to the
//! lookup's answer), so the offset between client and server clocks cancels
//! out. Pure: the caller passes both instants and the random draw.

use serde::{Deserialize, Serialize};

use crate::decision::UnixMillis;
use crate::retry::RetryPolicy;

/// The client's next step after a lookup answered `unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
#[non_exhaustive]
pub enum UnknownStep {
    /// Inside the replay window: wait this long (the retry policy's backoff),
    /// then send the same request with the same key.
    Resend {
        /// Milliseconds to wait.
        #[serde(rename = "delayMs")]
        delay_ms: u64,
    },
    /// Past the replay window: neither resend nor start a new operation
    /// without the application (or its user) deciding.
    NeedsDecision,
}

impl RetryPolicy {
    /// The step after a lookup answered `unknown` at `now`, for an operation
    /// first sent at `first_sent_at` that has made `attempt` attempts;
    /// `replay_window_ms` is the server's published window
    /// (`x-idempotency.retention.replayWindowSeconds` in `GET /openapi.json`,
    /// times 1000),
    /// `random` uniform in `[0, 1)`.
    ///
    /// Inside the window (`now - first_sent_at < replay_window_ms`) it is
    /// [`UnknownStep::Resend`] after [`RetryPolicy::backoff_ms`]; a clock that
    /// went backwards counts as no time elapsed. From the end of the window
    /// on, [`UnknownStep::NeedsDecision`].
    ///
    /// ```
    /// use idemkey_core::{RetryPolicy, UnixMillis, UnknownStep};
    /// let policy = RetryPolicy::default();
    /// let day = 86_400_000;
    /// let sent = UnixMillis(1_700_000_000_000);
    /// // Looked up 20 s after the first send: resend the same key.
    /// assert_eq!(
    ///     policy.after_unknown(8, sent, sent.plus_millis(20_000), day, 0.5),
    ///     UnknownStep::Resend { delay_ms: 15_000 }
    /// );
    /// // A day later, nothing recorded: the application decides.
    /// assert_eq!(
    ///     policy.after_unknown(8, sent, sent.plus_millis(day), day, 0.5),
    ///     UnknownStep::NeedsDecision
    /// );
    /// ```
    pub fn after_unknown(
        &self,
        attempt: u32,
        first_sent_at: UnixMillis,
        now: UnixMillis,
        replay_window_ms: u64,
        random: f64,
    ) -> UnknownStep {
        if first_sent_at.millis_until(now) < replay_window_ms {
            UnknownStep::Resend {
                delay_ms: self.backoff_ms(attempt, random),
            }
        } else {
            UnknownStep::NeedsDecision
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: u64 = 10_000;

    #[test]
    fn the_last_millisecond_of_the_window_resends_and_its_end_needs_a_decision() {
        let p = RetryPolicy::default();
        let sent = UnixMillis(1_000);
        assert_eq!(
            p.after_unknown(1, sent, UnixMillis(1_000 + WINDOW - 1), WINDOW, 0.0),
            UnknownStep::Resend { delay_ms: 0 }
        );
        assert_eq!(
            p.after_unknown(1, sent, UnixMillis(1_000 + WINDOW), WINDOW, 0.0),
            UnknownStep::NeedsDecision
        );
    }

    #[test]
    fn a_clock_that_went_backwards_is_still_inside_the_window() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.after_unknown(3, UnixMillis(5_000), UnixMillis(4_000), WINDOW, 0.5),
            UnknownStep::Resend { delay_ms: 500 }
        );
    }

    #[test]
    fn a_zero_window_always_needs_a_decision() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.after_unknown(1, UnixMillis(0), UnixMillis(0), 0, 0.5),
            UnknownStep::NeedsDecision
        );
    }
}

//! The client retry policy: after each attempt, wait and send again with the
//! same key, stop (the request must change), hold for re-authentication,
//! reconcile (look the operation up), or finish.
//!
//! Pure: the caller passes the attempt number, what happened, whether an
//! earlier attempt of the same operation may have been applied ([`Earlier`]),
//! and a random number in `[0, 1)` drawn from its own generator.
//!
//! | what happened | nothing sent before could have applied ([`Earlier::NotApplied`]) | an earlier attempt may have applied ([`Earlier::MaybeApplied`]) |
//! |---|---|---|
//! | 2xx or 3xx | [`RetryStep::Done`] | [`RetryStep::Done`] |
//! | network error, 408, 409, 425, 429, 500, 502, 503, 504 | [`RetryStep::Wait`] within the budget, then [`RetryStep::Reconcile`] | the same |
//! | a problem code that proves nothing stands and no resend changes ([`ProblemCode::is_final`]: 409 `order-reference-exists`; a flow's ends, 409 `out-of-stock`, 402 `payment-declined`, 409 `operation-failed`) | [`RetryStep::Stop`] | [`RetryStep::Stop`] |
//! | 410 | [`RetryStep::Reconcile`] | [`RetryStep::Reconcile`] |
//! | 401, 403 | [`RetryStep::HoldForAuth`] | [`RetryStep::HoldForAuth`] |
//! | any other 4xx or 5xx (400, 404, 405, 413, 415, 422, 501, ...) | [`RetryStep::Stop`] | [`RetryStep::Reconcile`] |
//!
//! Why the right column: a server answers 401/403, 404, 400, 413, 415 from
//! checks made *before* it reads the key's record (credentials, route,
//! request shape), so such an answer to a resend says that this attempt did
//! nothing, not that the earlier one, whose answer was lost, did nothing.
//! An expired token turns the resend of a committed order into a 401; a
//! deploy or a proxy turns it into a 404. Ending the operation there (and
//! dropping its key) is how the user's next click becomes a second order. So
//! 401/403 keep the operation for the same key after sign-in, and the others
//! look it up. 422 `idempotency-key-reused` proves the key *has* a record.
//! Only a code that says the server read the key and applied nothing, for
//! good ([`ProblemCode::is_final`]: a reference that exists, nothing stored;
//! a purchase's stored end: out of stock, its charge declined, or another
//! step refused and undone, `operation-failed`, the key's final answer)
//! still ends it. Without `operation-failed` here a purchase whose
//! confirmation was refused was resent to the end of the budget and ended
//! as a lookup that named no answer. A 401/403 holds even a
//! first attempt: the request needs credentials, not a change, and dropping
//! it would lose the purchase (a service worker's saved token goes stale).
//!
//! The wait is "full jitter": uniform in `[0, min(cap, base * 2^(attempt-1)))`,
//! and never less than the server's `Retry-After`.

use serde::{Deserialize, Serialize};

use crate::decision::UnixMillis;
use crate::problem::ProblemCode;

/// Retry parameters. The defaults: base 250 ms, cap 30 s, 8 attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// The first backoff ceiling, in milliseconds.
    pub base_ms: u64,
    /// The largest backoff ceiling, in milliseconds (a `Retry-After` may ask for more).
    pub cap_ms: u64,
    /// How many attempts in all (the first send included) before reconciling.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base_ms: 250,
            cap_ms: 30_000,
            max_attempts: 8,
        }
    }
}

/// What one attempt produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum AttemptOutcome {
    /// No response: connection refused or reset, timeout, lost response.
    NetworkError,
    /// A response with this status and, if sent, its `Retry-After` in ms
    /// (see [`parse_retry_after`]).
    Response {
        /// The HTTP status.
        status: u16,
        /// The server's `Retry-After`, in milliseconds.
        #[serde(rename = "retryAfterMs")]
        retry_after_ms: Option<u64>,
        /// The problem's `code`, when the body was an RFC 9457 problem with
        /// a code the core knows: a 409 is "in progress, wait" or "exists
        /// for good, stop" by its code, not by its status.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<ProblemCode>,
    },
}

/// Whether an earlier attempt of the same operation may have been applied by
/// the server: some attempt before this one got no answer, a 5xx, a 408, a
/// 409 in progress or a 410 ([`AttemptOutcome::may_have_applied`]), or was
/// cut off with no outcome recorded (a reload mid-flight). Once
/// `MaybeApplied`, an operation stays so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Earlier {
    /// This is the first attempt, or every earlier one was refused for sure
    /// (a 425 or 429, answered before anything ran).
    #[default]
    NotApplied,
    /// An earlier attempt may have been applied and its answer is unknown.
    MaybeApplied,
}

impl Earlier {
    /// What is known after an attempt that ended with `outcome`.
    pub fn after(self, outcome: AttemptOutcome) -> Self {
        if self == Self::MaybeApplied || outcome.may_have_applied() {
            Self::MaybeApplied
        } else {
            Self::NotApplied
        }
    }
}

impl AttemptOutcome {
    /// Whether the server may have applied the attempt: no answer, 2xx/3xx,
    /// any 5xx, 408, 410 (the key was used), or a 409 other than one whose
    /// code proves nothing was applied ([`ProblemCode::is_final`]:
    /// `order-reference-exists`, `out-of-stock`, `operation-failed`; 409 in progress: an attempt
    /// of this key is running). Other 4xx refuse the attempt before it runs.
    pub fn may_have_applied(self) -> bool {
        match self {
            Self::NetworkError => true,
            Self::Response { status, code, .. } => match status {
                409 => !code.is_some_and(ProblemCode::is_final),
                408 | 410 => true,
                400..=499 => false,
                _ => true,
            },
        }
    }
}

/// What the client does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum RetryStep {
    /// Wait this long, then send the same request with the same key.
    Wait {
        /// Milliseconds to wait.
        #[serde(rename = "delayMs")]
        delay_ms: u64,
    },
    /// Final: the request itself must change (400, 413, 415, 422, ... on an
    /// operation that nothing earlier may have applied).
    Stop,
    /// Not final: the credentials were refused (401, 403). Keep the
    /// operation and its key, send nothing, and resume it (the same key)
    /// once its account has signed in again.
    HoldForAuth,
    /// Final for sending: look the operation up; never start a new one blindly.
    Reconcile,
    /// Final: the operation succeeded (or was replayed).
    Done,
}

impl RetryPolicy {
    /// The step after attempt number `attempt` (1 for the first send) ended
    /// with `outcome`, when no earlier attempt may have been applied: the
    /// same as [`RetryPolicy::step_after`] with [`Earlier::NotApplied`]. A
    /// client that resends an operation uses `step_after`.
    ///
    /// ```
    /// use idemkey_core::{AttemptOutcome, RetryPolicy, RetryStep};
    /// let policy = RetryPolicy::default();
    /// let busy = AttemptOutcome::Response { status: 409, retry_after_ms: Some(2_000), code: None };
    /// assert_eq!(policy.step(1, busy, 0.0), RetryStep::Wait { delay_ms: 2_000 });
    /// let reused = AttemptOutcome::Response { status: 422, retry_after_ms: None, code: None };
    /// assert_eq!(policy.step(1, reused, 0.5), RetryStep::Stop);
    /// ```
    pub fn step(&self, attempt: u32, outcome: AttemptOutcome, random: f64) -> RetryStep {
        self.step_after(attempt, Earlier::NotApplied, outcome, random)
    }

    /// The step after attempt number `attempt` (1 for the first send) ended
    /// with `outcome`, `earlier` saying whether an attempt before it may have
    /// been applied (see the module's table); `random` is uniform in `[0, 1)`
    /// (values outside are clamped).
    ///
    /// ```
    /// use idemkey_core::{AttemptOutcome, Earlier, RetryPolicy, RetryStep};
    /// let policy = RetryPolicy::default();
    /// let not_found = AttemptOutcome::Response { status: 404, retry_after_ms: None, code: None };
    /// // Nothing was sent before: the request is wrong.
    /// assert_eq!(policy.step_after(1, Earlier::NotApplied, not_found, 0.5), RetryStep::Stop);
    /// // The first attempt's answer was lost: it may have committed.
    /// let earlier = Earlier::NotApplied.after(AttemptOutcome::NetworkError);
    /// assert_eq!(policy.step_after(2, earlier, not_found, 0.5), RetryStep::Reconcile);
    /// let expired = AttemptOutcome::Response { status: 401, retry_after_ms: None, code: None };
    /// assert_eq!(policy.step_after(2, earlier, expired, 0.5), RetryStep::HoldForAuth);
    /// ```
    pub fn step_after(
        &self,
        attempt: u32,
        earlier: Earlier,
        outcome: AttemptOutcome,
        random: f64,
    ) -> RetryStep {
        let retry_after_ms = match outcome {
            AttemptOutcome::NetworkError => None,
            AttemptOutcome::Response {
                status,
                retry_after_ms,
                code,
            } => match status {
                200..=399 => return RetryStep::Done,
                410 => return RetryStep::Reconcile,
                _ if code.is_some_and(ProblemCode::is_final) => return RetryStep::Stop,
                401 | 403 => return RetryStep::HoldForAuth,
                408 | 409 | 425 | 429 | 500 | 502 | 503 | 504 => retry_after_ms,
                _ if earlier == Earlier::MaybeApplied => return RetryStep::Reconcile,
                _ => return RetryStep::Stop,
            },
        };
        if attempt >= self.max_attempts {
            return RetryStep::Reconcile;
        }
        let delay_ms = self
            .backoff_ms(attempt, random)
            .max(retry_after_ms.unwrap_or(0));
        RetryStep::Wait { delay_ms }
    }

    /// Full jitter: `floor(random * min(cap, base * 2^(attempt-1)))`.
    pub fn backoff_ms(&self, attempt: u32, random: f64) -> u64 {
        let exp = attempt.saturating_sub(1).min(63);
        let ceiling = self.base_ms.saturating_mul(1u64 << exp).min(self.cap_ms);
        let r = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.0
        };
        // ceiling <= cap_ms, far below 2^53, so the f64 product is exact enough
        // and the truncating cast is in range.
        let delay = (r * ceiling as f64) as u64;
        delay.min(ceiling.saturating_sub(1))
    }
}

/// Reads a `Retry-After` value (RFC 9110, section 10.2.3): delay-seconds, or
/// an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT` measured from
/// `now`. Returns milliseconds to wait; `None` if the value is malformed.
pub fn parse_retry_after(value: &str, now: UnixMillis) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Very long digit strings saturate instead of failing.
        let secs: u64 = value.parse().unwrap_or(u64::MAX);
        return Some(secs.saturating_mul(1000));
    }
    let at = parse_imf_fixdate(value)?;
    Some(now.millis_until(at))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110, section 5.6.7), to Unix ms.
fn parse_imf_fixdate(s: &str) -> Option<UnixMillis> {
    let b = s.as_bytes();
    if b.len() != 29 || &b[3..5] != b", " || &b[25..] != b" GMT" {
        return None;
    }
    const DAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    if !DAYS.contains(&&b[0..3]) || b[7] != b' ' || b[11] != b' ' || b[16] != b' ' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let day = num(5..7)?;
    let month = MONTHS.iter().position(|m| *m == &b[8..11])? as u64 + 1;
    let year = num(12..16)?;
    if b[19] != b':' || b[22] != b':' {
        return None;
    }
    let (hour, minute, second) = (num(17..19)?, num(20..22)?, num(23..25)?);
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(UnixMillis(secs * 1000))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`, restricted to years >= 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16) -> AttemptOutcome {
        AttemptOutcome::Response {
            status,
            retry_after_ms: None,
            code: None,
        }
    }

    #[test]
    fn a_refusal_after_an_uncertain_attempt_does_not_end_the_operation() {
        let p = RetryPolicy::default();
        let uncertain = Earlier::NotApplied.after(AttemptOutcome::NetworkError);
        assert_eq!(uncertain, Earlier::MaybeApplied);
        for status in [400, 404, 405, 413, 415, 422, 501] {
            assert_eq!(
                p.step_after(1, Earlier::NotApplied, response(status), 0.5),
                RetryStep::Stop,
                "{status} on a first attempt"
            );
            assert_eq!(
                p.step_after(2, uncertain, response(status), 0.5),
                RetryStep::Reconcile,
                "{status} after a lost answer"
            );
        }
        for status in [401, 403] {
            for earlier in [Earlier::NotApplied, Earlier::MaybeApplied] {
                assert_eq!(
                    p.step_after(2, earlier, response(status), 0.5),
                    RetryStep::HoldForAuth
                );
            }
        }
        for code in FINAL {
            let fin = AttemptOutcome::Response {
                status: code.status(),
                retry_after_ms: None,
                code: Some(code),
            };
            assert_eq!(
                p.step_after(1, Earlier::NotApplied, fin, 0.5),
                RetryStep::Stop
            );
            assert_eq!(p.step_after(2, uncertain, fin, 0.5), RetryStep::Stop);
        }
    }

    /// Every code a client stops on: a reference that exists, and each end
    /// a purchase (a flow) can answer with.
    const FINAL: [ProblemCode; 4] = [
        ProblemCode::OrderReferenceExists,
        ProblemCode::OutOfStock,
        ProblemCode::PaymentDeclined,
        ProblemCode::OperationFailed,
    ];

    #[test]
    fn what_may_have_applied() {
        for status in [201, 408, 409, 410, 500, 503, 504, 501] {
            assert!(response(status).may_have_applied(), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 415, 422, 425, 429] {
            assert!(!response(status).may_have_applied(), "{status}");
        }
        for code in FINAL {
            let fin = AttemptOutcome::Response {
                status: code.status(),
                retry_after_ms: None,
                code: Some(code),
            };
            assert!(!fin.may_have_applied(), "{code}");
        }
        let busy = AttemptOutcome::Response {
            status: 409,
            retry_after_ms: None,
            code: Some(ProblemCode::IdempotencyRequestInProgress),
        };
        assert!(busy.may_have_applied());
        // Once uncertain, a later refusal does not make it certain again.
        assert_eq!(
            Earlier::MaybeApplied.after(response(404)),
            Earlier::MaybeApplied
        );
        assert_eq!(
            Earlier::NotApplied.after(response(429)),
            Earlier::NotApplied
        );
    }

    #[test]
    fn rfc_example_date() {
        // 784111777 is the Unix time of Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(UnixMillis(784_111_777_000))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:40 GMT", UnixMillis(784_111_777_000)),
            Some(3_000)
        );
        assert_eq!(parse_retry_after("soon", UnixMillis(0)), None);
        assert_eq!(parse_retry_after(" 7 ", UnixMillis(0)), Some(7_000));
    }

    #[test]
    fn jitter_stays_under_the_ceiling() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff_ms(1, 0.0), 0);
        assert_eq!(p.backoff_ms(1, 0.999_999), 249);
        assert_eq!(p.backoff_ms(3, 0.5), 500);
        assert_eq!(p.backoff_ms(40, 0.5), 15_000);
        assert_eq!(p.backoff_ms(2, f64::NAN), 0);
    }

    #[test]
    fn budget_exhaustion_reconciles() {
        let p = RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::default()
        };
        assert!(matches!(
            p.step(1, AttemptOutcome::NetworkError, 0.1),
            RetryStep::Wait { .. }
        ));
        assert_eq!(
            p.step(2, AttemptOutcome::NetworkError, 0.1),
            RetryStep::Reconcile
        );
    }
}

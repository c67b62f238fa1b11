//! How fast a worker may send each effect: an operator's rate limit (a
//! token bucket) and the downstream's own pushback (a `Retry-After` pauses
//! every new send of that effect, not only the message it answered).
//!
//! Our sending pace is a local decision, so it runs on this process's
//! clock; leases stay decided by the database's. Nothing here reads the
//! clock: every call takes `now`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// An operator's limit on the sends of one effect: `per_second` on
/// average, up to `burst` at once after a quiet spell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Sends per second, on average.
    pub per_second: NonZeroU32,
    /// Sends that may start at once (the bucket's size).
    pub burst: NonZeroU32,
}

impl Rate {
    /// `per_second` sends a second, as many at once.
    pub const fn per_second(per_second: NonZeroU32) -> Self {
        Self {
            per_second,
            burst: per_second,
        }
    }

    /// This rate with a bucket of `burst`.
    #[must_use]
    pub const fn with_burst(self, burst: NonZeroU32) -> Self {
        Self { burst, ..self }
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `N` (N a second, N at once) or `N/B` (N a second, B at once).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let whole = |part: &str| {
            part.trim()
                .parse::<NonZeroU32>()
                .map_err(|_| format!("{part:?} is not a whole number from 1"))
        };
        match text.split_once('/') {
            None => Ok(Self::per_second(whole(text)?)),
            Some((rate, burst)) => Ok(Self::per_second(whole(rate)?).with_burst(whole(burst)?)),
        }
    }
}

/// A token bucket: `tokens` at `at`, refilled at the rate up to the burst.
#[derive(Debug)]
struct Bucket {
    rate: Rate,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(self.rate.per_second.get()))
            .min(f64::from(self.rate.burst.get()));
        self.at = self.at.max(now);
    }
}

/// One effect's gate.
#[derive(Debug, Default)]
struct Gate {
    paused_until: Option<Instant>,
    bucket: Option<Bucket>,
}

/// The gates of a worker's effects, shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    gates: Mutex<HashMap<String, Gate>>,
}

impl Throttle {
    /// Limits `effect` to `rate`, starting with a full bucket at `now`.
    pub(crate) fn limit(&self, effect: &str, rate: Rate, now: Instant) {
        self.gates
            .lock()
            .entry(effect.to_owned())
            .or_default()
            .bucket = Some(Bucket {
            rate,
            tokens: f64::from(rate.burst.get()),
            at: now,
        });
    }

    /// Whether `effect` has a rate limit.
    pub(crate) fn is_limited(&self, effect: &str) -> bool {
        self.gates
            .lock()
            .get(effect)
            .is_some_and(|g| g.bucket.is_some())
    }

    /// No new send of `effect` starts before `until` (a later pause already
    /// set stays); whether this call moved the pause's end.
    pub(crate) fn pause(&self, effect: &str, until: Instant) -> bool {
        let mut gates = self.gates.lock();
        let gate = gates.entry(effect.to_owned()).or_default();
        if gate.paused_until.is_some_and(|t| t >= until) {
            return false;
        }
        gate.paused_until = Some(until);
        true
    }

    /// How long `effect` stays paused after `now`, if it is.
    pub(crate) fn paused_for(&self, effect: &str, now: Instant) -> Option<Duration> {
        let gates = self.gates.lock();
        let until = gates.get(effect)?.paused_until?;
        (until > now).then(|| until - now)
    }

    /// Takes up to `want` sends of `effect` that may start at `now`; how
    /// many (all of them for an effect without a limit).
    pub(crate) fn take(&self, effect: &str, want: u32, now: Instant) -> u32 {
        let mut gates = self.gates.lock();
        let Some(bucket) = gates.get_mut(effect).and_then(|g| g.bucket.as_mut()) else {
            return want;
        };
        bucket.refill(now);
        // Whole tokens only: `tokens` is at most the burst, a u32.
        let available = bucket.tokens.floor().max(0.0) as u32;
        let taken = available.min(want);
        bucket.tokens -= f64::from(taken);
        taken
    }

    /// Gives back `n` sends taken and not used (fewer messages were due).
    pub(crate) fn give_back(&self, effect: &str, n: u32, now: Instant) {
        let mut gates = self.gates.lock();
        if let Some(bucket) = gates.get_mut(effect).and_then(|g| g.bucket.as_mut()) {
            bucket.refill(now);
            bucket.tokens = (bucket.tokens + f64::from(n)).min(f64::from(bucket.rate.burst.get()));
        }
    }

    /// When `effect` may next start a send, if not at `now`: its pause's
    /// end, or its bucket's next token.
    pub(crate) fn opens_at(&self, effect: &str, now: Instant) -> Option<Instant> {
        let mut gates = self.gates.lock();
        let gate = gates.get_mut(effect)?;
        if let Some(until) = gate.paused_until.filter(|t| *t > now) {
            return Some(until);
        }
        let bucket = gate.bucket.as_mut()?;
        bucket.refill(now);
        if bucket.tokens >= 1.0 {
            return None;
        }
        let wait = (1.0 - bucket.tokens) / f64::from(bucket.rate.per_second.get());
        Some(now + Duration::from_secs_f64(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: u32, burst: u32) -> Rate {
        Rate::per_second(NonZeroU32::new(per_second).unwrap())
            .with_burst(NonZeroU32::new(burst).unwrap())
    }

    #[test]
    fn a_bucket_lets_its_burst_through_then_its_rate() {
        let t0 = Instant::now();
        let throttle = Throttle::default();
        throttle.limit("charge", rate(10, 3), t0);
        assert!(throttle.is_limited("charge"));
        assert_eq!(throttle.take("charge", 16, t0), 3);
        assert_eq!(throttle.take("charge", 16, t0), 0);
        assert_eq!(
            throttle.opens_at("charge", t0),
            Some(t0 + Duration::from_millis(100))
        );
        // A tenth of a second later: one more.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(throttle.take("charge", 16, t1), 1);
        // Sends not used go back, never beyond the burst.
        throttle.give_back("charge", 5, t1);
        assert_eq!(throttle.take("charge", 16, t1), 3);
        // A long quiet spell refills up to the burst only.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!(throttle.take("charge", 16, t2), 3);
        // Without a limit, everything asked for.
        assert!(!throttle.is_limited("mail"));
        assert_eq!(throttle.take("mail", 16, t2), 16);
        assert_eq!(throttle.opens_at("mail", t2), None);
    }

    #[test]
    fn a_pause_holds_until_its_end_and_only_a_later_end_moves_it() {
        let t0 = Instant::now();
        let throttle = Throttle::default();
        assert_eq!(throttle.paused_for("charge", t0), None);
        assert!(throttle.pause("charge", t0 + Duration::from_secs(2)));
        assert!(!throttle.pause("charge", t0 + Duration::from_secs(1)));
        assert_eq!(
            throttle.paused_for("charge", t0),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            throttle.opens_at("charge", t0),
            Some(t0 + Duration::from_secs(2))
        );
        assert_eq!(throttle.paused_for("mail", t0), None);
        let after = t0 + Duration::from_secs(2);
        assert_eq!(throttle.paused_for("charge", after), None);
        assert_eq!(throttle.opens_at("charge", after), None);
    }

    #[test]
    fn rates_are_read_as_n_or_n_slash_burst() {
        assert_eq!("50".parse::<Rate>(), Ok(rate(50, 50)));
        assert_eq!("50/200".parse::<Rate>(), Ok(rate(50, 200)));
        for bad in ["0", "-1", "x", "5/0", ""] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }
}

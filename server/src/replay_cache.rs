//! Replays without a database read: a bounded in-process copy of completed
//! records and of the token-to-account mapping.
//!
//! A completed record does not change until its replay window ends (every
//! write after completion is fenced by the record's state: only the trim
//! turns it into a tombstone, and only after its window), so each process
//! may answer a replay from its own copy, and every process answers alike.
//! What the copy cannot know by itself is time: the window is the
//! database's. The copy keeps the database's clock as it was read and the
//! process's monotonic instant at which the statement was *sent*; the
//! database's clock now is then at most `read + elapsed`, an estimate that
//! runs early, so a copy stops answering no later than the database would.
//! (Kept by hand: quick_cache bounds the copy by weight, but no cache crate
//! ages an entry by another clock read at the statement's send time.)
//! The engine's decision table ([`idemkey::idempotency::step`]) decides on the
//! copy exactly as on a row read from the database.
//!
//! A token's account is kept for `auth_ttl` only: that is how long a revoked
//! token can still replay from this process's copy (new orders and
//! everything else authenticate in the database, at once).
//!
//! Memory is bounded in bytes (each entry weighs its response, key and a
//! fixed overhead, so the entry count is bounded too); [`quick_cache`]
//! evicts the least valuable entries past the bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use idemkey_core::{Fingerprint, Stored, UnixMillis};
use quick_cache::Weighter;
use quick_cache::sync::Cache;

use crate::db::{AccountId, TokenHash};
use idemkey::duration::MAX_WAIT;
use idemkey::idempotency::{Read, Record, RecordKey};

/// What an entry weighs beyond its variable parts: the key's fixed fields,
/// the record's, and the cache's own bookkeeping.
const ENTRY_OVERHEAD: u64 = 256;

/// The bounds of one process's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayCacheSettings {
    /// Most bytes of completed records kept; 0 turns the cache off.
    pub bytes: u64,
    /// How long a token's account is trusted without asking the database:
    /// the longest a revoked token can still replay from the cache. Zero
    /// turns the cache off; more than [`MAX_WAIT`] counts as [`MAX_WAIT`]
    /// (the command line refuses it), so a trust deadline can never
    /// overflow the clock.
    pub auth_ttl: Duration,
}

impl Default for ReplayCacheSettings {
    fn default() -> Self {
        Self {
            bytes: 64 * 1024 * 1024,
            auth_ttl: Duration::from_secs(1),
        }
    }
}

impl ReplayCacheSettings {
    /// Whether these settings keep anything at all.
    pub const fn enabled(&self) -> bool {
        self.bytes > 0 && !self.auth_ttl.is_zero()
    }
}

/// A completed record as read, with the clocks it was read at; shared, so
/// that a hit costs a reference count rather than a copy of the record.
#[derive(Debug)]
struct Entry {
    record: Record,
    /// The database's clock in the statement that read the record.
    db_now: UnixMillis,
    /// This process's instant when that statement was sent (before
    /// `db_now`, so `db_now + sent.elapsed()` never runs late).
    sent: Instant,
    weight: u64,
    /// The stored response as a replay sends it, its headers parsed once.
    replay: (StatusCode, HeaderMap, Bytes),
    /// A request body already found to carry the record's fingerprint: the
    /// same bytes need neither a parse nor a hash to be known the same.
    same_body: Option<Bytes>,
}

#[derive(Clone)]
struct EntryWeight;

impl Weighter<RecordKey, Arc<Entry>> for EntryWeight {
    fn weight(&self, _: &RecordKey, entry: &Arc<Entry>) -> u64 {
        entry.weight
    }
}

/// A copy the cache holds for a key, with the database's clock as
/// estimated now.
#[derive(Debug)]
pub struct Hit {
    entry: Arc<Entry>,
    now: UnixMillis,
}

impl Hit {
    /// The record's fingerprint when `body` is, byte for byte, a body that
    /// was already parsed and found to carry it; `None` otherwise (parse
    /// and fingerprint it).
    pub fn fingerprint_of(&self, body: &[u8]) -> Option<Fingerprint> {
        match (&self.entry.same_body, self.entry.record.stored) {
            (Some(same), Stored::Completed { fingerprint, .. }) if same[..] == *body => {
                Some(fingerprint)
            }
            _ => None,
        }
    }

    /// The copy as the engine reads a row.
    pub fn read(&self) -> Read {
        Read {
            now: self.now,
            record: Some(self.entry.record.clone()),
        }
    }

    /// The stored response as a replay, the same bytes as
    /// [`StoredResponse::to_response`](idemkey::idempotency::StoredResponse::to_response)
    /// with `replayed` set.
    pub fn replay(&self) -> Response {
        let (status, headers, body) = &self.entry.replay;
        let mut response = Response::new(Body::from(body.clone()));
        *response.status_mut() = *status;
        *response.headers_mut() = headers.clone();
        response
    }
}

/// A token's account and until when it is trusted.
#[derive(Clone, Copy, Debug)]
struct TokenEntry {
    account: AccountId,
    until: Instant,
}

/// Counters for `GET /metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayCacheStats {
    /// Requests answered from the cache.
    pub hits: u64,
    /// Replays and 422s the database answered because the cache held no
    /// copy (new orders are not counted).
    pub misses: u64,
    /// Records held.
    pub entries: u64,
    /// Bytes of records held, as weighed against the bound.
    pub bytes: u64,
}

/// One process's replay cache; see the module documentation.
pub struct ReplayCache {
    records: Cache<RecordKey, Arc<Entry>, EntryWeight>,
    tokens: Cache<TokenHash, TokenEntry>,
    auth_ttl: Duration,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayCache")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl ReplayCache {
    /// A cache within `settings`, or `None` when they turn it off.
    pub fn new(settings: ReplayCacheSettings) -> Option<Self> {
        if !settings.enabled() {
            return None;
        }
        let estimated = usize::try_from(settings.bytes / (ENTRY_OVERHEAD * 2))
            .unwrap_or(usize::MAX)
            .clamp(16, 1 << 20);
        Some(Self {
            records: Cache::with_weighter(estimated, settings.bytes, EntryWeight),
            tokens: Cache::new(estimated.min(100_000)),
            auth_ttl: settings.auth_ttl.min(MAX_WAIT),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The account of `token`, if it authenticated in the database less
    /// than `auth_ttl` ago.
    pub fn account(&self, token: TokenHash) -> Option<AccountId> {
        let entry = self.tokens.get(&token)?;
        if Instant::now() < entry.until {
            Some(entry.account)
        } else {
            self.tokens.remove(&token);
            None
        }
    }

    /// What `key` holds, as the database would say now, if a copy is kept
    /// and still inside its window at the (early-running) estimate of the
    /// database's clock. Anything else is forgotten: the database answers.
    pub fn read(&self, key: &RecordKey) -> Option<Read> {
        self.lookup(key).map(|hit| hit.read())
    }

    /// [`ReplayCache::read`]'s copy, shared: what the engine needs to
    /// decide, and the replay ready to send.
    pub fn lookup(&self, key: &RecordKey) -> Option<Hit> {
        let entry = self.records.get(key)?;
        let elapsed = u64::try_from(entry.sent.elapsed().as_millis()).unwrap_or(u64::MAX);
        let now = UnixMillis(entry.db_now.0.saturating_add(elapsed));
        match entry.record.stored {
            Stored::Completed { replay_until, .. } if now < replay_until => {
                Some(Hit { entry, now })
            }
            _ => {
                self.records.remove(key);
                None
            }
        }
    }

    /// Keeps what the database answered for `key` with `token`'s account:
    /// a completed record with a stored response, read by a statement sent
    /// at `sent`, and `same_body`, a request body the database found to
    /// carry the record's fingerprint (a replay's). Anything else (in
    /// flight, tombstone, a response too large to store) is not kept.
    pub fn remember(
        &self,
        token: TokenHash,
        account: AccountId,
        key: &RecordKey,
        read: &Read,
        sent: Instant,
        same_body: Option<&Bytes>,
    ) {
        self.tokens.insert(
            token,
            TokenEntry {
                account,
                until: sent + self.auth_ttl,
            },
        );
        let Some(record) = &read.record else { return };
        let Stored::Completed { replay_until, .. } = record.stored else {
            return;
        };
        let Some(response) = record.response.as_ref().filter(|r| r.body.is_some()) else {
            return;
        };
        if read.now >= replay_until {
            return;
        }
        let weight = ENTRY_OVERHEAD
            + response.body.as_ref().map_or(0, |b| b.len() as u64)
            + response
                .headers
                .iter()
                .map(|(n, v)| (n.len() + v.len()) as u64)
                .sum::<u64>()
            + (key.scope.as_str().len() + key.operation.as_str().len() + key.key.as_str().len())
                as u64
            + record.resource_id.as_ref().map_or(0, |r| r.len() as u64)
            + same_body.map_or(0, |b| b.len() as u64);
        let (parts, _) = response.to_response(true).into_parts();
        let body = response.body.clone().unwrap_or_default();
        self.records.insert(
            key.clone(),
            Arc::new(Entry {
                record: record.clone(),
                db_now: read.now,
                sent,
                weight,
                replay: (parts.status, parts.headers, body),
                same_body: same_body.cloned(),
            }),
        );
    }

    /// Drops the copy of `key` (the engine decided something a copy must
    /// not answer).
    pub fn forget(&self, key: &RecordKey) {
        self.records.remove(key);
    }

    /// Counts a request answered from the cache.
    pub fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a replay or 422 the database answered for want of a copy.
    pub fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters and the cache's size.
    pub fn stats(&self) -> ReplayCacheStats {
        ReplayCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.records.len() as u64,
            bytes: self.records.weight(),
        }
    }
}

#[cfg(test)]
mod tests {
    use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, ORDER_OPERATION};
    use uuid::Uuid;

    use super::*;
    use idemkey::idempotency::{ClaimToken, StoredResponse};

    fn key(name: &str) -> RecordKey {
        RecordKey {
            scope: AccountId(Uuid::nil()).scope(),
            operation: ORDER_OPERATION,
            key: IdempotencyKey::parse(name.as_bytes(), KeyProfile::Lenient).expect("a key"),
        }
    }

    fn completed(now: u64, replay_until: u64, body: Option<&str>) -> Read {
        let mut response = StoredResponse::new(201, body.unwrap_or_default().to_owned());
        if body.is_none() {
            response.body = None;
        }
        Read {
            now: UnixMillis(now),
            record: Some(Record {
                stored: Stored::Completed {
                    fingerprint: Fingerprint::from_bytes([7; 32]),
                    replay_until: UnixMillis(replay_until),
                },
                token: ClaimToken(Uuid::nil()),
                response: Some(response),
                resource_id: None,
                created_at: UnixMillis(now),
                replay_until: Some(UnixMillis(replay_until)),
            }),
        }
    }

    fn cache(bytes: u64) -> ReplayCache {
        ReplayCache::new(ReplayCacheSettings {
            bytes,
            auth_ttl: Duration::from_secs(60),
        })
        .expect("enabled")
    }

    #[test]
    fn off_when_either_bound_is_zero() {
        for settings in [
            ReplayCacheSettings {
                bytes: 0,
                ..ReplayCacheSettings::default()
            },
            ReplayCacheSettings {
                auth_ttl: Duration::ZERO,
                ..ReplayCacheSettings::default()
            },
        ] {
            assert!(ReplayCache::new(settings).is_none(), "{settings:?}");
        }
    }

    #[test]
    fn a_completed_record_is_answered_with_the_databases_clock_moved_on() {
        let cache = cache(1 << 20);
        let token = TokenHash([1; 32]);
        let account = AccountId(Uuid::nil());
        let k = key("a");
        cache.remember(
            token,
            account,
            &k,
            &completed(1_000, 60_000, Some("{}")),
            Instant::now(),
            None,
        );
        assert_eq!(cache.account(token), Some(account));
        let read = cache.read(&k).expect("kept");
        assert!(read.now.0 >= 1_000 && read.now.0 < 60_000, "{:?}", read.now);
        assert_eq!(
            read.record,
            completed(0, 60_000, Some("{}")).record.map(|r| Record {
                created_at: UnixMillis(1_000),
                ..r
            })
        );
        assert_eq!(cache.stats().entries, 1);
    }

    #[test]
    fn a_window_over_by_the_estimate_is_never_answered() {
        let cache = cache(1 << 20);
        let k = key("b");
        // Read 10 ms before the window's end, the statement sent 20 ms ago:
        // by the estimate the window is over.
        let sent = Instant::now() - Duration::from_millis(20);
        cache.remember(
            TokenHash([2; 32]),
            AccountId(Uuid::nil()),
            &k,
            &completed(990, 1_000, Some("{}")),
            sent,
            None,
        );
        assert!(cache.read(&k).is_none());
        assert_eq!(cache.stats().entries, 0, "forgotten, not kept");
    }

    #[test]
    fn only_completed_records_with_a_stored_body_are_kept() {
        let cache = cache(1 << 20);
        let (token, account) = (TokenHash([3; 32]), AccountId(Uuid::nil()));
        let k = key("c");
        cache.remember(
            token,
            account,
            &k,
            &completed(1_000, 60_000, None),
            Instant::now(),
            None,
        );
        cache.remember(
            token,
            account,
            &k,
            &completed(60_000, 60_000, Some("{}")),
            Instant::now(),
            None,
        );
        let mut in_flight = completed(1_000, 60_000, Some("{}"));
        if let Some(r) = in_flight.record.as_mut() {
            r.stored = Stored::InFlight {
                fingerprint: Fingerprint::from_bytes([7; 32]),
                lease_until: UnixMillis(2_000),
            };
        }
        cache.remember(token, account, &k, &in_flight, Instant::now(), None);
        assert!(cache.read(&k).is_none());
        assert_eq!(cache.stats().entries, 0);
    }

    #[test]
    fn a_tokens_account_is_trusted_for_auth_ttl_only() {
        let cache = ReplayCache::new(ReplayCacheSettings {
            bytes: 1 << 20,
            auth_ttl: Duration::from_millis(50),
        })
        .expect("enabled");
        let token = TokenHash([4; 32]);
        let k = key("d");
        let long_ago = Instant::now() - Duration::from_millis(60);
        cache.remember(
            token,
            AccountId(Uuid::nil()),
            &k,
            &completed(1_000, 60_000, Some("{}")),
            long_ago,
            None,
        );
        assert_eq!(cache.account(token), None);
    }

    #[test]
    fn a_huge_auth_ttl_is_an_hour_not_a_panic() {
        let cache = ReplayCache::new(ReplayCacheSettings {
            bytes: 1 << 20,
            auth_ttl: Duration::MAX,
        })
        .expect("enabled");
        let (token, account) = (TokenHash([6; 32]), AccountId(Uuid::nil()));
        cache.remember(
            token,
            account,
            &key("e"),
            &completed(1_000, 60_000, Some("{}")),
            Instant::now(),
            None,
        );
        assert_eq!(cache.account(token), Some(account));
        assert_eq!(cache.auth_ttl, MAX_WAIT);
    }

    #[test]
    fn the_bytes_bound_holds() {
        let cache = cache(64 * 1024);
        let body = "x".repeat(1_000);
        for i in 0..1_000 {
            cache.remember(
                TokenHash([5; 32]),
                AccountId(Uuid::nil()),
                &key(&format!("k{i}")),
                &completed(1_000, 60_000, Some(&body)),
                Instant::now(),
                None,
            );
        }
        let stats = cache.stats();
        assert!(stats.bytes <= 64 * 1024, "{stats:?}");
        assert!(stats.entries > 0 && stats.entries < 1_000, "{stats:?}");
    }

    #[test]
    fn only_the_same_bytes_skip_the_parse_and_the_replay_is_the_stored_response() {
        let cache = cache(1 << 20);
        let (token, account) = (TokenHash([3; 32]), AccountId(Uuid::nil()));
        let (with_body, without) = (key("with"), key("without"));
        let body = Bytes::from_static(br#"{"sku":"A","quantity":1}"#);
        let mut read = completed(1_000, 60_000, Some(r#"{"id":"x"}"#));
        if let Some(response) = read.record.as_mut().and_then(|r| r.response.as_mut()) {
            response
                .headers
                .push(("location".into(), "/orders/x".into()));
        }
        cache.remember(
            token,
            account,
            &with_body,
            &read,
            Instant::now(),
            Some(&body),
        );
        cache.remember(token, account, &without, &read, Instant::now(), None);

        let hit = cache.lookup(&with_body).expect("kept");
        assert_eq!(
            hit.fingerprint_of(&body),
            Some(Fingerprint::from_bytes([7; 32]))
        );
        assert_eq!(hit.fingerprint_of(br#"{"sku":"A","quantity":1} "#), None);
        assert_eq!(hit.fingerprint_of(b""), None);
        let none_kept = cache.lookup(&without).expect("kept");
        assert_eq!(none_kept.fingerprint_of(&body), None);

        let stored = read
            .record
            .as_ref()
            .and_then(|r| r.response.as_ref())
            .expect("a response")
            .to_response(true);
        let replay = hit.replay();
        assert_eq!(replay.status(), stored.status());
        assert_eq!(replay.headers(), stored.headers());
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(replay.headers()["location"], "/orders/x");
        let bytes = |r: Response| {
            pollster::block_on(axum::body::to_bytes(r.into_body(), 1 << 20)).expect("a body")
        };
        assert_eq!(bytes(replay), bytes(stored));
    }
}

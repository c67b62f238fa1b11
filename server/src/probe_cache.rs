//! What the unauthenticated probes (`GET /readyz`, `GET /metrics`) ask the
//! database, asked at most once per [`PROBE_FRESH_FOR`] per process.
//!
//! Probes are exempt from `--max-in-flight` (they must answer when the
//! server is busy), so without this each one took a database connection
//! (on SQLite `/readyz` takes the writer and the write lock): a few hundred
//! concurrent probes made `POST /orders` wait out `--pool-wait`. A
//! [`ProbeCache`] keeps the last answer for [`PROBE_FRESH_FOR`]; past that
//! the first probe asks the database again while the others wait for that
//! same answer (one query in flight at most), so the probes' share of the
//! pool is one connection per figure, whatever their number.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use idemkey::outbox::OutboxStats;

/// How long a probe's answer from the database is reused.
pub const PROBE_FRESH_FOR: Duration = Duration::from_secs(1);

/// An answer a probe may reuse: a good one for [`PROBE_FRESH_FOR`], a
/// failure only by the probes that waited for it (the next probe asks
/// again, so a database that is back is seen at once).
pub trait Reusable {
    /// Whether this answer is reused while fresh.
    fn reusable(&self) -> bool;
}

impl<T, E> Reusable for Result<T, E> {
    fn reusable(&self) -> bool {
        self.is_ok()
    }
}

impl<T> Reusable for Option<T> {
    fn reusable(&self) -> bool {
        self.is_some()
    }
}

/// One figure that probes read: the last answer and when it came, behind
/// a lock that makes concurrent refreshes one.
#[derive(Debug)]
pub struct ProbeCache<T> {
    last: Mutex<Option<(Instant, T)>>,
    fresh_for: Duration,
    queries: AtomicU64,
}

impl<T: Clone + Reusable> Default for ProbeCache<T> {
    fn default() -> Self {
        Self::new(PROBE_FRESH_FOR)
    }
}

impl<T: Clone + Reusable> ProbeCache<T> {
    /// A cache whose good answers are reused for `fresh_for`.
    pub fn new(fresh_for: Duration) -> Self {
        Self {
            last: Mutex::new(None),
            fresh_for,
            queries: AtomicU64::new(0),
        }
    }

    /// The last answer if it came after this call began (a query another
    /// probe ran meanwhile) or is good and fresh; else `query`'s, run by
    /// this caller alone while the callers that arrive meanwhile wait for
    /// it.
    pub async fn get<F, Fut>(&self, query: F) -> T
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let arrived = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((at, value)) = last.as_ref()
            && (*at >= arrived || (value.reusable() && at.elapsed() < self.fresh_for))
        {
            return value.clone();
        }
        self.queries.fetch_add(1, Ordering::Relaxed);
        let value = query().await;
        *last = Some((Instant::now(), value.clone()));
        value
    }

    /// How many times the database was asked, for metrics.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }
}

/// The probes' figures of one process.
#[derive(Debug, Default)]
pub struct Probes {
    /// `/readyz`'s answer: the migrations not applied, or why the
    /// database did not answer.
    pub ready: ProbeCache<Result<Vec<String>, String>>,
    /// `/metrics`' outbox figures (`None`: not in time).
    pub outbox: ProbeCache<Option<OutboxStats>>,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// 50 callers at once while the first one's query is held open: one
    /// query, one answer for all.
    async fn callers_share(answer: Result<u64, String>) -> u64 {
        let cache = Arc::new(ProbeCache::<Result<u64, String>>::new(Duration::from_secs(
            3_600,
        )));
        let (release, gate) = tokio::sync::watch::channel(false);
        let callers: Vec<_> = (0..50)
            .map(|_| {
                let (cache, mut gate) = (Arc::clone(&cache), gate.clone());
                let answer = answer.clone();
                tokio::spawn(async move {
                    cache
                        .get(|| async move {
                            let _ = gate.wait_for(|open| *open).await;
                            answer
                        })
                        .await
                })
            })
            .collect();
        // On this one thread, one yield lets every caller arrive (the first
        // one's query waits at the gate) before the query ends.
        tokio::task::yield_now().await;
        assert_eq!(cache.queries(), 1);
        release.send(true).expect("open the gate");
        for caller in callers {
            assert_eq!(caller.await.expect("caller"), answer);
        }
        cache.queries()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_callers_share_one_query_good_or_bad() {
        assert_eq!(callers_share(Ok(7)).await, 1);
        assert_eq!(callers_share(Err("down".into())).await, 1);
    }

    #[tokio::test]
    async fn a_good_answer_is_reused_while_fresh_and_a_failure_is_not() {
        let cache = ProbeCache::<Result<u64, ()>>::new(Duration::from_secs(3_600));
        assert_eq!(cache.get(|| async { Err(()) }).await, Err(()));
        assert_eq!(cache.get(|| async { Ok(1) }).await, Ok(1));
        assert_eq!(cache.get(|| async { Ok(2) }).await, Ok(1), "fresh");
        assert_eq!(cache.queries(), 2);
        let stale = ProbeCache::<Result<u64, ()>>::new(Duration::ZERO);
        assert_eq!(stale.get(|| async { Ok(1) }).await, Ok(1));
        assert_eq!(stale.get(|| async { Ok(2) }).await, Ok(2));
    }
}

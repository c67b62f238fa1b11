//! When each API token was last used, without a write per request.
//!
//! A request authenticates inside its own statement, which stays the one
//! round trip of a new order or a replay. Each process only notes, in
//! memory, which tokens authenticated a request, and a background task
//! writes them in one `UPDATE` every interval, at the database's clock
//! (`--token-last-used-interval`, 60 s by default). `last_used_at` is
//! therefore the time of a flush that followed a use: late by at most one
//! interval, and lost for the uses of the last interval if the process is
//! killed (a clean shutdown flushes).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, warn};

use crate::db::{Db, StoreError, TokenHash};

/// Most distinct tokens kept between two flushes; more are not noted until
/// the next flush, so memory stays bounded whatever the traffic.
pub const MAX_PENDING_TOKENS: usize = 100_000;

/// The tokens seen since the last flush.
#[derive(Debug, Default)]
pub struct TokenUsage {
    seen: Mutex<HashSet<TokenHash>>,
}

impl TokenUsage {
    /// Notes that `token` authenticated a request (a hash-set insert).
    pub fn note(&self, token: TokenHash) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() < MAX_PENDING_TOKENS {
            seen.insert(token);
        }
    }

    /// Writes the noted tokens' `last_used_at` in one statement; on failure
    /// they are kept for the next flush. Returns how many rows it touched.
    pub async fn flush(&self, db: &Db) -> Result<u64, StoreError> {
        let batch: Vec<TokenHash> = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.drain().collect()
        };
        match db.mark_tokens_used(&batch).await {
            Ok(n) => Ok(n),
            Err(err) => {
                for token in batch {
                    self.note(token);
                }
                Err(err)
            }
        }
    }
}

/// Flushes `usage` every `interval` until `stop` turns true, then once more.
pub async fn run(
    usage: std::sync::Arc<TokenUsage>,
    db: Db,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            _ = stop.changed() => true,
        };
        match usage.flush(&db).await {
            Ok(n) => debug!(tokens = n, "recorded tokens' last use"),
            Err(err) => warn!(error = %err, "cannot record tokens' last use; will try again"),
        }
        if stopping || *stop.borrow() {
            break;
        }
    }
}

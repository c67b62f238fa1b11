//! The background task that keeps the idempotency records small: records
//! past their replay window become tombstones (the response is dropped; the
//! fingerprint and the order id stay, so reuse, expiry and lookups still
//! answer), and tombstones past their retention are deleted, in small
//! batches so that no statement holds many locks.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::store::{AnyStore, OrderStore as _, TrimReport};
use crate::{Clock, Settings};

/// Batches run back to back while a batch comes back full, at most this
/// many per round, so one round stays short.
const MAX_BATCHES_PER_ROUND: u32 = 100;

/// One round: trims and deletes in batches until a batch comes back short.
pub async fn trim_round(
    store: &AnyStore,
    settings: &Settings,
    now: idemkey_core::UnixMillis,
    batch: u32,
) -> Result<TrimReport, crate::store::StoreError> {
    let tombstone_ms = u64::try_from(settings.tombstone_ttl.as_millis()).unwrap_or(u64::MAX);
    let forget_before = idemkey_core::UnixMillis(now.0.saturating_sub(tombstone_ms));
    let mut total = TrimReport::default();
    for _ in 0..MAX_BATCHES_PER_ROUND {
        let report = store.trim(now, forget_before, batch).await?;
        total.trimmed += report.trimmed;
        total.deleted += report.deleted;
        if report.trimmed < u64::from(batch) && report.deleted < u64::from(batch) {
            break;
        }
    }
    Ok(total)
}

/// Runs [`trim_round`] every `interval` until `stop` turns true.
pub async fn run(
    store: AnyStore,
    settings: Settings,
    clock: Clock,
    interval: Duration,
    batch: u32,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => break,
        }
        if *stop.borrow() {
            break;
        }
        match trim_round(&store, &settings, clock.now(), batch).await {
            Ok(r) if r.trimmed > 0 || r.deleted > 0 => {
                info!(
                    trimmed = r.trimmed,
                    deleted = r.deleted,
                    "trimmed idempotency records"
                );
            }
            Ok(_) => debug!("nothing to trim"),
            Err(err) => warn!(error = %err, "trim failed; will try again"),
        }
    }
}

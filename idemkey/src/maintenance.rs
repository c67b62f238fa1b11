//! The background task that keeps the records small, for every front end
//! (one records table): records past their replay window become tombstones
//! (the response is dropped; the fingerprint and the resource stay, so
//! reuse, expiry and lookups still answer), and tombstones and abandoned
//! claims past their retention are deleted, in batches so that no
//! statement holds many locks, until nothing is left to do. The database's
//! clock decides what is due.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::idempotency::{Records, TrimReport};
use crate::store::StoreError;

/// One round: trims and deletes in batches until a batch comes back short
/// (fewer rows than the batch on each count and in all), so the backlog cannot outgrow the task however fast keys
/// arrive; stops early (between batches) when `stop` turns true.
/// `retention` is how long a key is remembered after its creation (the Layer's
/// `retention`), and an abandoned claim after its
/// lease.
pub async fn trim_round<R: Records>(
    db: &R,
    retention: Duration,
    batch: u32,
    stop: Option<&watch::Receiver<bool>>,
) -> Result<TrimReport, StoreError> {
    let mut total = TrimReport::default();
    loop {
        let report = db.trim(retention, batch).await?;
        total.trimmed += report.trimmed;
        total.deleted += report.deleted;
        total.rescheduled += report.rescheduled;
        let batch = u64::from(batch);
        let full = report.trimmed >= batch
            || report.deleted >= batch
            || report.trimmed + report.deleted + report.rescheduled >= batch;
        if !full || stop.is_some_and(|s| *s.borrow()) {
            return Ok(total);
        }
        // Let requests in between batches.
        tokio::task::yield_now().await;
    }
}

/// Runs [`trim_round`] every `interval` until `stop` turns true or its
/// sender is dropped (the application at shutdown; the idempotency
/// layer when its last service is dropped).
pub async fn run<R: Records>(
    db: R,
    retention: Duration,
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
        match trim_round(&db, retention, batch, Some(&stop)).await {
            Ok(r) if r.trimmed > 0 || r.deleted > 0 || r.rescheduled > 0 => {
                info!(
                    trimmed = r.trimmed,
                    deleted = r.deleted,
                    rescheduled = r.rescheduled,
                    "trimmed idempotency records"
                );
            }
            Ok(_) => debug!("nothing to trim"),
            Err(err) => warn!(error = %err, "trim failed; will try again"),
        }
    }
}

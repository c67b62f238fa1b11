//! The outbox's command-line flags (shared by `serve` and `worker`) and the
//! operator's `outbox` commands.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use idemkey_core::RetryPolicy;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::database::DatabaseArgs;
use crate::db::Db;
use crate::outbox::{CHARGE, charge_delivery};
use crate::payments::client::{ProviderClient, redacted_url};
use idemkey::duration::parse_duration;
use idemkey::outbox::{OutboxMetrics, Rate, Worker, WorkerSettings};

/// Where charges go and how the outbox is delivered. Its `Debug` shows the
/// provider URL without credentials and never the token.
#[derive(Clone, Args)]
pub struct OutboxArgs {
    /// Delivery workers in this process (0: none; another process, e.g.
    /// `idemkey-server worker`, delivers).
    #[arg(long, env = "IDEMKEY_OUTBOX_WORKERS", default_value_t = 1)]
    pub outbox_workers: u32,
    /// The payment provider's base URL (e.g. http://127.0.0.1:4000). Without
    /// it, charges wait in the outbox.
    #[arg(long, env = "IDEMKEY_PAYMENTS_URL")]
    pub payments_url: Option<String>,
    /// The bearer secret the provider knows this service by.
    #[arg(long, env = "IDEMKEY_PAYMENTS_TOKEN", hide_env_values = true)]
    pub payments_token: Option<String>,
    /// How long one call to the provider may take before its outcome is
    /// counted as uncertain.
    #[arg(long, env = "IDEMKEY_PAYMENTS_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub payments_timeout: Duration,
    /// How long a worker's claim on a message lasts; a crashed worker's
    /// messages are taken over after it (at the database's clock).
    #[arg(long, env = "IDEMKEY_OUTBOX_LEASE", default_value = "30s", value_parser = parse_duration)]
    pub outbox_lease: Duration,
    /// Messages a worker claims at once, and outcomes it settles at once.
    #[arg(long, env = "IDEMKEY_OUTBOX_BATCH", default_value_t = 16)]
    pub outbox_batch: u32,
    /// Deliveries a worker keeps in flight at most; it claims more as soon
    /// as half of them have finished, so one slow call holds only itself.
    #[arg(long, env = "IDEMKEY_OUTBOX_CONCURRENCY", default_value_t = 32)]
    pub outbox_concurrency: u32,
    /// Sends of one effect per second, per process: EFFECT=N (N a second, N
    /// at once) or EFFECT=N/BURST, e.g. charge=200/50 (repeat the flag, or
    /// comma-separate them). The provider's own Retry-After pauses an
    /// effect's sends whatever this says.
    #[arg(
        long = "outbox-rate-limit",
        env = "IDEMKEY_OUTBOX_RATE_LIMITS",
        value_delimiter = ',',
        value_parser = parse_rate_limit
    )]
    pub outbox_rate_limits: Vec<(String, Rate)>,
    /// How long a message (a charge, a purchase's step) is retried before
    /// it is dead-lettered, from its enqueueing at the database's clock:
    /// long enough to wait out a provider's outage, shorter than the
    /// provider's key retention (24 h) so that no resend meets a forgotten
    /// key.
    #[arg(long, env = "IDEMKEY_OUTBOX_RETRY_FOR", default_value = "12h", value_parser = parse_duration)]
    pub outbox_retry_for: Duration,
    /// Optionally also a number of deliveries after which a message is
    /// dead-lettered (none by default: the budget is --outbox-retry-for).
    #[arg(long, env = "IDEMKEY_OUTBOX_MAX_ATTEMPTS")]
    pub outbox_max_attempts: Option<u32>,
    /// The first retry's backoff ceiling (full jitter, doubling).
    #[arg(long, env = "IDEMKEY_OUTBOX_RETRY_BASE", default_value = "500ms", value_parser = parse_duration)]
    pub outbox_retry_base: Duration,
    /// The largest backoff ceiling (a provider's Retry-After may ask more).
    #[arg(long, env = "IDEMKEY_OUTBOX_RETRY_CAP", default_value = "60s", value_parser = parse_duration)]
    pub outbox_retry_cap: Duration,
    /// How long an idle worker waits before looking again.
    #[arg(long, env = "IDEMKEY_OUTBOX_POLL", default_value = "250ms", value_parser = parse_duration)]
    pub outbox_poll: Duration,
}

impl std::fmt::Debug for OutboxArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxArgs")
            .field("outbox_workers", &self.outbox_workers)
            .field(
                "payments_url",
                &self.payments_url.as_deref().map(redacted_url),
            )
            .field(
                "payments_token",
                &self.payments_token.as_ref().map(|_| ".."),
            )
            .field("payments_timeout", &self.payments_timeout)
            .field("outbox_lease", &self.outbox_lease)
            .field("outbox_batch", &self.outbox_batch)
            .field("outbox_concurrency", &self.outbox_concurrency)
            .field("outbox_rate_limits", &self.outbox_rate_limits)
            .field("outbox_retry_for", &self.outbox_retry_for)
            .field("outbox_max_attempts", &self.outbox_max_attempts)
            .field("outbox_retry_base", &self.outbox_retry_base)
            .field("outbox_retry_cap", &self.outbox_retry_cap)
            .field("outbox_poll", &self.outbox_poll)
            .finish()
    }
}

impl OutboxArgs {
    /// The workers' settings.
    pub fn settings(&self) -> WorkerSettings {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        WorkerSettings {
            batch: self.outbox_batch.max(1),
            concurrency: self.outbox_concurrency.max(1),
            lease: self.outbox_lease,
            idle_poll: self.outbox_poll,
            retry: RetryPolicy {
                base_ms: ms(self.outbox_retry_base).max(1),
                cap_ms: ms(self.outbox_retry_cap).max(1),
                max_attempts: self.outbox_max_attempts.map_or(u32::MAX, |n| n.max(1)),
            },
            retry_for: self.outbox_retry_for,
        }
    }

    /// Checks what clap cannot: the lease must outlast two provider calls
    /// (a lookup and a charge), or a live worker's claim could end under it.
    pub fn validate(&self) -> Result<(), String> {
        if self.outbox_workers > 0
            && self.payments_url.is_some()
            && self.outbox_lease < self.payments_timeout * 4
        {
            return Err(format!(
                "--outbox-lease ({:?}) must be at least 4 times --payments-timeout ({:?})",
                self.outbox_lease, self.payments_timeout
            ));
        }
        Ok(())
    }

    /// Starts the delivery workers until `stop` turns true; none without a
    /// provider URL (charges then wait in the outbox, and a warning says so).
    pub fn start(
        &self,
        db: &Db,
        metrics: &Arc<OutboxMetrics>,
        wake: &Arc<Notify>,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> Result<Vec<JoinHandle<()>>, String> {
        if self.outbox_workers == 0 {
            return Ok(Vec::new());
        }
        let Some(url) = &self.payments_url else {
            warn!("no --payments-url: charges wait in the outbox until a worker with one runs");
            return Ok(Vec::new());
        };
        let token = self.payments_token.clone().unwrap_or_default();
        let shown = redacted_url(url);
        let client = Arc::new(
            ProviderClient::new(url, &token, self.payments_timeout)
                .map_err(|e| format!("cannot reach the payment provider at {shown}: {e}"))?,
        );
        let purchases = crate::purchase::flows(
            db,
            Some(Arc::clone(&client)),
            Duration::ZERO,
            // A lookup, then the effect: inside the lease (`validate`).
            self.payments_timeout * 2,
            Arc::clone(wake),
        )
        .map_err(|e| format!("purchases: {e}"))?;
        // The purchases' steps run beside the charges, woken by `wake`.
        let mut worker = purchases.attach(
            Worker::new(db.store(), self.settings())
                .handle(CHARGE, charge_delivery(client))
                .with_metrics(Arc::clone(metrics)),
        );
        // One limit for this process's workers: they share the bucket.
        for (effect, rate) in &self.outbox_rate_limits {
            worker = worker.rate_limit(effect, *rate);
        }
        info!(workers = self.outbox_workers, provider = %shown, "outbox delivery started");
        Ok((0..self.outbox_workers)
            .map(|_| {
                let mut stop = stop.clone();
                tokio::spawn(worker.clone().run(async move {
                    let _ = stop.wait_for(|stopped| *stopped).await;
                }))
            })
            .collect())
    }
}

/// `EFFECT=N` or `EFFECT=N/BURST` of `--outbox-rate-limit`.
fn parse_rate_limit(text: &str) -> Result<(String, Rate), String> {
    let (effect, rate) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not EFFECT=N or EFFECT=N/BURST"))?;
    let effect = effect.trim();
    if effect.is_empty() {
        return Err(format!("{text:?} names no effect"));
    }
    Ok((effect.to_owned(), rate.parse()?))
}

/// Flags of `worker`: deliver the outbox without serving HTTP.
#[derive(Clone, Debug, Args)]
pub struct WorkerArgs {
    /// Where the data lives.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Where charges go and how.
    #[command(flatten)]
    pub outbox: OutboxArgs,
}

/// `outbox` subcommands: look at the outbox and send dead letters back.
#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// List messages, oldest first: id, status, attempts, effect, resource,
    /// downstream key, and the result or last error.
    List {
        /// Only messages of this status: pending, delivered, failed or dead.
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Where the data lives.
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Send a dead letter or a failed message (or, with --all-dead, every
    /// dead letter) back to pending (its retry budget still counts from its
    /// creation: one past it gets one attempt); its next attempt looks the
    /// effect up first. A message older than the provider's key
    /// retention is refused unless --force: the provider may have forgotten
    /// its key, and a re-sent charge would then be a second charge.
    Retry {
        /// The message's id (dead or failed).
        #[arg(required_unless_present = "all_dead", conflicts_with = "all_dead")]
        id: Option<i64>,
        /// Every dead letter.
        #[arg(long)]
        all_dead: bool,
        /// Send back messages older than --payments-key-retention too
        /// (check at the provider that they were never charged first).
        #[arg(long)]
        force: bool,
        /// How long the payment provider remembers an idempotency key
        /// (the simulator's: its 24 h replay window; Stripe's: 24 h). Ages
        /// are measured by the database's clock from the message's
        /// creation.
        #[arg(
            long,
            env = "IDEMKEY_PAYMENTS_KEY_RETENTION",
            default_value = "24h",
            value_parser = parse_duration
        )]
        payments_key_retention: Duration,
        /// Where the data lives.
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

//! The provider simulator's fault switches: `--fail-rate`, `--lose-rate`
//! and `--latency-ms`, drawn from one seeded random sequence so that a run
//! with the same `--fault-seed` and the same order of requests sees the same
//! faults.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use idemkey_core::Problem;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use tracing::warn;

use idemkey::problems::{UNAVAILABLE_RETRY_AFTER_SECS, problem_response};
use idemkey::serve::ConnectionControl;

/// The switches and the random sequence they draw from.
#[derive(Debug)]
pub(crate) struct Faults {
    fail_rate: f64,
    lose_rate: f64,
    latency: Duration,
    draws: Mutex<StdRng>,
    lose_next: AtomicBool,
}

/// The demo's one-shot switch: the next successful charge commits and its
/// connection is closed without an answer, whatever `--lose-rate` says.
#[derive(Clone, Debug)]
pub struct LoseNext(Arc<Faults>);

impl LoseNext {
    /// Arms the switch (until a charge takes it).
    pub fn arm(&self) {
        self.0.lose_next.store(true, Ordering::SeqCst);
    }
}

/// What one request draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Draw {
    fail: bool,
    lose: bool,
}

impl Faults {
    /// Switches drawing from the sequence of `seed`.
    pub(crate) fn new(fail_rate: f64, lose_rate: f64, latency: Duration, seed: u64) -> Self {
        Self {
            fail_rate,
            lose_rate,
            latency,
            draws: Mutex::new(StdRng::seed_from_u64(seed)),
            lose_next: AtomicBool::new(false),
        }
    }

    /// The one-shot switch of these faults.
    pub(crate) fn lose_next(self: &Arc<Self>) -> LoseNext {
        LoseNext(Arc::clone(self))
    }

    /// Both draws of one request, always both, so each request takes the
    /// same share of the sequence whatever the rates.
    fn draw(&self) -> Draw {
        let mut rng = self.draws.lock();
        let fail = rng.random::<f64>() < self.fail_rate;
        let lose = rng.random::<f64>() < self.lose_rate;
        Draw { fail, lose }
    }
}

/// Whether the fault switches apply to this request: the two calls a
/// client makes (`POST /charges`, `GET /charges/{key}`), not the list
/// (`GET /charges`), which is for checks.
fn faulty(request: &Request) -> bool {
    !(request.method() == Method::GET && request.uri().path() == "/charges")
}

/// Middleware outside the idempotency layer: sleeps `--latency-ms`, answers
/// 503 with `Retry-After` before anything happens at `--fail-rate`, and at
/// `--lose-rate` (or when [`LoseNext`] is armed) lets a charge commit and
/// its response be stored, then closes the connection without answering.
pub(crate) async fn inject(
    State(faults): State<Arc<Faults>>,
    request: Request,
    next: Next,
) -> Response {
    if !faults.latency.is_zero() {
        tokio::time::sleep(faults.latency).await;
    }
    if !faulty(&request) {
        return next.run(request).await;
    }
    let draw = faults.draw();
    if draw.fail {
        warn!("fault: 503 before any effect");
        return problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS));
    }
    let control = request.extensions().get::<ConnectionControl>().cloned();
    let losable = request.method() == Method::POST;
    let response = next.run(request).await;
    // The layer has stored the answer by now: a retry replays it.
    let lose = losable
        && response.status().is_success()
        && (draw.lose || faults.lose_next.swap(false, Ordering::SeqCst));
    if lose {
        if let Some(control) = control {
            warn!("fault: charge committed, closing the connection without a response");
            control.abort();
            // The connection task drops this future with the connection.
            std::future::pending::<()>().await;
        }
        // No connection to close (a router driven without a socket).
        return problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(faults: &Faults, n: usize) -> Vec<Draw> {
        (0..n).map(|_| faults.draw()).collect()
    }

    #[test]
    fn one_seed_gives_one_sequence() {
        let a = Faults::new(0.5, 0.5, Duration::ZERO, 7);
        let b = Faults::new(0.5, 0.5, Duration::ZERO, 7);
        let c = Faults::new(0.5, 0.5, Duration::ZERO, 8);
        let (a, b, c) = (draws(&a, 64), draws(&b, 64), draws(&c, 64));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().any(|d| d.fail) && a.iter().any(|d| !d.fail));
    }

    #[test]
    fn rates_zero_and_one_are_never_and_always() {
        let never = Faults::new(0.0, 0.0, Duration::ZERO, 1);
        let always = Faults::new(1.0, 1.0, Duration::ZERO, 1);
        assert!(draws(&never, 100).iter().all(|d| !d.fail && !d.lose));
        assert!(draws(&always, 100).iter().all(|d| d.fail && d.lose));
    }
}

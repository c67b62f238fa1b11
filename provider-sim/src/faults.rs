//! The provider simulator's fault switches: `--fail-rate`, `--lose-rate`
//! and `--latency-ms`, drawn from one seeded random sequence so that a run
//! with the same `--fault-seed` and the same order of requests sees the same
//! faults. They apply alike to every effect (charges, confirmations,
//! refunds): the calls a client makes are the same for each.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
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

use crate::calls::call_of;
use crate::store::Endpoint;

/// The switches and the random sequence they draw from.
#[derive(Debug)]
pub(crate) struct Faults {
    fail_rate: f64,
    lose_rate: f64,
    latency: Duration,
    draws: Mutex<StdRng>,
    /// The one-shot switch: [`DISARMED`], [`ANY_ENDPOINT`], or
    /// [`armed_for`] an endpoint.
    lose_next: AtomicU8,
}

/// [`Faults::lose_next`] when nothing is armed.
const DISARMED: u8 = 0;
/// [`Faults::lose_next`] armed for the next success of any effect.
const ANY_ENDPOINT: u8 = 1;

/// [`Faults::lose_next`] armed for one endpoint's next success.
fn armed_for(endpoint: Endpoint) -> u8 {
    match endpoint {
        Endpoint::Charges => 2,
        Endpoint::Confirmations => 3,
        Endpoint::Refunds => 4,
    }
}

/// The demo's and the tests' one-shot switch: the next successful `POST`
/// of an effect commits, its answer is stored, and its connection is closed
/// without an answer, whatever `--lose-rate` says. Armed for any effect
/// ([`LoseNext::arm`]) or for one endpoint's ([`LoseNext::arm_for`]), so
/// a test of a multi-step purchase can lose exactly the step it means to;
/// arming again replaces the selector.
#[derive(Clone, Debug)]
pub struct LoseNext(Arc<Faults>);

impl LoseNext {
    /// Arms the switch for the next success of any effect (until one takes
    /// it).
    pub fn arm(&self) {
        self.0.lose_next.store(ANY_ENDPOINT, Ordering::SeqCst);
    }

    /// Arms the switch for the next success of `endpoint` only (the others'
    /// answers pass).
    pub fn arm_for(&self, endpoint: Endpoint) {
        self.0
            .lose_next
            .store(armed_for(endpoint), Ordering::SeqCst);
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
            lose_next: AtomicU8::new(DISARMED),
        }
    }

    /// Takes the one-shot switch if it is armed for `endpoint` (or for any
    /// endpoint): exactly one success takes it.
    fn take_lose_next(&self, endpoint: Endpoint) -> bool {
        let armed = self.lose_next.load(Ordering::SeqCst);
        (armed == ANY_ENDPOINT || armed == armed_for(endpoint))
            && self
                .lose_next
                .compare_exchange(armed, DISARMED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
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

/// The endpoint of a request the fault switches apply to: the two calls a
/// client makes of each effect ([`call_of`]), not the lists.
fn faulty(request: &Request) -> Option<Endpoint> {
    call_of(request.method(), request.uri().path()).map(|(endpoint, _)| endpoint)
}

/// Middleware outside the idempotency layers: sleeps `--latency-ms`,
/// answers 503 with `Retry-After` before anything happens at `--fail-rate`,
/// and at `--lose-rate` (or when [`LoseNext`] is armed for the endpoint)
/// lets an effect commit and its response be stored, then closes the
/// connection without answering.
pub(crate) async fn inject(
    State(faults): State<Arc<Faults>>,
    request: Request,
    next: Next,
) -> Response {
    if !faults.latency.is_zero() {
        tokio::time::sleep(faults.latency).await;
    }
    let Some(endpoint) = faulty(&request) else {
        return next.run(request).await;
    };
    let draw = faults.draw();
    if draw.fail {
        warn!("fault: 503 before any effect");
        return problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS));
    }
    let control = request.extensions().get::<ConnectionControl>().cloned();
    let losable = request.method() == Method::POST;
    let response = next.run(request).await;
    // The layer has stored the answer by now: a retry replays it.
    let lose =
        losable && response.status().is_success() && (draw.lose || faults.take_lose_next(endpoint));
    if lose {
        if let Some(control) = control {
            warn!(
                effect = endpoint.as_str(),
                "fault: effect committed, closing the connection without a response"
            );
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
    fn the_switch_is_taken_once_by_the_endpoint_it_names() {
        let faults = Arc::new(Faults::new(0.0, 0.0, Duration::ZERO, 1));
        let switch = faults.lose_next();
        assert!(!faults.take_lose_next(Endpoint::Charges));
        switch.arm_for(Endpoint::Refunds);
        assert!(!faults.take_lose_next(Endpoint::Charges));
        assert!(!faults.take_lose_next(Endpoint::Confirmations));
        assert!(faults.take_lose_next(Endpoint::Refunds));
        assert!(!faults.take_lose_next(Endpoint::Refunds));
        switch.arm();
        assert!(faults.take_lose_next(Endpoint::Confirmations));
        assert!(!faults.take_lose_next(Endpoint::Charges));
    }

    #[test]
    fn the_calls_of_every_effect_are_faulty_and_the_lists_are_not() {
        let request = |method: Method, path: &str| {
            Request::builder()
                .method(method)
                .uri(path)
                .body(axum::body::Body::empty())
                .expect("a request")
        };
        for endpoint in Endpoint::ALL {
            let name = endpoint.as_str();
            assert_eq!(
                faulty(&request(Method::POST, &format!("/{name}"))),
                Some(endpoint)
            );
            assert_eq!(
                faulty(&request(Method::GET, &format!("/{name}/k"))),
                Some(endpoint)
            );
            assert_eq!(faulty(&request(Method::GET, &format!("/{name}"))), None);
        }
        assert_eq!(faulty(&request(Method::GET, "/requests")), None);
        assert_eq!(faulty(&request(Method::POST, "/faults/lose-next")), None);
    }

    #[test]
    fn rates_zero_and_one_are_never_and_always() {
        let never = Faults::new(0.0, 0.0, Duration::ZERO, 1);
        let always = Faults::new(1.0, 1.0, Duration::ZERO, 1);
        assert!(draws(&never, 100).iter().all(|d| !d.fail && !d.lose));
        assert!(draws(&always, 100).iter().all(|d| d.fail && d.lose));
    }
}

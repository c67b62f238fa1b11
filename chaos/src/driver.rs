//! The load driver: C clients run logical operations; each keeps one key,
//! retries with the core's [`RetryPolicy`] and reconciles through
//! `GET /operations/{key}` when the policy says so. Every attempt is recorded
//! for the checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idemkey_core::{AttemptOutcome, RetryPolicy, RetryStep, UnixMillis, parse_retry_after};

use crate::rng::Rng;

/// An account the load runs under.
#[derive(Clone, Debug)]
pub struct Account {
    /// Its id in the database.
    pub id: String,
    /// Its API token.
    pub token: String,
}

/// How the load runs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Concurrent clients.
    pub clients: usize,
    /// Operations to run at least (more while faults are still being injected).
    pub min_ops: usize,
    /// Operations to run at most.
    pub max_ops: usize,
    /// The clients' retry policy (shortened waits; `Retry-After` still wins).
    pub policy: RetryPolicy,
    /// Longest wait for one HTTP answer before the client calls it a hang.
    pub attempt_timeout: Duration,
    /// How long one operation may take before the client gives up on it.
    pub op_deadline: Duration,
    /// Share of operations whose first send asks the server to drop the
    /// response after COMMIT (`x-idemkey-test-fault: drop-after-commit`), a
    /// lost acknowledgement.
    pub lose_response_rate: f64,
    /// Seed of the clients' random choices.
    pub seed: u64,
    /// Pause of each client between two operations: paces a load whose
    /// effects (e.g. the outbox's deliveries) drain slower than orders come.
    pub op_pause: Duration,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            clients: 8,
            min_ops: 100,
            max_ops: 10_000,
            policy: RetryPolicy {
                base_ms: 20,
                cap_ms: 400,
                max_attempts: 10,
            },
            attempt_timeout: Duration::from_secs(20),
            op_deadline: Duration::from_secs(90),
            lose_response_rate: 0.0,
            seed: 1,
            op_pause: Duration::ZERO,
        }
    }
}

/// What an attempt asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptKind {
    /// `POST /orders` with the operation's key.
    Post,
    /// `GET /operations/{key}`.
    Lookup,
}

/// One HTTP exchange.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// What was asked.
    pub kind: AttemptKind,
    /// Which server slot.
    pub server: usize,
    /// Which process of that slot (1 for the first).
    pub incarnation: u32,
    /// The status, or `None` for no answer.
    pub status: Option<u16>,
    /// Why there was no answer.
    pub error: Option<String>,
    /// No answer within [`LoadConfig::attempt_timeout`].
    pub timed_out: bool,
    /// The body as received.
    pub body: String,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `Retry-After`.
    pub retry_after: Option<String>,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// Time to the answer (or the error).
    pub elapsed_ms: u64,
    /// When it was sent (Unix milliseconds), to line it up with server
    /// logs and fault timelines.
    pub sent_ms: u64,
    /// The fault this attempt asked the server for, if any (the checker
    /// counts it only when the attempt got no answer).
    pub injected: Option<&'static str>,
}

/// How a logical operation ended.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Final {
    /// A 201 on a send that created it.
    Created,
    /// A 201 replayed (`Idempotent-Replayed: true`).
    Replayed,
    /// The lookup found the order after the retry budget ran out.
    Reconciled,
    /// A final refusal (4xx other than 409/410): the request must change.
    Stopped(u16),
    /// No final answer before the operation's deadline.
    Unfinished,
}

impl Final {
    /// A short name for tables.
    pub fn label(&self) -> String {
        match self {
            Self::Created => "created".into(),
            Self::Replayed => "replayed".into(),
            Self::Reconciled => "reconciled".into(),
            Self::Stopped(s) => format!("stopped-{s}"),
            Self::Unfinished => "unfinished".into(),
        }
    }
}

/// Everything one logical operation did.
#[derive(Clone, Debug)]
pub struct OpHistory {
    /// Index into [`History::accounts`].
    pub account: usize,
    /// The key, as sent in `Idempotency-Key` (a UUID).
    pub key: String,
    /// The JSON body sent with every attempt.
    pub body: String,
    /// Every exchange, in order.
    pub attempts: Vec<Attempt>,
    /// How it ended.
    pub final_state: Final,
    /// The order id of the 2xx the client accepted, if any.
    pub acked_order: Option<String>,
    /// The order id the lookup reported, if it reconciled.
    pub reconciled_order: Option<String>,
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The accounts, by index.
    pub accounts: Vec<Account>,
    /// The operations.
    pub ops: Vec<OpHistory>,
    /// Wall time of the load.
    pub elapsed: Duration,
}

/// What the clients share.
struct Shared {
    cfg: LoadConfig,
    bases: Vec<String>,
    incarnations: Arc<Vec<AtomicU32>>,
    accounts: Vec<Account>,
    faults_done: Arc<AtomicBool>,
    issued: AtomicUsize,
    http: reqwest::Client,
}

/// Runs the load against `bases` until at least `min_ops` operations ran
/// and `faults_done` is set (or `max_ops` ran), and every started operation
/// ended.
pub async fn run_load(
    cfg: LoadConfig,
    bases: Vec<String>,
    incarnations: Arc<Vec<AtomicU32>>,
    accounts: Vec<Account>,
    faults_done: Arc<AtomicBool>,
) -> History {
    let started = Instant::now();
    let http = reqwest::Client::builder()
        .timeout(cfg.attempt_timeout)
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new());
    let mut rng = Rng::new(cfg.seed);
    let shared = Arc::new(Shared {
        cfg,
        bases,
        incarnations,
        accounts: accounts.clone(),
        faults_done,
        issued: AtomicUsize::new(0),
        http,
    });
    let mut tasks = Vec::new();
    for c in 0..shared.cfg.clients {
        let shared = Arc::clone(&shared);
        let rng = rng.fork(c as u64);
        tasks.push(tokio::spawn(client(shared, rng)));
    }
    let mut ops = Vec::new();
    for task in tasks {
        if let Ok(mut done) = task.await {
            ops.append(&mut done);
        }
    }
    History {
        accounts,
        ops,
        elapsed: started.elapsed(),
    }
}

async fn client(shared: Arc<Shared>, mut rng: Rng) -> Vec<OpHistory> {
    let mut done = Vec::new();
    loop {
        let issued = shared.issued.load(Ordering::SeqCst);
        let faults_done = shared.faults_done.load(Ordering::SeqCst);
        if issued >= shared.cfg.max_ops || (faults_done && issued >= shared.cfg.min_ops) {
            break;
        }
        if shared.issued.fetch_add(1, Ordering::SeqCst) >= shared.cfg.max_ops {
            break;
        }
        done.push(run_op(&shared, &mut rng).await);
        if !shared.cfg.op_pause.is_zero() {
            tokio::time::sleep(shared.cfg.op_pause).await;
        }
    }
    done
}

/// `HH:MM:SS.mmm` (UTC) of Unix milliseconds `ms`, as server logs print
/// their timestamps.
pub fn utc_time_of_day(ms: u64) -> String {
    let secs = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60,
        ms % 1000
    )
}

/// The current time of day, as [`utc_time_of_day`] prints it.
pub fn utc_now() -> String {
    utc_time_of_day(now_millis().0)
}

fn now_millis() -> UnixMillis {
    UnixMillis(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    )
}

const SKUS: [&str; 4] = ["LIBRO-TS", "CAFE-1KG", "TAZA-02", "LAMPARA-9"];

async fn run_op(shared: &Shared, rng: &mut Rng) -> OpHistory {
    let account = rng.range(0, shared.accounts.len() as u64 - 1) as usize;
    let sku = SKUS[rng.range(0, SKUS.len() as u64 - 1) as usize];
    let quantity = rng.range(1, 20);
    let mut op = OpHistory {
        account,
        key: uuid::Uuid::new_v4().to_string(),
        body: format!(r#"{{"sku":"{sku}","quantity":{quantity}}}"#),
        attempts: Vec::new(),
        final_state: Final::Unfinished,
        acked_order: None,
        reconciled_order: None,
    };
    let deadline = Instant::now() + shared.cfg.op_deadline;
    let policy = shared.cfg.policy;
    let mut round = 0u32;
    'op: loop {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            // Only the operation's first send: a fresh key cannot be
            // replayed there, so a 2xx to it means the fault did not fire.
            let first_send = round == 0 && attempt == 1;
            let inject = (first_send && rng.chance(shared.cfg.lose_response_rate))
                .then_some("drop-after-commit");
            let a = send(shared, rng, &op, AttemptKind::Post, inject).await;
            let outcome = match a.status {
                None => AttemptOutcome::NetworkError,
                Some(status) => AttemptOutcome::Response {
                    status,
                    retry_after_ms: a
                        .retry_after
                        .as_deref()
                        .and_then(|v| parse_retry_after(v, now_millis())),
                    code: idemkey_core::Problem::from_json(&a.body)
                        .and_then(|p| p.code)
                        .and_then(|c| idemkey_core::ProblemCode::from_code(&c)),
                },
            };
            let (status, replayed, body) = (a.status, a.replayed, a.body.clone());
            op.attempts.push(a);
            match policy.step(attempt, outcome, rng.unit()) {
                RetryStep::Done => {
                    op.acked_order = order_id(&body);
                    op.final_state = if replayed {
                        Final::Replayed
                    } else {
                        Final::Created
                    };
                    break 'op;
                }
                // The driver's tokens never expire: a 401/403 is final here.
                RetryStep::Stop | RetryStep::HoldForAuth => {
                    op.final_state = Final::Stopped(status.unwrap_or(0));
                    break 'op;
                }
                RetryStep::Wait { delay_ms } => {
                    let delay = Duration::from_millis(delay_ms);
                    if Instant::now() + delay > deadline {
                        break 'op;
                    }
                    tokio::time::sleep(delay).await;
                }
                // Budget spent or 410: look it up, never start anew blindly.
                RetryStep::Reconcile => break,
            }
        }
        let lookup = send(shared, rng, &op, AttemptKind::Lookup, None).await;
        let found = (lookup.status == Some(200))
            .then(|| serde_json::from_str::<serde_json::Value>(&lookup.body).ok())
            .flatten();
        op.attempts.push(lookup);
        if let Some(found) = found {
            let state = found["state"].as_str().unwrap_or_default();
            let order = found["order"]
                .as_str()
                .and_then(|l| l.strip_prefix("/orders/"));
            if let (Some(order), "completed" | "expired") = (order, state) {
                op.reconciled_order = Some(order.to_owned());
                op.final_state = Final::Reconciled;
                break;
            }
        }
        // Unknown or in progress: the same key goes out again, after a pause.
        round += 1;
        let pause = Duration::from_millis(policy.backoff_ms(round.min(8), rng.unit()) + 100);
        if Instant::now() + pause > deadline {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    op
}

fn order_id(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value["id"].as_str().map(str::to_owned)
}

async fn send(
    shared: &Shared,
    rng: &mut Rng,
    op: &OpHistory,
    kind: AttemptKind,
    inject: Option<&'static str>,
) -> Attempt {
    let server = rng.range(0, shared.bases.len() as u64 - 1) as usize;
    let incarnation = shared.incarnations[server].load(Ordering::SeqCst);
    let base = &shared.bases[server];
    let token = &shared.accounts[op.account].token;
    let request = match kind {
        AttemptKind::Post => {
            let mut r = shared
                .http
                .post(format!("{base}/orders"))
                .header("authorization", format!("Bearer {token}"))
                .header("idempotency-key", format!("\"{}\"", op.key))
                .header("content-type", "application/json")
                .body(op.body.clone());
            if let Some(fault) = inject {
                r = r.header("x-idemkey-test-fault", fault);
            }
            r
        }
        AttemptKind::Lookup => shared
            .http
            .get(format!("{base}/operations/{}", op.key))
            .header("authorization", format!("Bearer {token}")),
    };
    let started = Instant::now();
    let mut attempt = Attempt {
        kind,
        server,
        incarnation,
        status: None,
        error: None,
        timed_out: false,
        body: String::new(),
        content_type: None,
        retry_after: None,
        replayed: false,
        elapsed_ms: 0,
        sent_ms: now_millis().0,
        injected: inject,
    };
    match request.send().await {
        Ok(response) => {
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            attempt.content_type = header("content-type");
            attempt.retry_after = header("retry-after");
            attempt.replayed = header(idemkey_core::REPLAYED_HEADER).as_deref() == Some("true");
            let status = response.status().as_u16();
            match response.bytes().await {
                Ok(bytes) => {
                    attempt.status = Some(status);
                    attempt.body = String::from_utf8_lossy(&bytes).into_owned();
                }
                Err(err) => {
                    attempt.timed_out = err.is_timeout();
                    attempt.error = Some(format!("body: {err}"));
                }
            }
        }
        Err(err) => {
            attempt.timed_out = err.is_timeout();
            attempt.error = Some(err.to_string());
        }
    }
    attempt.elapsed_ms = started.elapsed().as_millis() as u64;
    attempt
}

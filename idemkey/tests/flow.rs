//! Operations of several steps on both SQL stores: one key, a local step
//! (stock in the same database), two external ones (a downstream that
//! holds each effect under its key for a lookup but applies every send it
//! gets, so a resend without a lookup shows as a second effect), retries
//! that resume, lost answers looked up, a declined step undone, and a
//! stale worker fenced out.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use idemkey::Db;
use idemkey::flow::{Attempt, External, Flow, FlowSettings, Flows, Local, StepContext, StepError};
use idemkey::idempotency::{RecordKey, Scope};
use idemkey::in_transaction::{Options, Outcome};
use idemkey::outbox::{Worker, WorkerSettings};
use idemkey::store::StoreSettings;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, RetryPolicy};
use idemkey_testkit::PgCluster;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Notify;

const OPERATION: OperationId = OperationId::from_static("POST /purchases:v1");

/// A downstream that applies every send it gets (it does not deduplicate
/// by `Idempotency-Key`) and answers a lookup by key with the effect it
/// holds: an attempt the library flags `maybe_sent` looks the key up
/// first, so a lost answer is found again, while a resend without that
/// flag is a second effect, counted. It can lose its next answer after
/// applying, refuse for good, be down, or hold its next answers (after
/// acting: slow answers, not late arrivals).
#[derive(Default)]
struct Downstream {
    /// Every effect applied, in order: (key, `step:action`, output).
    effects: Mutex<Vec<(String, String, Value)>>,
    calls: AtomicUsize,
    /// Calls that looked their key up first (`maybe_sent`).
    lookups: AtomicUsize,
    /// Lookups that found the effect (an earlier attempt's).
    found: AtomicUsize,
    /// Sends under a key already applied without a lookup first: a
    /// second effect of one step.
    repeats: AtomicUsize,
    lose_next: AtomicBool,
    refuse: Mutex<Option<&'static str>>,
    /// Gates the next calls' answers wait for, one per call.
    hold: Mutex<VecDeque<Arc<Notify>>>,
    down: AtomicBool,
    /// A step that answers `429` with this `Retry-After`.
    retry_after: Mutex<Option<(&'static str, Duration)>>,
    /// The steps called, in order.
    called: Mutex<Vec<&'static str>>,
}

/// What the downstream saw, for exact comparisons.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    calls: usize,
    lookups: usize,
    found: usize,
    repeats: usize,
}

impl Downstream {
    /// Effects applied for `step` (`name:Action`), repeats included.
    fn applied(&self, step: &str) -> usize {
        self.effects
            .lock()
            .iter()
            .filter(|(_, s, _)| s == step)
            .count()
    }

    /// The output of the first effect applied for `step`.
    fn output(&self, step: &str) -> Option<Value> {
        self.effects
            .lock()
            .iter()
            .find(|(_, s, _)| s == step)
            .map(|(_, _, output)| output.clone())
    }

    fn seen(&self) -> Seen {
        Seen {
            calls: self.calls.load(Ordering::SeqCst),
            lookups: self.lookups.load(Ordering::SeqCst),
            found: self.found.load(Ordering::SeqCst),
            repeats: self.repeats.load(Ordering::SeqCst),
        }
    }

    async fn call(self: Arc<Self>, ctx: StepContext) -> Attempt {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.called.lock().push(ctx.step);
        let busy = *self.retry_after.lock();
        if let Some((step, after)) = busy
            && step == ctx.step
        {
            return Attempt::Retry {
                after: Some(after),
                reason: "429".into(),
            };
        }
        let attempt = self.answer(&ctx);
        let gate = self.hold.lock().pop_front();
        if let Some(gate) = gate {
            gate.notified().await;
        }
        attempt
    }

    /// What the downstream does with a call, and answers.
    fn answer(&self, ctx: &StepContext) -> Attempt {
        if self.down.load(Ordering::SeqCst) {
            return Attempt::Retry {
                after: None,
                reason: "503".into(),
            };
        }
        let key = ctx.downstream_key().to_string();
        let name = format!("{}:{:?}", ctx.step, ctx.action);
        if ctx.maybe_sent {
            self.lookups.fetch_add(1, Ordering::SeqCst);
            let held = self
                .effects
                .lock()
                .iter()
                .find(|(k, _, _)| *k == key)
                .map(|(_, _, output)| output.clone());
            if let Some(found) = held {
                self.found.fetch_add(1, Ordering::SeqCst);
                return Attempt::Done(found);
            }
        }
        if *self.refuse.lock() == Some(ctx.step) {
            return Attempt::Refused("declined".into());
        }
        let output = {
            let mut effects = self.effects.lock();
            if effects.iter().any(|(k, _, _)| *k == key) {
                self.repeats.fetch_add(1, Ordering::SeqCst);
            }
            let output = json!({ "id": format!("{}-{}", ctx.step, effects.len()) });
            effects.push((key, name, output.clone()));
            output
        };
        if self.lose_next.swap(false, Ordering::SeqCst) {
            return Attempt::Uncertain("the answer was lost".into());
        }
        Attempt::Done(output)
    }
}

struct Env {
    db: Db,
    flows: Flows,
    worker: Worker,
    down: Arc<Downstream>,
    _keep: Option<idemkey_testkit::Database>,
    _file: Option<SqliteFile>,
}

/// A test's SQLite database, removed with its WAL and shared-memory files
/// when the test ends.
struct SqliteFile(std::path::PathBuf);

impl Drop for SqliteFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

fn purchase(down: &Arc<Downstream>) -> Flow {
    let charge = Arc::clone(down);
    let refund = Arc::clone(down);
    let confirm = Arc::clone(down);
    let reserve = Local::new()
        .postgres(|tx, ctx| {
            Box::pin(async move {
                let sku = ctx.input["sku"].as_str().unwrap_or_default().to_owned();
                let n = tx
                    .execute(
                        "UPDATE stock SET available = available - 1 WHERE sku = $1 AND available > 0",
                        &[&sku],
                    )
                    .await
                    .map_err(|e| StepError::Retry(e.to_string()))?;
                if n == 0 {
                    return Err(StepError::Refused("out of stock".into()));
                }
                Ok(json!({ "sku": sku }))
            })
        })
        .postgres_undo(|tx, ctx| {
            Box::pin(async move {
                let sku = ctx.input["sku"].as_str().unwrap_or_default().to_owned();
                tx.execute(
                    "UPDATE stock SET available = available + 1 WHERE sku = $1",
                    &[&sku],
                )
                .await
                .map_err(|e| StepError::Retry(e.to_string()))?;
                Ok(Value::Null)
            })
        })
        .sqlite(|conn, ctx| {
            let sku = ctx.input["sku"].as_str().unwrap_or_default();
            let n = conn
                .execute(
                    "UPDATE stock SET available = available - 1 WHERE sku = ?1 AND available > 0",
                    [sku],
                )
                .map_err(|e| StepError::Retry(e.to_string()))?;
            if n == 0 {
                return Err(StepError::Refused("out of stock".into()));
            }
            Ok(json!({ "sku": sku }))
        })
        .sqlite_undo(|conn, ctx| {
            let sku = ctx.input["sku"].as_str().unwrap_or_default();
            conn.execute(
                "UPDATE stock SET available = available + 1 WHERE sku = ?1",
                [sku],
            )
            .map_err(|e| StepError::Retry(e.to_string()))?;
            Ok(Value::Null)
        });
    Flow::new("purchase")
        .local("reserve", reserve)
        .external(
            "charge",
            External::new(move |ctx| Arc::clone(&charge).call(ctx))
                .undo(move |ctx| Arc::clone(&refund).call(ctx)),
        )
        .external(
            "confirm",
            External::new(move |ctx| Arc::clone(&confirm).call(ctx)),
        )
}

fn settings() -> FlowSettings {
    FlowSettings {
        wait: Duration::ZERO,
        call_timeout: Duration::from_secs(5),
        location_prefix: "/purchases/".into(),
        ..FlowSettings::default()
    }
}

fn worker_settings(lease: Duration) -> WorkerSettings {
    WorkerSettings {
        batch: 8,
        concurrency: 16,
        lease,
        idle_poll: Duration::from_millis(10),
        retry: RetryPolicy {
            base_ms: 5,
            cap_ms: 20,
            max_attempts: 8,
        },
        retry_for: Duration::from_secs(3600),
    }
}

async fn env(backend: &str) -> Env {
    let (url, keep, file) = if backend == "postgres" {
        let database = PgCluster::shared()
            .expect("postgres")
            .fresh_database()
            .expect("database");
        (database.url.clone(), Some(database), None)
    } else {
        let path = std::env::temp_dir().join(format!("idemkey-flow-{}.db", uuid::Uuid::new_v4()));
        (
            format!("sqlite://{}", path.display()),
            None,
            Some(SqliteFile(path)),
        )
    };
    let db = Db::open(&url, &StoreSettings::default())
        .await
        .expect("open");
    create_stock(&db).await;
    let down = Arc::new(Downstream::default());
    let flows = Flows::new(db.clone(), vec![purchase(&down)], settings()).expect("flows");
    let worker = flows.attach(Worker::new(
        db.clone(),
        worker_settings(Duration::from_secs(30)),
    ));
    Env {
        db,
        flows,
        worker,
        down,
        _keep: keep,
        _file: file,
    }
}

async fn create_stock(db: &Db) {
    match (
        db.backend_as::<idemkey::store::postgres::PgDb>(),
        db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
    ) {
        (Some(pg), _) => {
            let client = pg.client().await.expect("client");
            client
                .batch_execute(
                    "CREATE TABLE stock (sku text PRIMARY KEY, available int NOT NULL);
                     INSERT INTO stock VALUES ('tea', 2), ('none', 0);",
                )
                .await
                .expect("stock");
        }
        (_, Some(lite)) => {
            lite.with_conn(|conn| {
                conn.execute_batch(
                    "CREATE TABLE stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL);
                     INSERT INTO stock VALUES ('tea', 2), ('none', 0);",
                )
                .map_err(idemkey::store::sqlite::sqlite_error)
            })
            .await
            .expect("stock");
        }
        _ => unreachable!("SQL stores only"),
    }
}

async fn stock(db: &Db, sku: &str) -> i64 {
    let sku = sku.to_owned();
    match (
        db.backend_as::<idemkey::store::postgres::PgDb>(),
        db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
    ) {
        (Some(pg), _) => {
            let client = pg.client().await.expect("client");
            let n: i32 = client
                .query_one("SELECT available FROM stock WHERE sku = $1", &[&sku])
                .await
                .expect("stock")
                .get(0);
            i64::from(n)
        }
        (_, Some(lite)) => lite
            .with_conn(move |conn| {
                conn.query_row("SELECT available FROM stock WHERE sku = ?1", [sku], |r| {
                    r.get(0)
                })
                .map_err(idemkey::store::sqlite::sqlite_error)
            })
            .await
            .expect("stock"),
        _ => unreachable!(),
    }
}

fn key(text: &str) -> RecordKey {
    RecordKey {
        scope: Scope::new("acct-1").expect("scope"),
        operation: OPERATION,
        key: IdempotencyKey::parse(text.as_bytes(), KeyProfile::Lenient).expect("key"),
    }
}

async fn send(env: &Env, k: &str, input: &Value) -> Outcome {
    send_with(env, k, input, &Options::new(Duration::from_secs(3600))).await
}

async fn send_with(env: &Env, k: &str, input: &Value, options: &Options) -> Outcome {
    let fingerprint = Fingerprint::of_json(&OPERATION, &input.to_string()).expect("json");
    env.flows
        .start("purchase", &key(k), fingerprint, input, options)
        .await
        .expect("start")
}

/// Runs the worker until nothing is due for a while.
async fn drain(worker: &Worker) {
    let mut idle = 0;
    while idle < 5 {
        match worker.run_once().await.expect("worker") {
            0 => {
                idle += 1;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            _ => idle = 0,
        }
    }
}

fn body(outcome: &Outcome) -> (u16, Value) {
    let response = match outcome {
        Outcome::Executed(r) | Outcome::Replayed(r) | Outcome::NotStored(r) => r,
        Outcome::Rejected(problem) => return (problem.status(), Value::Null),
    };
    let json = response
        .body
        .as_deref()
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(Value::Null);
    (response.status, json)
}

async fn happy_path(backend: &str) {
    let env = env(backend).await;
    let input = json!({ "sku": "tea" });
    let first = send(&env, "k-1", &input).await;
    assert!(matches!(first, Outcome::Executed(_)), "{first:?}");
    let (status, doc) = body(&first);
    assert_eq!(status, 202, "{doc}");
    assert_eq!(doc["code"], "operation-in-progress");
    assert_eq!(doc["step"], "charge");
    assert_eq!(doc["steps"][0]["state"], "done");
    assert_eq!(doc["steps"][1]["state"], "pending");
    assert_eq!(
        stock(&env.db, "tea").await,
        1,
        "the reservation committed with the key"
    );
    // A retry before the worker ran: the same state, nothing run twice.
    let (status, again) = body(&send(&env, "k-1", &input).await);
    assert_eq!((status, &again["id"]), (202, &doc["id"]));
    drain(&env.worker).await;
    let done = send(&env, "k-1", &input).await;
    assert!(matches!(done, Outcome::Replayed(_)), "{done:?}");
    let (status, result) = body(&done);
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["outputs"]["reserve"]["sku"], "tea");
    assert!(result["outputs"]["charge"]["id"].is_string(), "{result}");
    assert_eq!(
        (
            env.down.applied("charge:Run"),
            env.down.applied("confirm:Run")
        ),
        (1, 1)
    );
    assert_eq!(stock(&env.db, "tea").await, 1);
    // The poll answers the final response too; another scope sees nothing.
    let id = uuid::Uuid::parse_str(doc["id"].as_str().unwrap()).unwrap();
    let view = env.flows.poll("acct-1", id).await.unwrap().expect("view");
    assert_eq!(view.response.status, 200);
    assert!(env.flows.poll("acct-2", id).await.unwrap().is_none());
    // Another payload under the key: 422, nothing runs.
    let (status, _) = body(&send(&env, "k-1", &json!({ "sku": "none" })).await);
    assert_eq!(status, 422);
}

async fn lost_answer_is_looked_up(backend: &str) {
    let env = env(backend).await;
    env.down.lose_next.store(true, Ordering::SeqCst);
    let input = json!({ "sku": "tea" });
    send(&env, "k-2", &input).await;
    drain(&env.worker).await;
    let (status, result) = body(&send(&env, "k-2", &input).await);
    assert_eq!(status, 200, "{result}");
    // The charge's answer was lost once: its second attempt (flagged
    // `maybe_sent`) looked the key up and found the effect, so it was
    // applied once; the confirmation's first attempt sent without a
    // lookup. A second attempt sent blind would be a repeat (a second
    // charge); a lookup on every attempt would be 3 lookups.
    assert_eq!(
        env.down.seen(),
        Seen {
            calls: 3,
            lookups: 1,
            found: 1,
            repeats: 0
        }
    );
    assert_eq!(
        (
            env.down.applied("charge:Run"),
            env.down.applied("confirm:Run")
        ),
        (1, 1)
    );
    assert_eq!(
        Some(&result["outputs"]["charge"]),
        env.down.output("charge:Run").as_ref(),
        "the answer found by the lookup is the one recorded"
    );
}

/// The state document says a step may have been sent from the step's
/// stored flag: after a lost answer the charge is running again with
/// `maybe_sent`, which the client shows as uncertain; a step never sent
/// carries no flag.
async fn a_lost_answer_shows_maybe_sent_in_the_state_document(backend: &str) {
    let env = env(backend).await;
    env.down.lose_next.store(true, Ordering::SeqCst);
    let (status, doc) = body(&send(&env, "k-9", &json!({ "sku": "tea" })).await);
    assert_eq!(status, 202, "{doc}");
    assert_eq!(doc["steps"][1]["name"], "charge");
    assert_eq!(doc["steps"][1].get("maybe_sent"), None, "never sent: {doc}");
    let id = uuid::Uuid::parse_str(doc["id"].as_str().unwrap()).unwrap();
    // One delivery: the provider charges, and its answer is lost.
    assert_eq!(env.worker.run_once().await.expect("worker"), 1);
    let view = env.flows.poll("acct-1", id).await.unwrap().expect("view");
    let charge = &view.document.steps[1];
    assert_eq!(
        (
            charge.name,
            charge.state,
            charge.attempts,
            charge.maybe_sent
        ),
        ("charge", "running", Some(1), true),
        "{:?}",
        view.document
    );
    let json: Value = serde_json::to_value(&view.document).unwrap();
    assert_eq!(json["steps"][1]["maybe_sent"], true, "{json}");
    assert_eq!(json["steps"][2].get("maybe_sent"), None, "{json}");
    // Its next attempt looked the charge up (one charge), and the ended
    // document flags nothing.
    drain(&env.worker).await;
    assert_eq!(env.down.applied("charge:Run"), 1);
    let view = env.flows.poll("acct-1", id).await.unwrap().expect("view");
    assert!(
        view.document.steps.iter().all(|s| !s.maybe_sent),
        "{:?}",
        view.document
    );
}

async fn decline_undoes_the_reservation(backend: &str) {
    let env = env(backend).await;
    *env.down.refuse.lock() = Some("charge");
    let input = json!({ "sku": "tea" });
    send(&env, "k-3", &input).await;
    assert_eq!(stock(&env.db, "tea").await, 1);
    drain(&env.worker).await;
    let (status, result) = body(&send(&env, "k-3", &input).await);
    assert_eq!(status, 409, "{result}");
    assert_eq!(result["failed_step"], "charge");
    assert_eq!(
        stock(&env.db, "tea").await,
        2,
        "the reservation was undone once"
    );
    assert_eq!(env.down.applied("confirm:Run"), 0);
    // Out of stock in the first transaction: failed at once, nothing queued.
    let (status, result) = body(&send(&env, "k-4", &json!({ "sku": "none" })).await);
    assert_eq!((status, &result["failed_step"]), (409, &json!("reserve")));
    assert_eq!(env.db.outbox_stats().await.unwrap().pending, 0);
}

async fn a_late_refusal_undoes_every_step_before_it_in_reverse(backend: &str) {
    let env = env(backend).await;
    *env.down.refuse.lock() = Some("confirm");
    let input = json!({ "sku": "tea" });
    send(&env, "k-7", &input).await;
    drain(&env.worker).await;
    let (status, result) = body(&send(&env, "k-7", &input).await);
    assert_eq!((status, &result["failed_step"]), (409, &json!("confirm")));
    // The charge was refunded under its own compensation key, once; the
    // reservation given back, once.
    assert_eq!(env.down.applied("charge:Run"), 1);
    assert_eq!(env.down.applied("charge:Compensate"), 1);
    assert_eq!(stock(&env.db, "tea").await, 2);
    let id = uuid::Uuid::parse_str(result["id"].as_str().unwrap()).unwrap();
    let view = env.flows.poll("acct-1", id).await.unwrap().expect("view");
    let states: Vec<&str> = view.row.steps.iter().map(|s| s.state.as_str()).collect();
    assert_eq!(states, ["compensated", "compensated", "failed"]);
}

async fn a_stale_worker_is_fenced_out(backend: &str) {
    let env = env(backend).await;
    // The charge's two attempts hang with their answers: A's after it
    // applied the charge, B's after its lookup found it.
    let (gate_a, gate_b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    env.down
        .hold
        .lock()
        .extend([Arc::clone(&gate_a), Arc::clone(&gate_b)]);
    let input = json!({ "sku": "tea" });
    let (_, doc) = body(&send(&env, "k-5", &input).await);
    let id = uuid::Uuid::parse_str(doc["id"].as_str().unwrap()).unwrap();
    let metrics = Arc::new(idemkey::outbox::OutboxMetrics::default());
    let worker = |lease| {
        env.flows
            .attach(Worker::new(env.db.clone(), worker_settings(lease)))
            .with_metrics(Arc::clone(&metrics))
    };
    // Worker A claims the charge for 200 ms and hangs in the call.
    let stale = worker(Duration::from_millis(200));
    let a = tokio::spawn(async move { stale.run_once().await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Its lease ended: worker B takes the charge over and hangs too.
    let taker = worker(Duration::from_secs(30));
    let b = tokio::spawn(async move { taker.run_once().await });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while env.down.calls.load(Ordering::SeqCst) < 2 {
        assert!(std::time::Instant::now() < deadline, "B never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A wakes up while B holds the step and tries to record: fenced, so
    // the charge is not recorded by A (nor the flow moved on).
    gate_a.notify_one();
    a.await.expect("join").expect("worker A");
    assert!(
        metrics
            .snapshot()
            .iter()
            .any(|(_, outcome, n)| *outcome == "lease-lost" && *n == 1),
        "{:?}",
        metrics.snapshot()
    );
    let view = env.flows.poll("acct-1", id).await.unwrap().expect("view");
    let names: Vec<&str> = view.row.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["reserve"], "the fenced-out owner recorded a step");
    // B records the charge; the confirmation follows.
    gate_b.notify_one();
    b.await.expect("join").expect("worker B");
    drain(&env.worker).await;
    // A's send applied the charge; B's take-over (flagged `maybe_sent`)
    // looked the key up and found it; the confirmation was sent once.
    assert_eq!(
        env.down.seen(),
        Seen {
            calls: 3,
            lookups: 1,
            found: 1,
            repeats: 0
        }
    );
    assert_eq!(env.down.applied("charge:Run"), 1);
    assert_eq!(env.down.applied("confirm:Run"), 1);
    assert_eq!(stock(&env.db, "tea").await, 1);
    // One row per step, the charge's recorded by B's claim (the second).
    let (status, result) = body(&send(&env, "k-5", &input).await);
    assert_eq!(status, 200, "{result}");
    let view = env.flows.poll("acct-1", id).await.unwrap().expect("view");
    let rows: Vec<(&str, &str, i32)> = view
        .row
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.state.as_str(), s.attempts))
        .collect();
    assert_eq!(
        rows,
        [
            ("reserve", "done", 1),
            ("charge", "done", 2),
            ("confirm", "done", 1)
        ]
    );
    assert_eq!(
        Some(&result["outputs"]["charge"]),
        env.down.output("charge:Run").as_ref()
    );
}

async fn a_dead_step_is_listed_and_retried_like_the_outbox(backend: &str) {
    let env = env(backend).await;
    env.down.down.store(true, Ordering::SeqCst);
    let input = json!({ "sku": "tea" });
    let (_, doc) = body(&send(&env, "k-6", &input).await);
    // 8 attempts with 5-20 ms backoffs, then a dead letter.
    drain(&env.worker).await;
    let dead = env.db.outbox_list(Some("dead"), 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].effect, "flow-step");
    assert_eq!(dead[0].resource_id.as_deref(), doc["id"].as_str());
    // A poll shows it dead (a retry of the key would revive it).
    let id = uuid::Uuid::parse_str(doc["id"].as_str().unwrap()).unwrap();
    let stalled = env.flows.poll("acct-1", id).await.unwrap().expect("view");
    let (status, stalled) = body(&Outcome::Replayed(stalled.response));
    assert_eq!(
        (status, &stalled["steps"][1]["state"]),
        (202, &json!("dead"))
    );
    // The provider is back; the operator retries the dead letter.
    env.down.down.store(false, Ordering::SeqCst);
    let requeued = env
        .db
        .outbox_retry(None, Duration::from_secs(86_400), false)
        .await
        .unwrap();
    assert_eq!(requeued.requeued, 1);
    drain(&env.worker).await;
    let (status, _) = body(&send(&env, "k-6", &input).await);
    assert_eq!(status, 200);
    assert_eq!(env.down.applied("charge:Run"), 1);
}

async fn ended_executions_are_trimmed_with_the_records(backend: &str) {
    use idemkey::idempotency::Records;
    let env = env(backend).await;
    let input = json!({ "sku": "none" });
    // Out of stock: ended in its first transaction.
    let (status, failed) = body(&send(&env, "k-8", &input).await);
    assert_eq!(status, 409, "{failed}");
    let ended = uuid::Uuid::parse_str(failed["id"].as_str().unwrap()).unwrap();
    let kept = env.db.trim(Duration::from_secs(3600), 100).await.unwrap();
    assert_eq!(kept.deleted, 0, "inside the retention: kept");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        env.flows.poll("acct-1", ended).await.unwrap().is_some(),
        "inside the retention: the execution is kept"
    );
    let gone = env.db.trim(Duration::from_millis(1), 100).await.unwrap();
    assert!(gone.deleted >= 1, "{gone:?}");
    assert!(
        env.flows.poll("acct-1", ended).await.unwrap().is_none(),
        "past the retention: the ended execution is trimmed with its record"
    );
    let running = send(&env, "k-9", &json!({ "sku": "tea" })).await;
    assert_eq!(body(&running).0, 202);
    tokio::time::sleep(Duration::from_millis(20)).await;
    env.db.trim(Duration::from_millis(1), 100).await.unwrap();
    let id = uuid::Uuid::parse_str(body(&running).1["id"].as_str().unwrap()).unwrap();
    assert!(
        env.flows.poll("acct-1", id).await.unwrap().is_some(),
        "a running execution is never trimmed"
    );
}

/// Under `reexecute`, a retry past the replay window of an execution that
/// has not ended resumes it (no second execution: no second reservation,
/// no new step keys); once ended, its final answer replays for the whole
/// window counted from the end, and only then may the key run again.
async fn a_running_execution_is_never_re_executed(backend: &str) {
    let env = env(backend).await;
    let window = Duration::from_millis(400);
    let options = Options {
        expiry_policy: idemkey_core::ExpiryPolicy::Reexecute,
        ..Options::new(window)
    };
    let input = json!({ "sku": "tea" });
    let (status, first) = body(&send_with(&env, "k-r", &input, &options).await);
    assert_eq!(status, 202);
    // The charge has not run; the window the client asked for has passed.
    tokio::time::sleep(window + Duration::from_millis(200)).await;
    let (status, again) = body(&send_with(&env, "k-r", &input, &options).await);
    assert_eq!((status, &again["id"]), (202, &first["id"]), "{again}");
    assert_eq!(stock(&env.db, "tea").await, 1, "reserved once");
    drain(&env.worker).await;
    // Ended well past the window counted from the start: its answer
    // replays, counted from the end.
    let replayed = send_with(&env, "k-r", &input, &options).await;
    assert!(matches!(replayed, Outcome::Replayed(_)), "{replayed:?}");
    let (status, done) = body(&replayed);
    assert_eq!((status, &done["id"]), (200, &first["id"]), "{done}");
    assert_eq!(env.down.applied("charge:Run"), 1);
    // Past the window after the end: the key runs again (a new execution).
    tokio::time::sleep(window + Duration::from_millis(200)).await;
    let (_, next) = body(&send_with(&env, "k-r", &input, &options).await);
    assert_ne!(next["id"], first["id"], "{next}");
    // Ended in its first transaction (out of stock): the window also
    // counts from then, and closes.
    let none = json!({ "sku": "none" });
    let (status, _) = body(&send_with(&env, "k-n", &none, &options).await);
    assert_eq!(status, 409);
    let replayed = send_with(&env, "k-n", &none, &options).await;
    assert!(matches!(replayed, Outcome::Replayed(_)), "{replayed:?}");
    tokio::time::sleep(window + Duration::from_millis(200)).await;
    let rerun = send_with(&env, "k-n", &none, &options).await;
    assert!(matches!(rerun, Outcome::Executed(_)), "{rerun:?}");
}

/// A flow started before the window was kept open (its record's window
/// counted from the start, as earlier versions stored it) still gets its
/// window from its end.
async fn an_earlier_versions_running_flow_gets_its_window_from_its_end(backend: &str) {
    let env = env(backend).await;
    let input = json!({ "sku": "tea" });
    let (status, first) = body(&send(&env, "k-u", &input).await);
    assert_eq!(status, 202);
    // The record as the version before stored it: a window of 400 ms from
    // the claim.
    let shrink = match backend {
        "postgres" => {
            "UPDATE idempotency_records SET replay_until = created_at + interval '400 milliseconds', \
             check_at = created_at + interval '400 milliseconds' WHERE key = 'k-u'"
        }
        _ => "UPDATE idempotency_records SET replay_until = created_at + 400 WHERE key = 'k-u'",
    };
    exec(&env.db, shrink).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    drain(&env.worker).await;
    let options = Options {
        expiry_policy: idemkey_core::ExpiryPolicy::Reexecute,
        ..Options::new(Duration::from_millis(400))
    };
    let replayed = send_with(&env, "k-u", &input, &options).await;
    assert!(matches!(replayed, Outcome::Replayed(_)), "{replayed:?}");
    let (status, done) = body(&replayed);
    assert_eq!((status, &done["id"]), (200, &first["id"]), "{done}");
}

async fn exec(db: &Db, sql: &'static str) {
    match (
        db.backend_as::<idemkey::store::postgres::PgDb>(),
        db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
    ) {
        (Some(pg), _) => {
            pg.client()
                .await
                .expect("client")
                .batch_execute(sql)
                .await
                .expect("sql");
        }
        (_, Some(lite)) => lite
            .with_conn(move |conn| {
                conn.execute_batch(sql)
                    .map_err(idemkey::store::sqlite::sqlite_error)
            })
            .await
            .expect("sql"),
        _ => unreachable!(),
    }
}

/// A step's budget is a duration: it is retried through an outage as long
/// as the budget lasts (well past a count of attempts), then dead; a
/// client's retry of the key revives it, looking the effect up first.
async fn a_step_waits_out_an_outage_and_a_retry_revives_it(backend: &str) {
    let env = env(backend).await;
    let worker = env.flows.attach(Worker::new(
        env.db.clone(),
        WorkerSettings {
            retry: RetryPolicy {
                base_ms: 5,
                cap_ms: 20,
                max_attempts: u32::MAX,
            },
            retry_for: Duration::from_millis(600),
            ..worker_settings(Duration::from_secs(30))
        },
    ));
    env.down.down.store(true, Ordering::SeqCst);
    let input = json!({ "sku": "tea" });
    send(&env, "k-o", &input).await;
    // Until the budget ends (not until the worker looks idle: under load a
    // backoff can outlast `drain`'s idle rounds).
    tokio::time::timeout(Duration::from_secs(20), async {
        while env.db.outbox_stats().await.unwrap().dead == 0 {
            worker.run_once().await.expect("worker");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the budget ends");
    let dead = env.db.outbox_list(Some("dead"), 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let tried = env.down.calls.load(Ordering::SeqCst);
    assert!(
        tried > 10,
        "retried for the duration, not 10 times: {tried}"
    );
    assert_eq!(env.db.outbox_stats().await.unwrap().dead, 1);
    // The provider is back; the client retries its key.
    env.down.down.store(false, Ordering::SeqCst);
    let lookups = env.down.lookups.load(Ordering::SeqCst);
    let (status, _) = body(&send(&env, "k-o", &input).await);
    assert_eq!(status, 202);
    drain(&worker).await;
    let (status, done) = body(&send(&env, "k-o", &input).await);
    assert_eq!(status, 200, "{done}");
    assert_eq!(env.down.applied("charge:Run"), 1);
    assert!(
        env.down.lookups.load(Ordering::SeqCst) > lookups,
        "the revived step looked its effect up first"
    );
    assert_eq!(env.db.outbox_stats().await.unwrap().dead, 0);
}

/// A downstream's `Retry-After` pauses its own step, not the others: a
/// mail sink's hour-long pause leaves every charge running.
async fn a_retry_after_pauses_only_its_step(backend: &str) {
    let env = env(backend).await;
    *env.down.retry_after.lock() = Some(("confirm", Duration::from_secs(3600)));
    let input = json!({ "sku": "tea" });
    send(&env, "k-p1", &input).await;
    drain(&env.worker).await;
    assert!(env.flows.paused_for("purchase", "confirm", false).is_some());
    assert_eq!(env.flows.paused_for("purchase", "charge", false), None);
    assert_eq!(env.worker.paused_for("flow-step"), None);
    // Another purchase: its charge runs; its confirmation waits unsent.
    send(&env, "k-p2", &input).await;
    drain(&env.worker).await;
    assert_eq!(env.down.applied("charge:Run"), 2);
    let confirms = env
        .down
        .called
        .lock()
        .iter()
        .filter(|s| **s == "confirm")
        .count();
    assert_eq!(confirms, 1, "the paused step is not called again");
}

/// A local step undone on one backend must be undone on the store's, or
/// a failure after it would keep its effect (stock held) for good.
async fn a_compensable_step_needs_the_undo_of_its_backend(backend: &str) {
    let env = env(backend).await;
    let noop =
        |_: &rusqlite::Connection, _: StepContext| -> Result<Value, StepError> { Ok(Value::Null) };
    let other = Local::new()
        .postgres(|_, _| Box::pin(async { Ok(Value::Null) }))
        .sqlite(noop);
    let other = if backend == "postgres" {
        other.sqlite_undo(noop)
    } else {
        other.postgres_undo(|_, _| Box::pin(async { Ok(Value::Null) }))
    };
    let flow = Flow::new("half").local("hold", other);
    let refused = Flows::new(env.db.clone(), vec![flow], settings());
    let err = refused.expect_err("no undo on this backend");
    assert!(err.to_string().contains("undo"), "{err}");
    // With both undos (or none), it is accepted.
    assert!(Flows::new(env.db.clone(), vec![purchase(&env.down)], settings()).is_ok());
    let plain = Local::new()
        .postgres(|_, _| Box::pin(async { Ok(Value::Null) }))
        .sqlite(noop);
    let flow = Flow::new("plain").local("note", plain);
    assert!(Flows::new(env.db.clone(), vec![flow], settings()).is_ok());
}

macro_rules! both {
    ($($name:ident),+) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name("sqlite").await })+
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name("postgres").await })+
        }
    };
}

both!(
    happy_path,
    lost_answer_is_looked_up,
    a_lost_answer_shows_maybe_sent_in_the_state_document,
    decline_undoes_the_reservation,
    a_stale_worker_is_fenced_out,
    a_late_refusal_undoes_every_step_before_it_in_reverse,
    a_dead_step_is_listed_and_retried_like_the_outbox,
    ended_executions_are_trimmed_with_the_records,
    a_running_execution_is_never_re_executed,
    an_earlier_versions_running_flow_gets_its_window_from_its_end,
    a_step_waits_out_an_outage_and_a_retry_revives_it,
    a_retry_after_pauses_only_its_step,
    a_compensable_step_needs_the_undo_of_its_backend
);

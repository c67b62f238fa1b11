//! The step journal's paths, replayed against the library on PostgreSQL
//! and SQLite: each event of a path of [`StepJournal`] is one piece of the
//! library's real work (the table in `idemkey_model::steps`), and after
//! each event what the store holds must be the model's state.
//!
//! **The harness.** A flow like the model's: `reserve` (local, its SQL on
//! a `stock` table in the journal's transaction, undone by a release),
//! `charge` (external, undone by a refund) and `confirm` (external). The
//! external steps call a downstream that deduplicates by the step key
//! (`StepContext::downstream_key`): a key it has seen gets the answer it
//! got then, a new one is applied, or declined when the path says
//! `refused`. Two worker slots, `w0` and `w1`, each claim with
//! `Db::claim_outbox(&["flow-step"], 1, lease)` and hand the message to
//! `Flows::run_step`, the hook an outbox worker runs, in a task of their
//! own. The external step function is the harness's, so it pauses at the
//! model's points (channels, per task): before looking the effect up
//! (`Lookup`, when the library says `maybe_sent`), before calling it
//! (`Call`), and with its answer before returning it (`Commit`: the
//! answer goes back to `run_step`, which runs the fenced recording
//! transaction, or hands a lost answer back as uncertain). The library
//! makes one call of the step function per attempt and leaves the lookup
//! and the send to it (telling it `maybe_sent`), so the model's `Lookup`
//! and `Call` are the two halves of that call: replayed as they are.
//!
//! | event | on the library |
//! |---|---|
//! | `Send` | `Flows::start` with the key (the first transaction, or a replay that resumes; once ended, the final response) |
//! | `Claim(w)` | `claim_outbox`, then `run_step` in `w`'s task up to its step function's first point (an external step); a local step's message is held |
//! | `Lookup(w)` | the step function looks the effect up at the downstream |
//! | `Call { w, refused, lost }` | the step function calls the downstream: applied, a seen key's answer, or declined; `lost`: it will answer uncertain |
//! | `Commit(w)`, answered | the step function returns; `run_step` runs the recording transaction: `Recorded`, or `Fenced` (rolled back). A held local step's message: `run_step` now (its SQL runs in that transaction) |
//! | `Commit(w)`, answer lost | `run_step` answers `Settled::Again` (uncertain); the harness settles the message back to pending as the worker does (`settle_outbox`, `Settlement::Retry`) |
//! | `Crash(w)` | `w`'s task is aborted; its claim stays and ends at the store's clock |
//! | `Expire` | the current claim's `lease_until` is moved to the store's now |
//!
//! After each event the harness compares: the flow row (state, position,
//! failed step), the step rows, the execution's live outbox message (its
//! step and action, attempts, and whose lease is live at the store's
//! clock), no message failed or dead, what the downstream remembers under
//! each step key and how many effects it applied, the local step's
//! reservations and releases (counted in the `stock` row, with the stock
//! itself), each slot's place against the model's worker (which of the
//! step function's points `run_step` reached: whether it looked up is the
//! library's `maybe_sent`), what each `run_step` and each `Flows::start`
//! answered (202 with the running or compensating state document, the
//! final 200 or 409 replayed with the body the model's end stands for:
//! every step's output as its downstream answered, or the failed step).
//!
//! **What is not replayed as the model has it, and why.**
//!
//! - The leases' time. Claims last a minute, so no lease ends by itself
//!   during a path; `Expire` ends the current one by setting its
//!   `lease_until` to the store's now (a test hook that stands for the
//!   lease's time passing: the store's own clock then decides, at the
//!   next claim and at the recording's fence), and `Crash` ends the
//!   crashed worker's claim the same way (the model ends it at the crash:
//!   nothing else acts on the message meanwhile).
//! - A local step's claim and its work. `run_step` runs a local step's
//!   message in one go (it reads the execution, then the recording
//!   transaction runs the step's SQL), with no point to pause at outside a
//!   transaction (pausing inside would hold the journal's locks). The
//!   harness holds the claimed message and calls `run_step` at `Commit`:
//!   the claim is the store's from `Claim` on, the work happens at
//!   `Commit`, as in the model.
//! - `run_step`'s read of the execution before an external step's call
//!   happens within `Claim` (it is no event of the model: the recording
//!   transaction reads the execution again under its lock).
//! - The lost answer's hand-back. `run_step` answers `Settled::Again`; the
//!   worker's settling of it is private to `Worker`, so the harness makes
//!   the same `settle_outbox` call, due at once (`Retry` after zero: the
//!   model has no backoff). Its boolean is not compared: an owner whose
//!   lease ended but that nobody took over still puts the message back
//!   (the outbox's settle is fenced by the lease token), which leaves the
//!   row the model has (pending, no live lease, the same attempts).
//! - Whatever the model leaves out: backoff, the attempts' budget and dead
//!   letters, temporary failures (`Attempt::Retry`), the call timeout
//!   (longer than any path), and real concurrency: each event's work ends
//!   before the next starts, so the row locks (SQLite: the write lock)
//!   that serialize two recordings are not what decides here: the fence
//!   is (`idemkey/tests/flow.rs`'s stale worker covers real overlap).
//!
//! **What it found.** The recording's fence compared the claim's lease
//! token, not its end: an owner whose lease had ended at the store's clock
//! still recorded its step as long as no other worker had claimed the
//! message since (`Send, Claim(0), Call, Expire, Commit(0)`: the model
//! rolls that recording back, the library committed it). The token alone
//! kept two owners apart, but the checked protocol (and the documented
//! one: a claim is a lease ended by the store's clock) is the stricter
//! fence, so the journal's settle now also requires the lease not to have
//! ended (`lease_until` after the store's now, PostgreSQL and SQLite).
//!
//! The paths: [`cover`] picks seeded random walks that make the most
//! transitions, and for each of the model's reachability targets the
//! sample misses, the shortest prefix of a walk of the pool that reaches
//! it is added; every event kind and the transitions the checker's own
//! export covers must appear. A defective model (no fence) diverges from
//! the library on its counterexample: the comparisons bite.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemkey::Db;
use idemkey::StoreError;
use idemkey::flow::{
    Attempt, External, Flow, FlowSettings, Flows, Local, STEP_EFFECT, StepContext, StepError,
};
use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
use idemkey::in_transaction::{Options, Outcome as Answer};
use idemkey::outbox::{Delivery, OutboxMessage, Settled, Settlement};
use idemkey::store::StoreSettings;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, StepAction as KeyAction};
use idemkey_model::steps::{
    CHARGE, CONFIRM, Defect, Event, FLOW, FlowState, Outcome, RESERVE, STEPS, State, StepAction,
    StepIndex, StepJournal, StepState, Worker, properties,
};
use idemkey_model::{Walk, cover, transitions, walks};
use idemkey_testkit::PgCluster;
use parking_lot::Mutex;
use serde_json::{Value, json};
use stateright::{Checker as _, Expectation, HasDiscoveries, Model as _};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const OPERATION: OperationId = OperationId::from_static("POST /purchases:v1");
/// A claim's lease: longer than any path, so only `Expire` and `Crash` end
/// one.
const LEASE: Duration = Duration::from_secs(60);
/// How long the harness waits for `run_step` to reach its next point.
const PATIENCE: Duration = Duration::from_secs(30);

/// Stops the replay of a path with a divergence unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

// ---------------------------------------------------------------------
// The downstream and the step function's points.

/// What the downstream did under one step key.
#[derive(Clone, Debug)]
struct Seen {
    step: StepIndex,
    action: StepAction,
    outcome: Outcome,
    output: Value,
}

/// The external steps' downstream: deduplicates by the step key.
#[derive(Default)]
struct Downstream {
    seen: Mutex<HashMap<String, Seen>>,
    /// Effects applied, per step and action.
    applied: Mutex<[[u8; 2]; STEPS]>,
}

impl Downstream {
    fn lookup(&self, key: &str) -> Option<Seen> {
        self.seen.lock().get(key).cloned()
    }

    /// A call under `key`: a seen key gets its answer again; a new one is
    /// declined (`refused`) or applied.
    fn call(&self, key: &str, step: StepIndex, action: StepAction, refused: bool) -> Seen {
        let mut seen = self.seen.lock();
        if let Some(known) = seen.get(key) {
            return known.clone();
        }
        let answer = if refused {
            Seen {
                step,
                action,
                outcome: Outcome::Declined,
                output: Value::Null,
            }
        } else {
            self.applied.lock()[usize::from(step)][action.index()] += 1;
            Seen {
                step,
                action,
                outcome: Outcome::Ok,
                output: json!({ "id": format!("{}-{}", FLOW[usize::from(step)].name, action.as_str()) }),
            }
        };
        seen.insert(key.to_owned(), answer.clone());
        answer
    }

    /// What it remembers, per step and action (the model's `downstream`).
    fn table(&self) -> [[Option<Outcome>; 2]; STEPS] {
        let mut table = [[None; 2]; STEPS];
        for seen in self.seen.lock().values() {
            table[usize::from(seen.step)][seen.action.index()] = Some(seen.outcome);
        }
        table
    }
}

/// Where the step function of a slot's `run_step` paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reached {
    /// Before looking the effect up (the library said `maybe_sent`).
    Lookup,
    /// Before calling the downstream.
    Call,
    /// With the downstream's answer, before returning it.
    Answered(Outcome),
    /// With no answer (lost), before returning `Uncertain`.
    Uncertain,
}

/// What the harness lets the step function do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Go {
    Lookup,
    Call { refused: bool, lost: bool },
    Answer,
}

type Gate = Mutex<Option<(mpsc::UnboundedSender<Reached>, mpsc::UnboundedReceiver<Go>)>>;

tokio::task_local! {
    /// The channels of the slot whose task runs this `run_step`.
    static GATE: Gate;
}

/// The model's step index of a step's name.
fn step_index(name: &str) -> StepIndex {
    let i = FLOW
        .iter()
        .position(|s| s.name == name)
        .expect("a step of the flow");
    StepIndex::try_from(i).expect("three steps")
}

/// An external step (or its compensation): the downstream call, paused at
/// each of the model's points until the harness lets it on.
async fn external(down: Arc<Downstream>, ctx: StepContext) -> Attempt {
    let gate = GATE.try_with(|g| g.lock().take()).ok().flatten();
    let Some((reached, mut go)) = gate else {
        return Attempt::Retry {
            after: None,
            reason: "called outside a worker slot".into(),
        };
    };
    let step = step_index(ctx.step);
    let action = match ctx.action {
        KeyAction::Run => StepAction::Run,
        KeyAction::Compensate => StepAction::Compensate,
    };
    let key = ctx.downstream_key().to_string();
    let gone = || Attempt::Uncertain("the harness let go".into());
    let mut found = None;
    if ctx.maybe_sent {
        let _ = reached.send(Reached::Lookup);
        if go.recv().await != Some(Go::Lookup) {
            return gone();
        }
        found = down.lookup(&key);
    }
    let (seen, lost) = match found {
        Some(seen) => (seen, false),
        None => {
            let _ = reached.send(Reached::Call);
            let Some(Go::Call { refused, lost }) = go.recv().await else {
                return gone();
            };
            (down.call(&key, step, action, refused), lost)
        }
    };
    let _ = reached.send(if lost {
        Reached::Uncertain
    } else {
        Reached::Answered(seen.outcome)
    });
    if go.recv().await != Some(Go::Answer) {
        return gone();
    }
    match (lost, seen.outcome) {
        (true, _) => Attempt::Uncertain("the answer was lost".into()),
        (false, Outcome::Ok) => Attempt::Done(seen.output),
        (false, Outcome::Declined) => Attempt::Refused("declined".into()),
    }
}

const RESERVE_PG: &str = "UPDATE stock SET available = available - 1, reserved = reserved + 1 \
                          WHERE sku = $1 AND available > 0";
const RELEASE_PG: &str =
    "UPDATE stock SET available = available + 1, released = released + 1 WHERE sku = $1";

/// The flow the model runs, its downstream `down`.
fn purchase(down: &Arc<Downstream>) -> Flow {
    let (charge, refund, confirm) = (Arc::clone(down), Arc::clone(down), Arc::clone(down));
    let reserve = Local::new()
        .postgres(|tx, ctx| {
            Box::pin(async move {
                let sku = ctx.input["sku"].as_str().unwrap_or_default().to_owned();
                let n = tx
                    .execute(RESERVE_PG, &[&sku])
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
                tx.execute(RELEASE_PG, &[&sku])
                    .await
                    .map_err(|e| StepError::Retry(e.to_string()))?;
                Ok(Value::Null)
            })
        })
        .sqlite(|conn, ctx| {
            let sku = ctx.input["sku"].as_str().unwrap_or_default();
            let n = conn
                .execute(&RESERVE_PG.replace('$', "?"), [sku])
                .map_err(|e| StepError::Retry(e.to_string()))?;
            if n == 0 {
                return Err(StepError::Refused("out of stock".into()));
            }
            Ok(json!({ "sku": sku }))
        })
        .sqlite_undo(|conn, ctx| {
            let sku = ctx.input["sku"].as_str().unwrap_or_default();
            conn.execute(&RELEASE_PG.replace('$', "?"), [sku])
                .map_err(|e| StepError::Retry(e.to_string()))?;
            Ok(Value::Null)
        });
    Flow::new("purchase")
        .local("reserve", reserve)
        .external(
            "charge",
            External::new(move |ctx| external(Arc::clone(&charge), ctx))
                .undo(move |ctx| external(Arc::clone(&refund), ctx)),
        )
        .external(
            "confirm",
            External::new(move |ctx| external(Arc::clone(&confirm), ctx)),
        )
}

fn settings() -> FlowSettings {
    FlowSettings {
        // Answer at once: the paths decide when anything else happens.
        wait: Duration::ZERO,
        // Longer than any path: a paused call never times out.
        call_timeout: Duration::from_secs(600),
        location_prefix: "/purchases/".into(),
        ..FlowSettings::default()
    }
}

// ---------------------------------------------------------------------
// The store: the harness's reads and its clock hook, in SQL that both
// backends run (`$n` becomes `?n` on SQLite, `{now}` the store's clock).

async fn sql_rows(db: &Db, sql: &str, params: &[String]) -> Vec<Vec<Option<String>>> {
    match (
        db.backend_as::<idemkey::store::postgres::PgDb>(),
        db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
    ) {
        (Some(pg), _) => {
            let sql = sql.replace("{now}", "statement_timestamp()");
            let client = pg.client().await.expect("a connection");
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let rows = client.query(&sql, &params).await.expect(&sql);
            rows.iter()
                .map(|r| (0..r.len()).map(|i| r.get(i)).collect())
                .collect()
        }
        (_, Some(lite)) => {
            let sql = sqlite_sql(sql);
            let params = params.to_vec();
            lite.with_conn(move |conn| {
                let mut stmt = conn.prepare(&sql).expect(&sql);
                let n = stmt.column_count();
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(params.iter()), |row| {
                        (0..n).map(|i| row.get(i)).collect()
                    })
                    .and_then(Iterator::collect)
                    .expect(&sql);
                Ok(rows)
            })
            .await
            .expect("SQLite")
        }
        _ => unreachable!("SQL stores only"),
    }
}

async fn sql_exec(db: &Db, sql: &str, params: &[String]) -> u64 {
    match (
        db.backend_as::<idemkey::store::postgres::PgDb>(),
        db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
    ) {
        (Some(pg), _) => {
            let sql = sql.replace("{now}", "statement_timestamp()");
            let client = pg.client().await.expect("a connection");
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            client.execute(&sql, &params).await.expect(&sql)
        }
        (_, Some(lite)) => {
            let sql = sqlite_sql(sql);
            let params = params.to_vec();
            lite.with_conn(move |conn| {
                let n = conn
                    .execute(&sql, rusqlite::params_from_iter(params.iter()))
                    .expect(&sql);
                Ok(n as u64)
            })
            .await
            .expect("SQLite")
        }
        _ => unreachable!("SQL stores only"),
    }
}

fn sqlite_sql(sql: &str) -> String {
    sql.replace(
        "{now}",
        "CAST(round(unixepoch('subsec') * 1000) AS INTEGER)",
    )
    .replace('$', "?")
}

/// The execution's row of the key: state, position, failed step.
const FLOW_ROW: &str = "SELECT state, CAST(position AS TEXT), failed_step FROM idemkey_flows \
     WHERE scope = $1 AND operation = $2 AND key = $3";
/// Its step rows.
const STEP_ROWS: &str = "SELECT CAST(s.idx AS TEXT), s.state FROM idemkey_steps s \
     JOIN idemkey_flows f ON f.id = s.flow_id \
     WHERE f.scope = $1 AND f.operation = $2 AND f.key = $3 ORDER BY s.idx";
/// Its step messages: status, payload, attempts, and the lease if live at
/// the store's clock.
const MESSAGES: &str = "SELECT status, payload, CAST(attempts AS TEXT), \
     CASE WHEN lease_until > {now} THEN CAST(lease AS TEXT) END FROM outbox \
     WHERE scope = $1 AND operation = $2 AND key = $3 AND effect = 'flow-step' \
       AND status IN ('pending', 'failed', 'dead') ORDER BY id";
/// The test hook for `Expire`: the current claim's lease ends now, at the
/// store's clock (time passing, without waiting for it).
const EXPIRE: &str = "UPDATE outbox SET lease_until = {now} \
     WHERE scope = $1 AND operation = $2 AND key = $3 AND effect = 'flow-step' \
       AND status = 'pending' AND lease_until > {now}";
/// The same for one claim (`Crash`): a no-op once it ended or was taken
/// over.
const END_CLAIM: &str = "UPDATE outbox SET lease_until = {now} \
     WHERE CAST(id AS TEXT) = $1 AND CAST(lease AS TEXT) = $2 AND status = 'pending' \
       AND lease_until > {now}";
const STOCK: &str = "SELECT CAST(available AS TEXT), CAST(reserved AS TEXT), \
     CAST(released AS TEXT) FROM stock WHERE sku = $1";

async fn create_stock(db: &Db) {
    let sql = "CREATE TABLE IF NOT EXISTS stock (sku text PRIMARY KEY, available bigint NOT NULL, \
               reserved bigint NOT NULL, released bigint NOT NULL)";
    sql_exec(db, sql, &[]).await;
}

// ---------------------------------------------------------------------
// The replay.

/// One worker slot.
enum Slot {
    Idle,
    /// A local step's claimed message: `run_step` runs it at `Commit`.
    Held(OutboxMessage),
    /// An external step's `run_step`, paused at one of its points.
    Running(Running),
}

struct Running {
    message: OutboxMessage,
    at: Reached,
    go: mpsc::UnboundedSender<Go>,
    reached: mpsc::UnboundedReceiver<Reached>,
    task: JoinHandle<Result<Settled, StoreError>>,
}

impl Running {
    /// Waits for the step function's next point.
    async fn next(&mut self, context: &str) -> Result<Reached, String> {
        match tokio::time::timeout(PATIENCE, self.reached.recv()).await {
            Ok(Some(at)) => {
                self.at = at;
                Ok(at)
            }
            Ok(None) => {
                let ended = (&mut self.task).await;
                Err(format!(
                    "{context}: run_step ended before the step function's next point: {ended:?}"
                ))
            }
            Err(_) => Err(format!("{context}: run_step never reached its next point")),
        }
    }
}

/// The model worker's place as the step function's point.
fn point(worker: Worker) -> Option<Reached> {
    match worker {
        Worker::Lookup(_) => Some(Reached::Lookup),
        Worker::Calling(_) => Some(Reached::Call),
        Worker::Recording(_, outcome) => Some(Reached::Answered(outcome)),
        Worker::Uncertain { .. } => Some(Reached::Uncertain),
        Worker::Idle => None,
    }
}

const fn flow_state(state: FlowState) -> &'static str {
    match state {
        FlowState::Running => "running",
        FlowState::Compensating => "compensating",
        FlowState::Done => "done",
        FlowState::Failed => "failed",
    }
}

const fn step_state(state: StepState) -> &'static str {
    match state {
        StepState::Done => "done",
        StepState::Failed => "failed",
        StepState::Compensated => "compensated",
    }
}

/// The final response's body the model's ended flow `state` stands for,
/// in the flow's default rendering: done, the execution's id and every
/// step's output (the local step's, and the answer the model's downstream
/// gave each external one); failed, the `operation-failed` problem naming
/// the model's refused step.
fn final_body(state: &State, id: &Value, sku: &str) -> Result<Value, String> {
    let Some(flow) = state.flow else {
        return Err("the model has no flow".into());
    };
    match flow.state {
        FlowState::Done => {
            let mut outputs = serde_json::Map::new();
            for (j, step) in FLOW.iter().enumerate() {
                let output = if step.local {
                    json!({ "sku": sku })
                } else {
                    match state.downstream[j][StepAction::Run.index()] {
                        Some(Outcome::Ok) => {
                            json!({ "id": format!("{}-{}", step.name, StepAction::Run.as_str()) })
                        }
                        other => {
                            return Err(format!(
                                "the model's flow is done but {}'s downstream holds {other:?}",
                                step.name
                            ));
                        }
                    }
                };
                outputs.insert(step.name.to_owned(), output);
            }
            Ok(json!({ "id": id, "outputs": outputs }))
        }
        FlowState::Failed => {
            let Some(failed) = flow.failed_step else {
                return Err("the model's flow failed at no step".into());
            };
            let name = FLOW[usize::from(failed)].name;
            Ok(json!({
                "type": "https://idemkey.dev/problems/operation-failed",
                "title": "Operation failed",
                "status": 409,
                "detail": format!(
                    "Step {name} failed: declined. The steps before it were undone."
                ),
                "code": "operation-failed",
                "id": id,
                "failed_step": name,
            }))
        }
        other => Err(format!("the model's flow has not ended: {other:?}")),
    }
}

struct Replay<'a> {
    db: &'a Db,
    flows: Flows,
    down: Arc<Downstream>,
    key: RecordKey,
    input: Value,
    sku: String,
    slots: Vec<Slot>,
    /// The real lease of each model claim token.
    tokens: HashMap<u8, String>,
    /// The execution's id, as the first transaction answered it.
    flow_id: Value,
}

impl Replay<'_> {
    fn key_params(&self) -> Vec<String> {
        vec![
            self.key.scope.as_str().to_owned(),
            self.key.operation.as_str().to_owned(),
            self.key.key.as_str().to_owned(),
        ]
    }

    /// Runs `event` on the library; `before` and `after` are the model's
    /// states around it.
    async fn act(
        &mut self,
        before: &State,
        event: Event,
        after: &State,
        context: &str,
    ) -> Result<(), String> {
        match event {
            Event::Send => self.send(before, after, context).await,
            Event::Claim(w) => self.claim(before, usize::from(w), after, context).await,
            Event::Lookup(w) => {
                let Slot::Running(running) = &mut self.slots[usize::from(w)] else {
                    return Err(format!("{context}: the slot runs no external step"));
                };
                ensure!(
                    running.at == Reached::Lookup,
                    "{context}: the step function is at {:?}",
                    running.at
                );
                let _ = running.go.send(Go::Lookup);
                let at = running.next(context).await?;
                let model = point(after.workers[usize::from(w)]);
                ensure!(
                    Some(at) == model,
                    "{context}: the lookup went to {at:?}, the model's to {model:?}"
                );
                Ok(())
            }
            Event::Call {
                worker,
                refused,
                lost,
            } => {
                let Slot::Running(running) = &mut self.slots[usize::from(worker)] else {
                    return Err(format!("{context}: the slot runs no external step"));
                };
                ensure!(
                    running.at == Reached::Call,
                    "{context}: the step function is at {:?}",
                    running.at
                );
                let _ = running.go.send(Go::Call { refused, lost });
                let at = running.next(context).await?;
                let model = point(after.workers[usize::from(worker)]);
                ensure!(
                    Some(at) == model,
                    "{context}: the call went to {at:?}, the model's to {model:?}"
                );
                Ok(())
            }
            Event::Commit(w) => self.commit(before, usize::from(w), after, context).await,
            Event::Crash(w) => {
                let message = match std::mem::replace(&mut self.slots[usize::from(w)], Slot::Idle) {
                    Slot::Running(running) => {
                        running.task.abort();
                        let _ = running.task.await;
                        running.message
                    }
                    Slot::Held(message) => message,
                    Slot::Idle => return Err(format!("{context}: the slot is idle")),
                };
                // Its claim stays; its lease ends at the store's clock.
                sql_exec(
                    self.db,
                    END_CLAIM,
                    &[message.id.to_string(), message.lease.to_string()],
                )
                .await;
                Ok(())
            }
            Event::Expire => {
                let ended = sql_exec(self.db, EXPIRE, &self.key_params()).await;
                ensure!(
                    ended == 1,
                    "{context}: {ended} live claims ended, the model's one"
                );
                Ok(())
            }
        }
    }

    async fn send(&mut self, before: &State, after: &State, context: &str) -> Result<(), String> {
        let fingerprint = Fingerprint::of_json(&OPERATION, &self.input.to_string()).expect("json");
        let answer = self
            .flows
            .start(
                "purchase",
                &self.key,
                fingerprint,
                &self.input,
                &Options::new(Duration::from_secs(3600)),
            )
            .await
            .map_err(|err| format!("{context}: start failed: {err}"))?;
        let json = |r: &StoredResponse| -> Value {
            r.body
                .as_deref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null)
        };
        match (before.flow, &answer) {
            // The first transaction: 202, running.
            (None, Answer::Executed(r)) => {
                ensure!(
                    r.status == 202 && json(r)["state"] == "running",
                    "{context}: the first request answered {} {}",
                    r.status,
                    json(r)
                );
                self.flow_id = json(r)["id"].clone();
            }
            // A replay while it runs: 202, the state document.
            (Some(flow), Answer::Replayed(r)) if !flow.state.is_final() => ensure!(
                r.status == 202 && json(r)["state"] == flow_state(flow.state),
                "{context}: a replay answered {} {}, the model's flow is {:?}",
                r.status,
                json(r),
                flow.state
            ),
            // Ended: its final response, replayed.
            (Some(flow), Answer::Replayed(r)) => {
                let status = if flow.state == FlowState::Done {
                    200
                } else {
                    409
                };
                ensure!(
                    r.status == status && after.client.answer == Some(flow.state),
                    "{context}: the final replay answered {} {}, the model's flow is {:?}",
                    r.status,
                    json(r),
                    flow.state
                );
                let model = final_body(after, &self.flow_id, &self.sku)
                    .map_err(|why| format!("{context}: {why}"))?;
                ensure!(
                    json(r) == model,
                    "{context}: the final replay's body is {}, the model's {model}",
                    json(r)
                );
            }
            (flow, answer) => {
                return Err(format!(
                    "{context}: start answered {answer:?}, the model's flow is {flow:?}"
                ));
            }
        }
        Ok(())
    }

    async fn claim(
        &mut self,
        before: &State,
        w: usize,
        after: &State,
        context: &str,
    ) -> Result<(), String> {
        let mut claimed = self
            .db
            .claim_outbox(&[STEP_EFFECT.to_owned()], 1, LEASE)
            .await
            .map_err(|err| format!("{context}: claim failed: {err}"))?;
        ensure!(
            claimed.len() == 1,
            "{context}: the store let {} messages be claimed, the model one",
            claimed.len()
        );
        let message = claimed.remove(0);
        let (Some(job), Some(model)) = (after.workers[w].job(), after.message) else {
            return Err(format!("{context}: the model claimed nothing"));
        };
        let payload: Value = serde_json::from_str(&message.payload).unwrap_or_default();
        ensure!(
            message.key == self.key.key.as_str()
                && payload["step"] == u64::from(job.step)
                && payload["action"] == job.action.as_str()
                && message.attempts == u32::from(model.attempts),
            "{context}: claimed {message:?}, the model's message is {model:?}"
        );
        self.tokens
            .insert(before.next_token, message.lease.to_string());
        if FLOW[usize::from(job.step)].local {
            self.slots[w] = Slot::Held(message);
            return Ok(());
        }
        let (reached_tx, reached) = mpsc::unbounded_channel();
        let (go, go_rx) = mpsc::unbounded_channel();
        let (flows, claimed) = (self.flows.clone(), message.clone());
        let task = tokio::spawn(
            GATE.scope(Mutex::new(Some((reached_tx, go_rx))), async move {
                flows.run_step(claimed).await
            }),
        );
        let mut running = Running {
            message,
            at: Reached::Call,
            go,
            reached,
            task,
        };
        let at = running.next(context).await;
        self.slots[w] = Slot::Running(running);
        let at = at?;
        ensure!(
            Some(at) == point(after.workers[w]),
            "{context}: run_step reached {at:?}, the model's worker is {:?}",
            after.workers[w]
        );
        Ok(())
    }

    async fn commit(
        &mut self,
        before: &State,
        w: usize,
        after: &State,
        context: &str,
    ) -> Result<(), String> {
        // Every recording changes a step row; a fenced one changes nothing.
        let recorded = before.steps != after.steps;
        let settled = match std::mem::replace(&mut self.slots[w], Slot::Idle) {
            Slot::Held(message) => self.flows.run_step(message).await,
            Slot::Running(running) => {
                let _ = running.go.send(Go::Answer);
                let settled = running.task.await.expect("run_step's task");
                if running.at == Reached::Uncertain {
                    let Ok(Settled::Again {
                        delivery: Delivery::Uncertain(error),
                        sent_key,
                    }) = settled
                    else {
                        return Err(format!(
                            "{context}: a lost answer came to {settled:?}, the model's is uncertain"
                        ));
                    };
                    // The worker's part: back to pending, due now (the
                    // model has no backoff), fenced by the lease token.
                    self.db
                        .settle_outbox(
                            &running.message,
                            sent_key.as_deref(),
                            &Settlement::Retry {
                                after: Duration::ZERO,
                                error,
                            },
                        )
                        .await
                        .map_err(|err| format!("{context}: settle failed: {err}"))?;
                    return Ok(());
                }
                settled
            }
            Slot::Idle => return Err(format!("{context}: the slot is idle")),
        };
        let expected = if recorded {
            Settled::Recorded
        } else {
            Settled::Fenced
        };
        ensure!(
            settled.as_ref().ok() == Some(&expected),
            "{context}: run_step came to {settled:?}, the model's {expected:?}"
        );
        Ok(())
    }

    /// What the store and the downstream hold is the model's `state`.
    async fn compare(&self, state: &State, context: &str) -> Result<(), String> {
        let key = self.key_params();
        // The flow row.
        let flow = sql_rows(self.db, FLOW_ROW, &key).await;
        let model_flow = state.flow.map(|f| {
            vec![
                Some(flow_state(f.state).to_owned()),
                Some(f.position.to_string()),
                f.failed_step.map(|s| FLOW[usize::from(s)].name.to_owned()),
            ]
        });
        ensure!(
            flow.first() == model_flow.as_ref() && flow.len() <= 1,
            "{context}: the flow row is {flow:?}, the model's {:?}",
            state.flow
        );
        // The step rows.
        let steps = sql_rows(self.db, STEP_ROWS, &key).await;
        let model_steps: Vec<Vec<Option<String>>> = (0..STEPS)
            .filter_map(|i| {
                state.steps[i].map(|s| vec![Some(i.to_string()), Some(step_state(s).to_owned())])
            })
            .collect();
        ensure!(
            steps == model_steps,
            "{context}: the step rows are {steps:?}, the model's {:?}",
            state.steps
        );
        // The live message: one pending at most, none failed or dead.
        let messages = sql_rows(self.db, MESSAGES, &key).await;
        let model_message = state.message.map(|m| {
            let payload = json!({ "step": m.step, "action": m.action.as_str() });
            (
                payload,
                m.attempts.to_string(),
                m.lease
                    .map(|t| self.tokens.get(&t).cloned().unwrap_or_default()),
            )
        });
        let real_message: Vec<_> = messages
            .iter()
            .map(|m| {
                let cell = |i: usize| m.get(i).cloned().flatten();
                (
                    cell(0).unwrap_or_default(),
                    (
                        cell(1)
                            .and_then(|p| serde_json::from_str::<Value>(&p).ok())
                            .unwrap_or_default(),
                        cell(2).unwrap_or_default(),
                        cell(3),
                    ),
                )
            })
            .collect();
        let same = match (&real_message[..], &model_message) {
            ([], None) => true,
            ([(status, real)], Some(model)) => status == "pending" && real == model,
            _ => false,
        };
        ensure!(
            same,
            "{context}: the step messages are {real_message:?}, the model's {:?}",
            state.message
        );
        // The downstream and the local step's effects.
        let table = self.down.table();
        ensure!(
            table == state.downstream,
            "{context}: the downstream holds {table:?}, the model's {:?}",
            state.downstream
        );
        let applied = *self.down.applied.lock();
        for step in [CHARGE, CONFIRM] {
            let s = usize::from(step);
            ensure!(
                applied[s] == state.ghost.applied[s],
                "{context}: {} applied {:?} (run, compensate), the model {:?}",
                FLOW[s].name,
                applied[s],
                state.ghost.applied[s]
            );
        }
        let stock = sql_rows(self.db, STOCK, std::slice::from_ref(&self.sku)).await;
        let [run, undo] = state.ghost.applied[usize::from(RESERVE)].map(i64::from);
        let model_stock = vec![
            Some((1 - run + undo).to_string()),
            Some(run.to_string()),
            Some(undo.to_string()),
        ];
        ensure!(
            stock.first() == Some(&model_stock),
            "{context}: the stock (available, reserved, released) is {stock:?}, the model's {model_stock:?}"
        );
        // Each slot is where the model's worker is.
        for (w, (slot, worker)) in self.slots.iter().zip(&state.workers).enumerate() {
            let same = match (slot, worker) {
                (Slot::Idle, Worker::Idle) => true,
                (Slot::Held(_), Worker::Recording(job, Outcome::Ok)) => {
                    FLOW[usize::from(job.step)].local
                }
                (Slot::Running(running), worker) => point(*worker) == Some(running.at),
                _ => false,
            };
            ensure!(
                same,
                "{context}: slot w{w} is not at the model's {worker:?}"
            );
        }
        Ok(())
    }

    /// Ends the tasks a path left paused.
    async fn abandon(&mut self) {
        for slot in &mut self.slots {
            if let Slot::Running(running) = std::mem::replace(slot, Slot::Idle) {
                running.task.abort();
                let _ = running.task.await;
            }
        }
    }
}

/// Replays `walk` on `db` with a fresh key, stock row and downstream;
/// `Err` with the first divergence.
async fn replay_walk(db: &Db, walk: &Walk<StepJournal>, n: usize) -> Result<(), String> {
    let down = Arc::new(Downstream::default());
    let flows = Flows::new(db.clone(), vec![purchase(&down)], settings()).expect("flows");
    let id = uuid::Uuid::new_v4();
    let sku = format!("sku-{id}");
    sql_exec(
        db,
        "INSERT INTO stock (sku, available, reserved, released) VALUES ($1, 1, 0, 0)",
        std::slice::from_ref(&sku),
    )
    .await;
    let mut replay = Replay {
        db,
        flows,
        down,
        key: RecordKey {
            scope: Scope::new("acct-1").expect("a scope"),
            operation: OPERATION,
            key: IdempotencyKey::parse(id.to_string().as_bytes(), KeyProfile::Lenient)
                .expect("a key"),
        },
        input: json!({ "sku": sku }),
        sku,
        slots: (0..walk.states[0].workers.len())
            .map(|_| Slot::Idle)
            .collect(),
        tokens: HashMap::new(),
        flow_id: Value::Null,
    };
    let result = async {
        replay
            .compare(&walk.states[0], &format!("walk {n}, at the start"))
            .await?;
        for (i, &event) in walk.actions.iter().enumerate() {
            let (before, after) = (&walk.states[i], &walk.states[i + 1]);
            let context = format!("walk {n}, event {i} ({event:?})");
            let replayed = async {
                replay.act(before, event, after, &context).await?;
                replay.compare(after, &context).await
            };
            replayed
                .await
                .map_err(|why| format!("{why}\n  after the events {:?}", &walk.actions[..=i]))?;
        }
        Ok(())
    }
    .await;
    replay.abandon().await;
    // A path may end with a message pending: no later path may claim it.
    sql_exec(db, "DELETE FROM outbox", &[]).await;
    result
}

// ---------------------------------------------------------------------
// The stores and the paths.

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A store to replay on, kept alive (its database, its file) while used.
async fn open(backend: &str) -> (Db, Box<dyn std::any::Any>) {
    let (url, keep): (String, Box<dyn std::any::Any>) = if backend == "postgres" {
        let database = PgCluster::shared()
            .expect("start PostgreSQL")
            .fresh_database()
            .expect("create a database");
        (database.url.clone(), Box::new(database))
    } else {
        let dir = std::env::temp_dir().join(format!("idemkey-steps-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let url = format!("sqlite://{}", dir.join("steps.db").display());
        (url, Box::new(TempDir(dir)))
    };
    let db = Db::open(&url, &StoreSettings::default())
        .await
        .expect("open the store");
    create_stock(&db).await;
    (db, keep)
}

/// Replays `paths` on `backend`; the divergences.
async fn replay_on(backend: &str, paths: &[Walk<StepJournal>]) -> Vec<String> {
    let started = Instant::now();
    let (db, _keep) = open(backend).await;
    let mut divergences = Vec::new();
    for (n, walk) in paths.iter().enumerate() {
        if let Err(why) = replay_walk(&db, walk, n).await {
            divergences.push(format!("{backend}: {why}"));
        }
    }
    let events: usize = paths.iter().map(|w| w.actions.len()).sum();
    println!(
        "{backend}: {} paths, {events} events replayed in {:.1} s",
        paths.len(),
        started.elapsed().as_secs_f64()
    );
    divergences
}

/// Whether a state reaches a reachability target.
type Reaches = fn(&StepJournal, &State) -> bool;

/// The reachability targets of the model's properties, as predicates.
fn targets() -> Vec<(&'static str, Reaches)> {
    let model = StepJournal::new(idemkey_model::steps::Bounds::small());
    model
        .properties()
        .into_iter()
        .filter(|p| p.expectation == Expectation::Sometimes && properties::applies(&model, p.name))
        .map(|p| (p.name, p.condition))
        .collect()
}

/// The transitions the sample must make: those the checker's export
/// covers, and a crash in each of a worker's places.
const EXPECTED_TRANSITIONS: [&str; 14] = [
    "send: none -> Running",
    "claim -> Calling",
    "claim -> Lookup (take-over)",
    "claim -> Recording",
    "lookup -> Recording",
    "lookup -> Calling",
    "call charge run refused=true lost=false -> Recording",
    "call confirm run refused=false lost=true -> Uncertain",
    "commit charge run recorded: Running -> Running",
    "commit charge compensate recorded: Compensating -> Compensating",
    "commit reserve compensate recorded: Compensating -> Failed",
    "crash in Calling",
    "crash in Recording",
    "crash in Uncertain",
];

/// The paths replayed: a covering sample of seeded random walks, for each
/// reachability target it misses the shortest prefix of a walk of the pool
/// that reaches it, and thirty more walks of the pool.
fn sample() -> Vec<Walk<StepJournal>> {
    let model = StepJournal::new(idemkey_model::steps::Bounds::small());
    let pool = walks(&model, 29, 400, 60);
    let mut sample = cover(pool.clone(), 10);
    for (name, reaches) in targets() {
        if sample
            .iter()
            .any(|w| w.states.iter().any(|s| reaches(&model, s)))
        {
            continue;
        }
        let shortest = pool
            .iter()
            .filter_map(|w| {
                let at = w.states.iter().position(|s| reaches(&model, s))?;
                Some(w.prefix(at))
            })
            .min_by_key(|w| w.actions.len())
            .unwrap_or_else(|| panic!("no walk of the pool reaches {name}"));
        sample.push(shortest);
    }
    // More interleavings of the same transitions: every thirteenth walk.
    sample.extend(pool.iter().step_by(13).take(30).cloned());
    sample
}

/// Checks what `sample` covers: every event kind, every expected
/// transition, every reachability target.
fn check_coverage(sample: &[Walk<StepJournal>]) {
    let model = StepJournal::new(idemkey_model::steps::Bounds::small());
    let covered: BTreeSet<String> = sample.iter().flat_map(transitions).collect();
    println!("transitions in the sample: {covered:#?}");
    for transition in EXPECTED_TRANSITIONS {
        assert!(
            covered.contains(transition),
            "the sample never makes {transition}"
        );
    }
    let kinds: BTreeSet<&str> = sample
        .iter()
        .flat_map(|w| &w.actions)
        .map(|e| match e {
            Event::Send => "send",
            Event::Claim(_) => "claim",
            Event::Lookup(_) => "lookup",
            Event::Call { .. } => "call",
            Event::Commit(_) => "commit",
            Event::Crash(_) => "crash",
            Event::Expire => "expire",
        })
        .collect();
    assert_eq!(kinds.len(), 7, "every event kind: {kinds:?}");
    for (name, reaches) in targets() {
        assert!(
            sample
                .iter()
                .any(|w| w.states.iter().any(|s| reaches(&model, s))),
            "the sample never reaches: {name}"
        );
    }
}

async fn sampled(backend: &str) {
    let sample = sample();
    check_coverage(&sample);
    let divergences = replay_on(backend, &sample).await;
    assert_eq!(divergences, Vec::<String>::new());
}

/// A sample of the step journal's paths, replayed on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_follows_the_step_journal() {
    sampled("postgres").await;
}

/// The same on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_follows_the_step_journal() {
    sampled("sqlite").await;
}

/// The shortest path on which the model without its fence records a
/// fenced-out owner's step.
fn no_fence_counterexample() -> Vec<Event> {
    let mut bounds = idemkey_model::steps::Bounds::small();
    bounds.defect = Defect::NoFence;
    StepJournal::new(bounds)
        .checker()
        .finish_when(HasDiscoveries::AnyOf(
            [properties::NO_FENCED_OUT_RECORDING].into(),
        ))
        .spawn_bfs()
        .join()
        .discovery(properties::NO_FENCED_OUT_RECORDING)
        .expect("a counterexample")
        .into_actions()
}

/// The replay tells a model from the library: on the fence's
/// counterexample, the library rolls the stale recording back as the
/// designed model does, and diverges from the model without the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_tells_the_model_without_fence_from_the_library() {
    let events = no_fence_counterexample();
    println!("the fence's counterexample: {events:?}");
    let designed = Walk::follow(
        &StepJournal::new(idemkey_model::steps::Bounds::small()),
        &events,
    );
    assert_eq!(
        designed.actions, events,
        "the designed model allows each event"
    );
    let mut bounds = idemkey_model::steps::Bounds::small();
    bounds.defect = Defect::NoFence;
    let defective = Walk::follow(&StepJournal::new(bounds), &events);
    for backend in ["postgres", "sqlite"] {
        assert_eq!(
            replay_on(backend, std::slice::from_ref(&designed)).await,
            Vec::<String>::new()
        );
        let divergences = replay_on(backend, std::slice::from_ref(&defective)).await;
        assert_eq!(divergences.len(), 1, "{divergences:?}");
        assert!(
            divergences[0].contains("the model's Recorded"),
            "{divergences:?}"
        );
    }
}

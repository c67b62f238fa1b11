//! One matrix: every entry point that touches the library's tables, run
//! against every configuration, so that a rule one entry point keeps (the
//! store's table names, unnamed statements behind a transaction pooler) is
//! checked on all of them, not only on the one it was written for.
//!
//! Configurations: PostgreSQL direct; PostgreSQL through PgBouncer 1.18 in
//! transaction mode with a pool of 2 and concurrent calls; SQLite; and the
//! sqlx backend, direct and through PgBouncer (beside a deployment on the
//! tokio-postgres backend: the two share one database). Each
//! with the default names and with a prefix, beside a second deployment
//! in the same database under the other names, whose tables must stay as
//! they were (the cell checks their contents before and after).
//!
//! The order service has no table prefix: its entry points (`/readyz`,
//! `/metrics`, `GET /purchases/{id}`) run in the default-names cells of its
//! own backends (not the sqlx cells: it runs on tokio-postgres), the
//! prefixed deployment beside them; under a prefix the library's own entry
//! points run.
//!
//! A cell runs every entry point and reports every failure at once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::post;
use common::{Backend, Env, Server, new_key};
use idemkey::Db;
use idemkey::flow::{Attempt, External, Flow, FlowSettings, Flows, Local, StepError};
use idemkey::idempotency::{self, Done, Mode, Policy, RecordKey, Records, Scope, StoredResponse};
use idemkey::in_transaction::{Options, Outcome};
use idemkey::layer::IdempotencyLayer;
use idemkey::outbox::{Delivery, Worker, WorkerSettings};
use idemkey::store::sqlx_postgres::{SqlxPgDb, sqlx_in_transaction};
use idemkey::store::{PgPooler, StoreSettings, Tables};
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, RetryPolicy};
use idemkey_testkit::{PgBouncer, PgBouncerOptions};
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// Every entry point the matrix runs, in its order. **A new entry point
/// that touches the library's tables (or sends statements) joins this list
/// and [`run_entry_point`] in the change that adds it.**
const ENTRY_POINTS: &[EntryPoint] = &[
    EntryPoint::Migrate,
    EntryPoint::Layer,
    EntryPoint::InTransactionEnqueueDeliver,
    EntryPoint::FlowDone,
    EntryPoint::FlowCompensated,
    EntryPoint::Trim,
    EntryPoint::Readyz,
    EntryPoint::Metrics,
    EntryPoint::GetPurchase,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EntryPoint {
    /// `Db::migrate` again, and nothing pending.
    Migrate,
    /// The axum `IdempotencyLayer`: new keys, a replay.
    Layer,
    /// `in_transaction` with an `enqueue` in its closure, then the
    /// outbox worker's delivery.
    InTransactionEnqueueDeliver,
    /// A flow from start to done.
    FlowDone,
    /// A flow whose external step is declined: compensated.
    FlowCompensated,
    /// The maintenance trim.
    Trim,
    /// The order service's `GET /readyz`.
    Readyz,
    /// The order service's `GET /metrics`.
    Metrics,
    /// The order service's `POST /purchases` then `GET /purchases/{id}`.
    GetPurchase,
}

impl EntryPoint {
    /// Whether the entry point belongs to the order service (default names
    /// only, see the module docs).
    fn in_order_service(self) -> bool {
        matches!(self, Self::Readyz | Self::Metrics | Self::GetPurchase)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    Direct,
    Bouncer,
    Sqlite,
    SqlxDirect,
    SqlxBouncer,
}

impl Config {
    /// Through PgBouncer in transaction mode.
    fn bounced(self) -> bool {
        matches!(self, Self::Bouncer | Self::SqlxBouncer)
    }

    /// Our deployment on the sqlx backend.
    fn sqlx(self) -> bool {
        matches!(self, Self::SqlxDirect | Self::SqlxBouncer)
    }
}

/// Concurrent calls per entry point: more than the pooler's 2 server
/// connections and than one client connection.
const CONCURRENT: usize = 8;
const PREFIX: &str = "acme_";
const OPERATION: OperationId = OperationId::from_static("POST /matrix:v1");
const MAIL: &str = "matrix-mail";
const SECRET: &str = "matrix-secret";

/// One cell's database and its two deployments.
struct Cell {
    config: Config,
    env: Env,
    _bouncer: Option<PgBouncer>,
    /// The URL the deployments use (through PgBouncer in that config).
    url: String,
    /// Why seeding the other deployment failed, if it did.
    seeded: Result<(), String>,
    ours: Db,
    mine: Tables,
    other: Tables,
}

fn settings(config: Config, tables: Tables) -> StoreSettings {
    StoreSettings {
        tables,
        pool_size: 4,
        pooler: if config.bounced() {
            PgPooler::Transaction
        } else {
            PgPooler::None
        },
        ..StoreSettings::default()
    }
}

async fn cell(config: Config, prefixed: bool) -> Cell {
    let mut env = Env::new(if config == Config::Sqlite {
        Backend::Sqlite
    } else {
        Backend::Postgres
    });
    let mut bouncer = None;
    if config.bounced() {
        env.sql(&format!(
            "ALTER ROLE postgres IN DATABASE \"{db}\" SET lock_timeout = '2s';
             ALTER ROLE postgres IN DATABASE \"{db}\" SET statement_timeout = '5s';",
            db = env.db
        ));
        let b = PgBouncer::start_with(env.cluster(), PgBouncerOptions::new().pool_size(2))
            .expect("start pgbouncer");
        env.url = b.url(&env.db);
        bouncer = Some(b);
    }
    let prefix = Tables::with_prefix(PREFIX).expect("prefix");
    let (mine, other) = if prefixed {
        (prefix, Tables::default())
    } else {
        (Tables::default(), prefix)
    };
    let url = env.url.clone();
    // The other deployment first, with a record and a pending message of
    // its own that nothing of ours may change.
    let theirs = Db::open(&url, &settings(config, other.clone()))
        .await
        .expect("open the other deployment");
    let seeded = seed(&theirs).await;
    let ours = if config.sqlx() {
        let db = SqlxPgDb::connect(&url, &settings(config, mine.clone()))
            .await
            .expect("open our deployment on sqlx");
        db.migrate().await.expect("migrate on sqlx");
        Db::new(db)
    } else {
        Db::open(&url, &settings(config, mine.clone()))
            .await
            .expect("open our deployment")
    };
    create_stock(&ours).await;
    Cell {
        config,
        env,
        _bouncer: bouncer,
        url,
        seeded,
        ours,
        mine,
        other,
    }
}

fn record_key(scope: &str, key: &str) -> RecordKey {
    RecordKey {
        scope: Scope::new(scope).expect("scope"),
        operation: OPERATION,
        key: IdempotencyKey::parse(format!("\"{key}\"").as_bytes(), KeyProfile::Lenient)
            .expect("key"),
    }
}

fn fingerprint(body: &str) -> Fingerprint {
    Fingerprint::of_json(&OPERATION, body).expect("json")
}

/// One key run in lease mode, its window `replay`.
async fn run_key(db: &Db, key: &RecordKey, replay: Duration) -> bool {
    let policy = Policy::new(Mode::Lease, Duration::from_secs(30), replay);
    let outcome = idempotency::run(db, key, fingerprint("{}"), &policy, async || {
        Ok::<_, ()>(Done {
            response: StoredResponse::new(201, "{}"),
            resource: None,
            value: (),
        })
    })
    .await
    .expect("run");
    matches!(outcome, idempotency::Outcome::Executed { stored: true, .. })
}

/// The other deployment's rows: a record whose window already ended (a
/// trim of the wrong table would drop it) and a pending message (a worker
/// on the wrong table would deliver it).
async fn seed(theirs: &Db) -> Result<(), String> {
    assert!(
        run_key(
            theirs,
            &record_key("theirs", "old"),
            Duration::from_millis(1)
        )
        .await
    );
    match in_transaction_enqueue(theirs, &record_key("theirs", "mail"), "{}").await {
        Ok(Outcome::Executed(_)) => Ok(()),
        other => Err(format!(
            "the other deployment's own in_transaction + enqueue: {other:?}"
        )),
    }
}

/// What a deployment's tables hold, to compare before and after.
fn contents(cell: &Cell, tables: &Tables) -> String {
    let names = [
        tables.records(),
        tables.outbox(),
        tables.migrations(),
        tables.render("idemkey_flows"),
        tables.render("idemkey_steps"),
    ];
    names
        .iter()
        .map(|table| {
            let sql = match cell.config {
                // Counts, and what the trim or a worker would change.
                Config::Sqlite if table.ends_with("idempotency_records") => format!(
                    "SELECT count(*) || ':' || coalesce(group_concat(status, ','), '') FROM \
                     (SELECT status FROM {table} ORDER BY scope, operation, key)"
                ),
                Config::Sqlite => format!("SELECT count(*) FROM {table}"),
                _ => format!(
                    "SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, ',' ORDER BY \
                     t::text)), '') FROM {table} t"
                ),
            };
            let mut line = format!("{table}={}", cell.env.sql(&sql));
            if table.ends_with("outbox") {
                let statuses = format!(
                    "SELECT coalesce(group_concat(status || attempts, ','), '') FROM \
                     (SELECT status, attempts FROM {table} ORDER BY id)"
                );
                if cell.config == Config::Sqlite {
                    line.push_str(&format!(" {}", cell.env.sql(&statuses)));
                }
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn count(cell: &Cell, sql: &str) -> i64 {
    cell.env
        .sql(&cell.mine.render(sql))
        .trim()
        .parse()
        .unwrap_or(-1)
}

async fn create_stock(db: &Db) {
    if let Some(sqlx) = db.backend_as::<SqlxPgDb>() {
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS matrix_stock (sku text PRIMARY KEY, available int NOT NULL);
             INSERT INTO matrix_stock VALUES ('tea', 100) ON CONFLICT DO NOTHING;",
        )
        .execute(sqlx.pool())
        .await
        .expect("stock");
        return;
    }
    match (
        db.backend_as::<idemkey::store::postgres::PgDb>(),
        db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
    ) {
        (Some(pg), _) => {
            let client = pg.client().await.expect("client");
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS matrix_stock (sku text PRIMARY KEY, available int NOT NULL);
                     INSERT INTO matrix_stock VALUES ('tea', 100) ON CONFLICT DO NOTHING;",
                )
                .await
                .expect("stock");
        }
        (_, Some(lite)) => {
            lite.with_conn(|conn| {
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS matrix_stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL);
                     INSERT OR IGNORE INTO matrix_stock VALUES ('tea', 100);",
                )
                .map_err(idemkey::store::sqlite::sqlite_error)
            })
            .await
            .expect("stock");
        }
        _ => unreachable!("SQL stores only"),
    }
}

/// The part of the matrix that calls `in_transaction` and `enqueue`: the
/// store goes in, and the closure's transaction carries its names.
async fn in_transaction_enqueue(
    db: &Db,
    key: &RecordKey,
    payload: &'static str,
) -> Result<Outcome, String> {
    use idemkey::store::postgres::pg_in_transaction;
    use idemkey::store::sqlite::sqlite_in_transaction_async;
    let options = Options::new(Duration::from_secs(3600));
    let response = StoredResponse::new(201, "{}");
    let key2 = key.clone();
    if let Some(sqlx) = db.backend_as::<SqlxPgDb>() {
        // The caller's own sqlx transaction, committed on `Executed`.
        let mut tx = sqlx.pool().begin().await.map_err(|e| e.to_string())?;
        let outcome = sqlx_in_transaction(sqlx, &mut tx, key, fingerprint("{}"), &options, {
            move |mut tx| {
                Box::pin(async move {
                    tx.enqueue(&key2, MAIL, None, payload).await?;
                    Ok::<_, idemkey::StoreError>(response)
                })
            }
        })
        .await
        .map_err(|e| e.to_string())?;
        if matches!(outcome, Outcome::Executed(_)) {
            tx.commit().await.map_err(|e| e.to_string())?;
        }
        return Ok(outcome);
    }
    match (
        db.backend_as::<idemkey::store::postgres::PgDb>(),
        db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
    ) {
        (Some(pg), _) => pg_in_transaction(pg, key, fingerprint("{}"), &options, move |tx| {
            Box::pin(async move {
                tx.enqueue(&key2, MAIL, None, payload).await?;
                Ok::<_, idemkey::StoreError>(response)
            })
        })
        .await
        .map_err(|e| e.to_string()),
        (_, Some(lite)) => sqlite_in_transaction_async(
            lite,
            lite.connection(),
            key.clone(),
            fingerprint("{}"),
            options,
            move |tx| {
                tx.enqueue(&key2, MAIL, None, payload)?;
                Ok::<_, idemkey::StoreError>(response)
            },
        )
        .await
        .map_err(|e| e.to_string()),
        _ => unreachable!("SQL stores only"),
    }
}

fn worker_settings() -> WorkerSettings {
    WorkerSettings {
        batch: 16,
        concurrency: 16,
        lease: Duration::from_secs(30),
        idle_poll: Duration::from_millis(10),
        retry: RetryPolicy {
            base_ms: 5,
            cap_ms: 20,
            max_attempts: 8,
        },
        ..WorkerSettings::default()
    }
}

/// Runs the worker until nothing is due for a while.
async fn drain(worker: &Worker) -> Result<(), String> {
    let mut idle = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while idle < 4 {
        if Instant::now() > deadline {
            return Err("the worker never went idle".into());
        }
        match worker.run_once().await.map_err(|e| e.to_string())? {
            0 => {
                idle += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => idle = 0,
        }
    }
    Ok(())
}

/// Runs `n` calls of `f` at once (one at a time outside PgBouncer's cell
/// would hide nothing, but all at once is what a pooler must survive).
async fn all_at_once<T, F, Fut>(n: usize, f: F) -> Vec<T>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        tasks.spawn(f(i));
    }
    tasks.join_all().await
}

async fn layer(cell: &Cell) -> Result<(), String> {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let app = Router::new()
        .route(
            "/pay",
            post(move || {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    (axum::http::StatusCode::CREATED, "paid")
                }
            }),
        )
        .route_layer(
            IdempotencyLayer::new(cell.ours.clone(), |_| Some("layer".to_owned()))
                .lease(Duration::from_secs(30))
                .replay_ttl(Duration::from_secs(3600)),
        );
    let call = |key: String| {
        let app = app.clone();
        async move {
            let request = Request::post("/pay")
                .header("idempotency-key", format!("\"{key}\""))
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .expect("request");
            let response = app.oneshot(request).await.expect("infallible");
            (
                response.status().as_u16(),
                response
                    .headers()
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true"),
            )
        }
    };
    let replies = all_at_once(CONCURRENT, |i| call(format!("layer-{i}"))).await;
    if let Some(bad) = replies.iter().find(|(status, _)| *status != 201) {
        return Err(format!("a new key answered {bad:?}: {replies:?}"));
    }
    let again = call("layer-0".into()).await;
    if again != (201, true) {
        return Err(format!("the replay answered {again:?}"));
    }
    let n = runs.load(Ordering::SeqCst);
    if n != CONCURRENT {
        return Err(format!("the handler ran {n} times for {CONCURRENT} keys"));
    }
    let stored = count(
        cell,
        "SELECT count(*) FROM idempotency_records WHERE scope = 'layer'",
    );
    if stored != CONCURRENT as i64 {
        return Err(format!(
            "{stored} records in our table for {CONCURRENT} keys"
        ));
    }
    Ok(())
}

async fn in_transaction_and_worker(cell: &Cell) -> Result<(), String> {
    let db = cell.ours.clone();
    let outcomes = all_at_once(CONCURRENT, move |i| {
        let db = db.clone();
        async move { in_transaction_enqueue(&db, &record_key("tx", &format!("tx-{i}")), "{}").await }
    })
    .await;
    for outcome in &outcomes {
        if !matches!(outcome, Ok(Outcome::Executed(_))) {
            return Err(format!("in_transaction: {outcome:?}"));
        }
    }
    let replay = in_transaction_enqueue(&cell.ours, &record_key("tx", "tx-0"), "{}").await;
    if !matches!(replay, Ok(Outcome::Replayed(_))) {
        return Err(format!("the replay: {replay:?}"));
    }
    let records = count(
        cell,
        "SELECT count(*) FROM idempotency_records WHERE scope = 'tx'",
    );
    let queued = count(cell, "SELECT count(*) FROM outbox WHERE scope = 'tx'");
    if (records, queued) != (CONCURRENT as i64, CONCURRENT as i64) {
        return Err(format!(
            "{records} records and {queued} messages in our tables for {CONCURRENT} calls"
        ));
    }
    let delivered = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&delivered);
    let worker = Worker::new(cell.ours.clone(), worker_settings()).handle(MAIL, move |message| {
        let seen = Arc::clone(&seen);
        async move {
            if message.scope == "tx" {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            Delivery::Delivered("sent".into())
        }
    });
    drain(&worker).await?;
    let n = delivered.load(Ordering::SeqCst);
    let settled = count(
        cell,
        "SELECT count(*) FROM outbox WHERE scope = 'tx' AND status = 'delivered'",
    );
    if (n, settled) != (CONCURRENT, CONCURRENT as i64) {
        return Err(format!(
            "the worker delivered {n} and settled {settled} of {CONCURRENT} messages"
        ));
    }
    Ok(())
}

/// A purchase: reserve stock (local, undone on a decline), then charge.
fn purchase(declines: Arc<AtomicUsize>) -> Flow {
    let reserve = Local::new()
        .postgres(|tx, _ctx| {
            Box::pin(async move {
                tx.execute_typed(
                    "UPDATE matrix_stock SET available = available - 1 WHERE sku = 'tea'",
                    &[],
                )
                .await
                .map_err(|e| StepError::Retry(e.to_string()))?;
                Ok(json!({ "sku": "tea" }))
            })
        })
        .postgres_undo(|tx, _ctx| {
            Box::pin(async move {
                tx.execute_typed(
                    "UPDATE matrix_stock SET available = available + 1 WHERE sku = 'tea'",
                    &[],
                )
                .await
                .map_err(|e| StepError::Retry(e.to_string()))?;
                Ok(Value::Null)
            })
        })
        .sqlx_postgres(|conn, _ctx| {
            Box::pin(async move {
                sqlx::query("UPDATE matrix_stock SET available = available - 1 WHERE sku = 'tea'")
                    .persistent(false)
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| StepError::Retry(e.to_string()))?;
                Ok(json!({ "sku": "tea" }))
            })
        })
        .sqlx_postgres_undo(|conn, _ctx| {
            Box::pin(async move {
                sqlx::query("UPDATE matrix_stock SET available = available + 1 WHERE sku = 'tea'")
                    .persistent(false)
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| StepError::Retry(e.to_string()))?;
                Ok(Value::Null)
            })
        })
        .sqlite(|conn, _ctx| {
            conn.execute(
                "UPDATE matrix_stock SET available = available - 1 WHERE sku = 'tea'",
                [],
            )
            .map_err(|e| StepError::Retry(e.to_string()))?;
            Ok(json!({ "sku": "tea" }))
        })
        .sqlite_undo(|conn, _ctx| {
            conn.execute(
                "UPDATE matrix_stock SET available = available + 1 WHERE sku = 'tea'",
                [],
            )
            .map_err(|e| StepError::Retry(e.to_string()))?;
            Ok(Value::Null)
        });
    Flow::new("matrix-purchase")
        .local("reserve", reserve)
        .external(
            "charge",
            External::new(move |ctx| {
                let declines = Arc::clone(&declines);
                async move {
                    if ctx.input["decline"] == json!(true) {
                        declines.fetch_add(1, Ordering::SeqCst);
                        Attempt::Refused("declined".into())
                    } else {
                        Attempt::Done(json!({ "charge": "ch-1" }))
                    }
                }
            })
            .undo(|_ctx| async { Attempt::Done(Value::Null) }),
        )
}

/// Runs `inputs` as flows under new keys, all at once, then the worker;
/// the final answers' statuses.
async fn flows(cell: &Cell, scope: &str, input: Value) -> Result<Vec<u16>, String> {
    let declines = Arc::new(AtomicUsize::new(0));
    let flows = Flows::new(
        cell.ours.clone(),
        vec![purchase(declines)],
        FlowSettings {
            wait: Duration::ZERO,
            call_timeout: Duration::from_secs(5),
            location_prefix: "/purchases/".into(),
            ..FlowSettings::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let worker = flows.attach(Worker::new(cell.ours.clone(), worker_settings()));
    let start = |i: usize| {
        let flows = flows.clone();
        let (scope, input) = (scope.to_owned(), input.clone());
        async move {
            let body = input.to_string();
            flows
                .start(
                    "matrix-purchase",
                    &record_key(&scope, &format!("f-{i}")),
                    Fingerprint::of_json(&OPERATION, &body).expect("json"),
                    &input,
                    &Options::new(Duration::from_secs(3600)),
                )
                .await
                .map_err(|e| e.to_string())
        }
    };
    for outcome in all_at_once(CONCURRENT / 2, start).await {
        match outcome {
            Ok(Outcome::Executed(r)) if r.status == 202 => {}
            other => return Err(format!("start: {other:?}")),
        }
    }
    drain(&worker).await?;
    let mut statuses = Vec::new();
    for outcome in all_at_once(CONCURRENT / 2, start).await {
        match outcome {
            Ok(Outcome::Replayed(r)) => statuses.push(r.status),
            other => return Err(format!("the final answer: {other:?}")),
        }
    }
    let flows_in_ours = count(
        cell,
        &format!("SELECT count(*) FROM idemkey_flows WHERE scope = '{scope}'"),
    );
    if flows_in_ours != (CONCURRENT / 2) as i64 {
        return Err(format!("{flows_in_ours} executions in our table"));
    }
    Ok(statuses)
}

async fn flow_done(cell: &Cell) -> Result<(), String> {
    let statuses = flows(cell, "flow-done", json!({ "sku": "tea" })).await?;
    if statuses.iter().any(|s| *s != 200) {
        return Err(format!("final answers {statuses:?}, not 200"));
    }
    Ok(())
}

async fn flow_compensated(cell: &Cell) -> Result<(), String> {
    let before = count(cell, "SELECT available FROM matrix_stock");
    let statuses = flows(
        cell,
        "flow-declined",
        json!({ "sku": "tea", "decline": true }),
    )
    .await?;
    if statuses.iter().any(|s| *s != 409) {
        return Err(format!("final answers {statuses:?}, not 409"));
    }
    let after = count(cell, "SELECT available FROM matrix_stock");
    if before != after {
        return Err(format!("stock {before} before, {after} after the undo"));
    }
    let compensated = count(
        cell,
        "SELECT count(*) FROM idemkey_steps WHERE scope = 'flow-declined' \
         AND state = 'compensated'",
    );
    if compensated != (CONCURRENT / 2) as i64 {
        return Err(format!("{compensated} steps compensated"));
    }
    Ok(())
}

async fn trim(cell: &Cell) -> Result<(), String> {
    if !run_key(
        &cell.ours,
        &record_key("trim", "short"),
        Duration::from_millis(1),
    )
    .await
    {
        return Err("the short-lived key did not run".into());
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let report = cell
        .ours
        .trim(Duration::from_secs(3600), 1000)
        .await
        .map_err(|e| e.to_string())?;
    if report.trimmed < 1 {
        return Err(format!("trimmed nothing: {report:?}"));
    }
    let left = count(
        cell,
        "SELECT count(*) FROM idempotency_records WHERE scope = 'trim' AND status = 'tombstone'",
    );
    if left != 1 {
        return Err(format!("{left} tombstones in our table after the trim"));
    }
    Ok(())
}

async fn migrate(cell: &Cell) -> Result<(), String> {
    cell.ours.migrate().await.map_err(|e| e.to_string())?;
    let pending = cell
        .ours
        .pending_migrations()
        .await
        .map_err(|e| e.to_string())?;
    if !pending.is_empty() {
        return Err(format!("pending after migrate: {pending:?}"));
    }
    let applied = count(cell, "SELECT count(*) FROM idemkey_migrations");
    if applied < 3 {
        return Err(format!("{applied} migrations in our book"));
    }
    Ok(())
}

/// The order service over this cell's database, with the provider
/// simulator for its purchases.
struct OrderService {
    server: Server,
    _provider: Server,
    token: String,
}

fn order_service(cell: &Cell) -> OrderService {
    let direct = match cell.config {
        // The provider keeps its own tables, directly.
        Config::Bouncer => cell.env.cluster().url(&cell.env.db),
        _ => cell.url.clone(),
    };
    let provider = Server::provider(&["--database-url", &direct, "--token", SECRET]);
    let mut flags = vec![
        "--payments-url",
        provider.base.as_str(),
        "--payments-token",
        SECRET,
        "--outbox-retry-base",
        "50ms",
        "--outbox-retry-cap",
        "200ms",
        "--outbox-poll",
        "50ms",
        "--pool-size",
        "4",
    ];
    if cell.config == Config::Bouncer {
        flags.extend(["--pg-pooler", "transaction"]);
    }
    let server = cell.env.serve(&flags);
    // The account, through the service's own CLI and path.
    let mut cli = std::process::Command::new(common::BIN);
    cli.args(["account", "create", "matrix", "--database-url", &cell.url])
        .env_remove("DATABASE_URL");
    if cell.config == Config::Bouncer {
        cli.args(["--pg-pooler", "transaction"]);
    }
    let out = cli.output().expect("account create");
    assert!(
        out.status.success(),
        "account create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .last()
        .expect("a token")
        .to_owned();
    OrderService {
        server,
        _provider: provider,
        token,
    }
}

async fn readyz(service: &OrderService) -> Result<(), String> {
    let base = service.server.base.clone();
    let client = service.server.client.clone();
    let statuses = all_at_once(CONCURRENT * 2, move |_| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            match client.get(format!("{base}/readyz")).send().await {
                Ok(r) => r.status().as_u16(),
                Err(_) => 0,
            }
        }
    })
    .await;
    if statuses.iter().any(|s| *s != 200) {
        return Err(format!("/readyz answered {statuses:?}"));
    }
    Ok(())
}

async fn metrics(service: &OrderService) -> Result<(), String> {
    let text = service.server.metrics().await;
    if !text.contains("idemkey_") {
        return Err(format!("no idemkey_ series in /metrics: {text:.300}"));
    }
    Ok(())
}

async fn get_purchase(service: &OrderService) -> Result<(), String> {
    let body = r#"{"sku":"TAZA-01","quantity":1}"#;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENT {
        let request = service
            .server
            .client
            .post(format!("{}/purchases", service.server.base))
            .header("authorization", format!("Bearer {}", service.token))
            .header("idempotency-key", new_key())
            .header("content-type", "application/json")
            .body(body);
        tasks.spawn(async move { common::Reply::from(request.send().await.expect("send")).await });
    }
    let mut ids = Vec::new();
    for reply in tasks.join_all().await {
        if !matches!(reply.status, 201 | 202) {
            return Err(format!("POST /purchases: {} {}", reply.status, reply.body));
        }
        ids.push(reply.json()["id"].as_str().unwrap_or_default().to_owned());
    }
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let request = service
            .server
            .client
            .get(format!("{}/purchases/{id}", service.server.base))
            .header("authorization", format!("Bearer {}", service.token));
        tasks.spawn(async move { common::Reply::from(request.send().await.expect("send")).await });
    }
    for reply in tasks.join_all().await {
        if reply.status != 200 {
            return Err(format!(
                "GET /purchases/{{id}}: {} {}",
                reply.status, reply.body
            ));
        }
    }
    Ok(())
}

/// Runs one entry point in `cell`.
async fn run_entry_point(
    cell: &Cell,
    service: Option<&OrderService>,
    entry: EntryPoint,
) -> Result<(), String> {
    match (entry, service) {
        (EntryPoint::Migrate, _) => migrate(cell).await,
        (EntryPoint::Layer, _) => layer(cell).await,
        (EntryPoint::InTransactionEnqueueDeliver, _) => in_transaction_and_worker(cell).await,
        (EntryPoint::FlowDone, _) => flow_done(cell).await,
        (EntryPoint::FlowCompensated, _) => flow_compensated(cell).await,
        (EntryPoint::Trim, _) => trim(cell).await,
        (EntryPoint::Readyz, Some(s)) => readyz(s).await,
        (EntryPoint::Metrics, Some(s)) => metrics(s).await,
        (EntryPoint::GetPurchase, Some(s)) => get_purchase(s).await,
        (_, None) => unreachable!("the order service's entry points run with it"),
    }
}

/// Runs every entry point in one cell; panics with every failure.
async fn matrix_cell(config: Config, prefixed: bool) {
    let started = Instant::now();
    let cell = cell(config, prefixed).await;
    let theirs_before = contents(&cell, &cell.other);
    // Started once the library's entry points ran: its worker shares the
    // default names' outbox and would take their messages.
    let mut service = None;
    let mut failures = Vec::new();
    if let Err(err) = &cell.seeded {
        failures.push(err.clone());
    }
    for &entry in ENTRY_POINTS {
        if entry.in_order_service() {
            if prefixed || config.sqlx() {
                continue;
            }
            if service.is_none() {
                service = Some(order_service(&cell));
            }
        }
        let at = Instant::now();
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            run_entry_point(&cell, service.as_ref(), entry),
        )
        .await
        .unwrap_or_else(|_| Err("timed out".into()));
        eprintln!(
            "{config:?}/{}: {entry:?} {} in {:?}",
            if prefixed { "prefix" } else { "default" },
            if result.is_ok() { "ok" } else { "FAILED" },
            at.elapsed()
        );
        if let Err(err) = result {
            failures.push(format!("{entry:?}: {err}"));
        }
    }
    let theirs_after = contents(&cell, &cell.other);
    if theirs_before != theirs_after {
        failures.push(format!(
            "the other deployment's tables changed:\nbefore:\n{theirs_before}\nafter:\n{theirs_after}"
        ));
    }
    eprintln!(
        "{config:?}/{}: cell in {:?}",
        if prefixed { "prefix" } else { "default" },
        started.elapsed()
    );
    if let Some(service) = &service
        && !failures.is_empty()
    {
        eprintln!("---- order service log ----\n{}", service.server.log());
    }
    assert!(
        failures.is_empty(),
        "{config:?}, {}: {} of the entry points failed:\n{}",
        if prefixed {
            "prefixed"
        } else {
            "default names"
        },
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_direct_default_names() {
    matrix_cell(Config::Direct, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_direct_prefixed() {
    matrix_cell(Config::Direct, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_transaction_mode_default_names() {
    matrix_cell(Config::Bouncer, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_transaction_mode_prefixed() {
    matrix_cell(Config::Bouncer, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_default_names() {
    matrix_cell(Config::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_prefixed() {
    matrix_cell(Config::Sqlite, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_direct_default_names() {
    matrix_cell(Config::SqlxDirect, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_direct_prefixed() {
    matrix_cell(Config::SqlxDirect, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_pgbouncer_transaction_mode_default_names() {
    matrix_cell(Config::SqlxBouncer, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_pgbouncer_transaction_mode_prefixed() {
    matrix_cell(Config::SqlxBouncer, true).await;
}

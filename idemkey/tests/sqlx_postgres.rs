//! The sqlx backend on a real PostgreSQL: the records protocol through
//! `Records`, `in_transaction` inside the caller's own
//! `sqlx::Transaction` (effect and record commit or roll back together),
//! an outbox message enqueued there and delivered by the `Worker`, a flow
//! run to its end, a table prefix that leaves the default-named tables
//! alone, and all of it behind PgBouncer in transaction mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idemkey::Db;
use idemkey::StoreError;
use idemkey::flow::{Attempt, External, Flow, FlowSettings, Flows, Local, StepError};
use idemkey::idempotency::{
    ClaimToken, Claimed, NewClaim, RecordKey, Records, Scope, StoredResponse,
};
use idemkey::in_transaction::{Options, Outcome};
use idemkey::outbox::{Delivery, Worker, WorkerSettings};
use idemkey::store::sqlx_postgres::{
    SqlxEffect, SqlxPgDb, SqlxTx, sqlx_error, sqlx_in_transaction,
};
use idemkey::store::{OutboxStore, PgPooler, StoreSettings, Tables};
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, RetryPolicy, Stored};
use idemkey_testkit::{PgBouncer, PgBouncerOptions, PgCluster};
use serde_json::{Value, json};

const OPERATION: OperationId = OperationId::from_static("POST /payments:v1");

fn key(text: &str) -> RecordKey {
    RecordKey {
        scope: Scope::new("acct-1").expect("scope"),
        operation: OPERATION,
        key: IdempotencyKey::parse(text.as_bytes(), KeyProfile::Lenient).expect("key"),
    }
}

fn fingerprint(body: &str) -> Fingerprint {
    Fingerprint::of_json(&OPERATION, body).expect("json")
}

fn claim(body: &str, lease: Duration) -> NewClaim {
    NewClaim {
        token: ClaimToken::random(),
        fingerprint: fingerprint(body),
        lease,
        replay_ttl: Duration::from_secs(3600),
    }
}

/// A migrated store on a fresh database, with a `payments` table of the
/// application's own.
async fn store(settings: &StoreSettings) -> (SqlxPgDb, idemkey_testkit::Database) {
    let database = PgCluster::shared()
        .expect("postgres")
        .fresh_database()
        .expect("database");
    let db = SqlxPgDb::connect(&database.url, settings)
        .await
        .expect("connect");
    db.migrate().await.expect("migrate");
    sqlx::raw_sql("CREATE TABLE payments (key text PRIMARY KEY, cents int NOT NULL)")
        .execute(db.pool())
        .await
        .expect("payments");
    (db, database)
}

async fn count(db: &SqlxPgDb, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .persistent(false)
        .fetch_one(db.pool())
        .await
        .expect("count")
}

async fn records_protocol(db: &SqlxPgDb) {
    let k = key("records-1");
    let first = claim(r#"{"cents":1}"#, Duration::from_secs(60));
    assert_eq!(db.claim(&k, &first).await.expect("claim"), Claimed::Won);
    let Claimed::Taken(read) = db
        .claim(&k, &claim(r#"{"cents":1}"#, Duration::from_secs(60)))
        .await
        .expect("claim")
    else {
        panic!("a second claim won");
    };
    let record = read.record.expect("record");
    assert_eq!(record.token, first.token);
    assert!(
        matches!(record.stored, Stored::InFlight { lease_until, .. } if lease_until.0 > read.now.0)
    );
    // Wrong tokens change nothing.
    let stranger = ClaimToken::random();
    assert!(!db.release(&k, stranger).await.expect("release"));
    let response = StoredResponse::new(201, r#"{"cents":1}"#).with_header("x-test", "1");
    assert!(
        !db.complete(&k, stranger, &response, Duration::from_secs(60), None)
            .await
            .expect("complete")
    );
    assert!(
        db.complete(
            &k,
            first.token,
            &response,
            Duration::from_secs(60),
            Some("pay-1")
        )
        .await
        .expect("complete")
    );
    let read = db.read(&k).await.expect("read");
    let record = read.record.expect("record");
    assert!(matches!(record.stored, Stored::Completed { .. }));
    assert_eq!(record.response, Some(response.clone()));
    assert_eq!(record.resource_id.as_deref(), Some("pay-1"));
    assert!(
        !db.release(&k, first.token).await.expect("release"),
        "completed: not released"
    );

    // A lapsed lease is taken over once, then released.
    let lapsed = key("records-2");
    let short = claim("{}", Duration::from_millis(1));
    assert_eq!(
        db.claim(&lapsed, &short).await.expect("claim"),
        Claimed::Won
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let previous = db
        .read(&lapsed)
        .await
        .expect("read")
        .record
        .expect("record");
    let next = claim("{}", Duration::from_secs(60));
    assert!(
        db.take_over(&lapsed, &previous, &next)
            .await
            .expect("take over")
    );
    assert!(
        !db.take_over(&lapsed, &previous, &claim("{}", Duration::from_secs(60)))
            .await
            .expect("take over"),
        "the same reading takes over once"
    );
    assert!(db.release(&lapsed, next.token).await.expect("release"));
    assert_eq!(db.read(&lapsed).await.expect("read").record, None);

    // The trim reads the database's clock: nothing is due yet.
    let report = db.trim(Duration::from_secs(3600), 100).await.expect("trim");
    assert_eq!((report.trimmed, report.deleted), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_protocol_on_the_pool_and_through_db() {
    let (db, _keep) = store(&StoreSettings::default()).await;
    records_protocol(&db).await;
    assert_eq!(
        db.pending_migrations().await.expect("pending"),
        Vec::<String>::new()
    );
    let through = Db::new(db.clone());
    assert_eq!(through.backend(), "sqlx-postgres");
    through.ping().await.expect("ping");
    let k = key("through-db");
    assert_eq!(
        through
            .claim(&k, &claim("{}", Duration::from_secs(60)))
            .await
            .expect("claim"),
        Claimed::Won
    );
    assert!(through.read(&k).await.expect("read").record.is_some());
    // The seam's generic front end, on a transaction of the pool.
    let k = key("seam-1");
    let options = Options::new(Duration::from_secs(3600));
    let outcome =
        idemkey::in_transaction::transaction(&db, &k, fingerprint("{}"), &options, seam_effect)
            .await
            .expect("transaction");
    assert!(matches!(outcome, Outcome::Executed(_)), "{outcome:?}");
    assert_eq!(
        count(&db, "SELECT count(*) FROM payments WHERE key = 'seam-1'").await,
        1
    );
}

/// An effect for the seam's generic front end: a function, so that it is
/// typed for every lifetime of the transaction.
fn seam_effect(mut tx: SqlxTx<'_>) -> SqlxEffect<'_, StoreError> {
    Box::pin(async move {
        sqlx::query("INSERT INTO payments (key, cents) VALUES ('seam-1', 3)")
            .execute(&mut *tx)
            .await
            .map_err(sqlx_error)?;
        Ok(StoredResponse::new(201, "{}"))
    })
}

/// One payment in `tx` under `k`: the effect inserts its row and enqueues
/// a receipt; `status` is what it answers.
async fn pay(
    db: &SqlxPgDb,
    tx: &mut sqlx::PgConnection,
    k: &str,
    status: u16,
    ran: &AtomicUsize,
) -> Outcome {
    let record_key = key(k);
    let body = r#"{"cents":500}"#;
    let options = Options::new(Duration::from_secs(3600));
    sqlx_in_transaction(
        db,
        tx,
        &record_key,
        fingerprint(body),
        &options,
        |mut tx| {
            let record_key = record_key.clone();
            ran.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let persistent = tx.persistent();
                sqlx::query("INSERT INTO payments (key, cents) VALUES ($1, 500)")
                    .persistent(persistent)
                    .bind(record_key.key.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(sqlx_error)?;
                tx.enqueue(&record_key, "receipt", Some(record_key.key.as_str()), body)
                    .await?;
                Ok::<_, StoreError>(StoredResponse::new(status, body))
            })
        },
    )
    .await
    .expect("in_transaction")
}

async fn in_your_transaction(db: &SqlxPgDb) {
    let ran = AtomicUsize::new(0);
    // Executed, then the caller commits: effect, record and message.
    let mut tx = db.pool().begin().await.expect("begin");
    let outcome = pay(db, &mut tx, "tx-commit", 201, &ran).await;
    assert!(
        matches!(outcome, Outcome::Executed(ref r) if r.status == 201),
        "{outcome:?}"
    );
    tx.commit().await.expect("commit");
    assert_eq!(
        count(db, "SELECT count(*) FROM payments WHERE key = 'tx-commit'").await,
        1
    );
    assert!(
        db.read(&key("tx-commit"))
            .await
            .expect("read")
            .record
            .is_some()
    );
    // A retry replays without running the effect.
    let mut tx = db.pool().begin().await.expect("begin");
    let outcome = pay(db, &mut tx, "tx-commit", 201, &ran).await;
    assert!(
        matches!(outcome, Outcome::Replayed(ref r) if r.status == 201),
        "{outcome:?}"
    );
    tx.commit().await.expect("commit");
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    // Executed, then the caller rolls back: neither effect nor record.
    let mut tx = db.pool().begin().await.expect("begin");
    let outcome = pay(db, &mut tx, "tx-rollback", 201, &ran).await;
    assert!(matches!(outcome, Outcome::Executed(_)), "{outcome:?}");
    tx.rollback().await.expect("rollback");
    assert_eq!(
        count(
            db,
            "SELECT count(*) FROM payments WHERE key = 'tx-rollback'"
        )
        .await,
        0
    );
    assert_eq!(
        db.read(&key("tx-rollback")).await.expect("read").record,
        None
    );

    // A temporary status: the call's part is undone, the caller's own
    // earlier write stays and commits.
    let mut tx = db.pool().begin().await.expect("begin");
    sqlx::query("INSERT INTO payments (key, cents) VALUES ('before', 1)")
        .persistent(db.pooler() == PgPooler::None)
        .execute(&mut *tx)
        .await
        .expect("the caller's own write");
    let outcome = pay(db, &mut tx, "tx-503", 503, &ran).await;
    assert!(
        matches!(outcome, Outcome::NotStored(ref r) if r.status == 503),
        "{outcome:?}"
    );
    tx.commit().await.expect("commit");
    assert_eq!(
        count(db, "SELECT count(*) FROM payments WHERE key = 'before'").await,
        1
    );
    assert_eq!(
        count(db, "SELECT count(*) FROM payments WHERE key = 'tx-503'").await,
        0
    );
    assert_eq!(db.read(&key("tx-503")).await.expect("read").record, None);
    // Only the committed payment's receipt is in the outbox.
    let stats = db.outbox_stats().await.expect("stats");
    assert_eq!(stats.pending, 1, "{stats:?}");
}

fn worker_settings() -> WorkerSettings {
    WorkerSettings {
        batch: 8,
        concurrency: 4,
        lease: Duration::from_secs(30),
        idle_poll: Duration::from_millis(10),
        retry: RetryPolicy {
            base_ms: 5,
            cap_ms: 20,
            max_attempts: 8,
        },
        retry_for: Duration::from_secs(3600),
    }
}

/// Runs the worker until nothing is due for a while.
async fn drain(worker: &Worker) {
    let mut idle = 0;
    while idle < 5 {
        match worker.run_once().await.expect("worker") {
            0 => {
                idle += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => idle = 0,
        }
    }
}

async fn worker_delivers(db: &SqlxPgDb) {
    let sent = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen = Arc::clone(&sent);
    let worker = Worker::new(Db::new(db.clone()), worker_settings()).handle("receipt", move |m| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock()
                .push((m.resource_id.clone(), m.downstream_key().to_string()));
            Delivery::Delivered("receipt-1".into())
        }
    });
    drain(&worker).await;
    let sent = sent.lock().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0.as_deref(), Some("tx-commit"));
    let stats = db.outbox_stats().await.expect("stats");
    assert_eq!((stats.pending, stats.dead), (0, 0));
    let listed = db.outbox_list(Some("delivered"), 10).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].result.as_deref(), Some("receipt-1"));
    assert_eq!(
        listed[0].downstream_key.as_deref(),
        Some(sent[0].1.as_str())
    );
    // Nothing dead to retry.
    let requeued = db
        .outbox_retry(None, Duration::from_secs(3600), false)
        .await
        .expect("retry");
    assert_eq!(requeued.requeued, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_your_own_transaction_with_an_outbox_message_delivered() {
    let (db, _keep) = store(&StoreSettings::default()).await;
    in_your_transaction(&db).await;
    worker_delivers(&db).await;
}

/// A flow with a local step on sqlx (a row in the caller's table, in the
/// journal's transaction) and an external one.
fn transfer(calls: &Arc<AtomicUsize>) -> Flow {
    let calls = Arc::clone(calls);
    let book = Local::new().sqlx_postgres(|conn, ctx| {
        Box::pin(async move {
            sqlx::query("INSERT INTO payments (key, cents) VALUES ($1, 7)")
                .persistent(false)
                .bind(format!("flow-{}", ctx.flow_id))
                .execute(&mut *conn)
                .await
                .map_err(|e| StepError::Retry(e.to_string()))?;
            Ok(json!({ "booked": true }))
        })
    });
    Flow::new("transfer").local("book", book).external(
        "notify",
        External::new(move |_ctx| {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Attempt::Done(json!({ "notified": true }))
            }
        }),
    )
}

async fn flow_to_done(db: &SqlxPgDb) {
    let calls = Arc::new(AtomicUsize::new(0));
    let settings = FlowSettings {
        wait: Duration::ZERO,
        ..FlowSettings::default()
    };
    let flows = Flows::new(Db::new(db.clone()), vec![transfer(&calls)], settings).expect("flows");
    let worker = flows.attach(Worker::new(Db::new(db.clone()), worker_settings()));
    let input = json!({ "to": "b" });
    let k = key("flow-1");
    let fp = fingerprint(&input.to_string());
    let options = Options::new(Duration::from_secs(3600));
    let first = flows
        .start("transfer", &k, fp, &input, &options)
        .await
        .expect("start");
    let Outcome::Executed(accepted) = first else {
        panic!("{first:?}");
    };
    assert_eq!(accepted.status, 202);
    assert_eq!(
        count(db, "SELECT count(*) FROM payments WHERE key LIKE 'flow-%'").await,
        1,
        "the local step committed with the key"
    );
    drain(&worker).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let again = flows
        .start("transfer", &k, fp, &input, &options)
        .await
        .expect("retry");
    let Outcome::Replayed(done) = again else {
        panic!("{again:?}");
    };
    assert_eq!(
        done.status,
        200,
        "{:?}",
        String::from_utf8_lossy(done.body.as_deref().unwrap_or_default())
    );
    let body: Value =
        serde_json::from_slice(done.body.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(body["outputs"]["notify"]["notified"], true, "{body}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a retry of an ended flow calls nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_runs_to_done() {
    let (db, _keep) = store(&StoreSettings::default()).await;
    flow_to_done(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_leaves_the_default_tables_alone() {
    let (plain, database) = store(&StoreSettings::default()).await;
    let k = key("shared-key");
    assert_eq!(
        plain
            .claim(&k, &claim("{}", Duration::from_secs(60)))
            .await
            .expect("claim"),
        Claimed::Won
    );
    let prefixed = StoreSettings {
        tables: Tables::with_prefix("acme_").expect("prefix"),
        ..StoreSettings::default()
    };
    let acme = SqlxPgDb::connect(&database.url, &prefixed)
        .await
        .expect("connect");
    acme.migrate().await.expect("migrate");
    // The same key is free under the prefix, and its writes stay there.
    records_protocol(&acme).await;
    assert_eq!(
        acme.claim(&k, &claim("{}", Duration::from_secs(60)))
            .await
            .expect("claim"),
        Claimed::Won
    );
    in_your_transaction(&acme).await;
    assert_eq!(
        count(&plain, "SELECT count(*) FROM idempotency_records").await,
        1
    );
    assert_eq!(count(&plain, "SELECT count(*) FROM outbox").await, 0);
    assert!(count(&plain, "SELECT count(*) FROM acme_idempotency_records").await > 1);
    assert_eq!(count(&plain, "SELECT count(*) FROM acme_outbox").await, 1);
    assert_eq!(
        count(&plain, "SELECT count(*) FROM acme_idemkey_migrations").await,
        count(&plain, "SELECT count(*) FROM idemkey_migrations").await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_in_transaction_mode() {
    let cluster = PgCluster::shared().expect("postgres");
    let database = cluster.fresh_database().expect("database");
    cluster
        .psql(
            &database.name,
            &format!(
                "ALTER ROLE postgres IN DATABASE \"{db}\" SET lock_timeout = '2s';
                 ALTER ROLE postgres IN DATABASE \"{db}\" SET statement_timeout = '5s';
                 CREATE TABLE payments (key text PRIMARY KEY, cents int NOT NULL);",
                db = database.name
            ),
        )
        .expect("role timeouts");
    let bouncer =
        PgBouncer::start_with(cluster, PgBouncerOptions::new().pool_size(2)).expect("pgbouncer");
    let settings = StoreSettings {
        pooler: PgPooler::Transaction,
        pool_size: 8,
        ..StoreSettings::default()
    };
    let db = SqlxPgDb::connect(&bouncer.url(&database.name), &settings)
        .await
        .expect("connect through pgbouncer");
    db.migrate().await.expect("migrate through pgbouncer");
    records_protocol(&db).await;
    in_your_transaction(&db).await;
    worker_delivers(&db).await;
    flow_to_done(&db).await;
    // Many clients on two server connections: every statement unnamed.
    let claims = (0..64).map(|i| {
        let db = db.clone();
        tokio::spawn(async move {
            let k = key(&format!("many-{i}"));
            let c = claim("{}", Duration::from_secs(60));
            db.claim(&k, &c).await?;
            db.complete(
                &k,
                c.token,
                &StoredResponse::new(201, "{}"),
                Duration::from_secs(60),
                None,
            )
            .await
        })
    });
    for done in futures_join(claims).await {
        assert!(
            done.expect("task")
                .expect("claim and complete through pgbouncer")
        );
    }
}

async fn futures_join<T>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await);
    }
    out
}

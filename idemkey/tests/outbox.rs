//! The outbox as a library user meets it, on both backends (a real
//! PostgreSQL database from the testkit, a real SQLite file): an effect
//! enqueued in the user's `in_transaction` closure commits with it or not at
//! all, and a `Worker` with the user's own delivery function delivers it
//! with the derived downstream key, looks it up after an uncertain attempt,
//! takes a crashed worker's claim over after its lease (the database's
//! clock), and dead-letters it when its attempts run out.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use idemkey::Db;
use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
use idemkey::in_transaction::{Options, Outcome};
use idemkey::outbox::{Delivery, Worker, WorkerSettings};
use idemkey::outbox::{OutboxMessage, Settlement};
use idemkey::store::StoreSettings as PgSettings;
use idemkey::store::postgres::PgDb;
use idemkey::store::postgres::pg_in_transaction;
use idemkey::store::sqlite::SqliteDb;
use idemkey::store::sqlite::sqlite_in_transaction_async;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, RetryPolicy};
use idemkey_testkit::{Backend, TestDb as Env, eventually};
use parking_lot::Mutex;

const OPERATION: OperationId = OperationId::from_static("POST /signups:v1");

fn backends() -> [Backend; 2] {
    [Backend::Postgres, Backend::Sqlite]
}

async fn open(env: &Env) -> (Db, uuid::Uuid) {
    let db = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("open");
    (db, uuid::Uuid::new_v4())
}

fn record(account: uuid::Uuid, key: &str) -> RecordKey {
    RecordKey {
        scope: Scope::account(account),
        operation: OPERATION,
        key: IdempotencyKey::parse(key.as_bytes(), KeyProfile::Lenient).expect("key"),
    }
}

/// The user's transaction: its own effect would go here too; it enqueues a
/// `welcome-mail` message, and answers `status` (a 5xx rolls back).
async fn sign_up(db: &Db, key: &RecordKey, status: u16) -> Outcome {
    let fingerprint = Fingerprint::of_json(&OPERATION, r#"{"email":"a@example.com"}"#).unwrap();
    let options = Options::new(Duration::from_secs(3600));
    let payload = r#"{"to":"a@example.com"}"#;
    let response = StoredResponse::new(status, "{}");
    if let Some(pg) = db.backend_as::<PgDb>() {
        let key2 = key.clone();
        pg_in_transaction(pg, key, fingerprint, &options, move |tx| {
            Box::pin(async move {
                tx.enqueue(&key2, "welcome-mail", None, payload).await?;
                Ok::<_, idemkey::StoreError>(response)
            })
        })
        .await
        .expect("in_transaction")
    } else if let Some(sqlite) = db.backend_as::<SqliteDb>() {
        let key2 = key.clone();
        sqlite_in_transaction_async(
            sqlite,
            sqlite.connection(),
            key.clone(),
            fingerprint,
            options,
            move |tx| {
                tx.enqueue(&key2, "welcome-mail", None, payload)?;
                Ok::<_, idemkey::StoreError>(response)
            },
        )
        .await
        .expect("in_transaction")
    } else {
        unreachable!(
            "the outbox runs on PostgreSQL or SQLite, not {}",
            db.backend()
        )
    }
}

fn fast() -> WorkerSettings {
    WorkerSettings {
        batch: 16,
        concurrency: 32,
        lease: Duration::from_secs(10),
        idle_poll: Duration::from_millis(20),
        retry: RetryPolicy {
            base_ms: 20,
            cap_ms: 50,
            max_attempts: 3,
        },
        retry_for: idemkey::outbox::DEFAULT_RETRY_FOR,
    }
}

/// `status|attempts|downstream_key|result` of the only message.
fn message_row(env: &Env) -> String {
    env.sql("SELECT status || '|' || attempts || '|' || coalesce(downstream_key, '') || '|' || coalesce(result, '') FROM outbox")
}

#[tokio::test]
async fn an_enqueued_effect_commits_with_the_transaction_or_not_at_all() {
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        let key = record(account, "signup-1");
        assert!(matches!(
            sign_up(&db, &key, 201).await,
            Outcome::Executed(_)
        ));
        // The replay runs no closure: still one message.
        assert!(matches!(
            sign_up(&db, &key, 201).await,
            Outcome::Replayed(_)
        ));
        // A rolled-back transaction (a 503 is never stored) enqueues nothing.
        let other = record(account, "signup-2");
        assert!(matches!(
            sign_up(&db, &other, 503).await,
            Outcome::NotStored(_)
        ));
        assert_eq!(env.count("outbox"), 1, "{backend:?}");
        assert_eq!(
            env.sql("SELECT key || ' ' || effect || ' ' || status FROM outbox"),
            "signup-1 welcome-mail pending"
        );
    }
}

#[tokio::test]
async fn a_worker_sends_the_derived_key_and_looks_up_after_an_uncertain_attempt() {
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        let key = record(account, "signup-1");
        sign_up(&db, &key, 201).await;
        let seen: Arc<Mutex<Vec<(String, bool, u32)>>> = Arc::default();
        let calls = Arc::clone(&seen);
        let worker = Worker::new(db.clone(), fast()).handle("welcome-mail", move |m| {
            let calls = Arc::clone(&calls);
            async move {
                let mut calls = calls.lock();
                calls.push((m.downstream_key().to_string(), m.maybe_sent(), m.attempts));
                // The first attempt loses its answer.
                if calls.len() == 1 {
                    Delivery::Uncertain("connection closed after sending".into())
                } else {
                    Delivery::Delivered("mail-1".into())
                }
            }
        });
        eventually("the message is delivered", async || {
            worker.run_once().await.expect("run");
            message_row(&env).starts_with("delivered")
        })
        .await;
        // Per message: no resource, so the message's own id tells this
        // effect from another of the same key.
        let id = env.sql("SELECT id FROM outbox");
        let expected = idemkey_core::instance_downstream_key_of(
            &account.to_string(),
            OPERATION.as_str(),
            key.key.as_str(),
            "welcome-mail",
            &format!("outbox:{id}"),
        )
        .to_string();
        let calls = seen.lock().clone();
        assert_eq!(
            calls,
            vec![(expected.clone(), false, 1), (expected.clone(), true, 2)],
            "{backend:?}"
        );
        assert_eq!(message_row(&env), format!("delivered|2|{expected}|mail-1"));
        // Nothing is left to deliver.
        assert_eq!(worker.run_once().await.expect("run"), 0);
    }
}

#[tokio::test]
async fn a_refusal_fails_for_good_and_an_exhausted_budget_is_dead_until_retried() {
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        sign_up(&db, &record(account, "refused"), 201).await;
        let refusing = Worker::new(db.clone(), fast()).handle("welcome-mail", |_| async {
            Delivery::Refused("no such mailbox".into())
        });
        assert_eq!(refusing.run_once().await.expect("run"), 1);
        assert_eq!(
            env.sql("SELECT status || '|' || result FROM outbox"),
            "failed|no such mailbox"
        );
        assert_eq!(refusing.run_once().await.expect("run"), 0, "never again");

        sign_up(&db, &record(account, "down"), 201).await;
        let down = Worker::new(db.clone(), fast()).handle("welcome-mail", |_| async {
            Delivery::Retry {
                after: None,
                reason: "503 from the mail API".into(),
            }
        });
        let dead = "SELECT count(*) FROM outbox WHERE status = 'dead'";
        eventually("the budget runs out", async || {
            down.run_once().await.expect("run");
            env.sql(dead) == "1"
        })
        .await;
        assert_eq!(
            env.sql("SELECT attempts || '|' || last_error FROM outbox WHERE status = 'dead'"),
            "3|503 from the mail API",
            "{backend:?}"
        );
        assert_eq!(db.clone().outbox_stats().await.expect("stats").dead, 1);
        // An operator sends it back; it is delivered, looked up first.
        let day = Duration::from_secs(86_400);
        assert_eq!(
            db.clone()
                .outbox_retry(None, day, false)
                .await
                .expect("retry")
                .requeued,
            1
        );
        let looked_up = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&looked_up);
        let back = Worker::new(db.clone(), fast()).handle("welcome-mail", move |m| {
            *seen.lock() = Some((m.attempts, m.maybe_sent()));
            async { Delivery::Delivered("mail-2".into()) }
        });
        assert_eq!(back.run_once().await.expect("run"), 1);
        assert_eq!(*looked_up.lock(), Some((1, true)));
        assert_eq!(
            env.sql("SELECT count(*) FROM outbox WHERE status = 'delivered'"),
            "1"
        );
    }
}

#[tokio::test]
async fn a_crashed_workers_claim_is_taken_over_after_its_lease_and_its_late_answer_is_ignored() {
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        sign_up(&db, &record(account, "signup-1"), 201).await;
        let effects = vec!["welcome-mail".to_owned()];
        // A worker claims it for 300 ms and dies.
        let crashed: Vec<OutboxMessage> = db
            .claim_outbox(&effects, 10, Duration::from_millis(300))
            .await
            .expect("claim");
        assert_eq!(crashed.len(), 1);
        // While the lease holds, nobody else gets it.
        assert!(
            db.clone()
                .claim_outbox(&effects, 10, Duration::from_secs(10))
                .await
                .expect("claim")
                .is_empty()
        );
        // After it (at the database's clock), another worker does.
        let mut taken = Vec::new();
        eventually("the lease ends", async || {
            taken = db
                .claim_outbox(&effects, 10, Duration::from_secs(10))
                .await
                .expect("claim");
            !taken.is_empty()
        })
        .await;
        assert_eq!(taken[0].attempts, 2);
        assert!(taken[0].maybe_sent(), "{backend:?}");
        let delivered = Settlement::Delivered {
            result: "late".into(),
        };
        // The crashed worker's late answer does not count.
        assert!(
            !db.clone()
                .settle_outbox(&crashed[0], None, &delivered)
                .await
                .expect("settle")
        );
        let mine = Settlement::Delivered {
            result: "mail-1".into(),
        };
        assert!(
            db.clone()
                .settle_outbox(&taken[0], Some("k"), &mine)
                .await
                .expect("settle")
        );
        assert_eq!(message_row(&env), "delivered|2|k|mail-1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_postgres_deliver_each_message_once_and_never_at_the_same_time() {
    let env = Env::new(Backend::Postgres);
    let (db, account) = open(&env).await;
    let n = 300;
    for i in 0..n {
        sign_up(&db, &record(account, &format!("signup-{i}")), 201).await;
    }
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let delivered: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let overlaps = Arc::new(Mutex::new(0u32));
    let worker = |db: Db| {
        let (in_flight, delivered, overlaps) = (
            Arc::clone(&in_flight),
            Arc::clone(&delivered),
            Arc::clone(&overlaps),
        );
        Worker::new(db, fast()).handle("welcome-mail", move |m| {
            let (in_flight, delivered, overlaps) = (
                Arc::clone(&in_flight),
                Arc::clone(&delivered),
                Arc::clone(&overlaps),
            );
            async move {
                let key = m.downstream_key().to_string();
                if !in_flight.lock().insert(key.clone()) {
                    *overlaps.lock() += 1;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                in_flight.lock().remove(&key);
                *delivered.lock().entry(key.clone()).or_default() += 1;
                Delivery::Delivered(key)
            }
        })
    };
    // Two workers, each with its own pool, as two processes would have.
    let other = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("open");
    let (one, two) = (worker(db.clone()), worker(other));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let run = |w: Worker| {
        let mut stop = stop_rx.clone();
        tokio::spawn(w.run(async move {
            let _ = stop.wait_for(|s| *s).await;
        }))
    };
    let (a, b) = (run(one), run(two));
    eventually("every message is delivered", async || {
        env.sql("SELECT count(*) FROM outbox WHERE status = 'delivered'") == n.to_string()
    })
    .await;
    let _ = stop_tx.send(true);
    let _ = (a.await, b.await);
    let delivered = delivered.lock();
    assert_eq!(delivered.len(), n);
    assert!(delivered.values().all(|&times| times == 1), "{delivered:?}");
    assert_eq!(*overlaps.lock(), 0);
    assert_eq!(
        env.sql("SELECT count(*) FROM outbox WHERE attempts <> 1"),
        "0"
    );
}

/// A downstream's `Retry-After` is honoured up to an hour: a huge one
/// neither overflows the store's time arithmetic nor parks the message for
/// years.
#[tokio::test]
async fn a_huge_retry_after_waits_at_most_an_hour() {
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        sign_up(&db, &record(account, "busy"), 201).await;
        let busy = Worker::new(db.clone(), fast()).handle("welcome-mail", |_| async {
            Delivery::Retry {
                after: Some(Duration::MAX),
                reason: "503 with Retry-After: 99999999999".into(),
            }
        });
        assert_eq!(busy.run_once().await.expect("settled"), 1, "{backend:?}");
        let wait_ms: i64 = env
            .sql(match backend {
                Backend::Postgres => {
                    "SELECT (extract(epoch FROM available_at - now()) * 1000)::int8 FROM outbox"
                }
                Backend::Sqlite => {
                    "SELECT available_at - CAST(round(unixepoch('subsec') * 1000) AS INTEGER) \
                     FROM outbox"
                }
            })
            .parse()
            .expect("a whole number of ms");
        // Honoured (far beyond the 50 ms backoff cap), up to the bound.
        assert!(
            (3_000_000..=3_600_000).contains(&wait_ms),
            "{backend:?}: {wait_ms} ms"
        );
        assert_eq!(message_row(&env).split('|').next(), Some("pending"));
    }
}

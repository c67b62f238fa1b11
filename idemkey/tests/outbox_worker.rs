//! The delivery worker's pace, on both backends (a real PostgreSQL
//! database from the testkit, a real SQLite file): outcomes are settled in
//! one write per batch and a claim taken over meanwhile is not overwritten;
//! a slow delivery holds only itself; a downstream's `Retry-After` pauses
//! every new send of its effect until it ends; an operator's rate limit
//! bounds how fast an effect is sent.
//!
//! Nothing here asserts a duration: only what happened before what.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idemkey::Db;
use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
use idemkey::in_transaction::Options;
use idemkey::outbox::{
    Delivery, OutboxMessage, OutboxMetrics, OutboxOutcome, Rate, Settlement, Worker, WorkerSettings,
};
use idemkey::store::StoreSettings as PgSettings;
use idemkey::store::postgres::PgDb;
use idemkey::store::postgres::pg_in_transaction;
use idemkey::store::sqlite::SqliteDb;
use idemkey::store::sqlite::sqlite_in_transaction_async;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, RetryPolicy};
use idemkey_testkit::{Backend, TestDb as Env, eventually};
use parking_lot::Mutex;
use tokio::sync::Notify;

const OPERATION: OperationId = OperationId::from_static("POST /signups:v1");
const MAIL: &str = "welcome-mail";
const SMS: &str = "welcome-sms";

fn backends() -> [Backend; 2] {
    [Backend::Postgres, Backend::Sqlite]
}

async fn open(env: &Env) -> (Db, uuid::Uuid) {
    let db = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("open");
    (db, uuid::Uuid::new_v4())
}

/// Commits a sign-up under `key` with one message of `effect`.
async fn enqueue(db: &Db, account: uuid::Uuid, key: &str, effect: &'static str) {
    let key = RecordKey {
        scope: Scope::account(account),
        operation: OPERATION,
        key: IdempotencyKey::parse(key.as_bytes(), KeyProfile::Lenient).expect("key"),
    };
    let fingerprint = Fingerprint::of_json(&OPERATION, r#"{"email":"a@example.com"}"#).unwrap();
    let options = Options::new(Duration::from_secs(3600));
    let response = StoredResponse::new(201, "{}");
    let payload = r#"{"to":"a@example.com"}"#;
    if let Some(pg) = db.backend_as::<PgDb>() {
        let key2 = key.clone();
        pg_in_transaction(pg, &key, fingerprint, &options, move |tx| {
            Box::pin(async move {
                tx.enqueue(&key2, effect, None, payload).await?;
                Ok::<_, idemkey::StoreError>(response)
            })
        })
        .await
        .expect("in_transaction");
    } else if let Some(sqlite) = db.backend_as::<SqliteDb>() {
        let key2 = key.clone();
        sqlite_in_transaction_async(
            sqlite,
            sqlite.connection(),
            key,
            fingerprint,
            options,
            move |tx| {
                tx.enqueue(&key2, effect, None, payload)?;
                Ok::<_, idemkey::StoreError>(response)
            },
        )
        .await
        .expect("in_transaction");
    } else {
        unreachable!(
            "the outbox runs on PostgreSQL or SQLite, not {}",
            db.backend()
        )
    }
}

fn settings(batch: u32, concurrency: u32) -> WorkerSettings {
    WorkerSettings {
        batch,
        concurrency,
        // Long enough that no delivery here is cut off as uncertain.
        lease: Duration::from_secs(60),
        idle_poll: Duration::from_millis(20),
        retry: RetryPolicy {
            base_ms: 20,
            cap_ms: 50,
            max_attempts: 5,
        },
        retry_for: Duration::from_secs(3600),
    }
}

/// Runs `worker` until the returned sender says stop.
fn run(
    worker: Worker,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(worker.run(async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));
    (stop, task)
}

fn delivered(env: &Env, effect: &str) -> u64 {
    env.sql(&format!(
        "SELECT count(*) FROM outbox WHERE effect = '{effect}' AND status = 'delivered'"
    ))
    .parse()
    .expect("a count")
}

#[tokio::test]
async fn a_batch_of_outcomes_is_settled_at_once_and_a_claim_taken_over_is_not_overwritten() {
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        let store = db.clone();
        let effects = vec![MAIL.to_owned()];
        for key in ["delivered", "refused", "retried", "dead", "postponed"] {
            enqueue(&db, account, key, MAIL).await;
        }
        let mine = store
            .claim_outbox(&effects, 10, Duration::from_secs(60))
            .await
            .expect("claim");
        assert_eq!(mine.len(), 5);
        // Another worker claims one more for 300 ms and stalls; after its
        // lease (at the database's clock) a third takes the message over.
        enqueue(&db, account, "taken-over", MAIL).await;
        let stalled = store
            .claim_outbox(&effects, 10, Duration::from_millis(300))
            .await
            .expect("claim");
        assert_eq!(stalled.len(), 1);
        let mut taker = Vec::new();
        eventually("the stalled lease ends", async || {
            taker = store
                .claim_outbox(&effects, 10, Duration::from_secs(60))
                .await
                .expect("claim");
            !taker.is_empty()
        })
        .await;

        let settlement = |m: &OutboxMessage| match m.key.as_str() {
            "delivered" => Settlement::Delivered {
                result: "mail-1".into(),
            },
            "refused" => Settlement::Failed {
                reason: "no such mailbox".into(),
            },
            "retried" => Settlement::Retry {
                after: Duration::from_secs(600),
                error: "503".into(),
            },
            "dead" => Settlement::Dead {
                error: "gone".into(),
            },
            "postponed" => Settlement::Postponed {
                after: Duration::from_secs(600),
            },
            _ => Settlement::Delivered {
                result: "late".into(),
            },
        };
        let outcomes: Vec<OutboxOutcome> = mine
            .iter()
            .chain(&stalled)
            .map(|m| OutboxOutcome {
                message: m.clone(),
                sent_key: (m.key != "postponed").then(|| format!("k-{}", m.key)),
                settlement: settlement(m),
            })
            .collect();
        let settled = store.settle_outbox_batch(&outcomes).await.expect("settle");
        assert_eq!(
            settled,
            [true, true, true, true, true, false],
            "{backend:?}"
        );

        let row = |key: &str| {
            env.sql(&format!(
                "SELECT status || '|' || attempts || '|' || coalesce(downstream_key, '') || '|' \
                 || coalesce(result, '') || '|' || coalesce(last_error, '') || '|' \
                 || (lease IS NULL) FROM outbox WHERE key = '{key}'"
            ))
        };
        let free = match backend {
            Backend::Postgres => "true",
            Backend::Sqlite => "1",
        };
        assert_eq!(
            row("delivered"),
            format!("delivered|1|k-delivered|mail-1||{free}")
        );
        assert_eq!(
            row("refused"),
            format!("failed|1|k-refused|no such mailbox||{free}")
        );
        assert_eq!(row("retried"), format!("pending|1|k-retried||503|{free}"));
        assert_eq!(row("dead"), format!("dead|1|k-dead||gone|{free}"));
        // Never sent: its attempt is taken back, so the next one does not
        // look it up first.
        assert_eq!(row("postponed"), format!("pending|0||||{free}"));
        // The stalled worker's late answer changed nothing: the message is
        // the taker's, claimed, unsettled.
        let held = if backend == Backend::Postgres {
            "false"
        } else {
            "0"
        };
        assert_eq!(row("taken-over"), format!("pending|2||||{held}"));
        assert_eq!(
            env.sql("SELECT lease FROM outbox WHERE key = 'taken-over'"),
            taker[0].lease.to_string()
        );
        // Neither the retried nor the postponed one is due yet.
        assert!(
            store
                .claim_outbox(&effects, 10, Duration::from_secs(60))
                .await
                .expect("claim")
                .is_empty()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_delivery_holds_only_itself() {
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        enqueue(&db, account, "slow", MAIL).await;
        for i in 0..39 {
            enqueue(&db, account, &format!("quick-{i}"), MAIL).await;
        }
        let gate = Arc::new(Notify::new());
        let released = Arc::new(AtomicBool::new(false));
        let (waiting, done) = (Arc::clone(&gate), Arc::clone(&released));
        // Batches of 8, 16 in flight: the slow one is in the first batch,
        // the others in four more.
        let worker = Worker::new(db.clone(), settings(8, 16)).handle(MAIL, move |m| {
            let (gate, released) = (Arc::clone(&waiting), Arc::clone(&done));
            async move {
                if m.key == "slow" {
                    gate.notified().await;
                    assert!(released.load(Ordering::SeqCst));
                }
                Delivery::Delivered(m.key.clone())
            }
        });
        let (stop, task) = run(worker);
        eventually("every quick message is delivered and settled", async || {
            delivered(&env, MAIL) == 39
        })
        .await;
        // Claimed, settled and delivered around it while it is held.
        assert!(!released.load(Ordering::SeqCst));
        assert_eq!(
            env.sql("SELECT status FROM outbox WHERE key = 'slow'"),
            "pending",
            "{backend:?}"
        );
        released.store(true, Ordering::SeqCst);
        gate.notify_one();
        eventually("the slow one is delivered too", async || {
            delivered(&env, MAIL) == 40
        })
        .await;
        let _ = stop.send(true);
        task.await.expect("the worker stops");
        assert_eq!(
            env.sql("SELECT count(*) FROM outbox WHERE attempts <> 1"),
            "0"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_pauses_the_effects_new_sends_until_it_ends() {
    const PAUSE: Duration = Duration::from_secs(1);
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        enqueue(&db, account, "first", MAIL).await;
        // When each send began, by effect; when the 429 was answered.
        let sends: Arc<Mutex<Vec<(String, String, Instant)>>> = Arc::default();
        let answered: Arc<Mutex<Option<Instant>>> = Arc::default();
        let record = |effect: &'static str| {
            let (sends, answered) = (Arc::clone(&sends), Arc::clone(&answered));
            move |m: OutboxMessage| {
                let (sends, answered) = (Arc::clone(&sends), Arc::clone(&answered));
                async move {
                    sends
                        .lock()
                        .push((effect.to_owned(), m.key.clone(), Instant::now()));
                    if m.key == "first" && m.attempts == 1 {
                        *answered.lock() = Some(Instant::now());
                        return Delivery::Retry {
                            after: Some(PAUSE),
                            reason: "429 Too Many Requests".into(),
                        };
                    }
                    Delivery::Delivered(m.key.clone())
                }
            }
        };
        let metrics = Arc::new(OutboxMetrics::default());
        let worker = Worker::new(db.clone(), settings(16, 32))
            .handle(MAIL, record(MAIL))
            .handle(SMS, record(SMS))
            .with_metrics(Arc::clone(&metrics));
        let (stop, task) = run(worker.clone());
        eventually("the first mail is answered 429", async || {
            answered.lock().is_some()
        })
        .await;
        // Its effect is paused; new messages of both effects arrive.
        assert!(worker.paused_for(MAIL).is_some(), "{backend:?}");
        assert_eq!(worker.paused_for(SMS), None);
        for i in 0..5 {
            enqueue(&db, account, &format!("mail-{i}"), MAIL).await;
            enqueue(&db, account, &format!("sms-{i}"), SMS).await;
        }
        eventually("everything is delivered", async || {
            delivered(&env, MAIL) == 6 && delivered(&env, SMS) == 5
        })
        .await;
        let _ = stop.send(true);
        task.await.expect("the worker stops");

        let answered = answered.lock().expect("answered");
        let sends = sends.lock().clone();
        let mail_after: Vec<Instant> = sends
            .iter()
            .filter(|(effect, key, at)| effect == MAIL && !(key == "first" && *at <= answered))
            .map(|(_, _, at)| *at)
            .collect();
        assert_eq!(mail_after.len(), 6, "{sends:?}");
        // No mail was sent before the pause ended: it began when the 429
        // came back, and lasted the Retry-After.
        assert!(
            mail_after.iter().all(|at| *at >= answered + PAUSE),
            "{backend:?}: a mail was sent during the pause: {sends:?}"
        );
        // The other effect was not held: an SMS went out before any mail
        // resumed.
        let first_sms = sends
            .iter()
            .filter(|(effect, _, _)| effect == SMS)
            .map(|(_, _, at)| *at)
            .min()
            .expect("SMS sent");
        assert!(first_sms < *mail_after.iter().min().expect("mail sent"));
        assert_eq!(metrics.deliveries(MAIL, "paused"), 1);
        assert_eq!(metrics.deliveries(SMS, "paused"), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_bounds_how_fast_an_effect_is_sent() {
    const PER_SECOND: u32 = 20;
    const BURST: u32 = 5;
    for backend in backends() {
        let env = Env::new(backend);
        let (db, account) = open(&env).await;
        for i in 0..30 {
            enqueue(&db, account, &format!("mail-{i}"), MAIL).await;
            enqueue(&db, account, &format!("sms-{i}"), SMS).await;
        }
        let sends: Arc<Mutex<Vec<(&'static str, Instant)>>> = Arc::default();
        let record = |effect: &'static str| {
            let sends = Arc::clone(&sends);
            move |m: OutboxMessage| {
                sends.lock().push((effect, Instant::now()));
                async move { Delivery::Delivered(m.key) }
            }
        };
        let rate =
            Rate::per_second(PER_SECOND.try_into().unwrap()).with_burst(BURST.try_into().unwrap());
        let worker = Worker::new(db.clone(), settings(16, 32))
            .handle(MAIL, record(MAIL))
            .handle(SMS, record(SMS))
            .rate_limit(MAIL, rate);
        let (stop, task) = run(worker);
        eventually("everything is delivered", async || {
            delivered(&env, MAIL) == 30 && delivered(&env, SMS) == 30
        })
        .await;
        let _ = stop.send(true);
        task.await.expect("the worker stops");

        let sends = sends.lock().clone();
        let mails: Vec<Instant> = sends
            .iter()
            .filter(|(e, _)| *e == MAIL)
            .map(|(_, at)| *at)
            .collect();
        let first = mails[0];
        // By each send, at most the burst plus the rate's worth since the
        // first, and one burst more: a send is counted when its claim takes
        // the token, a little before it starts (more on a loaded box).
        // Without the limit, all 30 would go out at once.
        for (n, at) in mails.iter().enumerate() {
            let allowed = f64::from(2 * BURST)
                + f64::from(PER_SECOND) * at.duration_since(first).as_secs_f64();
            assert!(
                (n + 1) as f64 <= allowed,
                "{backend:?}: send {} came {:?} after the first",
                n + 1,
                at.duration_since(first)
            );
        }
        // The unlimited effect was not held back by the limited one: all
        // of it went out before the mails were done.
        let last_sms = sends
            .iter()
            .filter(|(e, _)| *e == SMS)
            .map(|(_, at)| *at)
            .max()
            .expect("SMS sent");
        assert!(last_sms < *mails.last().expect("mails"));
    }
}

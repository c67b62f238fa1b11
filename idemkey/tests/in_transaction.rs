//! `idemkey::in_transaction` on both backends: a real PostgreSQL
//! database from the testkit and a real SQLite file in a temporary
//! directory. The caller's effect is a row in its own `payments` table,
//! written inside the transaction the API opens.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use idemkey::Db as AnyDb;
use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
use idemkey::in_transaction::{Error, Options, Outcome};
use idemkey::store::StoreSettings as PgSettings;
use idemkey::store::postgres::PgDb;
use idemkey::store::postgres::pg_in_transaction;
use idemkey::store::sqlite::sqlite_in_transaction_async;
use idemkey_core::{ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, OperationId};
use idemkey_testkit::PgCluster;

const TTL: Duration = Duration::from_secs(3600);

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

enum Db {
    Pg(PgDb),
    Sqlite {
        store: idemkey::store::sqlite::SqliteDb,
        path: PathBuf,
        _dir: TempDir,
    },
}

struct Env {
    db: Db,
    url: String,
    account: uuid::Uuid,
}

/// One call's record key and fingerprint.
#[derive(Clone)]
struct Call {
    key: RecordKey,
    fingerprint: Fingerprint,
}

/// Sessions of the database at `url` inside a transaction with no
/// statement running (a call between its claim and its commit).
async fn open_transactions(url: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    let n = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND state = 'idle in transaction'",
            &[],
        )
        .await
        .expect("pg_stat_activity")
        .get(0);
    drop(client);
    let _ = task.await;
    n
}

async fn postgres() -> Env {
    let cluster = PgCluster::shared().expect("postgres");
    let database = cluster.fresh_database().expect("database");
    let db = AnyDb::open(&database.url, &PgSettings::default())
        .await
        .expect("connect");
    let account = uuid::Uuid::new_v4();
    let store = db
        .backend_as::<PgDb>()
        .expect("a PostgreSQL URL opens PostgreSQL")
        .clone();
    let client = store.pool().get().await.expect("client");
    client
        .batch_execute(
            "CREATE TABLE payments (id bigserial PRIMARY KEY, account_id uuid NOT NULL, cents int NOT NULL)",
        )
        .await
        .expect("payments");
    Env {
        db: Db::Pg(PgDb::clone(&store)),
        url: database.url,
        account,
    }
}

async fn sqlite() -> Env {
    let dir = std::env::temp_dir().join(format!("idemkey-intx-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("app.db");
    let url = format!("sqlite://{}", path.display());
    let store = AnyDb::open(&url, &PgSettings::default())
        .await
        .expect("open");
    let account = uuid::Uuid::new_v4();
    open_sqlite(&path)
        .execute_batch(
            "CREATE TABLE payments (id INTEGER PRIMARY KEY, account_id TEXT NOT NULL, cents INTEGER NOT NULL)",
        )
        .expect("payments");
    let store = store
        .backend_as::<idemkey::store::sqlite::SqliteDb>()
        .expect("an SQLite URL opens SQLite")
        .clone();
    Env {
        db: Db::Sqlite {
            store: idemkey::store::sqlite::SqliteDb::clone(&store),
            path,
            _dir: TempDir(dir),
        },
        url,
        account,
    }
}

fn open_sqlite(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("sqlite");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy");
    conn.execute_batch("PRAGMA foreign_keys = ON;")
        .expect("pragma");
    conn
}

fn scope(env: &Env, key: &str, cents: u32) -> Call {
    let operation = OperationId::from_static("POST /payments:v1");
    let fingerprint =
        Fingerprint::of_json(&operation, &format!(r#"{{"cents":{cents}}}"#)).expect("json");
    Call {
        key: RecordKey {
            scope: Scope::account(env.account),
            operation,
            key: IdempotencyKey::parse(format!("\"{key}\"").as_bytes(), KeyProfile::Lenient)
                .expect("key"),
        },
        fingerprint,
    }
}

/// The closure's answer: 201 with a body that differs on every run, or
/// `status` when it is not 201.
fn response(cents: u32, status: u16) -> StoredResponse {
    StoredResponse::new(
        status,
        format!(r#"{{"cents":{cents},"id":"{}"}}"#, uuid::Uuid::new_v4()),
    )
    .with_header("content-type", "application/json")
}

/// Calls the API: the effect inserts one payment (after `delay`), or fails
/// after inserting when `fail` is set.
async fn pay(
    env: &Env,
    call: &Call,
    options: Options,
    cents: u32,
    fail: bool,
    delay: Duration,
) -> Result<Outcome, Error<String>> {
    pay_with_status(env, call, options, cents, fail, delay, 201).await
}

/// [`pay`], the closure answering `status`.
async fn pay_with_status(
    env: &Env,
    call: &Call,
    options: Options,
    cents: u32,
    fail: bool,
    delay: Duration,
    status: u16,
) -> Result<Outcome, Error<String>> {
    let account = env.account;
    match &env.db {
        Db::Pg(store) => {
            pg_in_transaction(store, &call.key, call.fingerprint, &options, move |tx| {
                Box::pin(async move {
                    tx.execute(
                        "INSERT INTO payments (account_id, cents) VALUES ($1, $2)",
                        &[&account, &i32::try_from(cents).expect("cents")],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                    tokio::time::sleep(delay).await;
                    if fail {
                        return Err("the provider said no".to_owned());
                    }
                    Ok(response(cents, status))
                })
            })
            .await
        }
        Db::Sqlite { store, path, .. } => {
            let conn = Arc::new(Mutex::new(open_sqlite(path)));
            let (key, fingerprint) = (call.key.clone(), call.fingerprint);
            sqlite_in_transaction_async(store, conn, key, fingerprint, options, move |tx| {
                tx.execute(
                    "INSERT INTO payments (account_id, cents) VALUES (?1, ?2)",
                    rusqlite::params![account.to_string(), cents],
                )
                .map_err(|e| e.to_string())?;
                std::thread::sleep(delay);
                if fail {
                    return Err("the provider said no".to_owned());
                }
                Ok(response(cents, status))
            })
            .await
        }
    }
}

async fn count(env: &Env, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    match &env.db {
        Db::Pg(store) => {
            let client = store.pool().get().await.expect("client");
            client.query_one(&sql, &[]).await.expect("count").get(0)
        }
        Db::Sqlite { path, .. } => open_sqlite(path)
            .query_row(&sql, [], |row| row.get(0))
            .expect("count"),
    }
}

fn options() -> Options {
    Options::new(TTL)
}

const NO_DELAY: Duration = Duration::ZERO;

// ------------------------------------------------------------------ cases

async fn executes_once_then_replays(env: Env) {
    let s = scope(&env, "pay-1", 500);
    let first = pay(&env, &s, options(), 500, false, NO_DELAY)
        .await
        .expect("first");
    let Outcome::Executed(stored) = first else {
        panic!("expected Executed, got {first:?}");
    };
    let again = pay(&env, &s, options(), 500, false, NO_DELAY)
        .await
        .expect("again");
    assert_eq!(again, Outcome::Replayed(stored));
    assert_eq!(count(&env, "payments").await, 1);
    assert_eq!(count(&env, "idempotency_records").await, 1);
}

async fn other_fingerprint_is_422(env: Env) {
    let first = pay(
        &env,
        &scope(&env, "pay-1", 500),
        options(),
        500,
        false,
        NO_DELAY,
    )
    .await
    .expect("first");
    assert!(matches!(first, Outcome::Executed(_)));
    let other = pay(
        &env,
        &scope(&env, "pay-1", 700),
        options(),
        700,
        false,
        NO_DELAY,
    )
    .await
    .expect("other");
    let Outcome::Rejected(problem) = other else {
        panic!("expected 422, got {other:?}");
    };
    assert_eq!(problem.status(), 422);
    assert_eq!(count(&env, "payments").await, 1);
}

async fn closure_error_stores_nothing(env: Env) {
    let s = scope(&env, "pay-1", 500);
    let failed = pay(&env, &s, options(), 500, true, NO_DELAY).await;
    assert!(
        matches!(&failed, Err(Error::Effect(msg)) if msg == "the provider said no"),
        "{failed:?}"
    );
    assert_eq!(count(&env, "payments").await, 0);
    assert_eq!(count(&env, "idempotency_records").await, 0);
    let retry = pay(&env, &s, options(), 500, false, NO_DELAY)
        .await
        .expect("retry");
    assert!(matches!(retry, Outcome::Executed(_)), "{retry:?}");
    assert_eq!(count(&env, "payments").await, 1);
}

async fn ten_concurrent_calls_one_effect(env: Env) {
    let env = Arc::new(env);
    let s = scope(&env, "pay-1", 500);
    let calls = (0..10).map(|_| {
        let (env, s) = (Arc::clone(&env), s.clone());
        tokio::spawn(async move {
            pay(&env, &s, options(), 500, false, Duration::from_millis(100)).await
        })
    });
    let outcomes: Vec<Outcome> = futures_join(calls).await;
    let executed: Vec<&StoredResponse> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Executed(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(executed.len(), 1, "{outcomes:?}");
    for outcome in &outcomes {
        match outcome {
            Outcome::Executed(_) => {}
            Outcome::Replayed(r) => assert_eq!(r, executed[0]),
            other => panic!("unexpected: {other:?}"),
        }
    }
    assert_eq!(count(&env, "payments").await, 1);
}

async fn expiry_follows_the_policy(env: Env) {
    let s = scope(&env, "pay-1", 500);
    let first = pay(&env, &s, options(), 500, false, NO_DELAY)
        .await
        .expect("first");
    assert!(matches!(first, Outcome::Executed(_)));
    idemkey_testkit::age_records(&env.url, TTL).await;
    let rejected = pay(&env, &s, options(), 500, false, NO_DELAY)
        .await
        .expect("reject");
    assert!(
        matches!(&rejected, Outcome::Rejected(p) if p.status() == 410),
        "{rejected:?}"
    );
    let reexecute = Options {
        expiry_policy: ExpiryPolicy::Reexecute,
        ..options()
    };
    let again = pay(&env, &s, reexecute, 500, false, NO_DELAY)
        .await
        .expect("reexecute");
    let Outcome::Executed(second) = again else {
        panic!("expected Executed, got {again:?}");
    };
    assert_eq!(count(&env, "payments").await, 2);
    let replay = pay(&env, &s, options(), 500, false, NO_DELAY)
        .await
        .expect("replay");
    assert_eq!(replay, Outcome::Replayed(second));
    assert_eq!(count(&env, "idempotency_records").await, 1);
}

/// A temporary status (429, 503) from the closure is never stored: its
/// effect is rolled back and the retry runs the closure again.
async fn temporary_statuses_are_rolled_back_and_run_again(env: Env) {
    let s = scope(&env, "pay-1", 500);
    for status in [429, 503] {
        let outcome = pay_with_status(&env, &s, options(), 500, false, NO_DELAY, status)
            .await
            .expect("call");
        assert!(
            matches!(&outcome, Outcome::NotStored(r) if r.status == status),
            "{outcome:?}"
        );
        assert_eq!(count(&env, "payments").await, 0, "rolled back");
        assert_eq!(
            count(&env, "idempotency_records").await,
            0,
            "nothing stored"
        );
    }
    let done = pay(&env, &s, options(), 500, false, NO_DELAY)
        .await
        .expect("retry");
    assert!(matches!(done, Outcome::Executed(_)), "{done:?}");
    assert_eq!(count(&env, "payments").await, 1);
}

async fn futures_join<T: Send + 'static>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<Result<T, Error<String>>>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.expect("task").expect("call"));
    }
    out
}

/// A duplicate that waits on the first request's claim longer than
/// `lock_timeout` is told 409 (SQLSTATE 55P03), and nothing of its own is
/// stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_lock_timeout_is_409() {
    let env = Arc::new(postgres().await);
    let s = scope(&env, "pay-1", 500);
    let first = {
        let (env, s) = (Arc::clone(&env), s.clone());
        tokio::spawn(async move {
            pay(&env, &s, options(), 500, false, Duration::from_millis(1500)).await
        })
    };
    // The first call holds its claim in an open transaction.
    idemkey_testkit::eventually("the first call's transaction is open", async || {
        open_transactions(&env.url).await >= 1
    })
    .await;
    let impatient = Options {
        lock_timeout: Some(Duration::from_millis(100)),
        ..options()
    };
    let second = pay(&env, &s, impatient, 500, false, NO_DELAY)
        .await
        .expect("second");
    assert!(
        matches!(&second, Outcome::Rejected(p) if p.status() == 409 && p.retry_after() == Some(1)),
        "{second:?}"
    );
    let first = first.await.expect("task").expect("first");
    assert!(matches!(first, Outcome::Executed(_)), "{first:?}");
    assert_eq!(count(&env, "payments").await, 1);
}

macro_rules! both {
    ($($case:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case(super::postgres().await).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case(super::sqlite().await).await;
                }
            )*
        }
    };
}

both!(
    executes_once_then_replays,
    other_fingerprint_is_422,
    closure_error_stores_nothing,
    ten_concurrent_calls_one_effect,
    expiry_follows_the_policy,
    temporary_statuses_are_rolled_back_and_run_again,
);

//! The records protocol on every store, driven directly through
//! [`Records`] and the engine: the compare-and-swaps that guard a record,
//! and the trim that keeps every key's record small and then forgets it.
//! On PostgreSQL, also how the records sit in the table: a key's completion
//! writes no index entry (a HOT update), and maintenance finds rows by when
//! each is next due, rows that carry no such time included.
//! Time passes the way the database sees it ([`age_records`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idemkey::Db;
use idemkey::idempotency::{
    self, ClaimToken, Claimed, Done, Mode, NewClaim, Outcome, Policy, RecordKey, Records as _,
    Scope, Step, StoredResponse,
};
use idemkey::maintenance::trim_round;
use idemkey::store::StoreSettings as PgSettings;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, Stored};
use idemkey_testkit::{Backend, RedisStore, TestDb as Env, age_records, eventually};

const OPERATION: OperationId = OperationId::from_static("http:v1");

async fn open(env: &Env) -> Db {
    Db::open(&env.url, &PgSettings::default())
        .await
        .expect("open the database")
}

/// One test's store: a database of either SQL backend, or a Redis node or
/// cluster of its own.
enum Store {
    Sql(Env),
    Redis(RedisStore),
}

impl Store {
    fn new(backend: Backend) -> Self {
        Self::Sql(Env::new(backend))
    }

    fn url(&self) -> String {
        match self {
            Self::Sql(env) => env.url.clone(),
            Self::Redis(redis) => redis.url(),
        }
    }

    async fn open(&self) -> Db {
        Db::open(&self.url(), &PgSettings::default())
            .await
            .expect("open the store")
    }
}

fn key(name: &str) -> RecordKey {
    RecordKey {
        scope: Scope::new("tenant-a").expect("a scope"),
        operation: OPERATION,
        key: IdempotencyKey::parse(format!("\"{name}\"").as_bytes(), KeyProfile::Strict)
            .expect("a key"),
    }
}

fn fingerprint(body: &str) -> Fingerprint {
    Fingerprint::of_json(&OPERATION, body).expect("json")
}

fn claim(fingerprint: Fingerprint, lease: Duration) -> NewClaim {
    NewClaim {
        token: ClaimToken::random(),
        fingerprint,
        lease,
        replay_ttl: Duration::from_secs(3600),
    }
}

fn lease_policy() -> Policy {
    Policy::new(
        Mode::Lease,
        Duration::from_secs(1),
        Duration::from_secs(3600),
    )
}

/// A's claim, read by B as in flight with its lease over, completed by A,
/// then B's take-over decided on the old row: B loses, A's response stays,
/// and a retry replays it without running the handler again.
async fn a_stale_take_over_cannot_overwrite_a_completed_record(store: Store) {
    let db = store.open().await;
    let k = key("stale");
    let fp = fingerprint("1");
    let runs = AtomicUsize::new(0);
    let a = claim(fp, Duration::from_secs(1));
    assert_eq!(db.claim(&k, &a).await.expect("claim"), Claimed::Won);
    runs.fetch_add(1, Ordering::SeqCst); // A's handler runs.
    age_records(&store.url(), Duration::from_secs(2)).await;

    // B reads A's row as in flight with its lease over: take it over.
    let b = claim(fp, Duration::from_secs(30));
    let Claimed::Taken(read) = db.claim(&k, &b).await.expect("claim") else {
        panic!("the key is A's");
    };
    let Step::TakeOver(_, previous) = idempotency::step(&read, &k, fp, &lease_policy()) else {
        panic!("an expired lease is taken over");
    };
    assert!(matches!(previous.stored, Stored::InFlight { .. }));

    // A completes before B's take-over lands.
    let response = StoredResponse::new(201, "A");
    assert!(
        db.complete(&k, a.token, &response, Duration::from_secs(3600), None)
            .await
            .expect("complete")
    );
    assert!(
        !db.take_over(&k, &previous, &b).await.expect("take over"),
        "a take-over decided on the in-flight row loses to the completion"
    );
    let now = db.read(&k).await.expect("read");
    let record = now.record.expect("a record");
    assert!(matches!(record.stored, Stored::Completed { .. }));
    assert_eq!(record.response, Some(response.clone()));
    assert_eq!(record.token, a.token);

    // A retry through the engine replays A's response; no handler runs.
    let outcome = idempotency::run(&db, &k, fp, &lease_policy(), async || {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok::<_, ()>(Done {
            response: StoredResponse::new(201, "B"),
            resource: None,
            value: (),
        })
    })
    .await
    .expect("run");
    assert_eq!(outcome, Outcome::Replayed(response));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Completion and release are fenced by the claim token: a claim that was
/// taken over can neither store its response nor release the new claim.
async fn a_taken_over_claim_can_neither_complete_nor_release(store: Store) {
    let db = store.open().await;
    let k = key("fenced");
    let fp = fingerprint("1");
    let a = claim(fp, Duration::from_secs(1));
    assert_eq!(db.claim(&k, &a).await.expect("claim"), Claimed::Won);
    age_records(&store.url(), Duration::from_secs(2)).await;
    let b = claim(fp, Duration::from_secs(30));
    let Claimed::Taken(read) = db.claim(&k, &b).await.expect("claim") else {
        panic!("the key is A's");
    };
    let previous = read.record.expect("A's row");
    assert!(db.take_over(&k, &previous, &b).await.expect("take over"));
    let late = StoredResponse::new(201, "A, late");
    assert!(
        !db.complete(&k, a.token, &late, Duration::from_secs(60), None)
            .await
            .expect("complete")
    );
    assert!(!db.release(&k, a.token).await.expect("release"));
    let record = db.read(&k).await.expect("read").record.expect("B's row");
    assert_eq!(record.token, b.token);
    assert!(matches!(record.stored, Stored::InFlight { .. }));
}

/// Completed records become tombstones once their window is over, and
/// tombstones and abandoned claims are deleted after the retention: one
/// trim, in batches smaller than the backlog, until nothing is left to do.
async fn trim_shrinks_records_to_tombstones_then_to_nothing(backend: Backend) {
    let env = Env::new(backend);
    let db = open(&env).await;
    let n = 23;
    for i in 0..n {
        let k = key(&format!("done-{i}"));
        let c = claim(fingerprint("1"), Duration::from_secs(30));
        assert_eq!(db.claim(&k, &c).await.expect("claim"), Claimed::Won);
        let response = StoredResponse::new(200, vec![b'x'; 1000]);
        assert!(
            db.complete(&k, c.token, &response, Duration::from_secs(3600), Some("r"))
                .await
                .expect("complete")
        );
    }
    let abandoned = claim(fingerprint("1"), Duration::from_secs(30));
    db.claim(&key("abandoned"), &abandoned)
        .await
        .expect("claim");
    // How long a key is remembered after creation.
    let tombstone_ttl = Duration::from_secs(30 * 24 * 3600);
    let count = |sql: &str| env.sql(sql).parse::<u64>().expect("a count");

    // Inside the window nothing is due.
    let report = trim_round(&db, tombstone_ttl, 5, None).await.expect("trim");
    assert_eq!((report.trimmed, report.deleted), (0, 0));

    age_records(&env.url, Duration::from_secs(2 * 3600)).await;
    let report = trim_round(&db, tombstone_ttl, 5, None).await.expect("trim");
    assert_eq!((report.trimmed, report.deleted), (n, 0));
    assert_eq!(
        count(
            "SELECT count(*) FROM idempotency_records WHERE status = 'tombstone' AND response_body IS NULL AND resource_id = 'r'"
        ),
        n
    );
    assert_eq!(count("SELECT count(*) FROM idempotency_records"), n + 1);

    age_records(&env.url, tombstone_ttl).await;
    let report = trim_round(&db, tombstone_ttl, 5, None).await.expect("trim");
    assert_eq!(report.deleted, n + 1, "tombstones and the abandoned claim");
    assert_eq!(count("SELECT count(*) FROM idempotency_records"), 0);
}

macro_rules! on_each_store {
    ($($scenario:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Store::new(super::Backend::Sqlite)).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Store::new(super::Backend::Postgres)).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Store::Redis(super::RedisStore::node())).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Store::Redis(super::RedisStore::cluster())).await;
                }
            )*
        }
    };
}

on_each_store!(
    a_stale_take_over_cannot_overwrite_a_completed_record,
    a_taken_over_claim_can_neither_complete_nor_release,
);

// Trim is the SQL stores' (Redis expires records itself: see redis.rs).
mod sql_trim {
    use super::{Backend, trim_shrinks_records_to_tombstones_then_to_nothing as trim};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        trim(Backend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        trim(Backend::Postgres).await;
    }
}

/// The retention of the PostgreSQL maintenance tests.
const PG_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Claims and completes `name` through the pool, as the Layer does (two
/// autocommit statements).
async fn claim_and_complete(db: &Db, name: &str, body: &[u8]) {
    let (k, c) = (key(name), claim(fingerprint("1"), Duration::from_secs(30)));
    assert_eq!(db.claim(&k, &c).await.expect("claim"), Claimed::Won);
    let mut response = StoredResponse::new(201, body.to_vec());
    response.headers = vec![("content-type".into(), "application/json".into())];
    assert!(
        db.complete(&k, c.token, &response, Duration::from_secs(3600), Some("r"))
            .await
            .expect("complete")
    );
}

/// `(n_tup_upd, n_tup_hot_upd)` of the records table, as the sessions
/// reported them.
fn updates(env: &Env) -> (u64, u64) {
    let out = env.sql(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables \
         WHERE relname = 'idempotency_records'",
    );
    let (all, hot) = out.split_once('|').expect("upd|hot");
    (all.parse().expect("n_tup_upd"), hot.parse().expect("hot"))
}

/// No index covers a column the completion changes, and the fill factor
/// leaves room in each page for the row's new version, so completions are
/// HOT updates: no new primary-key or maintenance-index entry per key.
/// With the partial indexes on `status` none of them was one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_hot_updates() {
    const KEYS: u64 = 2_000;
    let env = Env::new(Backend::Postgres);
    let db = open(&env).await;
    let body = [b'x'; 200];
    for i in 0..KEYS {
        claim_and_complete(&db, &format!("hot-{i}"), &body).await;
    }
    // A backend reports its counts when it exits, if not before.
    db.close();
    eventually("the sessions report their updates", async || {
        updates(&env).0 >= KEYS
    })
    .await;
    let (all, hot) = updates(&env);
    assert_eq!(all, KEYS, "one update per key");
    assert!(
        hot * 10 >= all * 9,
        "{hot} of {all} completions were HOT updates"
    );
}

/// The record's invariants hold at the database, whoever writes: a row
/// that breaks one is refused with SQLSTATE 23514 and nothing is stored,
/// a row that keeps them all is stored, and the table carries no CHECK
/// constraint (a trigger checks them, its plan kept per session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_breaks_an_invariant_is_refused() {
    let env = Env::new(Backend::Postgres);
    drop(open(&env).await);
    let row = |key: &str,
               fingerprint: &str,
               status: &str,
               lease: &str,
               replay: &str,
               code: &str| {
        format!(
            "INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim, status, \
                 created_at, lease_until, replay_until, response_status) \
             VALUES ('acct', 'http:v1', '{key}', '\\x{fingerprint}'::bytea, gen_random_uuid(), \
                     '{status}', now(), {lease}, {replay}, {code})"
        )
    };
    let fp = "ab".repeat(32);
    let now = "now()";
    let broken = [
        ("empty key", row("", &fp, "in_flight", now, "NULL", "NULL")),
        (
            "long key",
            row(&"k".repeat(256), &fp, "in_flight", now, "NULL", "NULL"),
        ),
        (
            "short fingerprint",
            row("a", "abcd", "in_flight", now, "NULL", "NULL"),
        ),
        ("unknown status", row("b", &fp, "done", now, now, "200")),
        ("status 99", row("c", &fp, "completed", "NULL", now, "99")),
        (
            "in flight without a lease",
            row("d", &fp, "in_flight", "NULL", "NULL", "NULL"),
        ),
        (
            "completed with a lease",
            row("e", &fp, "completed", now, now, "200"),
        ),
        (
            "completed without a status",
            row("f", &fp, "completed", "NULL", now, "NULL"),
        ),
        (
            "tombstone with a status",
            row("g", &fp, "tombstone", "NULL", now, "200"),
        ),
        (
            "completed without a window",
            row("h", &fp, "completed", "NULL", "NULL", "200"),
        ),
    ];
    for (what, sql) in broken {
        let err = env
            .cluster()
            .psql(&env.db, &format!("\\set VERBOSITY verbose\n{sql}"))
            .expect_err(what);
        assert!(err.to_string().contains("23514"), "{what}: {err}");
    }
    assert_eq!(env.count("idempotency_records"), 0);
    // The same statement with every rule kept, and an UPDATE that breaks one.
    env.sql(&row("ok", &fp, "completed", "NULL", now, "201"));
    let err = env
        .cluster()
        .psql(
            &env.db,
            "\\set VERBOSITY verbose\nUPDATE idempotency_records SET response_status = NULL",
        )
        .expect_err("an update that breaks a rule");
    assert!(err.to_string().contains("23514"), "{err}");
    assert_eq!(
        env.sql("SELECT key, response_status FROM idempotency_records"),
        "ok|201"
    );
    assert_eq!(
        env.sql(
            "SELECT count(*) FROM pg_constraint \
             WHERE conrelid = 'idempotency_records'::regclass AND contype = 'c'"
        ),
        "0"
    );
}

/// A row that carries no `check_at` (written before the column existed, or
/// by a statement that does not set it) is due from its creation:
/// maintenance looks at it, reschedules it while its window runs, and trims
/// it once the window is over, like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_without_a_maintenance_time_are_still_trimmed() {
    let env = Env::new(Backend::Postgres);
    let db = open(&env).await;
    for i in 0..7 {
        claim_and_complete(&db, &format!("old-{i}"), b"{}").await;
    }
    env.sql("UPDATE idempotency_records SET check_at = NULL");

    // Due at once, but inside the window: given a later time, not trimmed.
    let report = trim_round(&db, PG_RETENTION, 5, None).await.expect("trim");
    assert_eq!(
        (report.trimmed, report.deleted, report.rescheduled),
        (0, 0, 7)
    );
    assert_eq!(
        env.sql(
            "SELECT count(*) FROM idempotency_records WHERE check_at = replay_until \
             AND status = 'completed'"
        ),
        "7"
    );
    let report = trim_round(&db, PG_RETENTION, 5, None).await.expect("trim");
    assert_eq!(
        (report.trimmed, report.deleted, report.rescheduled),
        (0, 0, 0)
    );

    // Past the window: tombstones, due again at the retention's end.
    age_records(&env.url, Duration::from_secs(3601)).await;
    let report = trim_round(&db, PG_RETENTION, 5, None).await.expect("trim");
    assert_eq!((report.trimmed, report.deleted), (7, 0));
    assert_eq!(
        env.sql(
            "SELECT count(*) FROM idempotency_records WHERE status = 'tombstone' \
             AND response_body IS NULL AND check_at > now() + interval '29 days'"
        ),
        "7"
    );
    age_records(&env.url, PG_RETENTION).await;
    let report = trim_round(&db, PG_RETENTION, 5, None).await.expect("trim");
    assert_eq!((report.trimmed, report.deleted), (0, 7));
    assert_eq!(env.sql("SELECT count(*) FROM idempotency_records"), "0");
}

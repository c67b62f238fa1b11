//! A database written by an earlier version (schema 2: order records keyed
//! by account, lease-mode records in their own table) is migrated to one
//! records table with nothing lost: both kinds of record still replay, and
//! its API tokens (which had no id before schema 4) keep working. Orders
//! made before they kept their charge's id get it, and show their payment.

use idemkey::store::migrations::Migration;
use idemkey_core::{IdempotencyKey, KeyProfile, OperationId, Stored};
use idemkey_server::db::{Db, PgSettings};
use idemkey_server::idempotency::{RecordKey, Records as _, Scope};

#[macro_use]
mod common;
use common::{Backend, Env};

const ACCOUNT: &str = "3f0e8a64-9b2c-4c1e-8d8e-2a4f6c1b9d70";

fn migration(backend: &str, file: &str) -> String {
    // The package's directory as the test runner sets it when the test runs, not
    // as it was when the binary was built: a build directory shared by two checkouts
    // can hand this one a test binary another checkout compiled.
    let dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    let path = format!("{dir}/src/db/{backend}/migrations/legacy/{file}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn key(scope: &str, operation: &'static str, key: &str) -> RecordKey {
    RecordKey {
        scope: Scope::new(scope).expect("a scope"),
        operation: OperationId::from_static(operation),
        key: IdempotencyKey::parse(format!("\"{key}\"").as_bytes(), KeyProfile::Strict)
            .expect("a key"),
    }
}

/// A token of the old account, stored (hashed) in schema 2.
const OLD_TOKEN: &str = "idk_written-by-schema-two";

/// Schema 2 with one completed order record, one completed lease record
/// and one API token.
fn version_two(env: &Env, backend: Backend) {
    let hash: String = idemkey_server::auth::hash_token(OLD_TOKEN)
        .0
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let (dir, now, later, fp, claim, token) = match backend {
        Backend::Postgres => (
            "postgres",
            "now()",
            "now() + interval '1 hour'",
            "sha256('x')",
            "gen_random_uuid()",
            format!("'\\x{hash}'::bytea"),
        ),
        Backend::Sqlite => (
            "sqlite",
            "unixepoch() * 1000",
            "unixepoch() * 1000 + 3600000",
            "randomblob(32)",
            "randomblob(16)",
            format!("X'{hash}'"),
        ),
    };
    let order_id = "7d1c0f52-65a4-4d0e-9a53-0d7e8f2b8c11";
    let sql = format!(
        "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at integer);
         {one}
         {two}
         INSERT INTO schema_migrations (version, name) VALUES (1, 'init'), (2, 'idempotency_leases');
         INSERT INTO accounts (id, name) VALUES ('{ACCOUNT}', 'old');
         INSERT INTO api_tokens (token_hash, account_id) VALUES ({token}, '{ACCOUNT}');
         INSERT INTO orders (id, account_id, sku, quantity, created_at)
             VALUES ('{order_id}', '{ACCOUNT}', 'LIBRO-TS', 2, {now});
         INSERT INTO idempotency_records (account_id, operation, key, fingerprint, status,
             response_status, response_headers, response_body, created_at, replay_until, resource_id)
             VALUES ('{ACCOUNT}', 'POST /orders:v1', 'order-key', {fp}, 'completed', 201,
                     '[[\"location\",\"/orders/{order_id}\"]]', '{{\"id\":\"{order_id}\"}}',
                     {now}, {later}, '{order_id}');
         INSERT INTO idempotency_leases (scope, operation, key, fingerprint, claim, status,
             created_at, replay_until, response_status, response_headers, response_body)
             VALUES ('tenant-a', 'http:v1', 'lease-key', {fp}, {claim}, 'completed',
                     {now}, {later}, 200, '[]', 'paid');",
        one = migration(dir, "0001_init.sql"),
        two = migration(dir, "0002_idempotency_leases.sql"),
    );
    match backend {
        Backend::Postgres => {
            env.sql(&sql);
        }
        Backend::Sqlite => {
            let conn = rusqlite::Connection::open(&env.db).expect("open sqlite");
            conn.execute_batch(&sql).expect("schema 2");
        }
    }
}

async fn a_version_two_database_keeps_every_record(backend: Backend) {
    let env = Env::new(backend);
    version_two(&env, backend);
    let db = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("migrate");
    assert!(db.pending_migrations().await.expect("read").is_empty());

    let order = db
        .store()
        .read(&key(ACCOUNT, "POST /orders:v1", "order-key"))
        .await
        .expect("read")
        .record
        .expect("the order's record");
    assert!(matches!(order.stored, Stored::Completed { .. }));
    let response = order.response.expect("its response");
    assert_eq!(response.status, 201);
    assert_eq!(
        response.body.as_deref(),
        Some(&br#"{"id":"7d1c0f52-65a4-4d0e-9a53-0d7e8f2b8c11"}"#[..])
    );
    assert_eq!(
        response.headers,
        vec![(
            "location".to_owned(),
            "/orders/7d1c0f52-65a4-4d0e-9a53-0d7e8f2b8c11".to_owned()
        )]
    );

    let lease = db
        .store()
        .read(&key("tenant-a", "http:v1", "lease-key"))
        .await
        .expect("read")
        .record
        .expect("the lease record");
    assert!(matches!(lease.stored, Stored::Completed { replay_until, .. } if replay_until.0 > 0));
    assert_eq!(
        lease.response.and_then(|r| r.body).as_deref(),
        Some(&b"paid"[..])
    );
    assert_eq!(env.count("idempotency_records"), 2);
    // Opening again applies nothing and loses nothing.
    drop(db);
    let again = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("open");
    assert!(again.pending_migrations().await.expect("read").is_empty());
    assert_eq!(env.count("idempotency_records"), 2);
    drop(again);

    // The old token got an id and still authenticates.
    let (ok, out, err) = env.cli(&["token", "list", ACCOUNT]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "one token: {out}");
    let server = env.serve(&[]);
    let orders = server.get(OLD_TOKEN, "/orders").await;
    assert_eq!(orders.status, 200, "{}", orders.body);
    assert_eq!(orders.json()["orders"].as_array().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_version_two_database_keeps_every_record() {
    a_version_two_database_keeps_every_record(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_version_two_database_keeps_every_record() {
    a_version_two_database_keeps_every_record(Backend::Sqlite).await;
}

/// The migration transaction is not bound by the request timeouts: a start
/// that waits 3 s for another process's migration lock (longer than
/// `--lock-timeout`, 2 s by default) still migrates, instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_waits_past_the_request_lock_timeout() {
    // The server's migration lock key ("idemkey" + 1).
    const MIGRATION_LOCK: i64 = 0x6964_656d_6b65_7901;
    let env = Env::new(Backend::Postgres);
    let held = {
        let (cluster, db) = (env.cluster(), env.db.clone());
        let sql = format!(
            "BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK}); SELECT pg_sleep(3); COMMIT;"
        );
        std::thread::scope(|scope| {
            let holder = scope.spawn(|| cluster.psql(&db, &sql));
            // Until the lock is visibly held, the migration would not wait.
            let probe = format!(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND ((classid::bigint << 32) | objid::bigint) = {MIGRATION_LOCK}"
            );
            let guard = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while env.sql(&probe) != "1" {
                assert!(std::time::Instant::now() < guard, "the lock was never held");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let migrated = env.cli(&["migrate"]);
            holder.join().expect("holder thread").expect("holder psql");
            migrated
        })
    };
    let (ok, _, err) = held;
    assert!(ok, "migrate failed while waiting for the lock: {err}");
    assert_ne!(env.sql("SELECT count(*) FROM idemkey_migrations"), "0");
}

/// The migrations of the version before orders kept their charge's id
/// (records/1, outbox/1 with its index on resource_id, steps/1, orders/1
/// and orders/2), as that version applied them.
fn before_the_charge_message(backend: Backend) -> Vec<Migration> {
    macro_rules! sql {
        ($root:literal, $dir:literal, $file:literal) => {
            include_str!(concat!($root, $dir, "/migrations/", $file))
        };
    }
    macro_rules! files {
        ($dir:literal) => {
            [
                sql!("../../idemkey/src/store/", $dir, "records_0001.sql"),
                sql!("../../idemkey/src/store/", $dir, "outbox_0001.sql"),
                sql!("../../idemkey/src/store/", $dir, "steps_0001.sql"),
                sql!("../src/db/", $dir, "orders_0001.sql"),
                sql!("../src/db/", $dir, "orders_0002.sql"),
            ]
        };
    }
    let files = match backend {
        Backend::Postgres => files!("postgres"),
        Backend::Sqlite => files!("sqlite"),
    };
    [
        ("records", 1),
        ("outbox", 1),
        ("steps", 1),
        ("orders", 1),
        ("orders", 2),
    ]
    .into_iter()
    .zip(files)
    .map(|((component, version), sql)| Migration {
        component,
        version,
        name: component,
        sql,
        adopt: None,
    })
    .collect()
}

/// A database of the version before orders kept their charge's id, with
/// an order, another message about it and then its charge, opens with the
/// order pointing at its charge (not at the other message), and the order
/// still shows its payment.
async fn an_order_gets_its_charges_id(backend: Backend) {
    const ORDER: &str = "5e2a7b1c-3d4f-4a6b-8c9d-0e1f2a3b4c5d";
    const TOKEN_ID: &str = "a0b1c2d3-e4f5-4a6b-9c8d-7e6f5a4b3c2d";
    let env = Env::new(backend);
    let old = idemkey::Db::connect(&env.url, &PgSettings::default())
        .await
        .expect("connect");
    old.migrate_with(&before_the_charge_message(backend))
        .await
        .expect("the previous schema");
    drop(old);
    let hash: String = idemkey_server::auth::hash_token(OLD_TOKEN)
        .0
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let (now, token) = match backend {
        Backend::Postgres => ("statement_timestamp()", format!("'\\x{hash}'::bytea")),
        Backend::Sqlite => ("unixepoch() * 1000", format!("X'{hash}'")),
    };
    let message = |effect: &str| {
        format!(
            "INSERT INTO outbox (scope, operation, key, effect, resource_id, payload, available_at, \
                                 created_at)
                 VALUES ('{ACCOUNT}', 'POST /orders:v1', 'order-key', '{effect}', '{ORDER}', '{{}}', \
                         {now}, {now});"
        )
    };
    let rows = format!(
        "INSERT INTO accounts (id, name) VALUES ('{ACCOUNT}', 'old');
         INSERT INTO api_tokens (token_hash, id, account_id) VALUES ({token}, '{TOKEN_ID}', '{ACCOUNT}');
         INSERT INTO orders (id, account_id, sku, quantity, created_at, amount_cents, currency)
             VALUES ('{ORDER}', '{ACCOUNT}', 'LIBRO-TS', 2, {now}, 5980, 'EUR');
         {mail}
         {charge}
         UPDATE outbox SET status = 'delivered', result = 'ch_1', attempts = 1,
             settled_at = {now} WHERE effect = 'charge';",
        mail = message("mail"),
        charge = message("charge"),
    );
    match backend {
        Backend::Postgres => {
            env.sql(&rows);
        }
        Backend::Sqlite => rusqlite::Connection::open(&env.db)
            .and_then(|conn| conn.execute_batch(&rows))
            .expect("the rows"),
    }
    let charge = env.sql("SELECT id FROM outbox WHERE effect = 'charge'");

    let db = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("migrate");
    assert!(db.pending_migrations().await.expect("read").is_empty());
    drop(db);
    assert_eq!(env.sql("SELECT charge_message FROM orders"), charge);
    // The outbox lost its index on resource_id for one on flow steps.
    let indexes = match backend {
        Backend::Postgres => {
            "SELECT indexname FROM pg_indexes WHERE tablename = 'outbox' ORDER BY indexname"
        }
        Backend::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'outbox' \
             AND sql IS NOT NULL ORDER BY name"
        }
    };
    let indexes = env.sql(indexes);
    assert!(!indexes.contains("outbox_resource"), "{indexes}");
    assert!(indexes.contains("outbox_flow_step"), "{indexes}");

    let server = env.serve(&[]);
    let shown = server.get(OLD_TOKEN, &format!("/orders/{ORDER}")).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    let shown = shown.json();
    assert_eq!(shown["payment"]["status"], "charged", "{shown}");
    assert_eq!(shown["payment"]["charge_id"], "ch_1", "{shown}");
    let listed = server.get(OLD_TOKEN, "/orders").await.json();
    assert_eq!(listed["orders"][0]["payment"], shown["payment"], "{listed}");
}

on_each_backend!(an_order_gets_its_charges_id);

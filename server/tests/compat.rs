//! A database created by the last version before the split (one
//! `schema_migrations` list, versions 1 to 8, for the records, the orders,
//! the outbox and the payment provider simulator's tables) opens under the
//! new code on both backends: the library, the order service and the
//! simulator adopt their tables, nothing is applied twice, every row stays
//! as it was, and the order route replays a key that version stored.
//!
//! The database is built as that version's runner built it: its
//! `schema_migrations` table, then each version's file (verbatim: the
//! legacy files of the order service and the simulator's 7 and 8) with its
//! row, in one transaction; then rows in the formats that version wrote
//! them (read from a database its binary made).

use axum::body::{Body, to_bytes};
use axum::http::Request;
use idemkey_core::{NewOrder, ORDER_OPERATION};
use idemkey_server::auth::hash_token;
use idemkey_server::db::{Db, PgSettings};
use idemkey_server::{AppState, Settings, app};
use tower::ServiceExt as _;

mod common;
use common::{Backend, Env};

/// Each version of the shared list with its name and its PostgreSQL and
/// SQLite files, as the last version before the split applied them.
const VERSIONS: [(i32, &str, &str, &str); 8] = [
    (
        1,
        "init",
        include_str!("../src/db/postgres/migrations/legacy/0001_init.sql"),
        include_str!("../src/db/sqlite/migrations/legacy/0001_init.sql"),
    ),
    (
        2,
        "idempotency_leases",
        include_str!("../src/db/postgres/migrations/legacy/0002_idempotency_leases.sql"),
        include_str!("../src/db/sqlite/migrations/legacy/0002_idempotency_leases.sql"),
    ),
    (
        3,
        "one_records_table",
        include_str!("../src/db/postgres/migrations/legacy/0003_one_records_table.sql"),
        include_str!("../src/db/sqlite/migrations/legacy/0003_one_records_table.sql"),
    ),
    (
        4,
        "token_management",
        include_str!("../src/db/postgres/migrations/legacy/0004_token_management.sql"),
        include_str!("../src/db/sqlite/migrations/legacy/0004_token_management.sql"),
    ),
    (
        5,
        "account_first_keys",
        include_str!("../src/db/postgres/migrations/legacy/0005_account_first_keys.sql"),
        include_str!("../src/db/sqlite/migrations/legacy/0005_account_first_keys.sql"),
    ),
    (
        6,
        "payments",
        include_str!("../src/db/postgres/migrations/legacy/0006_payments.sql"),
        include_str!("../src/db/sqlite/migrations/legacy/0006_payments.sql"),
    ),
    (
        7,
        "provider_charges",
        include_str!("../../provider-sim/src/store/postgres/0007_provider_charges.sql"),
        include_str!("../../provider-sim/src/store/sqlite/0007_provider_charges.sql"),
    ),
    (
        8,
        "provider_requests",
        include_str!("../../provider-sim/src/store/postgres/0008_provider_requests.sql"),
        include_str!("../../provider-sim/src/store/sqlite/0008_provider_requests.sql"),
    ),
];

const ACCOUNT: &str = "5b1d3c2a-7e4f-4a8b-9c0d-1e2f3a4b5c6d";
const TOKEN: &str = "idk_written-by-the-shared-list";
const TOKEN_ID: &str = "6716247f-dc2d-47e5-8966-fb52422979b8";

/// The first order: no reference.
const ORDER_1: &str = "0c248200-8b86-4310-823d-f5f9eea24563";
const KEY_1: &str = "compat-key-1";
const BODY_1: &str = r#"{"sku":"LIBRO-TS","quantity":2}"#;
/// The fingerprint that version stored for `BODY_1` (read, like the claims
/// and the formats below, from a database its binary made).
const FINGERPRINT_1: &str = "80ffc07ee63f38409dd4005cba536ed3b1b180627fe55498ce2965e88068c24c";
const CLAIM_1: &str = "942cce9b754d49bc88a00fe88695a47c";

/// The second order: with a reference.
const ORDER_2: &str = "81a8fb40-c798-4fc1-b54e-6fef1938f3ca";
const KEY_2: &str = "compat-key-2";
const BODY_2: &str = r#"{"sku":"CAFE-1KG","quantity":1,"reference":"ref-hand-2"}"#;
const FINGERPRINT_2: &str = "6fbfa3e3840102d2767a870988c4bffd8bcf4066090e1cd8839e8cb29c5fa093";
const CLAIM_2: &str = "5dfba6a2e5044eff8c2b577c91be5424";

/// The creation times, in milliseconds and as the order's body shows them.
const CREATED_1: (u64, &str) = (1_796_419_828_709, "2026-12-04T21:30:28.709Z");
const CREATED_2: (u64, &str) = (1_796_419_828_727, "2026-12-04T21:30:28.727Z");

/// The simulator's charge for the first order, under its caller's scope.
const PROVIDER_SECRET: &str = "compat-provider-secret";
const CHARGE_KEY: &str = "ord_0c2482008b864310823df5f9eea24563_charge";
const CHARGE_ID: &str = "2f4e6a8c-0b1d-4e3f-9a5b-7c9d1e3f5a7b";

fn response_1() -> String {
    format!(
        r#"{{"id":"{ORDER_1}","sku":"LIBRO-TS","quantity":2,"amount_cents":5980,"currency":"EUR","created_at":"{}","payment":{{"status":"pending","attempts":0}}}}"#,
        CREATED_1.1
    )
}

fn response_2() -> String {
    format!(
        r#"{{"id":"{ORDER_2}","sku":"CAFE-1KG","quantity":1,"reference":"ref-hand-2","amount_cents":1850,"currency":"EUR","created_at":"{}","payment":{{"status":"pending","attempts":0}}}}"#,
        CREATED_2.1
    )
}

fn headers(order: &str) -> String {
    format!(r#"[["content-type","application/json"],["location","/orders/{order}"]]"#)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `schema_migrations` as the old runner created it, and versions 1 to 8
/// with their rows, in one transaction.
fn shared_list(backend: Backend) -> String {
    let mut sql = String::from("BEGIN;\n");
    sql.push_str(match backend {
        Backend::Postgres => {
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version integer PRIMARY KEY,
                 name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now());\n"
        }
        Backend::Sqlite => {
            "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY,
             name TEXT NOT NULL,
             applied_at INTEGER NOT NULL DEFAULT (unixepoch()));\n"
        }
    });
    for (version, name, postgres, sqlite) in VERSIONS {
        sql.push_str(match backend {
            Backend::Postgres => postgres,
            Backend::Sqlite => sqlite,
        });
        sql.push_str(&format!(
            "\nINSERT INTO schema_migrations (version, name) VALUES ({version}, '{name}');\n"
        ));
    }
    sql.push_str("COMMIT;\n");
    sql
}

/// An account, its token, two orders with their completed records, the
/// first one's charge in the outbox and at the simulator.
fn rows(backend: Backend) -> String {
    let token = hex(&hash_token(TOKEN).0);
    let scope = idemkey_provider_sim::scope_of(PROVIDER_SECRET);
    // Literals of each type, as the backend stores it.
    let pg = backend == Backend::Postgres;
    let bytes = |h: &str| {
        if pg {
            format!("'\\x{h}'::bytea")
        } else {
            format!("X'{h}'")
        }
    };
    let claim = |h: &str| {
        if pg {
            format!("'{h}'::uuid")
        } else {
            format!("X'{h}'")
        }
    };
    let time = |ms: u64| {
        if pg {
            format!("'epoch'::timestamptz + {ms} * interval '1 millisecond'")
        } else {
            ms.to_string()
        }
    };
    let body = |text: &str| {
        if pg {
            format!("convert_to('{text}', 'UTF8')")
        } else {
            format!("CAST('{text}' AS BLOB)")
        }
    };
    let replay_until = if pg {
        "statement_timestamp() + interval '1 day'"
    } else {
        "unixepoch('subsec') * 1000 + 86400000"
    };
    let record = |key: &str, fp: &str, cl: &str, order: &str, response: &str, at: u64| {
        format!(
            "INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim, status,
                 response_status, response_headers, response_body, created_at, replay_until,
                 resource_id)
             VALUES ('{ACCOUNT}', '{operation}', '{key}', {fp}, {cl}, 'completed', 201,
                     '{headers}', {response}, {at}, CAST({replay_until} AS {until_type}),
                     '{order}');\n",
            operation = ORDER_OPERATION.as_str(),
            fp = bytes(fp),
            cl = claim(cl),
            headers = headers(order),
            response = body(response),
            at = time(at),
            until_type = if pg { "timestamptz" } else { "INTEGER" },
        )
    };
    let mut sql = String::from("BEGIN;\n");
    sql.push_str(&format!(
        "INSERT INTO accounts (id, name, created_at) VALUES ('{ACCOUNT}', 'compat', {at});
         INSERT INTO api_tokens (token_hash, id, account_id, created_at, last_used_at)
             VALUES ({token}, '{TOKEN_ID}', '{ACCOUNT}', {at}, {used});
         INSERT INTO orders (id, account_id, sku, quantity, created_at, amount_cents, currency,
                             reference)
             VALUES ('{ORDER_1}', '{ACCOUNT}', 'LIBRO-TS', 2, {created_1}, 5980, 'EUR', NULL),
                    ('{ORDER_2}', '{ACCOUNT}', 'CAFE-1KG', 1, {created_2}, 1850, 'EUR',
                     'ref-hand-2');\n",
        at = time(CREATED_1.0 - 4_000),
        token = bytes(&token),
        used = time(CREATED_2.0 + 1_000),
        created_1 = time(CREATED_1.0),
        created_2 = time(CREATED_2.0),
    ));
    sql.push_str(&record(
        KEY_1,
        FINGERPRINT_1,
        CLAIM_1,
        ORDER_1,
        &response_1(),
        CREATED_1.0,
    ));
    sql.push_str(&record(
        KEY_2,
        FINGERPRINT_2,
        CLAIM_2,
        ORDER_2,
        &response_2(),
        CREATED_2.0 + 1,
    ));
    sql.push_str(&format!(
        "INSERT INTO outbox (scope, operation, key, effect, resource_id, payload, available_at,
                             created_at)
             VALUES ('{ACCOUNT}', '{operation}', '{KEY_1}', 'charge', '{ORDER_1}',
                     '{{\"order_id\":\"{ORDER_1}\",\"amount_cents\":5980,\"currency\":\"EUR\"}}',
                     {at}, {at});
         INSERT INTO provider_charges (scope, idempotency_key, id, order_id, amount_cents,
                                       currency, created_at)
             VALUES ('{scope}', '{CHARGE_KEY}', '{CHARGE_ID}', '{ORDER_1}', 5980, 'EUR',
                     {charged});
         COMMIT;\n",
        operation = ORDER_OPERATION.as_str(),
        at = time(CREATED_1.0),
        charged = time(CREATED_1.0 + 500),
    ));
    sql
}

/// The database as the last version before the split left it.
fn written_by_the_shared_list(env: &Env) {
    let script = shared_list(env.backend) + &rows(env.backend);
    match env.backend {
        Backend::Postgres => {
            env.sql(&script);
        }
        Backend::Sqlite => {
            // The old runner's connection settings.
            let conn = rusqlite::Connection::open(&env.db).expect("open sqlite");
            let mode: String = conn
                .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
                .expect("WAL");
            assert_eq!(mode, "wal");
            conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
                .expect("pragmas");
            conn.execute_batch(&script).expect("the shared list");
        }
    }
}

/// Every row written above, table by table (the token's last use apart,
/// which a request updates).
fn snapshot(env: &Env, with_last_use: bool) -> Vec<(&'static str, String)> {
    let tokens = if with_last_use {
        "SELECT * FROM api_tokens ORDER BY id"
    } else {
        "SELECT token_hash, id, account_id, created_at, revoked_at FROM api_tokens ORDER BY id"
    };
    // Every column the old version had (orders/3 adds `charge_message`).
    let orders = format!(
        "SELECT id, account_id, sku, quantity, created_at, amount_cents, currency, reference \
         FROM orders WHERE id IN ('{ORDER_1}', '{ORDER_2}') ORDER BY id"
    );
    // Every column the old version had (records/2 adds `check_at` on PostgreSQL).
    let records = format!(
        "SELECT scope, operation, key, fingerprint, status, response_status, response_headers, \
         response_body, created_at, replay_until, lease_until, resource_id, claim \
         FROM idempotency_records WHERE key IN ('{KEY_1}', '{KEY_2}') ORDER BY key"
    );
    let outbox = format!("SELECT * FROM outbox WHERE key = '{KEY_1}' ORDER BY id");
    [
        (
            "schema_migrations",
            "SELECT * FROM schema_migrations ORDER BY version",
        ),
        ("accounts", "SELECT * FROM accounts ORDER BY id"),
        ("api_tokens", tokens),
        ("orders", &orders),
        ("idempotency_records", &records),
        ("outbox", &outbox),
        (
            "provider_charges",
            "SELECT * FROM provider_charges ORDER BY idempotency_key",
        ),
        // Every column the old version had (orders/2 adds `stock`).
        (
            "products",
            "SELECT sku, unit_price_cents, currency FROM products ORDER BY sku",
        ),
    ]
    .into_iter()
    .map(|(table, query)| (table, env.sql(query)))
    .collect()
}

/// Versions made after the shared list: applied on opening, never adopted.
const AFTER_THE_SHARED_LIST: &[&str] = &[
    "orders/2",
    "orders/3",
    "orders/4",
    "outbox/2",
    "outbox/3",
    "provider-sim/3",
    "records/2",
    "records/3",
    "records/4",
    "steps/1",
    "steps/2",
];

/// `component/version` of every bookkeeping row, each adopted (but those
/// [`AFTER_THE_SHARED_LIST`], each applied).
fn bookkeeping(env: &Env) -> Vec<String> {
    env.sql(
        "SELECT component, version, adopted FROM idemkey_migrations ORDER BY component, version",
    )
    .lines()
    .map(|line| {
        let cells: Vec<&str> = line.split('|').collect();
        let label = format!("{}/{}", cells[0], cells[1]);
        let adopted = matches!(cells[2], "t" | "1");
        assert_eq!(
            adopted,
            !AFTER_THE_SHARED_LIST.contains(&label.as_str()),
            "{label}: adopted {adopted}"
        );
        label
    })
    .collect()
}

/// `POST /orders` through the router, answered as (status, headers, body).
async fn post_order(
    state: &AppState,
    key: &str,
    body: &'static str,
) -> (u16, axum::http::HeaderMap, String) {
    let request = Request::post("/orders")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("a request");
    let response = app(state.clone())
        .oneshot(request)
        .await
        .expect("a response");
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, 1 << 20).await.expect("the body");
    (
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8(body.to_vec()).expect("utf-8"),
    )
}

async fn a_database_of_the_shared_list_opens(backend: Backend) {
    // The fingerprints that version stored are the ones this build computes.
    for (body, stored) in [(BODY_1, FINGERPRINT_1), (BODY_2, FINGERPRINT_2)] {
        let order = NewOrder::from_json(body.as_bytes()).expect("an order");
        assert_eq!(order.fingerprint().to_hex(), stored);
    }

    let env = Env::new(backend);
    written_by_the_shared_list(&env);
    let before = snapshot(&env, true);
    let unused = snapshot(&env, false);
    assert_eq!(
        before[0].1.lines().count(),
        8,
        "versions 1 to 8: {}",
        before[0].1
    );

    let db = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("the order service opens it");
    assert_eq!(
        db.pending_migrations().await.expect("pending"),
        Vec::<String>::new()
    );
    let mut applied = vec![
        "orders/1",
        "orders/2",
        "orders/3",
        "orders/4",
        "outbox/1",
        "outbox/2",
        "records/1",
        "records/2",
        "steps/1",
    ];
    match backend {
        Backend::Postgres => {
            applied.insert(8, "records/3");
            applied.insert(9, "records/4");
        }
        Backend::Sqlite => {
            applied.insert(6, "outbox/3");
            applied.push("steps/2");
        }
    }
    assert_eq!(bookkeeping(&env), applied);
    assert_eq!(snapshot(&env, true), before);
    // The first order keeps its charge's id; the second had no charge.
    assert_eq!(
        env.sql(&format!(
            "SELECT o.id, o.charge_message, m.id FROM orders o \
             LEFT JOIN outbox m ON m.key = '{KEY_1}' AND m.resource_id = CAST(o.id AS text) \
             ORDER BY o.id"
        )),
        format!(
            "{ORDER_1}|{id}|{id}\n{ORDER_2}||",
            id = env.sql(&format!("SELECT id FROM outbox WHERE key = '{KEY_1}'"))
        )
    );

    let sim = idemkey_provider_sim::store::Db::open(&env.url)
        .await
        .expect("the simulator opens it");
    assert_eq!(
        sim.store().pending_migrations().await.expect("pending"),
        Vec::<String>::new()
    );
    let mut sim_applied: Vec<&str> = ["provider-sim/1", "provider-sim/2", "provider-sim/3"]
        .into_iter()
        .chain(applied)
        .collect();
    sim_applied.sort_unstable();
    assert_eq!(bookkeeping(&env), sim_applied);
    let charge = sim
        .charge(&idemkey_provider_sim::scope_of(PROVIDER_SECRET), CHARGE_KEY)
        .await
        .expect("read")
        .expect("the charge");
    assert_eq!(charge.id.to_string(), CHARGE_ID);
    assert_eq!(charge.order_id.to_string(), ORDER_1);
    assert_eq!(
        (charge.amount_cents, charge.currency.as_str()),
        (5980, "EUR")
    );
    assert_eq!(charge.created_at.0, CREATED_1.0 + 500);
    drop(sim);

    // Opening again applies and adopts nothing.
    drop(db);
    let db = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("opens again");
    assert!(db.pending_migrations().await.expect("pending").is_empty());
    assert_eq!(env.count("idemkey_migrations"), sim_applied.len() as u64);
    assert_eq!(snapshot(&env, true), before);

    // The order route replays what that version stored, with its token.
    let state = AppState::new(db, Settings::default());
    let (status, headers, body) = post_order(&state, KEY_1, BODY_1).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(headers["location"], format!("/orders/{ORDER_1}"));
    assert_eq!(body, response_1());
    let (status, headers, body) = post_order(&state, KEY_2, BODY_2).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(body, response_2());
    // Another payload under the stored key is refused.
    let (status, _, body) = post_order(&state, KEY_1, BODY_2).await;
    assert_eq!(status, 422, "{body}");
    // A new key makes a new order; the stored reference is still taken.
    let (status, headers, body) =
        post_order(&state, "compat-key-3", r#"{"sku":"TAZA-01","quantity":1}"#).await;
    assert_eq!(status, 201, "{body}");
    assert!(headers.get("idempotent-replayed").is_none());
    let created: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(created["amount_cents"], 990);
    let (status, _, body) = post_order(
        &state,
        "compat-key-4",
        r#"{"sku":"TAZA-01","quantity":1,"reference":"ref-hand-2"}"#,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains(ORDER_2), "{body}");

    assert_eq!(env.count("orders"), 3);
    assert_eq!(env.count("idempotency_records"), 3);
    assert_eq!(env.count("outbox"), 2);
    assert_eq!(snapshot(&env, false), unused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_database_of_the_shared_list_opens() {
    a_database_of_the_shared_list_opens(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_database_of_the_shared_list_opens() {
    a_database_of_the_shared_list_opens(Backend::Sqlite).await;
}

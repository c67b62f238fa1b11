//! The library's tables under a prefix: everything it creates is prefixed,
//! its statements use the prefixed names, and a store under another prefix
//! (or none) in the same file keeps its own records.

use std::collections::BTreeSet;
use std::time::Duration;

use idemkey::Db;
use idemkey::idempotency::{self, Done, Mode, Outcome, Policy, RecordKey, Scope, StoredResponse};
use idemkey::store::{StoreSettings, Tables};
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};

const OPERATION: OperationId = OperationId::from_static("POST /things:v1");

fn key() -> RecordKey {
    RecordKey {
        scope: Scope::new("tenant").expect("a scope"),
        operation: OPERATION,
        key: IdempotencyKey::parse(b"\"k-1\"", KeyProfile::Lenient).expect("a key"),
    }
}

async fn open(url: &str, tables: Tables) -> Db {
    Db::open(
        url,
        &StoreSettings {
            tables,
            ..StoreSettings::default()
        },
    )
    .await
    .expect("open")
}

/// Runs the key once on `db`; whether the effect ran.
async fn run_once(db: &Db, body: &str) -> bool {
    let fingerprint = Fingerprint::of_json(&OPERATION, body).expect("json");
    let policy = Policy::new(
        Mode::Lease,
        Duration::from_secs(30),
        Duration::from_secs(3600),
    );
    let outcome = idempotency::run(db, &key(), fingerprint, &policy, async || {
        Ok::<_, ()>(Done {
            response: StoredResponse::new(201, "{}"),
            resource: None,
            value: (),
        })
    })
    .await
    .expect("run");
    matches!(outcome, Outcome::Executed { stored: true, .. })
}

fn tables_in(path: &std::path::Path) -> BTreeSet<String> {
    let conn = rusqlite::Connection::open(path).expect("open file");
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .expect("prepare");
    stmt.query_map([], |row| row.get::<_, String>(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_keeps_the_librarys_tables_and_records_apart() {
    let dir = std::env::temp_dir().join(format!("idemkey-tables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("shared.db");
    let url = format!("sqlite://{}", path.display());

    let acme = open(&url, Tables::with_prefix("acme_").expect("prefix")).await;
    assert!(run_once(&acme, "1").await, "a new key runs");
    assert!(!run_once(&acme, "1").await, "the same key replays");

    let names = tables_in(&path);
    assert!(names.contains("acme_idempotency_records"), "{names:?}");
    assert!(names.contains("acme_idemkey_migrations"), "{names:?}");
    assert!(
        names.iter().all(|n| n.starts_with("acme_")),
        "only prefixed tables: {names:?}"
    );
    assert_eq!(
        acme.pending_migrations().await.expect("pending"),
        Vec::<String>::new()
    );

    // The default names in the same file: a store of its own.
    let plain = open(&url, Tables::default()).await;
    assert!(
        run_once(&plain, "1").await,
        "the key is new in the other tables"
    );
    let names = tables_in(&path);
    assert!(names.contains("idempotency_records"), "{names:?}");
    assert!(
        !run_once(&acme, "1").await,
        "the prefixed record is still there"
    );

    std::fs::remove_dir_all(&dir).ok();
}

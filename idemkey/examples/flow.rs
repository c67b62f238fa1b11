//! A purchase of three steps under one key, on SQLite: `reserve` (local SQL, undone if a
//! later step fails for good), `charge` and `email` (external, each sent with its own derived
//! key). The first request answers 202, the worker runs the rest, a retry replays the final
//! answer, and each step ran once.
//!
//! `cargo run -p idemkey --features flow,sqlite --example flow`

use idemkey::Db;
use idemkey::flow::{Attempt, External, Flow, FlowSettings, Flows, Local, StepError};
use idemkey::idempotency::{RecordKey, Scope};
use idemkey::in_transaction::{Options, Outcome};
use idemkey::outbox::{Worker, WorkerSettings};
use idemkey::store::StoreSettings;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Another system, deduplicating by `Idempotency-Key` as a provider does.
type Provider = Arc<Mutex<HashMap<String, Value>>>;

fn external(provider: &Provider) -> External {
    let provider = Arc::clone(provider);
    External::new(move |ctx| {
        let key = ctx.downstream_key().to_string(); // the same on every retry
        let mut seen = provider.lock().unwrap_or_else(|e| e.into_inner());
        let id = json!({ "id": seen.len() });
        std::future::ready(Attempt::Done(seen.entry(key).or_insert(id).clone()))
    })
}

fn sql(tx: &rusqlite::Connection, sql: &str, sku: &str) -> Result<usize, StepError> {
    tx.execute(sql, [sku])
        .map_err(|e| StepError::Retry(e.to_string()))
}

fn purchase(provider: &Provider) -> Flow {
    let reserve = Local::new()
        .sqlite(|tx, ctx| {
            let sku = ctx.input["sku"].as_str().unwrap_or_default();
            let take = "UPDATE stock SET n = n - 1 WHERE sku = ?1 AND n > 0";
            match sql(tx, take, sku)? {
                0 => Err(StepError::Refused(format!("{sku} is out of stock"))),
                _ => Ok(json!({ "sku": sku })),
            }
        })
        .sqlite_undo(|tx, ctx| {
            let sku = ctx.input["sku"].as_str().unwrap_or_default();
            sql(tx, "UPDATE stock SET n = n + 1 WHERE sku = ?1", sku).map(|_| Value::Null)
        });
    Flow::new("purchase")
        .local("reserve", reserve)
        .external("charge", external(provider))
        .external("email", external(provider))
}

fn show(outcome: Outcome) -> String {
    let (Outcome::Executed(r) | Outcome::Replayed(r) | Outcome::NotStored(r)) = outcome else {
        return format!("{outcome:?}");
    };
    let body = String::from_utf8_lossy(r.body.as_deref().unwrap_or_default());
    format!("{} {body}", r.status)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("idemkey-flow-{}.db", std::process::id()));
    let url = format!("sqlite://{}", path.display());
    let db = Db::open(&url, &StoreSettings::default()).await?;
    if let Some(lite) = db.backend_as::<idemkey::store::sqlite::SqliteDb>() {
        let ddl = "CREATE TABLE stock (sku TEXT, n INT); INSERT INTO stock VALUES ('tea', 5)";
        lite.with_conn(move |c| Ok(c.execute_batch(ddl))).await??;
    }
    let provider = Provider::default();
    let wait = Duration::ZERO; // answer 202 at once; the worker runs below
    let settings = FlowSettings {
        wait,
        ..Default::default()
    };
    let flows = Flows::new(db.clone(), vec![purchase(&provider)], settings)?;
    let worker = flows.attach(Worker::new(db.clone(), WorkerSettings::default()));
    let operation = OperationId::from_static("POST /purchases:v1");
    let key = RecordKey {
        scope: Scope::new("account-1").ok_or("scope")?,
        operation: operation.clone(),
        key: IdempotencyKey::parse(b"\"purchase-1\"", KeyProfile::Lenient)?,
    };
    let input = json!({ "sku": "tea" });
    let fp = Fingerprint::of_value(&operation, &input);
    let opts = Options::new(Duration::from_secs(86_400));
    let send = async || flows.start("purchase", &key, fp, &input, &opts).await;
    println!("first: {}", show(send().await?)); // 202: reserved; charge and email queued
    while worker.run_once().await? > 0 {} // the steps after the first transaction
    println!("retry: {}", show(send().await?)); // 200: every output, each step run once
    let effects = provider.lock().map(|p| p.len()).unwrap_or(0);
    assert_eq!(effects, 2, "charged once, emailed once");
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        std::fs::remove_file(file).ok();
    }
    Ok(())
}

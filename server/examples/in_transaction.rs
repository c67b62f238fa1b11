//! Someone else's axum app whose effect lives in idemkey's database:
//! `POST /payments` inserts a row into the app's own `payments` table, in the
//! same transaction as the idempotency record
//! (`idemkey_server::in_transaction`). A retry with the same key replays the
//! stored response and inserts nothing; another body with the same key is
//! 422. SQLite by default (a file in a temporary directory).
//!
//! ```text
//! cargo run -p idemkey-server --example in_transaction            # a scripted walk-through
//! cargo run -p idemkey-server --example in_transaction -- serve   # serve on 127.0.0.1:3003
//! curl -i -X POST localhost:3003/payments -H 'idempotency-key: "pay-1"' \
//!      -H 'content-type: application/json' -d '{"cents": 500}'
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idemkey::store::sqlite::sqlite_in_transaction_async;
use idemkey_core::{ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, OperationId};
use idemkey_server::db::{AccountId, Db, PgSettings, TokenHash};
use idemkey_server::idempotency::{RecordKey, StoredResponse};
use idemkey_server::in_transaction::Options;
use parking_lot::Mutex;
use tower::ServiceExt as _;

const OPERATION: OperationId = OperationId::from_static("POST /payments:v1");

#[derive(Clone)]
struct App {
    /// The store: its table names for the records.
    store: idemkey::store::sqlite::SqliteDb,
    conn: Arc<Mutex<rusqlite::Connection>>,
    /// The one account of this demo (a real app takes it from its auth).
    account: AccountId,
}

async fn pay(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(raw_key) = headers.get("idempotency-key") else {
        return (StatusCode::BAD_REQUEST, "Idempotency-Key required\n").into_response();
    };
    let key = match IdempotencyKey::parse(raw_key.as_bytes(), KeyProfile::Lenient) {
        Ok(key) => key,
        Err(e) => return idemkey_server::problems::problem_response(&e.to_problem()),
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return (StatusCode::BAD_REQUEST, "body is not UTF-8\n").into_response();
    };
    let Ok(payload) = serde_json::from_str::<serde_json::Value>(text) else {
        return (StatusCode::BAD_REQUEST, "body is not JSON\n").into_response();
    };
    let Some(cents) = payload["cents"].as_i64().filter(|c| *c > 0) else {
        return (StatusCode::BAD_REQUEST, "cents: a positive integer\n").into_response();
    };
    let record = RecordKey {
        scope: app.account.scope(),
        operation: OPERATION,
        key,
    };
    let fingerprint = Fingerprint::of_value(&OPERATION, &payload);
    let options = Options {
        expiry_policy: ExpiryPolicy::Reject,
        ..Options::new(Duration::from_secs(24 * 3600))
    };
    let account = app.account.0.to_string();
    let outcome = sqlite_in_transaction_async(
        &app.store,
        app.conn,
        record,
        fingerprint,
        options,
        move |tx| {
            // The app's own effect, in the transaction that stores the record.
            tx.execute(
                "INSERT INTO payments (account_id, cents) VALUES (?1, ?2)",
                rusqlite::params![account, cents],
            )?;
            let id = tx.last_insert_rowid();
            Ok::<_, rusqlite::Error>(
                StoredResponse::new(
                    201,
                    serde_json::json!({ "id": id, "cents": cents }).to_string(),
                )
                .with_header("content-type", "application/json")
                .with_header("location", &format!("/payments/{id}")),
            )
        },
    )
    .await;
    match outcome {
        Ok(outcome) => outcome.into_response(),
        Err(e) => {
            eprintln!("payment failed: {e}");
            (StatusCode::SERVICE_UNAVAILABLE, "try again\n").into_response()
        }
    }
}

async fn count(State(app): State<App>) -> String {
    let conn = app.conn.lock();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM payments", [], |row| row.get(0))
        .unwrap_or(-1);
    format!("{n}\n")
}

fn router(app: App) -> Router {
    Router::new()
        .route("/payments", post(pay))
        .route("/payments/count", get(count))
        .with_state(app)
}

/// Creates (and migrates) the database, the demo account and the app's own
/// table.
async fn open(path: &Path) -> Result<App, Box<dyn std::error::Error>> {
    // Db::open applies idemkey's migrations (idempotency_records).
    let store = Db::open(
        &format!("sqlite://{}", path.display()),
        &PgSettings::default(),
    )
    .await?;
    let account = store
        .create_account("demo", TokenHash(rand_bytes()))
        .await?;
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch(
        "PRAGMA foreign_keys = ON;
         CREATE TABLE IF NOT EXISTS payments (
             id         INTEGER PRIMARY KEY,
             account_id TEXT NOT NULL REFERENCES accounts (id),
             cents      INTEGER NOT NULL CHECK (cents > 0));",
    )?;
    let Db::Sqlite(sqlite) = store else {
        unreachable!("a sqlite:// URL")
    };
    Ok(App {
        store: idemkey::store::sqlite::SqliteDb::clone(&sqlite),
        conn: Arc::new(Mutex::new(conn)),
        account,
    })
}

fn rand_bytes() -> [u8; 32] {
    let mut bytes = [0; 32];
    bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes
}

async fn call(app: &Router, key: &str, body: &str) -> (StatusCode, HeaderMap, String) {
    let request = Request::post("/payments")
        .header("idempotency-key", key)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("a request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, usize::MAX).await.expect("a body");
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().nth(1).as_deref() == Some("serve");
    let dir: PathBuf =
        std::env::temp_dir().join(format!("idemkey-in-transaction-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("app.db");
    let app = open(&path).await?;
    let router = router(app.clone());

    if serve {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:3003").await?;
        println!(
            "listening on http://127.0.0.1:3003 (database {})",
            path.display()
        );
        axum::serve(listener, router).await?;
        return Ok(());
    }

    let (status, _, body) = call(&router, "\"pay-1\"", r#"{"cents": 500}"#).await;
    println!("first send:         {status} {body}");
    let (status, headers, body) = call(&router, "\"pay-1\"", r#"{"cents": 500}"#).await;
    let replayed = headers.get("idempotent-replayed").is_some();
    println!("retry:              {status} {body} (replayed: {replayed})");
    let (status, _, _) = call(&router, "\"pay-1\"", r#"{"cents": 900}"#).await;
    println!("same key, new body: {status}");
    let (status, _, body) = call(&router, "\"pay-2\"", r#"{"cents": 900}"#).await;
    println!("another key:        {status} {body}");
    let payments: i64 = app
        .conn
        .lock()
        .query_row("SELECT count(*) FROM payments", [], |row| row.get(0))?;
    println!("payments stored:    {payments}");
    assert_eq!(payments, 2, "one per key");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

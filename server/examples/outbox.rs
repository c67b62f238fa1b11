//! Someone else's service with an effect outside its database: a sign-up
//! commits its row and a `welcome-mail` message in one transaction
//! (`in_transaction` + `tx.enqueue`), and a `Worker` with the app's own
//! delivery function sends the mail to a mail API over HTTP, with the
//! message's derived key as its `Idempotency-Key`. The first send's answer
//! is lost on purpose: the worker tries again, the delivery function looks
//! the mail up by its key first, and the mail API holds one mail.
//!
//! ```text
//! cargo run -p idemkey-server --example outbox
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse as _;
use axum::routing::{get, post};
use idemkey::outbox::{Delivery, Worker, WorkerSettings};
use idemkey::store::sqlite::sqlite_in_transaction_async;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, RetryPolicy};
use idemkey_server::db::{Db, PgSettings, TokenHash};
use idemkey_server::idempotency::{RecordKey, StoredResponse};
use idemkey_server::in_transaction::Options;
use parking_lot::Mutex;

const OPERATION: OperationId = OperationId::from_static("POST /signups:v1");

/// The mail API: one mail per Idempotency-Key, looked up by it.
type Mails = Arc<Mutex<HashMap<String, String>>>;

async fn send_mail(State(mails): State<Mails>, headers: HeaderMap, body: String) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .trim_matches('"')
        .to_owned();
    mails.lock().entry(key).or_insert(body);
    StatusCode::CREATED
}

async fn find_mail(State(mails): State<Mails>, Path(key): Path<String>) -> StatusCode {
    if mails.lock().contains_key(&key) {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mails: Mails = Arc::default();
    let api = Router::new()
        .route("/mails", post(send_mail))
        .route("/mails/{key}", get(find_mail))
        .with_state(Arc::clone(&mails));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let api_url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, api).await });

    let dir = std::env::temp_dir().join(format!("idemkey-outbox-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}", dir.join("app.db").display());
    let db = Db::open(&url, &PgSettings::default()).await?;
    let account = db.create_account("demo", TokenHash([7; 32])).await?;
    let Db::Sqlite(sqlite) = &db else {
        unreachable!("a sqlite:// URL")
    };

    // The sign-up and its mail message commit together.
    let key = RecordKey {
        scope: account.scope(),
        operation: OPERATION,
        key: IdempotencyKey::parse(b"\"signup-1\"", KeyProfile::Lenient)?,
    };
    let fingerprint = Fingerprint::of_json(&OPERATION, r#"{"email":"ana@example.com"}"#)?;
    let message_key = key.clone();
    let outcome = sqlite_in_transaction_async(
        sqlite,
        sqlite.connection(),
        key,
        fingerprint,
        Options::new(Duration::from_secs(86_400)),
        move |tx| {
            // (the app's own INSERT of the user goes here)
            tx.enqueue(&message_key, "welcome-mail", None, "Welcome, Ana!")?;
            Ok::<_, idemkey_server::db::StoreError>(StoredResponse::new(201, "{}"))
        },
    )
    .await?;
    println!("sign-up: {:?}", outcome.into_response().status());

    // The app's delivery function: look up first when an earlier attempt
    // may have sent it; lose the first answer on purpose.
    let http = reqwest::Client::new();
    let lose_first = Arc::new(AtomicBool::new(true));
    let settings = WorkerSettings {
        retry: RetryPolicy {
            base_ms: 50,
            cap_ms: 200,
            max_attempts: 5,
        },
        ..WorkerSettings::default()
    };
    let worker = Worker::new(db.store(), settings).handle("welcome-mail", move |message| {
        let (http, api_url, lose_first) = (http.clone(), api_url.clone(), Arc::clone(&lose_first));
        async move {
            let key = message.downstream_key().to_string();
            if message.maybe_sent() {
                let found = http.get(format!("{api_url}/mails/{key}")).send().await;
                if found.is_ok_and(|r| r.status() == StatusCode::OK) {
                    println!(
                        "attempt {}: found by its key, not sent again",
                        message.attempts
                    );
                    return Delivery::Delivered(key);
                }
            }
            let sent = http
                .post(format!("{api_url}/mails"))
                .header("idempotency-key", format!("\"{key}\""))
                .body(message.payload.clone())
                .send()
                .await;
            match sent {
                Ok(_) if lose_first.swap(false, Ordering::SeqCst) => {
                    println!("attempt {}: sent, answer lost", message.attempts);
                    Delivery::Uncertain("answer lost".into())
                }
                Ok(r) if r.status().is_success() => Delivery::Delivered(key),
                Ok(r) => Delivery::Retry {
                    after: None,
                    reason: r.status().to_string(),
                },
                Err(e) => Delivery::Uncertain(e.to_string()),
            }
        }
    });
    while db.store().outbox_stats().await?.pending > 0 {
        worker.run_once().await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("mails at the API: {}", mails.lock().len());
    assert_eq!(mails.lock().len(), 1, "one mail, however many attempts");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

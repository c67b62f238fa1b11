//! `Records` implemented outside the library: a wrapper that counts the
//! calls and delegates to the library's SQLite store serves the
//! idempotency layer like any store, and the layer really goes through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::Request;
use axum::routing::post;
use idemkey::StoreError;
use idemkey::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, Scope, StoredResponse,
    TrimReport,
};
use idemkey::layer::{DEFAULT_OPERATION, IdempotencyLayer};
use idemkey::store::sqlite::SqliteDb;
use idemkey_core::{IdempotencyKey, KeyProfile, Stored};
use tower::ServiceExt as _;

/// Calls per method of [`Records`].
#[derive(Clone, Debug, Default)]
struct Calls {
    claim: Arc<AtomicUsize>,
    read: Arc<AtomicUsize>,
    take_over: Arc<AtomicUsize>,
    complete: Arc<AtomicUsize>,
    release: Arc<AtomicUsize>,
    trim: Arc<AtomicUsize>,
}

fn bump(counter: &AtomicUsize) {
    counter.fetch_add(1, Ordering::SeqCst);
}

fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

/// A store of this test's own: the library's SQLite store, counted.
#[derive(Clone, Debug)]
struct CountingRecords {
    inner: SqliteDb,
    calls: Calls,
}

impl Records for CountingRecords {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        bump(&self.calls.claim);
        self.inner.claim(key, claim).await
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        bump(&self.calls.read);
        self.inner.read(key).await
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        bump(&self.calls.take_over);
        self.inner.take_over(key, previous, claim).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        bump(&self.calls.complete);
        self.inner
            .complete(key, token, response, replay_ttl, resource_id)
            .await
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        bump(&self.calls.release);
        self.inner.release(key, token).await
    }

    async fn trim(&self, retention: Duration, batch: u32) -> Result<TrimReport, StoreError> {
        bump(&self.calls.trim);
        self.inner.trim(retention, batch).await
    }
}

/// A temporary directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn send(app: &Router, key: &str, body: &'static str) -> (u16, Option<String>, String) {
    let request = Request::post("/pay")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("a request");
    let response = app.clone().oneshot(request).await.expect("a response");
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().expect("ascii").to_owned());
    let status = response.status().as_u16();
    let body = to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("the body");
    (
        status,
        replayed,
        String::from_utf8(body.to_vec()).expect("utf-8"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_store_of_its_own_serves_the_layer() {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "idemkey-custom-records-{}",
        uuid::Uuid::new_v4().simple()
    )));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let counting = CountingRecords {
        inner: SqliteDb::open(dir.0.join("records.db"))
            .await
            .expect("open"),
        calls: Calls::default(),
    };

    let runs = Arc::new(AtomicUsize::new(0));
    let handler = {
        let runs = Arc::clone(&runs);
        move || async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            (axum::http::StatusCode::CREATED, format!("payment {n}"))
        }
    };
    let app = Router::new()
        .route("/pay", post(handler))
        .layer(IdempotencyLayer::new(counting.clone(), |_| {
            Some("tenant".into())
        }));

    let key = r#""pay-1""#;
    let first = send(&app, key, r#"{"amount":5}"#).await;
    assert_eq!(first, (201, None, "payment 1".to_owned()));
    let again = send(&app, key, r#"{"amount":5}"#).await;
    assert_eq!(
        again,
        (201, Some("true".to_owned()), "payment 1".to_owned())
    );
    let other = send(&app, key, r#"{"amount":6}"#).await;
    assert_eq!(other.0, 422, "{}", other.2);
    assert_eq!(count(&runs), 1, "the handler ran once");

    let calls = &counting.calls;
    assert!(count(&calls.claim) >= 3, "claims: {}", count(&calls.claim));
    assert_eq!(count(&calls.complete), 1);
    assert_eq!(count(&calls.take_over), 0);
    assert_eq!(count(&calls.release), 0);

    // The record is in the wrapped store, under the layer's scope.
    let stored = counting
        .inner
        .read(&RecordKey {
            scope: Scope::new("tenant").expect("a scope"),
            operation: DEFAULT_OPERATION,
            key: IdempotencyKey::parse(key.as_bytes(), KeyProfile::Strict).expect("a key"),
        })
        .await
        .expect("read")
        .record
        .expect("the record");
    assert!(matches!(stored.stored, Stored::Completed { .. }));
    assert_eq!(
        stored.response.and_then(|r| r.body).as_deref(),
        Some(&b"payment 1"[..])
    );
}

//! The idempotency layer (lease mode) on every backend: a real SQLite file
//! in a temporary directory, a real PostgreSQL database, and a real Redis
//! node and Redis Cluster (3 masters, 3 replicas) from the testkit.
//!
//! The tests drive the fixture's router (or a small app of their own) with
//! `oneshot`; time passes for a record the way the database sees it, by
//! moving the record's stored times back ([`TimeTravel`]), since the
//! database's clock decides leases and windows. The `idemkey-server
//! fixture` binary, started as processes that speak HTTP, is tested in
//! `server/tests/fixture_binary.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::request::Parts;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use axum::routing::post;
use idemkey::Db;
use idemkey::layer::IdempotencyLayer;
use idemkey::store::StoreSettings as PgSettings;
use idemkey::store::sqlite::SqliteDb;
use idemkey_core::{ExpiryPolicy, Fingerprint};
// The fixture's routes, which the server's `fixture` subcommand serves
// from the same file.
#[allow(dead_code)]
#[path = "common/fixture.rs"]
mod fixture;
use fixture::{Counter, FIXTURE_SCOPE};
use idemkey_testkit::{
    AnyBackend as Backend, AnyDb, PgCluster, age_records, count_in_flight, count_records,
    eventually,
};
use tower::ServiceExt as _;

// ---------------------------------------------------------------- set-up

/// A fresh store on `backend`.
fn database(backend: Backend) -> AnyDb {
    AnyDb::new(backend)
}

async fn open(db: &AnyDb) -> Db {
    Db::open(&db.url, &PgSettings::default())
        .await
        .expect("open the database")
}

/// Moves time forward for every record of a database, as its clock sees
/// it: the stored times are moved back.
struct TimeTravel(String);

impl TimeTravel {
    fn new(db: &AnyDb) -> Self {
        Self(db.url.clone())
    }

    async fn advance(&self, by: Duration) {
        age_records(&self.0, by).await;
    }
}

/// The fixture's scope function: one shared scope.
fn fixture_scope(_: &Parts) -> Option<String> {
    Some(FIXTURE_SCOPE.to_owned())
}

/// The fixture's router over `db`.
fn fixture_app(db: Db, adjust: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer) -> Router {
    let layer = adjust(IdempotencyLayer::new(db, fixture_scope));
    fixture::router(layer, Counter::default())
}

/// A response read whole.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    async fn from(response: Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body")
            .to_vec();
        Self {
            status,
            headers,
            body,
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    fn assert_problem(&self, status: u16, code: &str) {
        let json: serde_json::Value =
            serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()));
        assert_eq!(
            (self.status, json["code"].as_str().unwrap_or_default()),
            (status, code),
            "{}",
            self.text()
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
    }
}

async fn send(app: &Router, request: Request<Body>) -> Reply {
    Reply::from(app.clone().oneshot(request).await.expect("infallible")).await
}

fn post_to(path: &str, key: Option<&str>, content_type: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::post(path);
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    builder.body(Body::from(body.to_owned())).expect("request")
}

fn echo(key: &str, body: &str) -> Request<Body> {
    post_to("/echo", Some(key), Some("application/json"), body)
}

async fn counter(app: &Router) -> u64 {
    let reply = send(app, Request::get("/counter").body(Body::empty()).unwrap()).await;
    assert_eq!(reply.status, 200);
    let json: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    json["count"].as_u64().expect("a count")
}

/// An app of the test's own: `POST /work` hangs forever on its first run
/// (a crashed handler, once the test drops it) and answers `run:N` after.
fn hanging_app(
    db: Db,
    adjust: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer,
) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let app = Router::new()
        .route(
            "/work",
            post(move || {
                let runs = Arc::clone(&counted);
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    if n == 1 {
                        std::future::pending::<()>().await;
                    }
                    (StatusCode::OK, format!("run:{n}"))
                }
            }),
        )
        .route_layer(adjust(IdempotencyLayer::new(db, fixture_scope)));
    (app, runs)
}

/// Starts a request whose handler hangs, waits until it runs, then drops
/// it: the claim stays in flight, as after a crash.
async fn abandon_a_claim(app: &Router, runs: &AtomicUsize, key: &str) {
    let task = tokio::spawn(app.clone().oneshot(post_to("/work", Some(key), None, "")));
    for _ in 0..500 {
        if runs.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the first request never ran"
    );
    task.abort();
    let _ = task.await;
}

// ------------------------------------------------------------- scenarios

async fn first_post_runs_once_and_the_retry_replays_it_byte_for_byte(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l);
    let body = r#"{"amount": 5, "to": "acct-1"}"#;

    let first = send(&app, echo("k-1", body)).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body, body.as_bytes());
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert!(!first.replayed());

    let retry = send(&app, echo("k-1", body)).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.body, first.body, "byte-identical replay");
    assert_eq!(retry.header("content-type"), Some("application/json"));
    assert!(retry.replayed());

    // Member order and whitespace do not change a JSON fingerprint.
    let reordered = send(&app, echo("k-1", r#"{"to":"acct-1","amount":5}"#)).await;
    assert!(reordered.replayed());
    assert_eq!(reordered.body, first.body);
    assert_eq!(counter(&app).await, 1);
}

async fn the_same_key_with_another_body_is_422(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l);
    assert_eq!(send(&app, echo("k-2", r#"{"n":1}"#)).await.status, 201);
    send(&app, echo("k-2", r#"{"n":2}"#))
        .await
        .assert_problem(422, "idempotency-key-reused");
    // Another path under the same key is another request too.
    send(&app, post_to("/status/200", Some("k-2"), None, ""))
        .await
        .assert_problem(422, "idempotency-key-reused");
    assert_eq!(counter(&app).await, 1);
}

async fn a_concurrent_duplicate_gets_409_with_a_short_retry_after(backend: Backend) {
    let db = database(backend);
    let (app, runs) = hanging_app(open(&db).await, |l| l.lease(Duration::from_secs(10)));
    abandon_a_claim(&app, &runs, "k-3").await;
    let busy = send(&app, post_to("/work", Some("k-3"), None, "")).await;
    busy.assert_problem(409, "idempotency-request-in-progress");
    assert_eq!(
        busy.header("retry-after"),
        Some("1"),
        "a short hint by default, not the whole lease"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn a_longer_retry_after_hint_never_exceeds_the_lease_left(backend: Backend) {
    let db = database(backend);
    let clock = TimeTravel::new(&db);
    let (app, runs) = hanging_app(open(&db).await, |l| {
        l.lease(Duration::from_secs(10))
            .retry_after(Duration::from_secs(30))
    });
    abandon_a_claim(&app, &runs, "k-3b").await;
    let busy = send(&app, post_to("/work", Some("k-3b"), None, "")).await;
    assert_eq!(
        busy.header("retry-after"),
        Some("10"),
        "capped by the lease"
    );
    clock.advance(Duration::from_millis(8_500)).await;
    let busy = send(&app, post_to("/work", Some("k-3b"), None, "")).await;
    assert_eq!(
        busy.header("retry-after"),
        Some("2"),
        "seconds left, rounded up"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn a_claim_whose_lease_is_over_is_taken_over(backend: Backend) {
    let db = database(backend);
    let clock = TimeTravel::new(&db);
    let (app, runs) = hanging_app(open(&db).await, |l| l.lease(Duration::from_secs(5)));
    abandon_a_claim(&app, &runs, "k-4").await;
    clock.advance(Duration::from_millis(5_001)).await;
    let taken = send(&app, post_to("/work", Some("k-4"), None, "")).await;
    assert_eq!((taken.status, taken.text().as_str()), (200, "run:2"));
    assert!(!taken.replayed());
    let retry = send(&app, post_to("/work", Some("k-4"), None, "")).await;
    assert_eq!(retry.text(), "run:2");
    assert!(retry.replayed());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

async fn concurrent_takers_of_an_expired_lease_run_the_handler_once(backend: Backend) {
    let db = database(backend);
    let clock = TimeTravel::new(&db);
    let (app, runs) = hanging_app(open(&db).await, |l| l.lease(Duration::from_secs(5)));
    abandon_a_claim(&app, &runs, "k-5").await;
    clock.advance(Duration::from_secs(6)).await;
    let replies = futures_join(
        (0..8)
            .map(|_| send(&app, post_to("/work", Some("k-5"), None, "")))
            .collect(),
    )
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "exactly one take-over");
    for reply in &replies {
        match reply.status {
            200 => assert_eq!(reply.text(), "run:2"),
            409 => reply.assert_problem(409, "idempotency-request-in-progress"),
            other => panic!("unexpected {other}: {}", reply.text()),
        }
    }
}

async fn concurrent_first_requests_run_the_handler_once(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l);
    let replies = futures_join(
        (0..10)
            .map(|_| send(&app, post_to("/slow?ms=300", Some("k-6"), None, "")))
            .collect(),
    )
    .await;
    assert_eq!(counter(&app).await, 1);
    let ok = replies.iter().filter(|r| r.status == 200).count();
    assert!(ok >= 1);
    for reply in &replies {
        match reply.status {
            200 => assert_eq!(reply.text(), "slept:300"),
            409 => assert!(reply.header("retry-after").is_some()),
            other => panic!("unexpected {other}: {}", reply.text()),
        }
    }
}

async fn a_temporary_status_releases_the_key_and_other_statuses_are_kept(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l);
    for _ in 0..2 {
        let reply = send(&app, post_to("/status/503", Some("k-7"), None, "")).await;
        assert_eq!((reply.status, reply.text().as_str()), (503, "status:503"));
        assert!(!reply.replayed());
    }
    assert_eq!(counter(&app).await, 2, "each retry after a 5xx runs again");
    // 408, 425 and 429 say "try again" too: never stored, never replayed.
    for (i, status) in [408, 425, 429].into_iter().enumerate() {
        let path = format!("/status/{status}");
        let key = format!("k-temp-{i}");
        for _ in 0..2 {
            let reply = send(&app, post_to(&path, Some(&key), None, "")).await;
            assert_eq!(reply.status, status);
            assert!(!reply.replayed(), "{status} is not replayed");
        }
    }
    assert_eq!(counter(&app).await, 8, "every retry ran the handler");
    let stored = count_records(&db.url).await;
    assert_eq!(stored, 0, "no temporary answer is stored");
    let _ = send(&app, post_to("/status/503", Some("k-7"), None, "")).await;
    assert_eq!(counter(&app).await, 9);
    // A 4xx is an answer: stored and replayed.
    let first = send(&app, post_to("/status/404", Some("k-8"), None, "")).await;
    let retry = send(&app, post_to("/status/404", Some("k-8"), None, "")).await;
    assert_eq!((retry.status, retry.text().as_str()), (404, "status:404"));
    assert_eq!(retry.header("content-type"), Some("text/plain"));
    assert!(!first.replayed() && retry.replayed());
    assert_eq!(counter(&app).await, 10);
}

async fn after_the_replay_window_reject_answers_410(backend: Backend) {
    let db = database(backend);
    let clock = TimeTravel::new(&db);
    let app = fixture_app(open(&db).await, |l| {
        l.replay_ttl(Duration::from_secs(60))
            .expiry_policy(ExpiryPolicy::Reject)
    });
    assert_eq!(send(&app, echo("k-9", "1")).await.status, 201);
    clock.advance(Duration::from_secs(59)).await;
    assert!(send(&app, echo("k-9", "1")).await.replayed());
    clock.advance(Duration::from_secs(1)).await;
    send(&app, echo("k-9", "1"))
        .await
        .assert_problem(410, "idempotency-key-expired");
    // Another payload is still reuse, at any age.
    send(&app, echo("k-9", "2"))
        .await
        .assert_problem(422, "idempotency-key-reused");
    assert_eq!(counter(&app).await, 1);
}

async fn after_the_replay_window_reexecute_runs_anew(backend: Backend) {
    let db = database(backend);
    let clock = TimeTravel::new(&db);
    let app = fixture_app(open(&db).await, |l| {
        l.replay_ttl(Duration::from_secs(60))
            .expiry_policy(ExpiryPolicy::Reexecute)
    });
    assert_eq!(send(&app, echo("k-10", "1")).await.status, 201);
    clock.advance(Duration::from_secs(61)).await;
    let again = send(&app, echo("k-10", "1")).await;
    assert_eq!(again.status, 201);
    assert!(!again.replayed());
    assert_eq!(counter(&app).await, 2);
    let retry = send(&app, echo("k-10", "1")).await;
    assert!(retry.replayed(), "the new execution is replayed");
    assert_eq!(counter(&app).await, 2);
}

async fn get_with_a_key_passes_through_untouched(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l);
    for keys in [vec!["k-11"], vec!["not, valid"], vec!["a", "b"]] {
        let mut request = Request::get("/counter");
        for key in keys {
            request = request.header("idempotency-key", key);
        }
        let reply = send(&app, request.body(Body::empty()).unwrap()).await;
        assert_eq!(
            (reply.status, reply.text().as_str()),
            (200, r#"{"count":0}"#)
        );
        assert!(!reply.replayed());
    }
    // Nothing was claimed: the key is still free for a POST.
    assert_eq!(send(&app, echo("k-11", "1")).await.status, 201);
}

async fn missing_or_invalid_keys_get_the_cores_problems(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l);
    send(&app, post_to("/echo", None, None, "x"))
        .await
        .assert_problem(400, "idempotency-key-missing");
    for bad in ["", "\"unterminated", "has space", &"k".repeat(256)] {
        send(&app, echo(bad, "x"))
            .await
            .assert_problem(400, "idempotency-key-invalid");
    }
    let repeated = Request::post("/echo")
        .header("idempotency-key", "a")
        .header("idempotency-key", "b")
        .body(Body::from("x"))
        .unwrap();
    send(&app, repeated)
        .await
        .assert_problem(400, "idempotency-key-invalid");
    assert_eq!(counter(&app).await, 0);
}

async fn a_response_over_the_cap_passes_through_and_retries_get_410(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l.max_stored_response(1000));
    let within = send(&app, post_to("/large?bytes=1000", Some("k-12"), None, "")).await;
    assert_eq!(within.body.len(), 1000);
    let replayed = send(&app, post_to("/large?bytes=1000", Some("k-12"), None, "")).await;
    assert!(replayed.replayed());
    assert_eq!(replayed.body, within.body);

    let over = send(&app, post_to("/large?bytes=5000", Some("k-13"), None, "")).await;
    assert_eq!(over.status, 200);
    assert_eq!(over.body, vec![b'x'; 5000], "passed through in full");
    let retry = send(&app, post_to("/large?bytes=5000", Some("k-13"), None, "")).await;
    retry.assert_problem(410, "idempotency-key-expired");
    assert!(retry.text().contains("too large"), "{}", retry.text());
    send(&app, post_to("/large?bytes=1", Some("k-13"), None, ""))
        .await
        .assert_problem(422, "idempotency-key-reused");
    assert_eq!(counter(&app).await, 2, "the handler never ran again");
}

async fn a_body_over_the_limit_is_413_and_claims_nothing(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| l.max_request_body(16));
    let big = "x".repeat(17);
    // Without Content-Length: the bytes read are held to the limit.
    send(&app, post_to("/echo", Some("k-14"), None, &big))
        .await
        .assert_problem(413, "payload-too-large");
    // With a declared Content-Length: refused before reading.
    let declared = Request::post("/echo")
        .header("idempotency-key", "k-14")
        .header("content-length", "17")
        .body(Body::from(big))
        .unwrap();
    send(&app, declared)
        .await
        .assert_problem(413, "payload-too-large");
    assert_eq!(counter(&app).await, 0);
    // The key was not consumed.
    assert_eq!(
        send(&app, echo("k-14", "16 bytes exactly")).await.status,
        201
    );
}

/// A request body that sends nothing and never ends.
struct Stalled;

impl axum::body::HttpBody for Stalled {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

async fn a_body_that_never_arrives_is_400_and_claims_nothing(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| {
        l.body_read_timeout(Duration::from_millis(200))
    });
    let stalled = Request::post("/echo")
        .header("idempotency-key", "k-stalled")
        .header("content-length", "10")
        .body(Body::new(Stalled))
        .unwrap();
    // What happened is the assertion (400, closed, nothing claimed); the
    // minute only guards against hanging forever.
    let reply = tokio::time::timeout(Duration::from_secs(60), send(&app, stalled))
        .await
        .expect("the stalled request is answered");
    reply.assert_problem(400, "request-invalid");
    assert_eq!(reply.header("connection"), Some("close"));
    assert_eq!(counter(&app).await, 0);
    // The key was not consumed.
    assert_eq!(send(&app, echo("k-stalled", "hello")).await.status, 201);
}

async fn scopes_keep_callers_apart(backend: Backend) {
    let db = database(backend);
    // For the test only: a real service derives the scope from
    // authentication, never from a header the caller picks.
    let layer = IdempotencyLayer::new(open(&db).await, |parts| {
        parts
            .headers
            .get("x-test-tenant")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let app = fixture::router(layer, Counter::default());
    let as_tenant = |tenant: Option<&str>, body: &str| {
        let mut request = Request::post("/echo").header("idempotency-key", "shared");
        if let Some(tenant) = tenant {
            request = request.header("x-test-tenant", tenant);
        }
        request.body(Body::from(body.to_owned())).unwrap()
    };
    assert_eq!(send(&app, as_tenant(Some("a"), "from a")).await.status, 201);
    let b = send(&app, as_tenant(Some("b"), "from b")).await;
    assert_eq!((b.status, b.text().as_str()), (201, "from b"));
    assert!(!b.replayed());
    send(&app, as_tenant(None, "x"))
        .await
        .assert_problem(401, "unauthorized");
    assert_eq!(counter(&app).await, 2);
}

async fn a_custom_fingerprint_decides_what_counts_as_the_same_request(backend: Backend) {
    let db = database(backend);
    // Only the path matters to this fingerprint.
    let app = fixture_app(open(&db).await, |l| {
        l.fingerprint_with(|op, parts, _body| {
            Ok(Fingerprint::of_value(
                op,
                &serde_json::json!(parts.uri.path()),
            ))
        })
    });
    assert_eq!(send(&app, echo("k-15", "1")).await.text(), "1");
    let retry = send(&app, echo("k-15", "2")).await;
    assert!(retry.replayed());
    assert_eq!(retry.text(), "1");
}

/// Opt-in: a duplicate of a request in progress waits for it and replays
/// its answer instead of getting 409.
async fn a_duplicate_can_wait_for_the_first_request_and_replay_it(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| {
        l.wait_for_in_flight(Duration::from_secs(10))
    });
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_to("/slow?ms=600", Some("k-wait"), None, "")).await }
    });
    eventually("the first request claimed its key", async || {
        count_in_flight(&db.url).await == 1
    })
    .await;
    let waited = send(&app, post_to("/slow?ms=600", Some("k-wait"), None, "")).await;
    assert_eq!((waited.status, waited.text().as_str()), (200, "slept:600"));
    assert!(waited.replayed(), "the first request's answer, replayed");
    let first = first.await.expect("join");
    assert!(!first.replayed());
    assert_eq!(counter(&app).await, 1);
    // Past the wait, the draft's 409 as usual.
    let impatient = fixture_app(open(&db).await, |l| {
        l.wait_for_in_flight(Duration::from_millis(100))
    });
    let slow = tokio::spawn({
        let app = impatient.clone();
        async move { send(&app, post_to("/slow?ms=800", Some("k-wait-2"), None, "")).await }
    });
    eventually("the slow request claimed its key", async || {
        count_in_flight(&db.url).await == 1
    })
    .await;
    send(
        &impatient,
        post_to("/slow?ms=800", Some("k-wait-2"), None, ""),
    )
    .await
    .assert_problem(409, "idempotency-request-in-progress");
    assert_eq!(slow.await.expect("join").status, 200);
}

/// Durations past what a clock or a database interval can hold are
/// capped by the builder: the Layer still claims, runs, replays and waits
/// (unbounded, the deadline overflowed `Instant` and the lease failed the
/// claim's interval arithmetic).
async fn huge_durations_are_capped_not_overflowed(backend: Backend) {
    let db = database(backend);
    let app = fixture_app(open(&db).await, |l| {
        l.lease(Duration::MAX)
            .replay_ttl(Duration::MAX)
            .wait_for_in_flight(Duration::MAX)
            .retention(Duration::MAX)
            .trim_interval(Duration::MAX)
    });
    let first = send(&app, echo("k-huge", "1")).await;
    assert_eq!((first.status, first.text().as_str()), (201, "1"));
    let retry = send(&app, echo("k-huge", "1")).await;
    assert!(retry.replayed(), "the stored answer, replayed");
    assert_eq!(counter(&app).await, 1);
}

/// The layer counts its outcomes by operation from the engine's outcome.
async fn outcomes_are_counted_for_the_layer(backend: Backend) {
    use idemkey::metrics::{FrontEnd, Metrics};
    let db = database(backend);
    let metrics = Arc::new(Metrics::default());
    let app = fixture_app(open(&db).await, |l| l.metrics(Arc::clone(&metrics)));
    assert_eq!(send(&app, echo("k-m", "1")).await.status, 201);
    assert!(send(&app, echo("k-m", "1")).await.replayed());
    assert_eq!(send(&app, echo("k-m", "2")).await.status, 422);
    assert_eq!(
        send(&app, post_to("/echo", None, None, "x")).await.status,
        400
    );
    assert_eq!(
        send(&app, post_to("/status/503", Some("k-n"), None, ""))
            .await
            .status,
        503
    );
    let op = idemkey::layer::DEFAULT_OPERATION;
    for (outcome, n) in [
        ("executed", 1),
        ("replayed", 1),
        ("reused", 1),
        ("invalid", 1),
        ("released", 1),
        ("expired", 0),
    ] {
        assert_eq!(
            metrics.counted(FrontEnd::Layer, &op, outcome),
            n,
            "{outcome}"
        );
    }
}

/// Awaits all futures concurrently (on the current task).
/// Keys sent per round of [`the_layer_trims_its_own_records`].
const PER_ROUND: u64 = 20;

/// Rounds of steady load.
const ROUNDS: u64 = 8;

/// Steady load: each round sends [`PER_ROUND`] new keys, then a second
/// passes on the database's clock ([`TimeTravel`]). With a 1 s replay
/// window and a 1 s retention, a round's records are due for deletion two
/// rounds later, so the layer's own trim task keeps the table at most two
/// rounds' worth; the same load through a layer that opts out of the trim
/// keeps every record.
async fn the_layer_trims_its_own_records(backend: Backend) {
    let db = database(backend);
    let store = open(&db).await;
    let clock = TimeTravel::new(&db);
    let trimmed = fixture_app(store.clone(), |l| {
        l.replay_ttl(Duration::from_secs(1))
            .retention(Duration::from_secs(1))
            .trim_interval(Duration::from_millis(100))
    });
    let mut sent = 0;
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            let reply = send(&trimmed, echo(&format!("t-{round}-{i}"), "{}")).await;
            assert_eq!(reply.status, 201, "{}", reply.text());
            sent += 1;
        }
        clock.advance(Duration::from_secs(1)).await;
        eventually("the trim keeps at most two rounds", async || {
            count_records(&db.url).await <= (2 * PER_ROUND) as i64
        })
        .await;
    }
    assert_eq!(sent, ROUNDS * PER_ROUND);
    // An abandoned claim goes too, once the retention is over after its
    // lease (and, on PostgreSQL, once the window a response given at once
    // would have had is over: when maintenance first looks at the row).
    let (hanging, runs) = hanging_app(store.clone(), |l| {
        l.lease(Duration::from_secs(1))
            .replay_ttl(Duration::from_secs(1))
            .retention(Duration::from_secs(1))
            .trim_interval(Duration::from_millis(100))
    });
    abandon_a_claim(&hanging, &runs, "abandoned").await;
    assert_eq!(count_in_flight(&db.url).await, 1);
    clock.advance(Duration::from_secs(3)).await;
    eventually("the abandoned claim is deleted", async || {
        count_in_flight(&db.url).await == 0
    })
    .await;

    // The control: no trim task, every record stays.
    let other = database(backend);
    let untrimmed = fixture_app(open(&other).await, |l| {
        l.replay_ttl(Duration::from_secs(1))
            .retention(Duration::from_secs(1))
            .trim_interval(Duration::from_millis(100))
            .without_trim()
    });
    let other_clock = TimeTravel::new(&other);
    for round in 0..3 {
        for i in 0..PER_ROUND {
            let reply = send(&untrimmed, echo(&format!("u-{round}-{i}"), "{}")).await;
            assert_eq!(reply.status, 201, "{}", reply.text());
        }
        other_clock.advance(Duration::from_secs(1)).await;
    }
    assert_eq!(
        count_records(&other.url).await,
        (3 * PER_ROUND) as i64,
        "without the trim nothing goes"
    );
}

/// The fixture has no authentication: it refuses a non-loopback bind
/// unless told otherwise.
mod trim {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::the_layer_trims_its_own_records(super::Backend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::the_layer_trims_its_own_records(super::Backend::Postgres).await;
    }
}

async fn futures_join<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    let state = Mutex::new((futures, results));
    std::future::poll_fn(|cx| {
        let mut guard = state.lock().expect("not poisoned");
        let (futures, results) = &mut *guard;
        let mut pending = false;
        for (future, result) in futures.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(out) => *result = Some(out),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(
                results
                    .iter_mut()
                    .map(|r| r.take().expect("ready"))
                    .collect(),
            )
        }
    })
    .await
}

macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Backend::Postgres).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Backend::Redis).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Backend::RedisCluster).await;
                }
            )*
        }
    };
}

on_both_backends!(
    a_body_that_never_arrives_is_400_and_claims_nothing,
    first_post_runs_once_and_the_retry_replays_it_byte_for_byte,
    the_same_key_with_another_body_is_422,
    a_concurrent_duplicate_gets_409_with_a_short_retry_after,
    a_longer_retry_after_hint_never_exceeds_the_lease_left,
    a_claim_whose_lease_is_over_is_taken_over,
    concurrent_takers_of_an_expired_lease_run_the_handler_once,
    concurrent_first_requests_run_the_handler_once,
    a_temporary_status_releases_the_key_and_other_statuses_are_kept,
    a_duplicate_can_wait_for_the_first_request_and_replay_it,
    huge_durations_are_capped_not_overflowed,
    outcomes_are_counted_for_the_layer,
    after_the_replay_window_reject_answers_410,
    after_the_replay_window_reexecute_runs_anew,
    get_with_a_key_passes_through_untouched,
    missing_or_invalid_keys_get_the_cores_problems,
    a_response_over_the_cap_passes_through_and_retries_get_410,
    a_body_over_the_limit_is_413_and_claims_nothing,
    scopes_keep_callers_apart,
    a_custom_fingerprint_decides_what_counts_as_the_same_request,
);

#[tokio::test]
async fn databases_open_directly() {
    // The typed constructor, as an app that knows its backend uses it.
    let file = idemkey_testkit::TestDb::new(idemkey_testkit::Backend::Sqlite);
    let sqlite = SqliteDb::open(&file.db).await.expect("sqlite");
    assert!(sqlite.path().ends_with("idemkey.db"));
    let cluster = PgCluster::shared().expect("start PostgreSQL");
    let url = cluster
        .create_database(&format!("lease_{}", uuid::Uuid::new_v4().simple()))
        .expect("create database");
    Db::open(&url, &PgSettings::default())
        .await
        .expect("postgres");
    // Migrations are idempotent: opening again applies nothing new.
    let again = Db::open(&url, &PgSettings::default())
        .await
        .expect("postgres again");
    assert_eq!(
        again.pending_migrations().await.expect("read"),
        Vec::<String>::new()
    );
}

//! The sqlx backend next to the rest of the library: the Layer guards a
//! route on an `sqlx::PgPool`, and the tokio-postgres backend shares one
//! database with it (the same tables, migrations and records).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idemkey::Db;
use idemkey::idempotency::{
    ClaimToken, Claimed, NewClaim, RecordKey, Records, Scope, StoredResponse,
};
use idemkey::layer::IdempotencyLayer;
use idemkey::store::StoreSettings;
use idemkey::store::postgres::PgDb;
use idemkey::store::sqlx_postgres::SqlxPgDb;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};
use idemkey_testkit::PgCluster;
use tower::ServiceExt as _;

const OPERATION: OperationId = OperationId::from_static("POST /payments:v1");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_guards_a_route_on_an_sqlx_pool() {
    let database = PgCluster::shared()
        .expect("postgres")
        .fresh_database()
        .expect("database");
    let db = SqlxPgDb::connect(&database.url, &StoreSettings::default())
        .await
        .expect("connect");
    db.migrate().await.expect("migrate");
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let app: Router = Router::new()
        .route(
            "/payments",
            post(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { (StatusCode::CREATED, "paid") }
            }),
        )
        .route_layer(
            IdempotencyLayer::new(Db::new(db.clone()), |_| Some("account-1".to_owned()))
                .operation(OPERATION),
        );
    let send = |body: &'static str| {
        Request::post("/payments")
            .header("idempotency-key", "\"pay-1\"")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("a request")
    };
    let first = app.clone().oneshot(send("{}")).await.expect("infallible");
    assert_eq!(first.status(), StatusCode::CREATED);
    let again = app.clone().oneshot(send("{}")).await.expect("infallible");
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    let other = app
        .clone()
        .oneshot(send(r#"{"cents":2}"#))
        .await
        .expect("infallible");
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the route ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_postgres_backends_share_one_database() {
    let database = PgCluster::shared()
        .expect("postgres")
        .fresh_database()
        .expect("database");
    let settings = StoreSettings::default();
    let pg = PgDb::connect(&database.url, &settings)
        .await
        .expect("tokio-postgres");
    pg.migrate().await.expect("migrate");
    let sqlx = SqlxPgDb::connect(&database.url, &settings)
        .await
        .expect("sqlx");
    // The tokio-postgres backend's migrations are this backend's: nothing
    // is pending, and migrating again applies nothing.
    sqlx.migrate().await.expect("migrate");
    assert_eq!(
        sqlx.pending_migrations().await.expect("pending"),
        Vec::<String>::new()
    );
    assert_eq!(
        pg.pending_migrations().await.expect("pending"),
        Vec::<String>::new()
    );
    // A key claimed on one is taken on the other, completed there, and
    // replayed from the first.
    let key = RecordKey {
        scope: Scope::new("acct-1").expect("scope"),
        operation: OPERATION,
        key: IdempotencyKey::parse(b"\"shared\"", KeyProfile::Lenient).expect("key"),
    };
    let claim = NewClaim {
        token: ClaimToken::random(),
        fingerprint: Fingerprint::of_json(&OPERATION, "{}").expect("json"),
        lease: Duration::from_secs(60),
        replay_ttl: Duration::from_secs(3600),
    };
    assert_eq!(pg.claim(&key, &claim).await.expect("claim"), Claimed::Won);
    let Claimed::Taken(read) = sqlx
        .claim(
            &key,
            &NewClaim {
                token: ClaimToken::random(),
                ..claim
            },
        )
        .await
        .expect("claim")
    else {
        panic!("claimed twice across the backends");
    };
    assert_eq!(read.record.expect("record").token, claim.token);
    let response = StoredResponse::new(201, "{}");
    assert!(
        sqlx.complete(
            &key,
            claim.token,
            &response,
            Duration::from_secs(3600),
            None
        )
        .await
        .expect("complete")
    );
    let stored = pg.read(&key).await.expect("read").record.expect("record");
    assert_eq!(stored.response, Some(response));
}

//! Someone else's axum app with idemkey's layer on its routes.
//!
//! `POST /payments` calls a (pretend) payment provider: an effect outside
//! any database of ours, so the route uses lease mode. An authentication
//! middleware outside the layer puts the caller's account in the request's
//! extensions, and the layer scopes keys by it. Records live in an SQLite
//! file.
//!
//! ```text
//! cargo run -p idemkey --features layer,sqlite --example layer            # a scripted walk-through
//! cargo run -p idemkey --features layer,sqlite --example layer -- serve   # serve on 127.0.0.1:3002
//! curl -i -X POST localhost:3002/payments -H 'authorization: Bearer token-alice' \
//!      -H 'idempotency-key: "pay-1"' -H 'content-type: application/json' -d '{"cents": 500}'
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{Next, from_fn};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use idemkey::Db;
use idemkey::layer::IdempotencyLayer;
use idemkey::store::StoreSettings;
use tower::ServiceExt as _;

/// The authenticated caller, as the app's own auth middleware finds it.
#[derive(Clone, Debug)]
struct Account(String);

/// Stands in for a payment provider: counts the charges it was asked for.
#[derive(Clone, Default)]
struct Provider(Arc<AtomicU64>);

async fn authenticate(mut request: Request, next: Next) -> Response {
    let account = match request.headers().get(header::AUTHORIZATION) {
        Some(v) if v == "Bearer token-alice" => "alice",
        Some(v) if v == "Bearer token-bob" => "bob",
        _ => return StatusCode::UNAUTHORIZED.into_response(),
    };
    request.extensions_mut().insert(Account(account.to_owned()));
    next.run(request).await
}

async fn pay(State(provider): State<Provider>, Json(body): Json<serde_json::Value>) -> Response {
    let charge = provider.0.fetch_add(1, Ordering::SeqCst) + 1;
    let mut response = (
        StatusCode::CREATED,
        Json(serde_json::json!({ "charge": charge, "cents": body["cents"] })),
    )
        .into_response();
    let location = format!("/payments/{charge}")
        .parse()
        .expect("a header value");
    response.headers_mut().insert(header::LOCATION, location);
    response
}

async fn charges(State(provider): State<Provider>) -> String {
    provider.0.load(Ordering::SeqCst).to_string()
}

fn app(db: Db, provider: Provider) -> Router {
    // The scope comes from authentication, never from a header the caller
    // picks: it keeps one account's keys from another's.
    let idempotent = IdempotencyLayer::new(db, |parts| {
        parts.extensions.get::<Account>().map(|a| a.0.clone())
    })
    .lease(Duration::from_secs(30))
    .replay_ttl(Duration::from_secs(24 * 3600));
    Router::new()
        .route("/payments", post(pay))
        .route("/charges", get(charges))
        .route_layer(idempotent)
        // Added after the idempotency layer, so it runs first.
        .layer(from_fn(authenticate))
        .with_state(provider)
}

async fn call(app: &Router, who: &str, key: &str, body: &str) -> (StatusCode, HeaderMap, String) {
    let request = Request::post("/payments")
        .header(header::AUTHORIZATION, format!("Bearer token-{who}"))
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
    let path = if serve {
        std::path::PathBuf::from("idemkey-layer-example.db")
    } else {
        std::env::temp_dir().join(format!("idemkey-layer-example-{}.db", std::process::id()))
    };
    let store = Db::open(
        &format!("sqlite://{}", path.display()),
        &StoreSettings::default(),
    )
    .await?;
    let provider = Provider::default();
    let app = app(store, provider.clone());

    if serve {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:3002").await?;
        println!(
            "listening on http://127.0.0.1:3002 (records in {})",
            path.display()
        );
        axum::serve(listener, app).await?;
        return Ok(());
    }

    let (status, _, body) = call(&app, "alice", "\"pay-1\"", r#"{"cents": 500}"#).await;
    println!("first send:         {status} {body}");
    let (status, headers, body) = call(&app, "alice", "\"pay-1\"", r#"{"cents": 500}"#).await;
    let replayed = headers.get("idempotent-replayed").is_some();
    println!("retry:              {status} {body} (replayed: {replayed})");
    let (status, _, _) = call(&app, "alice", "\"pay-1\"", r#"{"cents": 900}"#).await;
    println!("same key, new body: {status}");
    let (status, _, body) = call(&app, "bob", "\"pay-1\"", r#"{"cents": 500}"#).await;
    println!("bob, same key:      {status} {body}");
    let charges = provider.0.load(Ordering::SeqCst);
    println!("charges made:       {charges}");
    assert_eq!(charges, 2, "one per account");
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    Ok(())
}

//! The bench's ceiling for replays: what an axum handler costs when it
//! answers every `POST` with the same bytes an order's replay carries
//! (status, headers, body) from a constant, doing nothing else: no token,
//! no key, no fingerprint, no log line, no metrics.
//!
//! It takes `idemkey-server`'s command line (`migrate`, `account create`,
//! `serve --bind ADDR`; every other argument is ignored), so that
//! `A=<this> B=<idemkey-server> KINDS=replay bench/ab.sh` measures replays
//! against it in the same harness, alternating, on the same box.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

/// An order's `201` as `idemkey-server` stores it (the same length and
/// fields as the bench's `{"sku":"LIBRO-TS","quantity":2}` order).
const BODY: &str = concat!(
    r#"{"id":"0b6f8f2e-3c1a-4d55-9a57-6d0e1c3f2a10","sku":"LIBRO-TS","quantity":2,"#,
    r#""amount_cents":5980,"currency":"EUR","created_at":"2026-12-07T23:59:59.123Z","#,
    r#""payment":{"status":"pending","attempts":0}}"#
);
const LOCATION: &str = "/orders/0b6f8f2e-3c1a-4d55-9a57-6d0e1c3f2a10";

/// Reads the body (as a real handler must) and answers the replay's bytes.
async fn replay(_body: Bytes) -> Response {
    let mut response = (StatusCode::CREATED, BODY).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::LOCATION, HeaderValue::from_static(LOCATION));
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        // Nothing to migrate; any token authenticates.
        Some("migrate") => {}
        Some("account") => println!("ceiling-token"),
        Some("serve") => {
            let bind = args
                .iter()
                .position(|a| a == "--bind")
                .and_then(|i| args.get(i + 1))
                .map_or("127.0.0.1:38150", String::as_str);
            let Ok(addr) = bind.parse::<SocketAddr>() else {
                eprintln!("not an address: {bind}");
                std::process::exit(2);
            };
            serve(addr);
        }
        _ => {
            eprintln!("usage: idemkey-ceiling migrate | account create NAME | serve --bind ADDR");
            std::process::exit(2);
        }
    }
}

#[tokio::main]
async fn serve(addr: SocketAddr) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .fallback(post(replay));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("bind {addr}: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = axum::serve(listener, app).await {
        eprintln!("serve: {err}");
        std::process::exit(1);
    }
}

//! The operator's surface through `app(state)`, without a socket:
//! `/metrics`, `/readyz`, `/openapi.json` (checked against the real
//! routes), `/problems/{code}` and the request id.

use std::collections::BTreeSet;

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request};
use axum::response::Response;
use idemkey_core::ProblemCode;
use idemkey_server::auth::hash_token;
use idemkey_server::db::{Db, PgSettings};
use idemkey_server::{AppState, Settings, app};
use serde_json::Value;
use tower::ServiceExt as _;

const TOKEN: &str = "operator-test-token";

struct Sqlite {
    dir: std::path::PathBuf,
    state: AppState,
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sqlite {
    fn db(&self) -> std::path::PathBuf {
        self.dir.join("idemkey.db")
    }
}

async fn sqlite_state() -> Sqlite {
    sqlite_state_with(Settings::default()).await
}

async fn sqlite_state_with(settings: Settings) -> Sqlite {
    let dir = std::env::temp_dir().join(format!("idemkey-operator-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("idemkey.db").display());
    let store = Db::open(&url, &PgSettings::default()).await.unwrap();
    store
        .create_account("operator", hash_token(TOKEN))
        .await
        .unwrap();
    let state = AppState::new(store, settings);
    Sqlite { dir, state }
}

async fn send(state: &AppState, request: Request<Body>) -> (Response, String) {
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, 1 << 20).await.unwrap();
    (
        Response::from_parts(parts, Body::empty()),
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

async fn get(state: &AppState, path: &str) -> (Response, String) {
    send(state, Request::get(path).body(Body::empty()).unwrap()).await
}

fn order(key: &str, body: &'static str, token: Option<&str>, content_type: &str) -> Request<Body> {
    let mut request = Request::post("/orders")
        .header("idempotency-key", key)
        .header("content-type", content_type);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request.body(Body::from(body)).unwrap()
}

/// `(METHOD, /path/{param})` of every `.route(...)` call in `source`.
fn routes_in(source: &str) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (start, _) in source.match_indices(".route(") {
        let rest = &source[start + ".route(".len()..];
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let call = &rest[..end];
        let Some(open) = call.find('"') else { continue };
        let Some(len) = call[open + 1..].find('"') else {
            continue;
        };
        let path = &call[open + 1..open + 1 + len];
        let bytes = call.as_bytes();
        for method in ["get", "post", "put", "patch", "delete"] {
            let needle = format!("{method}(");
            let routed = call.match_indices(&needle).any(|(i, _)| {
                i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')
            });
            if routed {
                routes.insert((method.to_uppercase(), path.to_owned()));
            }
        }
    }
    routes
}

fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete", "head", "options"]
                .contains(&method.as_str())
            {
                routes.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    routes
}

#[tokio::test]
async fn openapi_document_is_3_1_and_every_documented_route_is_routed() {
    let db = sqlite_state().await;
    let (response, body) = get(&db.state, "/openapi.json").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let retention = &doc["x-idempotency"]["retention"];
    assert_eq!(retention["replayWindowSeconds"], 86_400);
    assert_eq!(retention["tombstoneTtlSeconds"], 30 * 86_400);
    let post = &doc["paths"]["/orders"]["post"]["responses"];
    for status in [
        "201", "400", "401", "409", "410", "413", "415", "422", "503",
    ] {
        assert!(
            post.get(status).is_some(),
            "POST /orders documents {status}"
        );
    }
    for (method, path) in documented_routes(&doc) {
        let concrete = path
            .replace("{id}", "00000000-0000-4000-8000-000000000000")
            .replace("{key}", "abc-123")
            .replace("{code}", "not-found");
        let request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(&concrete)
            .body(Body::empty())
            .unwrap();
        let (response, body) = send(&db.state, request).await;
        assert!(
            !matches!(response.status().as_u16(), 404 | 405),
            "{method} {path} is documented but not routed: {} {body}",
            response.status()
        );
    }
}

#[test]
fn every_public_route_is_in_the_openapi_document() {
    let doc: Value = serde_json::from_str(idemkey_server::operator::OPENAPI_TEMPLATE).unwrap();
    let documented = documented_routes(&doc);
    let mut routed = routes_in(include_str!("../src/routes/mod.rs"));
    routed.extend(routes_in(include_str!("../src/operator.rs")));
    routed.retain(|(_, path)| !path.starts_with("/demo/"));
    assert!(routed.contains(&("POST".to_owned(), "/orders".to_owned())));
    assert!(routed.contains(&("GET".to_owned(), "/metrics".to_owned())));
    let missing: Vec<_> = routed.difference(&documented).collect();
    assert!(missing.is_empty(), "routed but not documented: {missing:?}");
}

#[tokio::test]
async fn readyz_answers_200_when_migrated_and_503_when_a_migration_is_missing() {
    let db = sqlite_state().await;
    let (response, body) = get(&db.state, "/readyz").await;
    assert_eq!(response.status(), 200, "{body}");
    assert!(body.contains(r#""backend":"sqlite""#), "{body}");
    let (response, _) = get(&db.state, "/healthz").await;
    assert_eq!(response.status(), 200);

    let conn = rusqlite::Connection::open(db.db()).unwrap();
    conn.execute("DELETE FROM idemkey_migrations", []).unwrap();
    drop(conn);
    // The 200 is reused for up to a second (probes share one query).
    let (response, body) = readyz_once_not_ready(&db.state).await;
    assert_eq!(response.status(), 503, "{body}");
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(body.contains(r#""code":"service-unavailable""#), "{body}");
    // Liveness does not care about migrations.
    let (response, _) = get(&db.state, "/healthz").await;
    assert_eq!(response.status(), 200);
}

/// `/readyz` polled until it is no longer 200 (a ready answer is reused
/// for up to a second), then that answer; bounded like `eventually`.
async fn readyz_once_not_ready(state: &AppState) -> (Response, String) {
    let mut answer = None;
    common::eventually("/readyz stops answering 200", async || {
        let (response, body) = get(state, "/readyz").await;
        let done = response.status() != 200;
        answer = Some((response, body));
        done
    })
    .await;
    answer.expect("an answer")
}

fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing in\n{metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn metrics_count_order_outcomes_latency_and_the_pool() {
    let db = sqlite_state().await;
    let state = &db.state;
    let body = r#"{"sku":"LIBRO-TS","quantity":2}"#;
    let other = r#"{"sku":"LIBRO-TS","quantity":3}"#;
    let json = "application/json";
    let cases = [
        (order("k-1", body, Some(TOKEN), json), 201),
        (order("k-1", body, Some(TOKEN), json), 201),
        (order("k-1", other, Some(TOKEN), json), 422),
        (order("k-2", body, None, json), 401),
        (order("k-3", body, Some(TOKEN), "text/plain"), 415),
    ];
    for (request, status) in cases {
        let (response, text) = send(state, request).await;
        assert_eq!(response.status(), status, "{text}");
    }
    let (response, text) = get(state, "/metrics").await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    for (outcome, n) in [
        ("executed", 1.0),
        ("replayed", 1.0),
        ("reused", 1.0),
        ("unauthorized", 1.0),
        ("invalid", 1.0),
        ("in_progress", 0.0),
        ("expired", 0.0),
        ("unavailable", 0.0),
    ] {
        let name = format!(
            "idemkey_requests_total{{front_end=\"orders\",operation=\"POST /orders:v1\",outcome=\"{outcome}\"}}"
        );
        assert_eq!(sample(&text, &name), n, "{outcome}");
    }
    assert!(text.contains("# TYPE idemkey_request_duration_seconds histogram"));
    assert_eq!(
        sample(
            &text,
            "idemkey_request_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        5.0
    );
    assert_eq!(sample(&text, "idemkey_request_duration_seconds_count"), 5.0);
    // The write connection and the read-only ones.
    assert_eq!(
        sample(&text, "idemkey_pool_size{backend=\"sqlite\"}"),
        (1 + idemkey::store::sqlite::DEFAULT_READERS) as f64
    );
    // Other routes are not counted.
    let (_, text) = get(state, "/metrics").await;
    assert_eq!(sample(&text, "idemkey_request_duration_seconds_count"), 5.0);
    assert!(!text.contains(TOKEN));
}

#[tokio::test]
async fn request_ids_are_kept_or_generated_and_echoed() {
    let db = sqlite_state().await;
    let request = Request::get("/healthz")
        .header("x-request-id", "client-id-42")
        .body(Body::empty())
        .unwrap();
    let (response, _) = send(&db.state, request).await;
    assert_eq!(response.headers()["x-request-id"], "client-id-42");

    let (response, _) = get(&db.state, "/no-such-route").await;
    assert_eq!(response.status(), 404);
    let generated = response.headers()["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::try_parse(generated).is_ok(), "{generated}");

    // An unsafe id is replaced, not echoed.
    let request = Request::get("/healthz")
        .header("x-request-id", "a b\"c")
        .body(Body::empty())
        .unwrap();
    let (response, _) = send(&db.state, request).await;
    assert_ne!(response.headers()["x-request-id"], "a b\"c");
}

#[tokio::test]
async fn problem_types_resolve_to_documentation_pages() {
    let db = sqlite_state().await;
    for code in ProblemCode::ALL {
        let (response, body) = get(&db.state, &code.type_uri()).await;
        assert_eq!(response.status(), 200, "{}", code.as_str());
        assert_eq!(
            response.headers()["content-type"],
            "text/html; charset=utf-8"
        );
        assert!(body.contains(code.title()), "{body}");
        assert!(body.contains(&format!("HTTP status {}", code.status())));
        assert!(body.contains(r#"href="/openapi.json""#));
    }
    let (response, body) = get(&db.state, "/problems/no-such-code").await;
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert!(body.contains(r#""code":"not-found""#), "{body}");
    let request = Request::post("/problems/not-found")
        .body(Body::empty())
        .unwrap();
    let (response, _) = send(&db.state, request).await;
    assert_eq!(response.status(), 405);
}

mod common;

#[tokio::test]
async fn postgres_readyz_and_pool_gauges() {
    let env = common::Env::new(common::Backend::Postgres);
    let store = Db::open(&env.url, &Default::default()).await.unwrap();
    let state = AppState::new(store, Settings::default());
    let (response, body) = get(&state, "/readyz").await;
    assert_eq!(response.status(), 200, "{body}");
    assert!(body.contains(r#""backend":"postgres""#), "{body}");
    let (_, text) = get(&state, "/metrics").await;
    assert_eq!(
        sample(&text, "idemkey_pool_max_size{backend=\"postgres\"}"),
        10.0
    );
    assert!(sample(&text, "idemkey_pool_size{backend=\"postgres\"}") >= 1.0);
    assert_eq!(
        sample(&text, "idemkey_pool_waiting{backend=\"postgres\"}"),
        0.0
    );
    assert!(text.contains("idemkey_pool_available{backend=\"postgres\"}"));

    env.sql("DELETE FROM idemkey_migrations WHERE component = 'records'");
    let (response, body) = readyz_once_not_ready(&state).await;
    assert_eq!(response.status(), 503, "{body}");
    assert!(body.contains(r#""code":"service-unavailable""#), "{body}");
}

/// Header values on the edges of the key grammar, for every profile.
fn key_corpus() -> Vec<String> {
    let max = idemkey_core::MAX_KEY_LEN;
    let uuid = "8E03978E-40D5-43E8-BC93-6894A57F9324";
    let mut corpus: Vec<String> = [
        "abc-123",
        "\"abc-123\"",
        " \"abc-123\"\t",
        "\"abc-123\";v=1;w;x=?0;y=:QUJD:;z=@1;d=%\"caf%c3%a9\";t=tok/en;n=-1.5",
        "\"abc-123\" ;v=1",
        "\"abc-123\";V=1",
        "\"abc-123\";d=%\"%c3\"",
        "abc;v=1",
        "a,b",
        "a\"b",
        "\"a\\\"b\\\\c\"",
        "\"a\\b\"",
        "\"open",
        "\"\"",
        "\"caf\u{e9}\"",
        uuid,
        "8e03978e40d543e8bc936894a57f9324",
    ]
    .map(str::to_owned)
    .to_vec();
    corpus.push(format!("\"{uuid}\";v=1"));
    corpus.push(format!("{{{uuid}}}"));
    for len in [max - 1, max, max + 1] {
        corpus.push("k".repeat(len));
        corpus.push(format!("\"{}\"", "k".repeat(len)));
        corpus.push(format!("\"{}\\\\\"", "k".repeat(len - 1)));
    }
    corpus
}

fn schema_regex(schema: &Value) -> regex::Regex {
    regex::Regex::new(schema["pattern"].as_str().expect("a pattern")).unwrap()
}

fn percent_encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The published document against the routes themselves, for every key
/// profile: a header value or lookup segment is refused with 400 exactly
/// when the document's pattern refuses it, and the body and `?limit=`
/// bounds it states are the ones the routes apply.
#[tokio::test]
async fn the_published_constraints_are_what_the_routes_enforce() {
    let body = r#"{"sku":"LIBRO-TS","quantity":2}"#;
    for profile in idemkey_core::KeyProfile::ALL {
        let db = sqlite_state_with(Settings {
            key_profile: profile,
            ..Settings::default()
        })
        .await;
        let state = &db.state;
        let (_, text) = get(state, "/openapi.json").await;
        let doc: Value = serde_json::from_str(&text).unwrap();

        let header = schema_regex(&doc["components"]["parameters"]["IdempotencyKey"]["schema"]);
        for value in key_corpus() {
            // Non-ASCII goes out as the raw bytes a client would send.
            let request = Request::post("/orders")
                .header(
                    "idempotency-key",
                    axum::http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
                )
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::from(body))
                .unwrap();
            let (response, text) = send(state, request).await;
            let refused = response.status() == 400;
            assert_eq!(
                !header.is_match(&value),
                refused,
                "{profile} key {value:?}: {} {text}",
                response.status()
            );
            if refused {
                assert!(
                    text.contains(r#""code":"idempotency-key-invalid""#),
                    "{text}"
                );
            }
        }

        let path = &doc["paths"]["/operations/{key}"]["get"]["parameters"][0]["schema"];
        let segment = schema_regex(path);
        for value in key_corpus() {
            let request = Request::get(format!("/operations/{}", percent_encode(&value)))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::empty())
                .unwrap();
            let (response, text) = send(state, request).await;
            let expected = if segment.is_match(&value) { 200 } else { 400 };
            assert_eq!(
                response.status(),
                expected,
                "{profile} lookup {value:?}: {text}"
            );
        }
    }

    // The order body's bounds, from the document.
    let db = sqlite_state().await;
    let state = &db.state;
    let doc = idemkey_server::operator::openapi_document(&Settings::default());
    let props = &doc["components"]["schemas"]["NewOrder"]["properties"];
    let (min, max) = (
        props["quantity"]["minimum"].as_u64().unwrap(),
        props["quantity"]["maximum"].as_u64().unwrap(),
    );
    let longest = props["sku"]["maxLength"].as_u64().unwrap() as usize;
    let sku = schema_regex(&props["sku"]);
    let listed: Vec<&str> = props["sku"]["enum"]
        .as_array()
        .expect("the sku enum (the catalogue)")
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let reference = schema_regex(&props["reference"]);
    let longest_reference = props["reference"]["maxLength"].as_u64().unwrap() as usize;
    // (sku, quantity, reference, status): the bounds, every sku of the
    // enum, a sku of the right shape outside it, and the reference's rule.
    let mut cases = vec![
        ("A".to_owned(), min - 1, None, 400),
        ("A".to_owned(), min, None, 201),
        ("A".to_owned(), max, None, 201),
        ("A".to_owned(), max + 1, None, 400),
        ("A".repeat(longest), min, None, 400),
        ("A".repeat(longest + 1), min, None, 400),
        ("a".to_owned(), min, None, 400),
        (
            "A".to_owned(),
            min,
            Some("r".repeat(longest_reference)),
            201,
        ),
        (
            "A".to_owned(),
            min,
            Some("r".repeat(longest_reference + 1)),
            400,
        ),
        ("A".to_owned(), min, Some("PO 1".to_owned()), 400),
        ("A".to_owned(), min, Some("po_2026.01-Z".to_owned()), 201),
    ];
    cases.extend(listed.iter().map(|s| (s.to_string(), min, None, 201)));
    for (i, (sku_value, quantity, reference_value, status)) in cases.into_iter().enumerate() {
        // What the document says of the body, then what the route answers.
        let valid = sku.is_match(&sku_value)
            && listed.contains(&sku_value.as_str())
            && (min..=max).contains(&quantity)
            && reference_value
                .as_deref()
                .is_none_or(|r| reference.is_match(r));
        assert_eq!(
            valid,
            status == 201,
            "{sku_value:?} x {quantity}, {reference_value:?}"
        );
        let mut json = serde_json::json!({ "sku": sku_value, "quantity": quantity });
        if let Some(value) = reference_value {
            json["reference"] = value.into();
        }
        let json = json.to_string();
        let request = Request::post("/orders")
            .header("idempotency-key", format!("\"bounds-{i}\""))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::from(json.clone()))
            .unwrap();
        let (response, text) = send(state, request).await;
        assert_eq!(response.status(), status, "{json}: {text}");
    }

    // `?limit=`: the minimum, one below it, and a number of any size.
    let limit = &doc["paths"]["/orders"]["get"]["parameters"][0]["schema"];
    let minimum = limit["minimum"].as_u64().unwrap();
    assert!(limit.get("maximum").is_none(), "any size is accepted");
    for (value, status) in [
        (minimum.to_string(), 200),
        ((minimum - 1).to_string(), 400),
        ("9".repeat(40), 200),
    ] {
        let request = Request::get(format!("/orders?limit={value}"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap();
        let (response, text) = send(state, request).await;
        assert_eq!(response.status(), status, "limit={value}: {text}");
    }
}

//! The operator's surface: `GET /metrics`, `GET /readyz`,
//! `GET /openapi.json` and the problem documentation at
//! `GET /problems/{code}` (the problem `type` URIs are relative
//! `/problems/<code>`, RFC 9457 section 3.1.1).
//!
//! The OpenAPI 3.1 document is `server/openapi.json`, with the running
//! configuration (key profile, replay window, tombstone TTL, expiry policy)
//! filled into its `x-idempotency` member when it is served. Every
//! constraint the server enforces on a request (the `Idempotency-Key`
//! field's syntax and length under the running profile, the lookup path's
//! key, the order body with the catalogue's skus, `?limit=`) and the
//! problem codes of each status are
//! written into it from the core's constants and the routes' rules when it
//! is built ([`openapi_document`]), so the published contract cannot be
//! looser or stricter than the server; a test checks that the shipped file
//! holds the same values for the default settings.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::get;
use idemkey_core::{
    CATALOGUE, CURRENCY, KeyProfile, MAX_KEY_LEN, MAX_ORDER_BODY_BYTES, Problem, ProblemCode,
    QUANTITY_RANGE, REFERENCE_MAX_LEN, REFERENCE_PATTERN, SKU_MAX_LEN, SKU_PATTERN,
};
use serde_json::{Value, json};
use tracing::warn;

use crate::routes::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, lookup_segment_pattern};
use crate::{AppState, Settings};
use idemkey::duration::human_duration;
use idemkey::problems::{UNAVAILABLE_RETRY_AFTER_SECS, problem_response};

/// The OpenAPI document as shipped, before the running values are filled in.
pub const OPENAPI_TEMPLATE: &str = include_str!("../openapi.json");

/// The operator's routes, with the problem fallbacks for wrong methods.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(crate::metrics::show))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
        .route("/problems/{code}", get(problem_page))
        .method_not_allowed_fallback(|| async { problem_response(&Problem::method_not_allowed()) })
        .with_state(state)
}

/// How long `/readyz` waits for the database, whatever `--pool-wait` says:
/// a probe must answer before its prober gives up.
pub const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /readyz`: 200 when the database answers within [`READY_TIMEOUT`]
/// (on SQLite: grants the write lock) and every migration this build knows
/// is applied; 503 `service-unavailable` otherwise. The answer is the
/// database's of at most [`PROBE_FRESH_FOR`](crate::probe_cache::PROBE_FRESH_FOR)
/// ago, asked by one probe at a time ([`crate::probe_cache`]).
async fn readyz(State(state): State<AppState>) -> Response {
    let store = state.db();
    let answer = state
        .probes()
        .ready
        .get(|| async { store.ready(READY_TIMEOUT).await.map_err(|e| e.to_string()) })
        .await;
    let reason = match answer {
        Ok(pending) if pending.is_empty() => {
            return json(
                StatusCode::OK,
                &json!({ "status": "ready", "backend": store.backend() }),
            );
        }
        Ok(pending) => format!("migrations not applied: {pending:?}"),
        Err(err) => err,
    };
    warn!(%reason, "not ready");
    problem_response(
        &Problem::new(
            ProblemCode::ServiceUnavailable,
            "The database is unreachable or not fully migrated.",
        )
        .with_retry_after(UNAVAILABLE_RETRY_AFTER_SECS),
    )
}

/// The OpenAPI document with `settings` filled in, and every request
/// constraint written from the rule the server applies (see the module
/// docs).
pub fn openapi_document(settings: &Settings) -> Value {
    let mut doc: Value = serde_json::from_str(OPENAPI_TEMPLATE).unwrap_or_else(|_| json!({}));
    write_constraints(&mut doc, settings.key_profile);
    let contract = &mut doc["x-idempotency"];
    contract["keySyntax"]["profile"] = json!(settings.key_profile.as_str());
    let retention = &mut contract["retention"];
    retention["replayWindowSeconds"] = json!(settings.replay_ttl.as_secs());
    retention["replayWindow"] = json!(human_duration(settings.replay_ttl));
    retention["tombstoneTtlSeconds"] = json!(settings.tombstone_ttl.as_secs());
    retention["tombstoneTtl"] = json!(human_duration(settings.tombstone_ttl));
    retention["expiryPolicy"] = json!(settings.expiry_policy.as_str());
    doc
}

/// The response components of problem documents, by HTTP status: each
/// one's schema pins `status` and lists the codes the core sends with it.
pub const PROBLEM_RESPONSES: [(&str, u16); 12] = [
    ("BadRequest", 400),
    ("Unauthorized", 401),
    ("PaymentRequired", 402),
    ("Forbidden", 403),
    ("NotFound", 404),
    ("MethodNotAllowed", 405),
    ("Conflict", 409),
    ("Expired", 410),
    ("PayloadTooLarge", 413),
    ("UnsupportedMediaType", 415),
    ("KeyReused", 422),
    ("Unavailable", 503),
];

/// Writes the request constraints and the problem codes per status into
/// `doc` (the template), from the core's constants and the routes' rules.
fn write_constraints(doc: &mut Value, profile: KeyProfile) {
    let key = &mut doc["components"]["parameters"]["IdempotencyKey"];
    key["schema"] = json!({
        "type": "string",
        "minLength": 1,
        "pattern": profile.field_value_pattern(),
    });
    let lookup = &mut doc["paths"]["/operations/{key}"]["get"]["parameters"][0];
    lookup["schema"] = json!({
        "type": "string",
        "minLength": 1,
        "pattern": lookup_segment_pattern(profile),
    });
    doc["x-idempotency"]["keySyntax"]["maxLength"] = json!(MAX_KEY_LEN);

    let order = &mut doc["components"]["schemas"]["NewOrder"]["properties"];
    // The enum is the seed catalogue: a schema-valid sku is one the server
    // sells, so a client (or a contract fuzzer) that follows the document
    // never gets the catalogue's 400.
    let skus: Vec<&str> = CATALOGUE.iter().map(|(sku, _)| *sku).collect();
    order["sku"] = json!({
        "type": "string",
        "minLength": 1,
        "maxLength": SKU_MAX_LEN,
        "pattern": SKU_PATTERN,
        "enum": skus,
    });
    order["reference"] = json!({
        "type": "string",
        "minLength": 1,
        "maxLength": REFERENCE_MAX_LEN,
        "pattern": REFERENCE_PATTERN,
    });
    order["quantity"] = json!({
        "type": "integer",
        "minimum": QUANTITY_RANGE.start(),
        "maximum": QUANTITY_RANGE.end(),
    });
    doc["components"]["schemas"]["Order"]["properties"]["currency"] =
        json!({ "type": "string", "enum": [CURRENCY] });
    doc["x-idempotency"]["outcomes"]["413"] = json!(format!(
        "payload-too-large: the body is larger than {MAX_ORDER_BODY_BYTES} bytes."
    ));

    let limit = &mut doc["paths"]["/orders"]["get"]["parameters"][0];
    limit["description"] = json!(format!(
        "How many orders: a whole number of 1 or more, default {DEFAULT_LIST_LIMIT}; \
         larger values list {MAX_LIST_LIMIT}, the most one page holds."
    ));
    limit["schema"] = json!({ "type": "integer", "minimum": 1, "default": DEFAULT_LIST_LIMIT });

    for (name, status) in PROBLEM_RESPONSES {
        let codes: Vec<&str> = ProblemCode::ALL
            .iter()
            .filter(|code| code.status() == status)
            .map(|code| code.as_str())
            .collect();
        let response = &mut doc["components"]["responses"][name];
        response["content"] = json!({
            "application/problem+json": { "schema": {
                "allOf": [
                    { "$ref": "#/components/schemas/Problem" },
                    { "properties": {
                        "status": { "const": status },
                        "code": { "enum": codes },
                    } },
                ],
            } },
        });
    }
}

async fn openapi(State(state): State<AppState>) -> Response {
    json(StatusCode::OK, &openapi_document(state.settings()))
}

fn json(status: StatusCode, value: &Value) -> Response {
    let mut response = Response::new(value.to_string().into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// What a client should do about a problem.
pub fn advice(code: ProblemCode) -> &'static str {
    match code {
        ProblemCode::IdempotencyKeyMissing => {
            "Send an Idempotency-Key header with a new, unique key for each new operation, and the same key when retrying it."
        }
        ProblemCode::IdempotencyKeyInvalid => {
            "Send exactly one Idempotency-Key field that the server's key profile accepts (see x-idempotency in /openapi.json), at most 255 characters."
        }
        ProblemCode::IdempotencyKeyReused => {
            "The key was already used with a different payload; the first operation is unchanged. Use a new key for a new operation, or resend the original payload."
        }
        ProblemCode::IdempotencyRequestInProgress => {
            "A request with this key is still being processed. Wait Retry-After seconds, then retry with the same key and payload."
        }
        ProblemCode::IdempotencyKeyExpired => {
            "The replay window is over and the request was not executed again. Look the operation up at the URL in the problem's lookup member instead of starting a new one."
        }
        ProblemCode::RequestInvalid => {
            "Fix the fields listed in the problem's errors member and send the request again; nothing was stored."
        }
        ProblemCode::PayloadTooLarge => "Send a smaller body; nothing was stored.",
        ProblemCode::UnsupportedMediaType => {
            "Send the body as application/json; nothing was stored."
        }
        ProblemCode::Unauthorized => {
            "Send Authorization: Bearer with a valid API token; nothing was stored."
        }
        ProblemCode::CrossSiteRequest => {
            "The local demo's endpoints (/demo/*) answer only the demo page served by the same server, opened at a loopback address (127.0.0.1, [::1] or localhost). A page on another site cannot arm its switches or read its tokens; use the page at / instead, or a tool that sends no Origin (curl)."
        }
        ProblemCode::NotFound => {
            "There is no such resource for this account; check the URL and the token."
        }
        ProblemCode::MethodNotAllowed => "Use a method the resource supports (see /openapi.json).",
        ProblemCode::ServiceUnavailable => {
            "The outcome is unknown or the database failed. Wait Retry-After seconds, then retry with the same key and the same payload: the order is created at most once."
        }
        ProblemCode::OrderReferenceExists => {
            "This account already has an order with this reference (a purchase reference is unique for ever, whatever the key's age); nothing was created and the key stays unused. The problem's order member is that order's id: look it up with GET /orders/{id} instead of ordering again. If you meant a new purchase, send a new reference."
        }
        ProblemCode::PaymentDeclined => {
            "The payment provider refused the charge for the reason in detail; sending the same charge again is refused again. The order's payment shows failed with that reason."
        }
        ProblemCode::OutOfStock => {
            "There was not enough stock for this purchase: nothing was reserved or charged. Sending it again with the same key replays this answer; a new purchase needs a new key."
        }
        _ => "See /openapi.json.",
    }
}

/// The documentation page of `code`, as HTML (every text is static).
pub fn problem_page_html(code: ProblemCode) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\n\
         <body><h1>{title}</h1>\n<p>Problem type <code>{uri}</code>, code <code>{code}</code>, HTTP status {status}.</p>\n\
         <h2>What to do</h2>\n<p>{advice}</p>\n\
         <p>The whole contract: <a href=\"/openapi.json\">/openapi.json</a>.</p></body></html>\n",
        title = code.title(),
        uri = code.type_uri(),
        code = code.as_str(),
        status = code.status(),
        advice = advice(code),
    )
}

/// `GET /problems/{code}`: the page of a known code, else 404 `not-found`.
async fn problem_page(Path(code): Path<String>) -> Response {
    match ProblemCode::from_code(&code) {
        Some(code) => {
            let mut response = Response::new(problem_page_html(code).into());
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            response
        }
        None => problem_response(&Problem::not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_on_the_command_line() {
        assert_eq!(human_duration(Duration::from_secs(86_400)), "1d");
        assert_eq!(human_duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(human_duration(Duration::from_secs(7_200)), "2h");
        assert_eq!(human_duration(Duration::from_secs(900)), "15m");
        assert_eq!(human_duration(Duration::from_secs(2)), "2s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn openapi_carries_the_running_retention() {
        let settings = Settings {
            replay_ttl: Duration::from_secs(3_600),
            tombstone_ttl: Duration::from_secs(7 * 86_400),
            ..Settings::default()
        };
        let doc = openapi_document(&settings);
        assert_eq!(doc["openapi"], "3.1.0");
        let retention = &doc["x-idempotency"]["retention"];
        assert_eq!(retention["replayWindowSeconds"], 3_600);
        assert_eq!(retention["replayWindow"], "1h");
        assert_eq!(retention["tombstoneTtlSeconds"], 604_800);
        assert_eq!(retention["expiryPolicy"], "reject");
        assert_eq!(doc["x-idempotency"]["keySyntax"]["profile"], "lenient");
    }

    /// Every member of `expected` that `actual` lacks or holds differently,
    /// as JSON pointers.
    fn differences(expected: &Value, actual: &Value, at: String, out: &mut Vec<String>) {
        match (expected, actual) {
            (Value::Object(e), Value::Object(a)) => {
                for (name, value) in e {
                    let here = format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
                    match a.get(name) {
                        Some(other) => differences(value, other, here, out),
                        None => out.push(format!("{here}: missing in the file")),
                    }
                }
                for name in a.keys().filter(|n| !e.contains_key(*n)) {
                    out.push(format!("{at}/{name}: only in the file"));
                }
            }
            (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
                for (i, (e, a)) in e.iter().zip(a).enumerate() {
                    differences(e, a, format!("{at}/{i}"), out);
                }
            }
            _ if expected != actual => out.push(format!("{at}: the server writes {expected}")),
            _ => {}
        }
    }

    /// The shipped `server/openapi.json` holds what the server serves for
    /// the default settings (apart from the values filled in from the
    /// running configuration), so a constant changed in the core or the
    /// routes without the file fails here.
    #[test]
    fn the_shipped_file_states_the_constraints_the_server_enforces() {
        let file: Value = serde_json::from_str(OPENAPI_TEMPLATE).unwrap();
        let mut served = file.clone();
        write_constraints(&mut served, Settings::default().key_profile);
        let mut drift = Vec::new();
        differences(&served, &file, String::new(), &mut drift);
        assert!(
            drift.is_empty(),
            "server/openapi.json is not what the server serves:\n{}",
            drift.join("\n")
        );
        // The constants reach the document.
        let doc = openapi_document(&Settings::default());
        let quantity = &doc["components"]["schemas"]["NewOrder"]["properties"]["quantity"];
        assert_eq!(quantity["minimum"], *QUANTITY_RANGE.start());
        assert_eq!(quantity["maximum"], *QUANTITY_RANGE.end());
        let sku = &doc["components"]["schemas"]["NewOrder"]["properties"]["sku"];
        assert_eq!(sku["pattern"], SKU_PATTERN);
        let skus: Vec<&str> = CATALOGUE.iter().map(|(sku, _)| *sku).collect();
        assert_eq!(
            sku["enum"],
            json!(skus),
            "the sku enum is the core's catalogue"
        );
        let sku_rule = regex::Regex::new(SKU_PATTERN).unwrap();
        assert!(skus.iter().all(|sku| sku_rule.is_match(sku)));
        let reference = &doc["components"]["schemas"]["NewOrder"]["properties"]["reference"];
        assert_eq!(reference["pattern"], REFERENCE_PATTERN);
        assert_eq!(reference["maxLength"], REFERENCE_MAX_LEN);
        let order = &doc["components"]["schemas"]["Order"];
        assert_eq!(order["properties"]["currency"]["enum"], json!([CURRENCY]));
        assert_eq!(doc["x-idempotency"]["keySyntax"]["maxLength"], MAX_KEY_LEN);
    }

    #[test]
    fn each_profile_publishes_its_own_key_rule() {
        for profile in KeyProfile::ALL {
            let settings = Settings {
                key_profile: profile,
                ..Settings::default()
            };
            let doc = openapi_document(&settings);
            let header = &doc["components"]["parameters"]["IdempotencyKey"]["schema"];
            assert_eq!(header["pattern"], profile.field_value_pattern());
            let segment = &doc["paths"]["/operations/{key}"]["get"]["parameters"][0]["schema"];
            assert_eq!(segment["pattern"], lookup_segment_pattern(profile));
            assert_eq!(
                doc["x-idempotency"]["keySyntax"]["profile"],
                profile.as_str()
            );
            // The examples hold under every profile.
            let parameter = &doc["components"]["parameters"]["IdempotencyKey"];
            let header = regex::Regex::new(&profile.field_value_pattern()).unwrap();
            assert!(
                header.is_match(parameter["example"].as_str().unwrap()),
                "{profile}"
            );
            let parameter = &doc["paths"]["/operations/{key}"]["get"]["parameters"][0];
            let path = regex::Regex::new(&lookup_segment_pattern(profile)).unwrap();
            assert!(
                path.is_match(parameter["example"].as_str().unwrap()),
                "{profile}"
            );
        }
    }

    #[test]
    fn problem_responses_list_the_codes_of_their_status() {
        let doc = openapi_document(&Settings::default());
        let mut listed = Vec::new();
        for (name, status) in PROBLEM_RESPONSES {
            let response = &doc["components"]["responses"][name];
            assert!(response["description"].is_string(), "{name}");
            let schema = &response["content"]["application/problem+json"]["schema"]["allOf"][1];
            assert_eq!(schema["properties"]["status"]["const"], status, "{name}");
            for code in schema["properties"]["code"]["enum"].as_array().unwrap() {
                let code = ProblemCode::from_code(code.as_str().unwrap()).unwrap();
                assert_eq!(code.status(), status, "{name}");
                listed.push(code);
            }
        }
        listed.sort();
        let mut all = ProblemCode::ALL.to_vec();
        all.sort();
        assert_eq!(listed, all, "every code under exactly one response");
    }

    #[test]
    fn every_problem_code_is_in_the_document_and_has_a_page() {
        let doc = openapi_document(&Settings::default());
        let codes = doc["components"]["schemas"]["ProblemCode"]["enum"]
            .as_array()
            .unwrap();
        let documented: Vec<&str> = codes.iter().filter_map(Value::as_str).collect();
        let known: Vec<&str> = ProblemCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(documented, known);
        for code in ProblemCode::ALL {
            let page = problem_page_html(code);
            assert!(page.contains(code.title()), "{page}");
            assert!(page.contains("/openapi.json"));
            assert!(!advice(code).is_empty());
        }
    }
}

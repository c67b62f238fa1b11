//! The operator's surface: `GET /metrics`, `GET /readyz`,
//! `GET /openapi.json` and the problem documentation at
//! `GET /problems/{code}` (the problem `type` URIs are relative
//! `/problems/<code>`, RFC 9457 section 3.1.1).
//!
//! The OpenAPI 3.1 document is `server/openapi.json`, with the running
//! configuration (key profile, replay window, tombstone TTL, expiry policy)
//! filled into its `x-idempotency` member when it is served.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::get;
use idemkey_core::{Problem, ProblemCode};
use serde_json::{Value, json};
use tracing::warn;

use crate::problems::{UNAVAILABLE_RETRY_AFTER_SECS, problem_response};
use crate::{AppState, Settings};

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

/// `GET /readyz`: 200 when the database answers and every migration this
/// build knows is applied; 503 `service-unavailable` otherwise.
async fn readyz(State(state): State<AppState>) -> Response {
    let store = state.db();
    let reason = match store.pending_migrations().await {
        Ok(pending) if pending.is_empty() => {
            return json(
                StatusCode::OK,
                &json!({ "status": "ready", "backend": store.backend() }),
            );
        }
        Ok(pending) => format!("migrations not applied: {pending:?}"),
        Err(err) => err.to_string(),
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

/// `2s`, `15m`, `24h`, `30d` or milliseconds, as the command line reads them.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs.is_multiple_of(len) {
            return format!("{}{unit}", secs / len);
        }
    }
    format!("{secs}s")
}

/// The OpenAPI document with `settings` filled in.
pub fn openapi_document(settings: &Settings) -> Value {
    let mut doc: Value = serde_json::from_str(OPENAPI_TEMPLATE).unwrap_or_else(|_| json!({}));
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
        ProblemCode::NotFound => {
            "There is no such resource for this account; check the URL and the token."
        }
        ProblemCode::MethodNotAllowed => "Use a method the resource supports (see /openapi.json).",
        ProblemCode::ServiceUnavailable => {
            "The outcome is unknown or the database failed. Wait Retry-After seconds, then retry with the same key and the same payload: the order is created at most once."
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

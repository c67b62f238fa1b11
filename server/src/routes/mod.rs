//! The HTTP routes: orders, operation lookups, health, the problem
//! fallbacks, and the demo's switches.

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use idemkey_core::{Problem, UnixMillis};
use tower_http::services::ServeDir;

use crate::AppState;
use crate::problems::problem_response;

mod operations;
mod orders;

pub use operations::{lookup_path, lookup_segment_pattern};
pub use orders::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};

/// The routes, without the outer layers that [`crate::app`] adds.
pub fn router(state: AppState) -> Router {
    let demo_dir = state.settings().demo_dir.clone();
    let mut router = Router::new()
        .route("/orders", post(orders::create).get(orders::list))
        .route("/orders/{id}", get(orders::show))
        .route("/operations/{key}", get(operations::show))
        .route("/healthz", get(healthz))
        .method_not_allowed_fallback(method_not_allowed);
    if let Some(dir) = demo_dir {
        router = router
            .route("/demo/lose-next-response", post(lose_next_response))
            .route("/demo/token", get(demo_token))
            .route("/demo/tokens", get(demo_tokens))
            .fallback_service(ServeDir::new(dir).not_found_service(axum::routing::any(not_found)))
            .layer(axum::middleware::map_response(close_connection));
    } else {
        router = router.fallback(not_found);
    }
    router.with_state(state)
}

/// `GET /healthz`: liveness, answered without the database or its pool
/// (a slow or locked database is `/readyz`'s business; a liveness probe
/// that waited on it would get a busy process restarted).
pub(crate) async fn healthz() -> Response {
    json_response(StatusCode::OK, r#"{"status":"ok"}"#.to_owned())
}

/// Demo mode only: the next new order commits, then its connection is
/// closed without a response, as if the network had lost it.
async fn lose_next_response(State(state): State<AppState>) -> Response {
    state.arm_lose_next_response();
    json_response(StatusCode::OK, r#"{"armed":true}"#.to_owned())
}

/// Demo mode only: the demo account's token, for the page served next to
/// it. Acceptable for a local demo bound to 127.0.0.1, never in production.
async fn demo_token(State(state): State<AppState>) -> Response {
    match &state.settings().demo_token {
        Some(token) => json_response(
            StatusCode::OK,
            serde_json::json!({ "token": token }).to_string(),
        ),
        None => problem_response(&Problem::not_found()),
    }
}

/// Demo mode only: the demo accounts (`demo`, `demo-b`) and their tokens,
/// in the order the page offers them, for the page's "switch account"
/// control. Added by `main` as an [`axum::Extension`].
#[derive(Clone, Debug, Default)]
pub struct DemoAccounts(pub Vec<(String, String)>);

/// Demo mode only: `{"accounts":[{"name":"demo","token":"…"},…]}`.
async fn demo_tokens(accounts: Option<axum::Extension<DemoAccounts>>) -> Response {
    let Some(axum::Extension(DemoAccounts(accounts))) = accounts else {
        return problem_response(&Problem::not_found());
    };
    let list: Vec<_> = accounts
        .iter()
        .map(|(name, token)| serde_json::json!({ "name": name, "token": token }))
        .collect();
    json_response(
        StatusCode::OK,
        serde_json::json!({ "accounts": list }).to_string(),
    )
}

/// Demo mode only: every response closes its connection, so the lost
/// response happens on a fresh connection. When a reused keep-alive
/// connection closes before any response byte, Chromium resends the POST by
/// itself (same body, same key); the server replays, and the page never
/// sees the loss that the demo is about.
async fn close_connection(mut response: Response) -> Response {
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        HeaderValue::from_static("close"),
    );
    response
}

async fn not_found() -> Response {
    problem_response(&Problem::not_found())
}

async fn method_not_allowed() -> Response {
    problem_response(&Problem::method_not_allowed())
}

/// A JSON response with `status` and `body`.
pub(crate) fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-12-02T17:49:54.123Z`.
pub fn rfc3339(t: UnixMillis) -> String {
    let nanos = i128::from(t.0) * 1_000_000;
    match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(dt) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            dt.year(),
            u8::from(dt.month()),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second(),
            dt.millisecond()
        ),
        Err(_) => "9999-12-31T23:59:59.999Z".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_has_millis_and_utc() {
        assert_eq!(rfc3339(UnixMillis(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UnixMillis(1_764_700_000_123)),
            "2025-12-02T18:26:40.123Z"
        );
    }
}

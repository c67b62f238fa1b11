//! The HTTP routes: the caller's account, orders, operation lookups, health, the problem
//! fallbacks, and the demo's switches.

use axum::Router;
use axum::http::HeaderValue;
use axum::response::Response;
use axum::routing::{get, post};
use idemkey_core::Problem;
use tower_http::services::ServeDir;

use crate::AppState;
use idemkey::problems::problem_response;

mod account;
mod authed;
mod create;
mod demo;
mod demo_provider;
mod operations;
mod orders;
mod purchases;

pub use demo::{DemoAccounts, same_origin};
pub use demo_provider::DemoProvider;
pub use operations::{lookup_path, lookup_segment_pattern};
pub use orders::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};

/// The routes, without the outer layers that [`crate::app`] adds.
pub fn router(state: AppState) -> Router {
    let demo_dir = state.settings().demo_dir.clone();
    let mut router = Router::new()
        .route("/account", get(account::show))
        .route("/orders", post(orders::create).get(orders::list))
        .route("/orders/{id}", get(orders::show))
        .route("/purchases", post(purchases::create))
        .route("/purchases/{id}", get(purchases::show))
        .route("/operations/{key}", get(operations::show))
        .route("/healthz", get(idemkey::serve::healthz))
        .method_not_allowed_fallback(method_not_allowed);
    if let Some(dir) = demo_dir {
        router = router
            .merge(demo::router())
            .fallback_service(ServeDir::new(dir).not_found_service(axum::routing::any(not_found)))
            .layer(axum::middleware::map_response(close_connection));
    } else {
        router = router.fallback(not_found);
    }
    router.with_state(state)
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

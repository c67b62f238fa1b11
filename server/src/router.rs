//! The order service's router: every route, the problem fallbacks, the
//! request id, logs, metrics and `Cache-Control: no-store` on every
//! response.

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::CACHE_CONTROL;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::state::AppState;
use crate::{metrics, operator, routes};
use idemkey::request_id;

/// The router: every route, the problem fallbacks and
/// `Cache-Control: no-store` on every response.
pub fn app(state: AppState) -> Router {
    let router = routes::router(state.clone()).merge(operator::router(state.clone()));
    #[cfg(feature = "test-faults")]
    let router = router.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        crate::faults::track,
    ));
    router
        .layer(axum::middleware::from_fn_with_state(state, metrics::record))
        .layer(axum::middleware::from_fn(
            idemkey::request_log::log_requests,
        ))
        .layer(axum::middleware::from_fn(request_id::assign))
        .layer(SetResponseHeaderLayer::overriding(
            CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
}

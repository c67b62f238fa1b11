//! Demo mode's endpoints (`/demo/*`): the one-shot "lose the next response"
//! switches (the server's own, and the payment provider's per purchase step
//! through [`super::demo_provider`]) and the demo accounts' tokens, for the page
//! served next to them.
//! They need no authentication, so they answer only the demo's own page: a
//! server in demo mode listens on a loopback address only (checked at
//! start-up), and every `/demo/*` request must name a loopback host (no DNS
//! rebinding) and must not come from another site (Fetch Metadata, else
//! `Origin` against `Host`); anything else gets 403 `cross-site-request`.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use idemkey_core::Problem;
use tracing::info;

use crate::AppState;
use idemkey::problems::json_response;
use idemkey::problems::problem_response;

/// The `/demo/*` routes, each behind [`same_origin`].
pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/demo/lose-next-response", post(lose_next_response))
        .route(
            "/demo/lose-next-charge-response",
            post(super::demo_provider::lose_next_charge_response),
        )
        .route(
            "/demo/lose-next-step-response",
            post(super::demo_provider::lose_next_step_response),
        )
        .route("/demo/token", get(demo_token))
        .route("/demo/tokens", get(demo_tokens))
        .route_layer(axum::middleware::from_fn(refuse_cross_site))
}

async fn refuse_cross_site(request: Request, next: Next) -> Response {
    if same_origin(request.headers()) {
        return next.run(request).await;
    }
    info!(path = %request.uri().path(), "refused a cross-site request to a demo endpoint");
    problem_response(&Problem::cross_site_request())
}

/// Whether a request comes from this loopback server's own page, or from a
/// tool that is not a browser: its `Host` is a loopback name
/// (`127.0.0.1`, `[::1]`, `localhost`, with any port), and
/// `Sec-Fetch-Site`, when sent, is `same-origin` or `none`; without it, an
/// `Origin`, when sent, is `http://` and the `Host`. Browsers send one or
/// the other with every cross-site POST, so a page on another site is
/// refused whatever its request looks like.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    if !loopback_host(host) {
        return false;
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        return matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    match headers.get(ORIGIN) {
        None => true,
        Some(origin) => origin
            .to_str()
            .ok()
            .and_then(|o| o.strip_prefix("http://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(host)),
    }
}

/// Whether a `Host` value names this machine's loopback interface.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, port)) if port.is_empty() || port.starts_with(':') => ip,
            _ => return false,
        },
        None => host.split_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Demo mode only: the next new order commits, then its connection is
/// closed without a response, as if the network had lost it.
async fn lose_next_response(State(state): State<AppState>) -> Response {
    state.arm_lose_next_response();
    json_response(StatusCode::OK, r#"{"armed":true}"#.to_owned())
}

/// Demo mode only: the first demo account's token (for pages older than
/// `/demo/tokens`).
async fn demo_token(State(state): State<AppState>) -> Response {
    match &state.settings().demo_token {
        Some(token) => json_response(
            StatusCode::OK,
            serde_json::json!({ "token": token }).to_string(),
        ),
        None => problem_response(&Problem::not_found()),
    }
}

/// Demo mode only: demo mode's own accounts (`demo`, `demo-b`, marked as
/// such in the database, never an account found by name) and this start's
/// tokens, in the order the page offers them, for the page's "switch
/// account" control. Added by `main` as an [`axum::Extension`].
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

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_the_loopback_page_and_non_browsers_pass() {
        let host = ("host", "127.0.0.1:3000");
        assert!(same_origin(&headers(&[host])), "curl");
        assert!(same_origin(&headers(&[
            host,
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(same_origin(&headers(&[host, ("sec-fetch-site", "none")])));
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:3000")
        ])));
        assert!(same_origin(&headers(&[("host", "[::1]:3000")])));
        assert!(same_origin(&headers(&[("host", "LocalHost:3000")])));
        for refused in [
            headers(&[host, ("sec-fetch-site", "cross-site")]),
            headers(&[host, ("sec-fetch-site", "same-site")]),
            headers(&[host, ("origin", "http://evil.example")]),
            headers(&[host, ("origin", "http://127.0.0.1:3001")]),
            headers(&[host, ("origin", "null")]),
            // DNS rebinding: evil.example resolved to 127.0.0.1.
            headers(&[
                ("host", "evil.example:3000"),
                ("sec-fetch-site", "same-origin"),
            ]),
            headers(&[("host", "127.0.0.1.evil.example")]),
            headers(&[("host", "[::1]x")]),
            headers(&[]),
        ] {
            assert!(!same_origin(&refused), "{refused:?}");
        }
    }
}

//! `peer` mode: the echo handler behind `axum-idempotent`, configured as its
//! README shows: `CookieManagerLayer` outermost, then ruts' `SessionLayer`,
//! then `IdempotentLayer` keyed by the client's `Idempotency-Key` header
//! (the README's "direct key mode"). Responses are stored as fields of the
//! caller's session, so a client first calls `POST /session` (a login, in a
//! real app) and sends the cookie it gets with every request: the
//! middleware caches nothing for a request without a session.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use axum_idempotent::{IdempotentLayer, IdempotentOptions};
use ruts::store::SessionStore;
use ruts::store::Ttl;
use ruts::store::moka::MokaStore;
use ruts::store::postgres::{PostgresStore, PostgresStoreBuilder};
use ruts::{CookieOptions, Session, SessionLayer};
use tower_cookies::CookieManagerLayer;

use crate::common::{self, Runs};

/// How long a session and a cached response live: the replay window
/// idemkey's records get in the other modes (24 h).
const TTL_SECS: i64 = 86_400;

/// `POST /echo` behind axum-idempotent on `store` (`moka` or `postgres://…`).
pub async fn router(store: &str, runs: Runs) -> Result<Router, String> {
    if store == "moka" {
        Ok(with_store(Arc::new(MokaStore::builder().build()), runs))
    } else if store.starts_with("postgres://") || store.starts_with("postgresql://") {
        let pool = sqlx::PgPool::connect(store)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let store: PostgresStore = PostgresStoreBuilder::new(pool)
            .create_table(true)
            .build()
            .await
            .map_err(|e| format!("cannot create the session table: {e}"))?;
        Ok(with_store(Arc::new(store), runs))
    } else {
        Err("peer mode needs --store moka or postgres://…".into())
    }
}

fn with_store<T: SessionStore + Send + Sync + 'static>(store: Arc<T>, runs: Runs) -> Router {
    let options = IdempotentOptions::default()
        .use_idempotency_key_header(Some("Idempotency-Key"), true)
        .expire_after(TTL_SECS);
    let cookie = CookieOptions::build()
        .name("session")
        .http_only(true)
        .max_age(TTL_SECS.unsigned_abs())
        .path("/");
    Router::new()
        .route("/echo", post(common::handler))
        .with_state(runs)
        .route_layer(IdempotentLayer::<T>::new(options))
        .route("/session", post(login::<T>))
        .layer(SessionLayer::new(store).with_cookie_options(cookie))
        .layer(CookieManagerLayer::new())
}

/// Creates the caller's session (what a login does in a real app).
async fn login<T: SessionStore>(session: Session<T>) -> StatusCode {
    let Ok(ttl) = Ttl::new(TTL_SECS) else {
        return StatusCode::INTERNAL_SERVER_ERROR;
    };
    match session.set("user", &"bench", ttl, None).await {
        Ok(()) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

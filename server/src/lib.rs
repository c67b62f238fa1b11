//! # idemkey-server
//!
//! The order service of idemkey: `POST /orders` is safe to retry with an
//! `Idempotency-Key`. The order and the key's stored response commit in one
//! transaction guarded by the primary key `(account, operation, key)`, so a
//! client whose response was lost retries with the same key and gets the
//! order that was already created, never a second one, through any instance
//! and across restarts. Every rule (key syntax, fingerprint, decision table,
//! problem documents) comes from [`idemkey_core`], and the engine, the
//! stores and the outbox from the [`idemkey`] library, which this service
//! uses as any Rust service would. [`app`] builds the router, so tests can
//! drive it without a socket; [`idemkey::serve::serve`] runs it with
//! graceful shutdown.
//!
//! ```no_run
//! use axum::body::Body;
//! use axum::http::Request;
//! use idemkey_server::db::{Db, PgSettings};
//! use idemkey_server::{AppState, Settings, app};
//! use tower::ServiceExt as _;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let db = Db::open("postgres://127.0.0.1/idemkey", &PgSettings::default()).await?;
//! let state = AppState::new(db, Settings::default());
//! let response = app(state)
//!     .oneshot(Request::get("/healthz").body(Body::empty())?)
//!     .await?;
//! assert_eq!(response.status(), 200);
//! assert_eq!(response.headers()["cache-control"], "no-store");
//! # Ok(())
//! # }
//! ```

pub mod auth;
pub mod catalogue;
pub mod config;
pub mod db;
pub mod faults;
pub mod hold;
pub mod log_buffer;
pub mod metrics;
pub mod operator;
pub mod outbox;
pub mod payments;
pub mod probe_cache;
pub mod purchase;
pub mod replay_cache;
pub mod router;
pub mod routes;
pub mod shown_clock;
pub mod state;
pub mod telemetry;
pub mod token_usage;

pub use idemkey::{
    idempotency, in_transaction, layer, load_shed, maintenance, problems, request_id, serve,
};
pub use router::app;
pub use state::{AppState, Settings, display_now};

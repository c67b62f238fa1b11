//! Idempotency for any axum service, as a tower [`Layer`]: lease mode, for
//! handlers whose effects are **not** in our database (a payment provider,
//! a message queue, a file).
//!
//! For each request whose method needs a key (POST and PATCH by default)
//! [`IdempotencyLayer`]:
//!
//! 1. reads the `Idempotency-Key` field with the core's
//!    [`IdempotencyKey::from_field_lines`](idemkey_core::IdempotencyKey::from_field_lines) (400 problems when it is missing,
//!    repeated or invalid);
//! 2. picks the record's **scope** with the scope function (401 when it
//!    answers `None`);
//! 3. reads the whole body within [`IdempotencyLayer::max_request_body`]
//!    (413 `payload-too-large` above it) and before
//!    [`IdempotencyLayer::body_read_timeout`] (400 `request-invalid` and the
//!    connection closed after it) and fingerprints the request (see
//!    [`default_fingerprint`], or [`IdempotencyLayer::fingerprint_with`]);
//! 4. **claims** `(scope, operation, key)` with a lease and commits the claim
//!    in its own short transaction, then asks [`idemkey_core::decide`] what
//!    any existing record means: replay it (with `Idempotent-Replayed: true`),
//!    409 with `Retry-After` from the lease's remaining time, 422 for another
//!    payload, take over a claim whose lease is over, or apply the expiry
//!    policy (410, or run anew under `reexecute`);
//! 5. runs the inner service, then stores the status, the allow-listed
//!    headers and the body. A **5xx** response (or an inner error) releases
//!    the claim instead, so the client can retry.
//!
//! Methods that need no key (GET, HEAD, OPTIONS, and anything not listed in
//! [`IdempotencyLayer::methods`]) pass through untouched, whatever key they
//! carry.
//!
//! Apply it with [`Router::route_layer`](axum::Router::route_layer), so that
//! unknown paths still get 404 rather than a key problem, and put
//! authentication outside it (a `.layer(...)` added after it), so the scope
//! function can read who the caller is. Records are kept per
//! `(scope, operation, key)` in the table `idempotency_leases`, created by
//! migration 2 of either backend; each backend runs its migrations when it
//! opens ([`SqliteLeaseStore::open`], [`PgLeaseStore::connect`],
//! [`AnyLeaseStore::open`]).
//!
//! # What "once" means here
//! The handler's effect is outside the record's transaction, so the promise
//! is "at most once per lease, at least once overall": a handler that
//! outlives its lease, a process that crashes mid-handler, or a response
//! that cannot be stored leaves an in-flight claim that a retry takes over
//! once the lease is over, running the handler again. Set the lease above the
//! slowest handler, and give the effect a downstream key derived from the
//! idempotency key (DESIGN.md, section 1). When the client disconnects, the
//! handler future is dropped and the claim stays until its lease ends, for
//! the same reason: nobody knows how far the handler got.
//!
//! # Responses over the storage cap
//! A response body larger than [`IdempotencyLayer::max_stored_response`] is
//! passed through to the first client in full (streamed, never truncated),
//! but only its status is stored, with a marker instead of the body. The
//! effect happened and must not run again, yet the response cannot be
//! replayed, so a retry within the replay window gets **410**
//! `idempotency-key-expired` ("the stored response is not available; look the
//! operation up instead of sending it again") — the same instruction as
//! after the replay window, which retry policies already treat as "stop and
//! reconcile". Another payload under the key still gets 422; after the replay
//! window the expiry policy applies as usual.
//!
//! # Example
//! ```no_run
//! use axum::{Router, routing::post};
//! use idemkey_server::layer::{IdempotencyLayer, SqliteLeaseStore};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteLeaseStore::open("leases.db").await?;
//! let idempotent = IdempotencyLayer::new(store)
//!     .lease(Duration::from_secs(30))
//!     .replay_ttl(Duration::from_secs(24 * 3600))
//!     // Real services scope records by the authenticated caller, e.g. an
//!     // account id an authentication layer put in the extensions.
//!     .scope_with(|parts| parts.extensions.get::<Account>().map(|a| a.0.clone()));
//! let app: Router = Router::new()
//!     .route("/payments", post(|| async { "paid" }))
//!     .route_layer(idempotent);
//! # let _ = app; Ok(())
//! # }
//! # #[derive(Clone)] struct Account(String);
//! ```

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{HeaderName, Method};
use base64::Engine as _;
use idemkey_core::{ExpiryPolicy, Fingerprint, KeyProfile, OperationId, Problem};
use tower::Layer;

use crate::Clock;

mod body;
pub mod postgres;
mod service;
pub mod sqlite;
pub mod store;

pub use postgres::PgLeaseStore;
pub use service::IdempotencyService;
pub use sqlite::SqliteLeaseStore;
pub use store::{AnyLeaseStore, LeaseStore};

/// The operation id of the layer's records unless
/// [`IdempotencyLayer::operation`] names another.
pub const DEFAULT_OPERATION: OperationId = OperationId::from_static("http:v1");

/// The scope of every record unless [`IdempotencyLayer::scope_with`] derives
/// one per caller: one shared namespace, for unauthenticated fixtures only.
pub const DEFAULT_SCOPE: &str = "anonymous";

/// Default lease of a claim.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Default replay window.
pub const DEFAULT_REPLAY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Default largest request body read (1 MiB).
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1024 * 1024;

/// Default largest response body stored for replay (1 MiB).
pub const DEFAULT_MAX_STORED_RESPONSE: usize = 1024 * 1024;

/// Chooses a record's scope from the request head; `None` answers 401.
pub type ScopeFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Fingerprints a request from its operation, head and body; an error is
/// answered as it is (e.g. 400 `request-invalid`).
pub type FingerprintFn =
    dyn Fn(&OperationId, &Parts, &[u8]) -> Result<Fingerprint, Problem> + Send + Sync;

/// The default fingerprint:
/// [`Fingerprint::of_value`]`(operation, {"method", "path", "body"})`, where
///
/// - `method` is the method's name, e.g. `"POST"`;
/// - `path` is the path and query as received, e.g. `"/slow?ms=10"`;
/// - `body` is `{"json": VALUE}` when the `Content-Type` is JSON
///   (`application/json`, see [`idemkey_core::is_json_media_type`]) and the
///   bytes parse as JSON, so member order and insignificant whitespace do not
///   matter; otherwise `{"base64": "…"}` (standard alphabet, padded) of the
///   raw bytes; `null` for an empty body.
///
/// Headers are not part of it: two requests with the same body under other
/// content types share a fingerprint. Supply your own function with
/// [`IdempotencyLayer::fingerprint_with`] when that matters, or to fingerprint
/// only the members that change the effect.
///
/// ```
/// use axum::http::Request;
/// use idemkey_core::OperationId;
/// use idemkey_server::layer::default_fingerprint;
///
/// let op = OperationId::from_static("http:v1");
/// let (a, _) = Request::post("/pay").header("content-type", "application/json")
///     .body(()).unwrap().into_parts();
/// let one = default_fingerprint(&op, &a, br#"{"amount": 5, "to": "x"}"#);
/// let two = default_fingerprint(&op, &a, br#"{"to":"x","amount":5}"#);
/// assert_eq!(one, two);
/// ```
pub fn default_fingerprint(operation: &OperationId, parts: &Parts, body: &[u8]) -> Fingerprint {
    let is_json = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| idemkey_core::is_json_media_type(v.as_bytes()));
    let body = if body.is_empty() {
        serde_json::Value::Null
    } else {
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(value) if is_json => serde_json::json!({ "json": value }),
            _ => serde_json::json!({
                "base64": base64::engine::general_purpose::STANDARD.encode(body)
            }),
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |pq| pq.as_str());
    let payload = serde_json::json!({
        "method": parts.method.as_str(),
        "path": path,
        "body": body,
    });
    Fingerprint::of_value(operation, &payload)
}

/// Settings shared by every service the layer builds.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) operation: OperationId,
    pub(crate) methods: HashSet<Method>,
    pub(crate) key_profile: KeyProfile,
    pub(crate) lease: Duration,
    pub(crate) replay_ttl: Duration,
    pub(crate) expiry_policy: ExpiryPolicy,
    pub(crate) max_request_body: usize,
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_stored_response: usize,
    pub(crate) replay_headers: Vec<HeaderName>,
    pub(crate) scope: Arc<ScopeFn>,
    pub(crate) fingerprint: Arc<FingerprintFn>,
    pub(crate) clock: Clock,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("operation", &self.operation)
            .field("methods", &self.methods)
            .field("key_profile", &self.key_profile)
            .field("lease", &self.lease)
            .field("replay_ttl", &self.replay_ttl)
            .field("expiry_policy", &self.expiry_policy)
            .field("max_request_body", &self.max_request_body)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("max_stored_response", &self.max_stored_response)
            .field("replay_headers", &self.replay_headers)
            .finish_non_exhaustive()
    }
}

/// A tower [`Layer`] that makes the wrapped routes safe to retry with an
/// `Idempotency-Key` (see the [module documentation](self)).
///
/// Built with [`IdempotencyLayer::new`] and adjusted with its builder
/// methods; cheap to clone.
#[derive(Clone, Debug)]
pub struct IdempotencyLayer<St> {
    store: St,
    config: Arc<Config>,
}

impl<St: LeaseStore> IdempotencyLayer<St> {
    /// A layer over `store` with the defaults: operation [`DEFAULT_OPERATION`],
    /// methods POST and PATCH, the `lenient` key profile, a
    /// [`DEFAULT_LEASE`] lease, a [`DEFAULT_REPLAY_TTL`] replay window, the
    /// `reject` expiry policy, [`DEFAULT_MAX_REQUEST_BODY`] and
    /// [`DEFAULT_MAX_STORED_RESPONSE`], replayed headers `content-type` and
    /// `location`, the fixed scope [`DEFAULT_SCOPE`], [`default_fingerprint`]
    /// and the system clock.
    pub fn new(store: St) -> Self {
        Self {
            store,
            config: Arc::new(Config {
                operation: DEFAULT_OPERATION,
                methods: [Method::POST, Method::PATCH].into_iter().collect(),
                key_profile: KeyProfile::Lenient,
                lease: DEFAULT_LEASE,
                replay_ttl: DEFAULT_REPLAY_TTL,
                expiry_policy: ExpiryPolicy::Reject,
                max_request_body: DEFAULT_MAX_REQUEST_BODY,
                body_read_timeout: crate::problems::DEFAULT_BODY_READ_TIMEOUT,
                max_stored_response: DEFAULT_MAX_STORED_RESPONSE,
                replay_headers: vec![
                    axum::http::header::CONTENT_TYPE,
                    axum::http::header::LOCATION,
                ],
                scope: Arc::new(|_: &Parts| Some(DEFAULT_SCOPE.to_owned())),
                fingerprint: Arc::new(|op: &OperationId, parts: &Parts, body: &[u8]| {
                    Ok(default_fingerprint(op, parts, body))
                }),
                clock: Clock::system(),
            }),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(Arc::make_mut(&mut self.config));
        self
    }

    /// The operation id under which records are kept: layers with different
    /// operations never see each other's keys. Part of the fingerprint too.
    #[must_use]
    pub fn operation(self, operation: OperationId) -> Self {
        self.with(|c| c.operation = operation)
    }

    /// The methods that require a key; every other method passes through.
    /// GET, HEAD and OPTIONS are never guarded, even if listed.
    #[must_use]
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods
            .into_iter()
            .filter(|m| ![Method::GET, Method::HEAD, Method::OPTIONS].contains(m))
            .collect();
        self.with(|c| c.methods = methods)
    }

    /// How `Idempotency-Key` values are read.
    #[must_use]
    pub fn key_profile(self, profile: KeyProfile) -> Self {
        self.with(|c| c.key_profile = profile)
    }

    /// How long a claim holds the key before another request may take it
    /// over; also the upper bound of the `Retry-After` of a 409.
    #[must_use]
    pub fn lease(self, lease: Duration) -> Self {
        self.with(|c| c.lease = lease)
    }

    /// How long a stored response is replayed, from its completion.
    #[must_use]
    pub fn replay_ttl(self, ttl: Duration) -> Self {
        self.with(|c| c.replay_ttl = ttl)
    }

    /// What happens after the replay window: 410, or run anew.
    #[must_use]
    pub fn expiry_policy(self, policy: ExpiryPolicy) -> Self {
        self.with(|c| c.expiry_policy = policy)
    }

    /// The largest request body read, in bytes (413 above it).
    #[must_use]
    pub fn max_request_body(self, bytes: usize) -> Self {
        self.with(|c| c.max_request_body = bytes)
    }

    /// The longest wait for the request body once its head has arrived
    /// (default 10 s); past it the request is answered 400
    /// `request-invalid` with `Connection: close`, and nothing is stored.
    #[must_use]
    pub fn body_read_timeout(self, timeout: Duration) -> Self {
        self.with(|c| c.body_read_timeout = timeout)
    }

    /// The largest response body stored for replay, in bytes (see
    /// "Responses over the storage cap" in the [module documentation](self)).
    #[must_use]
    pub fn max_stored_response(self, bytes: usize) -> Self {
        self.with(|c| c.max_stored_response = bytes)
    }

    /// The response headers stored and replayed (default `content-type` and
    /// `location`); others are sent the first time only.
    #[must_use]
    pub fn replay_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names = names.into_iter().collect();
        self.with(|c| c.replay_headers = names)
    }

    /// Derives the record's scope (account, tenant) from the request head;
    /// `None` answers 401 `unauthorized`. Real services must derive it from
    /// authentication (e.g. an extension their auth layer inserted, applied
    /// outside this layer), never from a header the caller picks: the scope
    /// is what keeps one caller's keys from replaying another's responses.
    #[must_use]
    pub fn scope_with(self, f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.with(|c| c.scope = Arc::new(f))
    }

    /// Replaces [`default_fingerprint`].
    #[must_use]
    pub fn fingerprint_with(
        self,
        f: impl Fn(&OperationId, &Parts, &[u8]) -> Result<Fingerprint, Problem> + Send + Sync + 'static,
    ) -> Self {
        self.with(|c| c.fingerprint = Arc::new(f))
    }

    /// The clock (tests pass their own).
    #[must_use]
    pub fn clock(self, clock: Clock) -> Self {
        self.with(|c| c.clock = clock)
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.store
    }
}

impl<St: LeaseStore, S> Layer<S> for IdempotencyLayer<St> {
    type Service = IdempotencyService<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(inner, self.store.clone(), Arc::clone(&self.config))
    }
}

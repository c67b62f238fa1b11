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
//! 2. picks the record's **scope** with the scope function given to
//!    [`IdempotencyLayer::new`] (401 when it answers `None`): there is no
//!    shared default, so no integrator gets one namespace for every caller;
//! 3. reads the whole body within [`IdempotencyLayer::max_request_body`]
//!    (413 `payload-too-large` above it) and before
//!    [`IdempotencyLayer::body_read_timeout`] (400 `request-invalid` and the
//!    connection closed after it) and fingerprints the request (see
//!    [`default_fingerprint`], or [`IdempotencyLayer::fingerprint_with`]);
//! 4. runs the [engine](crate::idempotency) in lease mode: it **claims**
//!    `(scope, operation, key)` with a lease and commits the claim in its own
//!    short transaction, then decides, at the database's clock, what any
//!    existing record means: replay it (with `Idempotent-Replayed: true`),
//!    409 with a short `Retry-After` (or, opt-in, wait for the first request
//!    and replay it), 422 for another payload, take over a claim whose lease
//!    is over, or apply the expiry policy (410, or run anew under
//!    `reexecute`);
//! 5. runs the inner service, then stores the status, the allow-listed
//!    headers and the body. A temporary status (**408, 425, 429, 5xx**) or
//!    an inner error releases the claim instead, so the client can retry.
//!
//! Methods that need no key (GET, HEAD, OPTIONS, and anything not listed in
//! [`IdempotencyLayer::methods`]) pass through untouched, whatever key they
//! carry.
//!
//! Apply it with [`Router::route_layer`](axum::Router::route_layer), so that
//! unknown paths still get 404 rather than a key problem, and put
//! authentication outside it (a `.layer(...)` added after it), so the scope
//! function can read who the caller is. Records are kept per
//! `(scope, operation, key)` in the records table of any [`Db`]
//! ([`Db::open`] runs the migrations), or in Redis / Redis Cluster
//! (`redis://`, `rediss://`, `redis+cluster://host:port,…`; see
//! [`crate::store::redis`] and docs/redis.md for when to choose which store
//! and Redis's durability options).
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
//! # Trim
//! Records do not stay for ever: from its first guarded request on, the
//! layer runs the order service's maintenance ([`crate::maintenance`]) in
//! the background every [`DEFAULT_TRIM_INTERVAL`]: completed records past
//! their replay window lose their stored response (a tombstone keeps the
//! fingerprint, so 422 and 410 still answer), and tombstones and abandoned
//! claims are deleted once [`IdempotencyLayer::retention`] has passed
//! since their creation or their lease, by the database's clock. The task
//! stops when the last service the layer built is dropped. The records
//! table is shared by every front end on one database and the trim applies
//! to all of it: where an order service (or another layer) trims the same
//! database, give them the same retention or turn this one off with
//! [`IdempotencyLayer::without_trim`]. Redis expires its records itself
//! (`--redis-retention`), so no task runs there.
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
//! use idemkey::Db;
//! use idemkey::store::StoreSettings;
//! use idemkey::layer::IdempotencyLayer;
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let db = Db::open("sqlite://leases.db", &StoreSettings::default()).await?;
//! // Records are scoped by the authenticated caller, e.g. an account id an
//! // authentication layer put in the extensions.
//! let idempotent = IdempotencyLayer::new(db, |parts| {
//!     parts.extensions.get::<Account>().map(|a| a.0.clone())
//! })
//! .lease(Duration::from_secs(30))
//! .replay_ttl(Duration::from_secs(24 * 3600));
//! let app: Router = Router::new()
//!     .route("/payments", post(|| async { "paid" }))
//!     .route_layer(idempotent);
//! # let _ = app; Ok(())
//! # }
//! # #[derive(Clone)] struct Account(String);
//! ```
//!
//! A layer cannot be built without a scope function:
//! ```compile_fail
//! # async fn run(db: idemkey::Db) {
//! let layer = idemkey::layer::IdempotencyLayer::new(db);
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{HeaderName, Method};
use idemkey_core::{
    DEFAULT_REPLAY_HEADERS, ExpiryPolicy, Fingerprint, KeyProfile, OperationId, Problem,
};
use tower::Layer;

use crate::Db;
use crate::idempotency::{DEFAULT_RETRY_AFTER, Mode, Policy, Records};
use crate::metrics::Metrics;

mod body;
mod config;
mod service;

use config::{Config, Trimmer};
pub use config::{FingerprintFn, ScopeFn, TRIM_BATCH};

pub use service::IdempotencyService;

/// The operation id of the layer's records unless
/// [`IdempotencyLayer::operation`] names another.
pub const DEFAULT_OPERATION: OperationId = OperationId::from_static("http:v1");

/// Default lease of a claim.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Default replay window.
pub const DEFAULT_REPLAY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Default of [`IdempotencyLayer::retention`]: how long a key is
/// remembered after its creation, as long as a client may retry.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Default of [`IdempotencyLayer::trim_interval`]: one trim round a minute.
pub const DEFAULT_TRIM_INTERVAL: Duration = Duration::from_secs(60);

/// Default largest request body read (1 MiB).
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1024 * 1024;

/// Default largest response body stored for replay (1 MiB).
pub const DEFAULT_MAX_STORED_RESPONSE: usize = 1024 * 1024;

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
/// use idemkey::layer::default_fingerprint;
///
/// let op = OperationId::from_static("http:v1");
/// let (a, _) = Request::post("/pay").header("content-type", "application/json")
///     .body(()).unwrap().into_parts();
/// let one = default_fingerprint(&op, &a, br#"{"amount": 5, "to": "x"}"#);
/// let two = default_fingerprint(&op, &a, br#"{"to":"x","amount":5}"#);
/// assert_eq!(one, two);
/// ```
pub fn default_fingerprint(operation: &OperationId, parts: &Parts, body: &[u8]) -> Fingerprint {
    let content_type = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .map(axum::http::HeaderValue::as_bytes);
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |pq| pq.as_str());
    Fingerprint::of_http(operation, parts.method.as_str(), path, content_type, body)
}

/// A tower [`Layer`] that makes the wrapped routes safe to retry with an
/// `Idempotency-Key` (see the [module documentation](self)).
///
/// Built with [`IdempotencyLayer::new`] and adjusted with its builder
/// methods; cheap to clone.
#[derive(Clone, Debug)]
pub struct IdempotencyLayer<R = Db> {
    db: R,
    config: Arc<Config>,
    trimmer: Arc<Trimmer>,
}

impl<R: Records + Clone> IdempotencyLayer<R> {
    /// A layer over `db` whose records are scoped by `scope` (the
    /// authenticated account or tenant, derived from the request head;
    /// `None` answers 401 `unauthorized`). Real services derive it from
    /// authentication (e.g. an extension their auth layer inserted, applied
    /// outside this layer), never from a header the caller picks: the scope
    /// is what keeps one caller's keys from replaying another's responses.
    ///
    /// Defaults: operation [`DEFAULT_OPERATION`], methods POST and PATCH,
    /// the `lenient` key profile, a [`DEFAULT_LEASE`] lease, a
    /// [`DEFAULT_REPLAY_TTL`] replay window, the `reject` expiry policy, a
    /// one-second `Retry-After` on 409, no waiting for in-flight requests,
    /// [`DEFAULT_MAX_REQUEST_BODY`] and [`DEFAULT_MAX_STORED_RESPONSE`], the
    /// core's replayed headers ([`DEFAULT_REPLAY_HEADERS`]),
    /// [`default_fingerprint`], and a trim every [`DEFAULT_TRIM_INTERVAL`]
    /// with a [`DEFAULT_RETENTION`] retention (see "Trim" in the
    /// [module documentation](self)).
    pub fn new(db: R, scope: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        let policy = Policy::new(Mode::Lease, DEFAULT_LEASE, DEFAULT_REPLAY_TTL);
        Self {
            db,
            config: Arc::new(Config {
                methods: [Method::POST, Method::PATCH].into_iter().collect(),
                key_profile: KeyProfile::Lenient,
                policy: Policy {
                    retry_after: DEFAULT_RETRY_AFTER,
                    ..policy
                },
                operation: DEFAULT_OPERATION,
                max_request_body: DEFAULT_MAX_REQUEST_BODY,
                body_read_timeout: crate::problems::DEFAULT_BODY_READ_TIMEOUT,
                max_stored_response: DEFAULT_MAX_STORED_RESPONSE,
                replay_headers: DEFAULT_REPLAY_HEADERS
                    .iter()
                    .map(|h| (*h).to_owned())
                    .collect(),
                scope: Arc::new(scope),
                fingerprint: Arc::new(|op: &OperationId, parts: &Parts, body: &[u8]| {
                    Ok(default_fingerprint(op, parts, body))
                }),
                metrics: None,
                retention: DEFAULT_RETENTION,
                trim_interval: Some(DEFAULT_TRIM_INTERVAL),
            }),
            trimmer: Arc::default(),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(Arc::make_mut(&mut self.config));
        // A layer adjusted from a clone is another layer, with its own
        // task for its own settings.
        self.trimmer = Arc::default();
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
    /// over, counted by the database's clock (at most
    /// [`MAX_INTERVAL`](crate::duration::MAX_INTERVAL), so the database's
    /// interval arithmetic cannot overflow).
    #[must_use]
    pub fn lease(self, lease: Duration) -> Self {
        self.with(|c| c.policy.lease = lease.min(crate::duration::MAX_INTERVAL))
    }

    /// How long a stored response is replayed, from its completion (at
    /// most [`MAX_DURATION`](crate::duration::MAX_DURATION)).
    #[must_use]
    pub fn replay_ttl(self, ttl: Duration) -> Self {
        self.with(|c| c.policy.replay_ttl = ttl.min(crate::duration::MAX_DURATION))
    }

    /// What happens after the replay window: 410, or run anew.
    #[must_use]
    pub fn expiry_policy(self, policy: ExpiryPolicy) -> Self {
        self.with(|c| c.policy.expiry = policy)
    }

    /// The `Retry-After` of a 409 for a request in progress (default 1 s;
    /// never more than the lease left, at least 1 s).
    #[must_use]
    pub fn retry_after(self, hint: Duration) -> Self {
        self.with(|c| c.policy.retry_after = hint)
    }

    /// Instead of answering 409 to a duplicate of a request in progress,
    /// wait up to `wait` for it to finish and replay its result (off by
    /// default: the draft standard's answer is 409). Past `wait` the 409 is
    /// sent as usual. At most [`MAX_WAIT`](crate::duration::MAX_WAIT), so the
    /// deadline cannot overflow `Instant`.
    #[must_use]
    pub fn wait_for_in_flight(self, wait: Duration) -> Self {
        self.with(|c| c.policy.wait_for_in_flight = Some(wait.min(crate::duration::MAX_WAIT)))
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

    /// The response headers stored and replayed (default: the core's
    /// [`DEFAULT_REPLAY_HEADERS`]); others are sent the first time only, and
    /// the core's never-replayed headers are never stored.
    #[must_use]
    pub fn replay_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names = names.into_iter().map(|n| n.as_str().to_owned()).collect();
        self.with(|c| c.replay_headers = names)
    }

    /// Replaces [`default_fingerprint`].
    #[must_use]
    pub fn fingerprint_with(
        self,
        f: impl Fn(&OperationId, &Parts, &[u8]) -> Result<Fingerprint, Problem> + Send + Sync + 'static,
    ) -> Self {
        self.with(|c| c.fingerprint = Arc::new(f))
    }

    /// How long a key is remembered after its creation (as a tombstone once
    /// its replay window is over, so that 422 and 410 still answer) and an
    /// abandoned claim after its lease, before the trim deletes it (default
    /// [`DEFAULT_RETENTION`]; keep it longer than the replay window; at
    /// most [`MAX_DURATION`](crate::duration::MAX_DURATION)).
    #[must_use]
    pub fn retention(self, retention: Duration) -> Self {
        self.with(|c| c.retention = retention.min(crate::duration::MAX_DURATION))
    }

    /// How often the trim task runs (default [`DEFAULT_TRIM_INTERVAL`], at
    /// most [`MAX_INTERVAL`](crate::duration::MAX_INTERVAL)).
    #[must_use]
    pub fn trim_interval(self, interval: Duration) -> Self {
        self.with(|c| c.trim_interval = Some(interval.min(crate::duration::MAX_INTERVAL)))
    }

    /// No trim task: another process trims the records table (e.g. the
    /// order service on the same database), or the application runs
    /// [`crate::maintenance`] itself.
    #[must_use]
    pub fn without_trim(self) -> Self {
        self.with(|c| c.trim_interval = None)
    }

    /// Counts every guarded request's outcome into `metrics` instead of
    /// [`Metrics::global`] (the `metrics` facade sees each
    /// either way).
    #[must_use]
    pub fn metrics(self, metrics: Arc<Metrics>) -> Self {
        self.with(|c| c.metrics = Some(metrics))
    }

    /// The database.
    pub fn db(&self) -> &R {
        &self.db
    }
}

impl<S, R: Clone> Layer<S> for IdempotencyLayer<R> {
    type Service = IdempotencyService<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(
            inner,
            self.db.clone(),
            Arc::clone(&self.config),
            Arc::clone(&self.trimmer),
        )
    }
}

//! A payment provider **simulator** for idemkey's tests and demo (run as
//! `idemkey-server provider`), not a payment service. Real HTTP, and three
//! downstream effects a purchase needs, each in its own table and behind
//! its own instance of the library's [`IdempotencyLayer`], so it
//! deduplicates by the key a client sends exactly as a real provider
//! promises to: **charges** ([`store::Charge`]), **confirmations** (a mail
//! sink, [`store::Confirmation`]) and **refunds** of a charge
//! ([`store::Refund`]).
//!
//! | route | answer |
//! |---|---|
//! | `POST /charges` (`Idempotency-Key` required) | 201 the charge; 402 `payment-declined` for a declined amount (nothing stored) |
//! | `GET /charges/{key}` | 200 the charge made under that key, or 404 `not-found` |
//! | `GET /charges` | 200 `{"charges": [...]}`: every charge of the caller, oldest first |
//! | `POST /confirmations` (`Idempotency-Key` required) | 201 the confirmation |
//! | `GET /confirmations/{key}` | 200 the confirmation made under that key, or 404 `not-found` |
//! | `GET /confirmations` | 200 `{"confirmations": [...]}`: every confirmation of the caller, oldest first |
//! | `POST /refunds` (`Idempotency-Key` required) | 201 the refund; 404 `charge-not-found`, 422 `refund-amount-mismatch`, 409 `charge-already-refunded` ([`problems`]; nothing stored) |
//! | `GET /refunds/{key}` | 200 the refund made under that key, or 404 `not-found` |
//! | `GET /refunds` | 200 `{"refunds": [...]}`: every refund of the caller, oldest first |
//! | `GET /requests[?effect=charges\|confirmations\|refunds\|all]` | 200 `{"requests": [...]}`: the caller's request log about one effect (the charges' without the parameter), in arrival order: every `POST` (`request`) and `GET` of a key (`lookup`) received, and every run of the effect's handler (`charge`, `confirmation`, `refund`, with its order) |
//! | `POST /faults/lose-next[?endpoint=charges\|confirmations\|refunds]` | 204: the next successful `POST` of that effect (of any effect without the parameter; of any caller) loses its response ([`LoseNext`]) |
//!
//! Every effect follows the same rules. The same key and body replay the
//! first answer (`Idempotent-Replayed: true`); the same key with another
//! body gets 422 `idempotency-key-reused`; a duplicate of a request in
//! progress gets 409 `idempotency-request-in-progress` with `Retry-After`.
//! Under the layer, a unique key on `(scope, key)` of each table keeps one
//! effect per key even when the layer runs a request again after its lease.
//! A charge is refunded at most once (a unique key on the refund's charge),
//! for its whole amount.
//!
//! Every route needs `Authorization: Bearer SECRET` with one of the
//! `--token` secrets (401 `unauthorized` otherwise). A caller's records and
//! effects are scoped by the hex SHA-256 of its secret: another secret sees
//! none of them, cannot replay them and cannot refund another's charge. The
//! secret is never stored or logged.
//!
//! Faults, on purpose ([`faults`]), alike for every effect: `--fail-rate`
//! answers 503 with `Retry-After` before any effect; `--lose-rate` lets the
//! effect commit and its response be stored, then closes the connection
//! without an answer; `--latency-ms` sleeps before every request; amounts
//! listed in `--decline-amount` are declined with 402. `--fault-seed` makes
//! the sequence of drawn faults reproducible.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use clap::Args;
use idemkey_core::{
    FieldError, IdempotencyKey, KEY_HEADER, KeyProfile, OperationId, Problem, ProblemCode,
    bearer_token, is_json_media_type,
};
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use tower_http::set_header::SetResponseHeaderLayer;
use tracing::{info, warn};
use uuid::Uuid;

mod confirmations;
pub mod faults;
pub mod problems;
mod refunds;
pub mod store;

pub use faults::LoseNext;
use faults::{Faults, inject};
use idemkey::duration::{parse_duration, rfc3339};
use idemkey::layer::IdempotencyLayer;
use idemkey::problems::{ApiError, json_response, problem_response};
use idemkey::serve::{serve, shutdown_signal};
use store::{Charge, ChargeWrite, Db, Endpoint, NewCharge, RequestKind};

/// The operation of the provider's charge records.
pub const CHARGE_OPERATION: OperationId = OperationId::from_static("provider-charge:v1");

/// The operation of the provider's confirmation records: a key of its own
/// namespace, apart from the charges' (as its table is).
pub const CONFIRMATION_OPERATION: OperationId =
    OperationId::from_static("provider-confirmation:v1");

/// The operation of the provider's refund records.
pub const REFUND_OPERATION: OperationId = OperationId::from_static("provider-refund:v1");

/// The largest amount a charge may have, in cents.
pub const MAX_AMOUNT_CENTS: i64 = 100_000_000_000;

/// A bearer secret: kept out of `Debug` (and so out of logs).
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// The secret's characters, for the `Authorization` field.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match bearer_token(format!("Bearer {s}").as_bytes()) {
            Some(token) if token == s => Ok(Self(s.to_owned())),
            _ => Err("a token is 1 to 512 characters of A-Z a-z 0-9 - . _ ~ + / =".into()),
        }
    }
}

/// Flags of `provider`.
#[derive(Clone, Debug, Args)]
pub struct ProviderArgs {
    /// Address to listen on.
    #[arg(long, env = "IDEMKEY_PROVIDER_BIND", default_value = "127.0.0.1:3002")]
    pub bind: SocketAddr,
    /// Where the charges (confirmations, refunds) and their idempotency
    /// records live: sqlite://PATH or postgres://… (Redis holds no charges).
    #[arg(
        long,
        env = "IDEMKEY_PROVIDER_DATABASE_URL",
        default_value = "sqlite://idemkey-provider.db"
    )]
    pub database_url: String,
    /// A bearer secret a caller may use (repeat the flag for more; the
    /// variable takes them comma-separated). Each secret is its own scope.
    #[arg(
        long = "token",
        env = "IDEMKEY_PROVIDER_TOKENS",
        value_delimiter = ',',
        required = true,
        hide_env_values = true
    )]
    pub tokens: Vec<Secret>,
    /// Share of requests and lookups (of charges, confirmations, refunds)
    /// answered 503 with Retry-After before any effect (0 to 1).
    #[arg(long, env = "IDEMKEY_PROVIDER_FAIL_RATE", default_value = "0", value_parser = parse_rate)]
    pub fail_rate: f64,
    /// Share of successful requests (of charges, confirmations, refunds)
    /// whose effect commits and whose response is stored, and whose
    /// connection is then closed without an answer (0 to 1).
    #[arg(long, env = "IDEMKEY_PROVIDER_LOSE_RATE", default_value = "0", value_parser = parse_rate)]
    pub lose_rate: f64,
    /// Milliseconds to sleep before handling each request.
    #[arg(long, env = "IDEMKEY_PROVIDER_LATENCY_MS", default_value = "0")]
    pub latency_ms: u64,
    /// Amounts in cents declined with 402 payment-declined (repeat the
    /// flag, or comma-separate them).
    #[arg(
        long = "decline-amount",
        env = "IDEMKEY_PROVIDER_DECLINE_AMOUNTS",
        value_delimiter = ',',
        default_value = "402"
    )]
    pub decline_amounts: Vec<i64>,
    /// How long a request's claim holds its key before a retry may take it
    /// over (a provider killed mid-request answers 409 to that key until
    /// then).
    #[arg(long, env = "IDEMKEY_PROVIDER_LEASE", default_value = "30s", value_parser = parse_duration)]
    pub lease: Duration,
    /// Seed of the fault draws, to repeat a run's faults; a random seed
    /// (logged) without it.
    #[arg(long, env = "IDEMKEY_PROVIDER_FAULT_SEED")]
    pub fault_seed: Option<u64>,
    /// Listen on an address other than loopback. The simulator is for tests
    /// and the demo (plain HTTP, faults on purpose, a request log anyone
    /// with a secret can read): it refuses such an address without this.
    #[arg(long, env = "IDEMKEY_PROVIDER_ALLOW_NON_LOOPBACK")]
    pub allow_non_loopback: bool,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err("a rate is a number from 0 to 1, e.g. 0.2".into()),
    }
}

/// The scope of a caller: the hex SHA-256 of its bearer secret.
pub fn scope_of(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The authenticated caller's scope, put in the request's extensions.
#[derive(Clone, Debug)]
struct Caller(String);

/// What the routes share.
#[derive(Clone, Debug)]
struct Provider {
    db: Db,
    /// The scopes of the configured secrets.
    scopes: Arc<HashSet<String>>,
    declined: Arc<HashSet<i64>>,
}

/// The provider's router over `db`, with its settings (and faults drawn
/// from `seed`), and its one-shot switch that loses the next successful
/// effect's response (also armed by `POST /faults/lose-next`): for the demo,
/// which embeds the provider or drives it over HTTP.
pub fn router(db: Db, args: &ProviderArgs, seed: u64) -> (Router, LoseNext) {
    let provider = Provider {
        db: db.clone(),
        scopes: Arc::new(args.tokens.iter().map(|t| scope_of(t.expose())).collect()),
        declined: Arc::new(args.decline_amounts.iter().copied().collect()),
    };
    let faults = Arc::new(Faults::new(
        args.fail_rate,
        args.lose_rate,
        Duration::from_millis(args.latency_ms),
        seed,
    ));
    // One layer per effect, each with its own operation: a key names one
    // effect, as it names one row of that effect's table. Each trims the
    // whole records table with the same retention once its effect is used,
    // which the others' trims only repeat.
    let idempotent = |operation| {
        IdempotencyLayer::new(db.store(), |parts| {
            parts.extensions.get::<Caller>().map(|c| c.0.clone())
        })
        .operation(operation)
        .key_profile(KeyProfile::Lenient)
        .lease(args.lease)
    };
    let lose_next = faults.lose_next();
    let arm = {
        let lose_next = lose_next.clone();
        move |RawQuery(query): RawQuery| async move {
            match query_member(query.as_deref(), "endpoint") {
                None => {
                    warn!("fault: the next successful effect loses its response");
                    lose_next.arm();
                }
                Some(name) => match Endpoint::from_name(name) {
                    Some(endpoint) => {
                        warn!(
                            effect = endpoint.as_str(),
                            "fault: the next successful effect of one endpoint loses its response"
                        );
                        lose_next.arm_for(endpoint);
                    }
                    None => return problem_response(&unknown_member("endpoint", false)),
                },
            }
            StatusCode::NO_CONTENT.into_response()
        }
    };
    let router = Router::new()
        .route(
            "/charges",
            post(create)
                .get(list)
                .route_layer(idempotent(CHARGE_OPERATION)),
        )
        .route("/charges/{key}", get(lookup))
        .route(
            "/confirmations",
            post(confirmations::create)
                .get(confirmations::list)
                .route_layer(idempotent(CONFIRMATION_OPERATION)),
        )
        .route("/confirmations/{key}", get(confirmations::lookup))
        .route(
            "/refunds",
            post(refunds::create)
                .get(refunds::list)
                .route_layer(idempotent(REFUND_OPERATION)),
        )
        .route("/refunds/{key}", get(refunds::lookup))
        .route_layer(from_fn_with_state(faults, inject))
        .route_layer(from_fn_with_state(provider.clone(), record))
        .route("/requests", get(requests))
        .route("/faults/lose-next", post(arm))
        .route_layer(from_fn_with_state(provider.clone(), authenticate))
        .fallback(|| async { problem_response(&Problem::not_found()) })
        .method_not_allowed_fallback(|| async { problem_response(&Problem::method_not_allowed()) })
        .with_state(provider)
        .layer(from_fn(idemkey::request_log::log_requests))
        .layer(SetResponseHeaderLayer::overriding(
            CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ));
    (router, lose_next)
}

/// The value of `name` in a query (`a=b&c=d`; the values the simulator
/// reads are plain words, never percent-encoded).
fn query_member<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// 400 for a query member naming no endpoint (or `all`, where allowed).
fn unknown_member(name: &str, all: bool) -> Problem {
    let mut names: Vec<&str> = Endpoint::ALL.iter().map(|e| e.as_str()).collect();
    if all {
        names.push("all");
    }
    Problem::new(
        ProblemCode::RequestInvalid,
        format!("The query's {name} must be one of: {}.", names.join(", ")),
    )
}

/// A call a client makes of one effect: its `POST` (no key in the path) or
/// the `GET` of one key (the key as the path has it, percent-encoded). The
/// lists (`GET /charges`) are not calls: they are for checks, never logged
/// and never faulted.
pub(crate) fn call_of<'a>(method: &Method, path: &'a str) -> Option<(Endpoint, Option<&'a str>)> {
    let path = path.strip_prefix('/')?;
    let (collection, key) = match path.split_once('/') {
        Some((collection, key)) => (collection, Some(key)),
        None => (path, None),
    };
    let endpoint = Endpoint::from_name(collection)?;
    match (method, key) {
        (&Method::POST, None) => Some((endpoint, None)),
        (&Method::GET, Some(key)) if !key.is_empty() && !key.contains('/') => {
            Some((endpoint, Some(key)))
        }
        _ => None,
    }
}

/// Runs the provider until SIGTERM or SIGINT.
pub async fn run(args: ProviderArgs) -> Result<(), String> {
    if !args.bind.ip().is_loopback() && !args.allow_non_loopback {
        return Err(format!(
            "refusing to listen on {}: the simulator is for tests and the demo; bind a loopback \
             address (127.0.0.1 or [::1]) or pass --allow-non-loopback",
            args.bind
        ));
    }
    let db = Db::open(&args.database_url)
        .await
        .map_err(|e| format!("cannot open the database: {e}"))?;
    let seed = match args.fault_seed {
        Some(seed) => seed,
        None => random_seed()?,
    };
    let (app, _) = router(db.clone(), &args, seed);
    let (listener, local) = idemkey::serve::bind(args.bind).await?;
    info!(
        address = %local,
        backend = db.store().backend(),
        secrets = args.tokens.len(),
        fail_rate = args.fail_rate,
        lose_rate = args.lose_rate,
        latency_ms = args.latency_ms,
        decline_amounts = ?args.decline_amounts,
        fault_seed = seed,
        "payment provider simulator listening on http://{local}"
    );
    serve(listener, app, shutdown_signal(), Duration::from_secs(5))
        .await
        .map_err(|e| format!("server error: {e}"))?;
    db.store().close();
    info!("stopped");
    Ok(())
}

/// A seed for a run that names none (logged, so the run can be repeated).
fn random_seed() -> Result<u64, String> {
    let mut bytes = [0; 8];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a fault seed: {e}"))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Middleware: the caller's scope from its bearer secret, or 401.
async fn authenticate(
    State(provider): State<Provider>,
    mut request: Request,
    next: Next,
) -> Response {
    let scope = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()))
        .map(scope_of)
        .filter(|scope| provider.scopes.contains(scope));
    let Some(scope) = scope else {
        return problem_response(&Problem::unauthorized());
    };
    request.extensions_mut().insert(Caller(scope));
    next.run(request).await
}

/// Middleware inside the authentication, outside the faults: logs every
/// call of an effect as it arrives ([`RequestKind`]), so a test sees a
/// second request under a key that the effect's unique key would hide, and
/// whether a lookup came before each resend.
async fn record(State(provider): State<Provider>, request: Request, next: Next) -> Response {
    let scope = request.extensions().get::<Caller>().map(|c| c.0.clone());
    let logged = match call_of(request.method(), request.uri().path()) {
        Some((endpoint, None)) => request_key(request.headers())
            .ok()
            .map(|key| (endpoint, RequestKind::Request, key.as_str().to_owned())),
        Some((endpoint, Some(key))) => {
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            Some((endpoint, RequestKind::Lookup, key.into_owned()))
        }
        None => None,
    };
    if let (Some(scope), Some((endpoint, kind, key))) = (scope, logged) {
        if key.is_empty() || key.len() > 1024 {
            return next.run(request).await;
        }
        if let Err(err) = provider
            .db
            .log_provider_request(&scope, endpoint, kind, &key, None)
            .await
        {
            return ApiError::Store(err).into_response();
        }
    }
    next.run(request).await
}

/// The request's `Idempotency-Key` (the layer has checked it already for
/// the handlers; this reads the same value).
fn request_key(headers: &HeaderMap) -> Result<IdempotencyKey, Problem> {
    IdempotencyKey::from_field_lines(
        headers
            .get_all(KEY_HEADER)
            .iter()
            .map(HeaderValue::as_bytes),
        KeyProfile::Lenient,
    )
    .map_err(|err| err.to_problem())
}

/// Logs a run of `endpoint`'s handler that reached its effect's write,
/// with the order it names: every run, a same-key repeat included, which
/// the effect's unique key would hide.
async fn log_run(
    provider: &Provider,
    scope: &str,
    endpoint: Endpoint,
    key: &IdempotencyKey,
    order_id: Uuid,
) -> Result<(), Response> {
    provider
        .db
        .log_provider_request(
            scope,
            endpoint,
            endpoint.run_kind(),
            key.as_str(),
            Some(order_id),
        )
        .await
        .map_err(|err| ApiError::Store(err).into_response())
}

/// 201 with `body` and the `Location` where the effect is looked up.
fn created(endpoint: Endpoint, key: &IdempotencyKey, body: &impl Serialize) -> Response {
    let mut response = json(StatusCode::CREATED, body);
    let location = format!(
        "/{}/{}",
        endpoint.as_str(),
        percent_encoding::utf8_percent_encode(key.as_str(), percent_encoding::NON_ALPHANUMERIC)
    );
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// Whether a request body is declared JSON (415 otherwise).
fn json_body(headers: &HeaderMap) -> Result<(), Problem> {
    if headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| is_json_media_type(v.as_bytes()))
    {
        Ok(())
    } else {
        Err(Problem::unsupported_media_type())
    }
}

/// One row of the request log as the provider shows it.
#[derive(Serialize)]
struct RequestBody<'a> {
    seq: i64,
    kind: &'a str,
    effect: &'a str,
    idempotency_key: &'a str,
    order_id: Option<String>,
    created_at: String,
}

#[derive(Serialize)]
struct RequestList<'a> {
    requests: Vec<RequestBody<'a>>,
}

/// `GET /requests`: the caller's request log, in arrival order. The
/// charges' rows without `?effect=` (the log as it was before the other
/// effects, which the discipline check of `idemkey_testkit` reads), one
/// other effect's, or `all`.
async fn requests(
    State(provider): State<Provider>,
    axum::Extension(Caller(scope)): axum::Extension<Caller>,
    RawQuery(query): RawQuery,
) -> Response {
    let effect = match query_member(query.as_deref(), "effect") {
        None => Some(Endpoint::Charges),
        Some("all") => None,
        Some(name) => match Endpoint::from_name(name) {
            Some(endpoint) => Some(endpoint),
            None => return problem_response(&unknown_member("effect", true)),
        },
    };
    match provider.db.provider_requests(&scope, effect).await {
        Ok(log) => json(
            StatusCode::OK,
            &RequestList {
                requests: log
                    .iter()
                    .map(|r| RequestBody {
                        seq: r.seq,
                        kind: &r.kind,
                        effect: &r.effect,
                        idempotency_key: &r.idempotency_key,
                        order_id: r.order_id.map(|id| id.to_string()),
                        created_at: rfc3339(r.created_at),
                    })
                    .collect(),
            },
        ),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

/// A charge as the provider shows it.
#[derive(Serialize)]
struct ChargeBody<'a> {
    id: String,
    idempotency_key: &'a str,
    order_id: String,
    amount_cents: i64,
    currency: &'a str,
    created_at: String,
}

impl<'a> From<&'a Charge> for ChargeBody<'a> {
    fn from(charge: &'a Charge) -> Self {
        Self {
            id: format!("ch_{}", charge.id.simple()),
            idempotency_key: &charge.idempotency_key,
            order_id: charge.order_id.to_string(),
            amount_cents: charge.amount_cents,
            currency: &charge.currency,
            created_at: rfc3339(charge.created_at),
        }
    }
}

/// A charge request's members, checked.
struct ChargeRequest {
    order_id: uuid::Uuid,
    amount_cents: i64,
    currency: String,
}

/// Reads `{"order_id", "amount_cents", "currency"}`; 400 `request-invalid`
/// with a pointer per failing member otherwise.
fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<ChargeRequest, Problem> {
    json_body(headers)?;
    let invalid = |errors| {
        Problem::new(ProblemCode::RequestInvalid, "The charge is invalid.").with_errors(errors)
    };
    let Ok(serde_json::Value::Object(members)) = serde_json::from_slice(body) else {
        return Err(invalid(vec![FieldError::new("", "must be a JSON object")]));
    };
    let mut errors = Vec::new();
    let order_id = members
        .get("order_id")
        .and_then(|v| v.as_str())
        .and_then(|s| uuid::Uuid::try_parse(s).ok());
    if order_id.is_none() {
        errors.push(FieldError::new("/order_id", "must be a UUID"));
    }
    let amount_cents = members
        .get("amount_cents")
        .and_then(serde_json::Value::as_i64)
        .filter(|a| (1..=MAX_AMOUNT_CENTS).contains(a));
    if amount_cents.is_none() {
        errors.push(FieldError::new(
            "/amount_cents",
            format!("must be a whole number from 1 to {MAX_AMOUNT_CENTS}"),
        ));
    }
    let currency = members
        .get("currency")
        .and_then(|v| v.as_str())
        .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()));
    if currency.is_none() {
        errors.push(FieldError::new(
            "/currency",
            "must be three capital letters (ISO 4217)",
        ));
    }
    match (order_id, amount_cents, currency) {
        (Some(order_id), Some(amount_cents), Some(currency)) => Ok(ChargeRequest {
            order_id,
            amount_cents,
            currency: currency.to_owned(),
        }),
        _ => Err(invalid(errors)),
    }
}

async fn create(
    State(provider): State<Provider>,
    axum::Extension(Caller(scope)): axum::Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = match request_key(&headers) {
        Ok(key) => key,
        Err(problem) => return problem_response(&problem),
    };
    let request = match read_request(&headers, &body) {
        Ok(request) => request,
        Err(problem) => return problem_response(&problem),
    };
    if provider.declined.contains(&request.amount_cents) {
        info!(amount_cents = request.amount_cents, "declined");
        return problem_response(&Problem::payment_declined(&format!(
            "the provider declines charges of {} cents",
            request.amount_cents
        )));
    }
    let new = NewCharge {
        scope,
        idempotency_key: key.as_str().to_owned(),
        order_id: request.order_id,
        amount_cents: request.amount_cents,
        currency: request.currency,
    };
    let written = provider.db.insert_charge(&new).await;
    if written.is_ok()
        && let Err(response) =
            log_run(&provider, &new.scope, Endpoint::Charges, &key, new.order_id).await
    {
        return response;
    }
    let charge = match written {
        Ok(ChargeWrite::Created(charge)) => charge,
        Ok(ChargeWrite::Existing(charge)) => {
            let same = charge.order_id == new.order_id
                && charge.amount_cents == new.amount_cents
                && charge.currency == new.currency;
            if !same {
                // Only reachable once the key's record is gone: the layer
                // refuses another payload under a key it remembers.
                warn!("a key's existing charge differs from the request");
                return problem_response(&Problem::key_reused());
            }
            charge
        }
        Err(err) => return ApiError::Store(err).into_response(),
    };
    created(Endpoint::Charges, &key, &ChargeBody::from(&charge))
}

async fn lookup(
    State(provider): State<Provider>,
    axum::Extension(Caller(scope)): axum::Extension<Caller>,
    Path(key): Path<String>,
) -> Response {
    match provider.db.charge(&scope, &key).await {
        Ok(Some(charge)) => json(StatusCode::OK, &ChargeBody::from(&charge)),
        Ok(None) => problem_response(&Problem::not_found()),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

/// A JSON answer (these bodies always serialise).
fn json(status: StatusCode, body: &impl Serialize) -> Response {
    json_response(status, serde_json::to_string(body).unwrap_or_default())
}

#[derive(Serialize)]
struct ChargeList<'a> {
    charges: Vec<ChargeBody<'a>>,
}

async fn list(
    State(provider): State<Provider>,
    axum::Extension(Caller(scope)): axum::Extension<Caller>,
) -> Response {
    match provider.db.charges(&scope).await {
        Ok(charges) => json(
            StatusCode::OK,
            &ChargeList {
                charges: charges.iter().map(ChargeBody::from).collect(),
            },
        ),
        Err(err) => ApiError::Store(err).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_is_the_hex_sha256_of_the_secret() {
        assert_eq!(
            scope_of("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let secret: Secret = "s3cret-value".parse().expect("a valid secret");
        assert_eq!(format!("{secret:?}"), "Secret(..)");
        assert!("two words".parse::<Secret>().is_err());
        assert!("".parse::<Secret>().is_err());
    }

    #[test]
    fn charge_requests_are_checked_member_by_member() {
        let mut json = HeaderMap::new();
        json.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let ok = read_request(
            &json,
            br#"{"order_id":"8e03978e-40d5-43e8-bc93-6894a57f9324","amount_cents":5980,"currency":"EUR"}"#,
        )
        .expect("a valid charge");
        assert_eq!((ok.amount_cents, ok.currency.as_str()), (5980, "EUR"));
        let bad = read_request(
            &json,
            br#"{"order_id":"x","amount_cents":0,"currency":"eur"}"#,
        )
        .err()
        .expect("invalid");
        let pointers: Vec<&str> = bad.errors().iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/order_id", "/amount_cents", "/currency"]);
        let text = read_request(&HeaderMap::new(), b"{}").err().expect("415");
        assert_eq!(text.status(), 415);
    }
}

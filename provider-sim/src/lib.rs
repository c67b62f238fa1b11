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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::RawQuery;
use axum::http::header::CACHE_CONTROL;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::IntoResponse as _;
use axum::routing::{get, post};
use clap::Args;
use idemkey_core::{KeyProfile, OperationId, Problem};
use tower_http::set_header::SetResponseHeaderLayer;
use tracing::{info, warn};

mod auth;
mod calls;
mod charges;
mod confirmations;
pub mod faults;
mod gates;
mod http;
mod memory;
pub mod problems;
mod refunds;
mod requests;
pub mod store;

pub use auth::{Secret, scope_of};
pub use charges::MAX_AMOUNT_CENTS;
pub use faults::LoseNext;

use auth::{Caller, authenticate};
use faults::{Faults, inject};
use gates::Gates;
use http::{Provider, query_member, unknown_member};
use idemkey::duration::parse_duration;
use idemkey::layer::IdempotencyLayer;
use idemkey::problems::problem_response;
use idemkey::serve::{serve, shutdown_signal};
use requests::{record, requests};
use store::{Db, Endpoint};

/// The operation of the provider's charge records.
pub const CHARGE_OPERATION: OperationId = OperationId::from_static("provider-charge:v1");

/// The operation of the provider's confirmation records: a key of its own
/// namespace, apart from the charges' (as its table is).
pub const CONFIRMATION_OPERATION: OperationId =
    OperationId::from_static("provider-confirmation:v1");

/// The operation of the provider's refund records.
pub const REFUND_OPERATION: OperationId = OperationId::from_static("provider-refund:v1");

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
    /// Benchmark sink: keep charges in memory (no database, no idempotency
    /// records; lost at exit) and answer only POST /charges and GET
    /// /charges/{key}, one charge per caller and key, to measure a client's
    /// own cost. Not a simulator of a provider; --database-url is ignored.
    #[arg(long, env = "IDEMKEY_PROVIDER_MEMORY")]
    pub memory: bool,
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

/// The gates `args` ask for, with the fault draws from `seed`.
fn gates(args: &ProviderArgs, seed: u64) -> Gates {
    Gates {
        scopes: Arc::new(args.tokens.iter().map(|t| scope_of(t.expose())).collect()),
        faults: Arc::new(Faults::new(
            args.fail_rate,
            args.lose_rate,
            Duration::from_millis(args.latency_ms),
            seed,
        )),
        declined: Arc::new(args.decline_amounts.iter().copied().collect()),
    }
}

/// The provider's router over `db`, with its settings (and faults drawn
/// from `seed`), and its one-shot switch that loses the next successful
/// effect's response (also armed by `POST /faults/lose-next`): for the demo,
/// which embeds the provider or drives it over HTTP.
pub fn router(db: Db, args: &ProviderArgs, seed: u64) -> (Router, LoseNext) {
    let Gates {
        scopes,
        faults,
        declined,
    } = gates(args, seed);
    let provider = Provider {
        db: db.clone(),
        declined,
    };
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
            post(charges::create)
                .get(charges::list)
                .route_layer(idempotent(CHARGE_OPERATION)),
        )
        .route("/charges/{key}", get(charges::lookup))
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
        .route_layer(from_fn_with_state(scopes, authenticate))
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

/// Runs the provider until SIGTERM or SIGINT.
pub async fn run(args: ProviderArgs) -> Result<(), String> {
    if !args.bind.ip().is_loopback() && !args.allow_non_loopback {
        return Err(format!(
            "refusing to listen on {}: the simulator is for tests and the demo; bind a loopback \
             address (127.0.0.1 or [::1]) or pass --allow-non-loopback",
            args.bind
        ));
    }
    let seed = match args.fault_seed {
        Some(seed) => seed,
        None => random_seed()?,
    };
    if args.memory {
        let (listener, local) = idemkey::serve::bind(args.bind).await?;
        warn!(
            address = %local,
            "memory benchmark sink (charges only, nothing stored) listening on http://{local}"
        );
        return serve(
            listener,
            memory::router(gates(&args, seed)),
            shutdown_signal(),
            Duration::from_secs(5),
        )
        .await
        .map_err(|e| format!("server error: {e}"));
    }
    let db = Db::open(&args.database_url)
        .await
        .map_err(|e| format!("cannot open the database: {e}"))?;
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

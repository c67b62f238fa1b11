//! `in-transaction` mode: the echo handler run through idemkey's
//! `in_transaction` API, the way a library user whose effect lives in the
//! same database would call it (here the effect writes nothing, so the
//! figure is the API's own cost: BEGIN, claim, complete, COMMIT).

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idemkey_core::{IdempotencyKey, KeyProfile, Problem};
use idemkey::Db;
use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
use idemkey::in_transaction::{Options, Outcome};
use idemkey::store::postgres::pg_in_transaction;
use idemkey::store::sqlite::sqlite_in_transaction_async;
use idemkey::layer::{DEFAULT_OPERATION, default_fingerprint};
use idemkey::problems::problem_response;

use crate::BENCH_SCOPE;
use crate::common::{self, Echo, Runs};

/// The largest body the handler reads (the Layer's default is larger; the
/// bench sends 14 bytes).
const MAX_BODY: usize = 1 << 20;

#[derive(Clone)]
struct Ctx {
    db: Db,
    runs: Runs,
}

/// `POST /echo` through the in-transaction API on `db` (SQLite or PostgreSQL).
pub fn router(db: Db, runs: Runs) -> Result<Router, String> {
    if !matches!(db, Db::Postgres(_) | Db::Sqlite(_)) {
        return Err("in-transaction needs sqlite:// or postgres://".into());
    }
    Ok(Router::new()
        .route("/echo", post(handler))
        .with_state(Ctx { db, runs }))
}

/// The echo's answer as the in-transaction API stores it (the same status,
/// body and `Content-Type` the other modes send).
fn stored(echo: Echo) -> StoredResponse {
    let stored = StoredResponse::new(201, echo.body);
    match echo.content_type.as_ref().and_then(|v| v.to_str().ok()) {
        Some(ct) => stored.with_header("content-type", ct),
        None => stored,
    }
}

fn unavailable() -> Response {
    problem_response(&Problem::service_unavailable(1))
}

async fn handler(State(ctx): State<Ctx>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = to_bytes(body, MAX_BODY).await else {
        return problem_response(&Problem::payload_too_large(MAX_BODY));
    };
    let key = match IdempotencyKey::from_field_lines(
        parts
            .headers
            .get_all(idemkey_core::KEY_HEADER)
            .iter()
            .map(|v| v.as_bytes()),
        KeyProfile::Lenient,
    ) {
        Ok(key) => key,
        Err(err) => return problem_response(&Problem::from(err)),
    };
    let Some(scope) = Scope::new(BENCH_SCOPE) else {
        return unavailable();
    };
    let fingerprint = default_fingerprint(&DEFAULT_OPERATION, &parts, &body);
    let key = RecordKey {
        scope,
        operation: DEFAULT_OPERATION,
        key,
    };
    let options = Options::new(Duration::from_secs(86_400));
    let wait = common::delay(&parts.uri);
    let (runs, headers) = (ctx.runs.clone(), parts.headers);
    let outcome: Result<Outcome, _> = match &ctx.db {
        Db::Postgres(pg) => {
            let Ok(mut client) = pg.pool().get().await else {
                return unavailable();
            };
            pg_in_transaction(&mut client, &key, fingerprint, &options, move |_tx| {
                Box::pin(async move {
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    Ok::<_, Infallible>(stored(common::run(&runs, &headers, body)))
                })
            })
            .await
        }
        Db::Sqlite(sqlite) => {
            sqlite_in_transaction_async(
                sqlite.connection(),
                key,
                fingerprint,
                options,
                move |_tx| {
                    if !wait.is_zero() {
                        std::thread::sleep(wait);
                    }
                    Ok::<_, Infallible>(stored(common::run(&runs, &headers, body)))
                },
            )
            .await
        }
        _ => return unavailable(),
    };
    match outcome {
        Ok(outcome) => outcome.into_response(),
        Err(_) => unavailable(),
    }
}

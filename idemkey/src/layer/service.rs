//! The service the layer wraps around each route: key, scope, body,
//! fingerprint, then the engine in lease mode around the inner service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{HeaderValue, Request};
use axum::response::{IntoResponse as _, Response};
use idemkey_core::{IdempotencyKey, KEY_HEADER, Problem, check_body_len};
use tower::Service;
use tracing::{info, warn};

use super::body::{Capped, read_capped};
use super::{Config, Trimmer};
use crate::Db;
use crate::idempotency::{self, Done, Outcome, RecordKey, Records, Scope, StoredResponse};
use crate::metrics::{FrontEnd, Metrics};
use crate::problems::{ApiError, UNAVAILABLE_RETRY_AFTER_SECS, problem_response};

/// The [`tower::Service`] built by [`IdempotencyLayer`](super::IdempotencyLayer).
#[derive(Clone, Debug)]
pub struct IdempotencyService<S, R = Db> {
    inner: S,
    db: R,
    config: Arc<Config>,
    trimmer: Arc<Trimmer>,
}

impl<S, R> IdempotencyService<S, R> {
    pub(crate) fn new(inner: S, db: R, config: Arc<Config>, trimmer: Arc<Trimmer>) -> Self {
        Self {
            inner,
            db,
            config,
            trimmer,
        }
    }
}

impl<S, R> Service<Request<Body>> for IdempotencyService<S, R>
where
    R: Records + Clone + Send + Sync + 'static,
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if !self.config.methods.contains(request.method()) {
            return Box::pin(self.inner.call(request));
        }
        self.trimmer.start(&self.db, &self.config);
        // The readied service goes with this request; a clone stays behind
        // for the next one (tower's usual hand-over).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (db, config) = (self.db.clone(), Arc::clone(&self.config));
        Box::pin(async move {
            let (outcome, response) = handle(inner, db, &config, request).await?;
            config.metrics.as_ref().unwrap_or(Metrics::global()).count(
                FrontEnd::Layer,
                &config.operation,
                outcome,
            );
            Ok(response)
        })
    }
}

fn unavailable() -> Response {
    problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS))
}

/// Why the effect (the inner service) did not produce a response to store.
enum Failed<E> {
    /// The inner service failed.
    Inner(E),
    /// The response body failed while it was read.
    Body,
}

/// Reads, checks and fingerprints the request; `Err` is the answer.
async fn prepare(
    config: &Config,
    request: Request<Body>,
) -> Result<
    (
        RecordKey,
        idemkey_core::Fingerprint,
        axum::http::request::Parts,
        Bytes,
    ),
    (&'static str, Response),
> {
    let (parts, body) = request.into_parts();
    let invalid = |problem: &Problem| ("invalid", problem_response(problem));
    let key_lines = parts.headers.get_all(KEY_HEADER);
    let key = IdempotencyKey::from_field_lines(
        key_lines.iter().map(HeaderValue::as_bytes),
        config.key_profile,
    )
    .map_err(|err| invalid(&err.to_problem()))?;
    let scope = (config.scope)(&parts)
        .and_then(Scope::new)
        .ok_or_else(|| ("unauthorized", problem_response(&Problem::unauthorized())))?;
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    if let Some(Err(too_large)) = declared.map(|n| check_body_len(n, config.max_request_body)) {
        return Err(invalid(&too_large));
    }
    let bytes = crate::problems::read_body(body, config.max_request_body, config.body_read_timeout)
        .await
        .map_err(|err| ("invalid", err.into_response()))?;
    let fingerprint = (config.fingerprint)(&config.operation, &parts, &bytes)
        .map_err(|rejected| invalid(&rejected))?;
    let key = RecordKey {
        scope,
        operation: config.operation.clone(),
        key,
    };
    Ok((key, fingerprint, parts, bytes))
}

async fn handle<S, R: Records>(
    mut inner: S,
    db: R,
    config: &Config,
    request: Request<Body>,
) -> Result<(&'static str, Response), S::Error>
where
    S: Service<Request<Body>, Response = Response>,
{
    let (key, fingerprint, parts, bytes) = match prepare(config, request).await {
        Ok(prepared) => prepared,
        Err(answer) => return Ok(answer),
    };
    let allow: Vec<&str> = config.replay_headers.iter().map(String::as_str).collect();
    let cap = config.max_stored_response;
    let effect = async || {
        let response = inner
            .call(Request::from_parts(parts, Body::from(bytes)))
            .await
            .map_err(Failed::Inner)?;
        let (head, body) = response.into_parts();
        let (stored_body, body) = match read_capped(body, cap).await {
            Ok(Capped::Whole(bytes)) => (Some(bytes.clone()), Body::from(bytes)),
            Ok(Capped::Over(body)) => {
                info!(
                    cap,
                    "response over the storage cap: stored without its body"
                );
                (None, body)
            }
            Err(err) => {
                warn!(error = %err, "the handler's response body failed; releasing the key");
                return Err(Failed::Body);
            }
        };
        let stored = StoredResponse {
            status: head.status.as_u16(),
            headers: StoredResponse::kept_headers(&head.headers, &allow),
            body: stored_body,
        };
        Ok(Done {
            response: stored,
            resource: None,
            value: Response::from_parts(head, body),
        })
    };
    let outcome = idempotency::run(&db, &key, fingerprint, &config.policy, effect).await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(idempotency::Error::Effect(Failed::Inner(err))) => return Err(err),
        Err(idempotency::Error::Effect(Failed::Body)) => return Ok(("unavailable", unavailable())),
        Err(idempotency::Error::Store(err)) => {
            return Ok(("unavailable", ApiError::Store(err).into_response()));
        }
    };
    let label = outcome.label();
    info!(outcome = label, "idempotency layer");
    let response = match outcome {
        Outcome::Executed { value, .. } => value,
        Outcome::Replayed(stored) => stored.to_response(true),
        Outcome::Rejected { problem, .. } => problem_response(&problem),
    };
    Ok((label, response))
}

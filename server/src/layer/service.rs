//! The service the layer wraps around each route: key, scope, body,
//! fingerprint, claim, decide, run, store.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, to_bytes};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse as _, Response};
use idemkey_core::{
    Decision, IdempotencyKey, KEY_HEADER, Problem, ProblemCode, REPLAYED_HEADER, check_body_len,
    decide,
};
use tower::Service;
use tracing::{debug, info, warn};

use super::Config;
use super::body::{Capped, read_capped};
use super::store::{ClaimOutcome, ClaimToken, LeaseKey, LeaseResponse, LeaseStore, NewClaim};
use crate::problems::{ApiError, UNAVAILABLE_RETRY_AFTER_SECS, problem_response};

/// How many times one request re-reads a key whose row changed under it.
const MAX_ATTEMPTS: usize = 3;

/// The answer to a retry of an operation whose response was over the
/// storage cap (see the module documentation of [`crate::layer`]).
pub(crate) fn response_not_stored() -> Problem {
    Problem::new(
        ProblemCode::IdempotencyKeyExpired,
        "The operation with this Idempotency-Key ran, but its response was too large to store and cannot be replayed. Look the operation up instead of sending it again.",
    )
}

/// The [`tower::Service`] built by [`IdempotencyLayer`](super::IdempotencyLayer).
#[derive(Clone, Debug)]
pub struct IdempotencyService<S, St> {
    inner: S,
    store: St,
    config: Arc<Config>,
}

impl<S, St> IdempotencyService<S, St> {
    pub(crate) fn new(inner: S, store: St, config: Arc<Config>) -> Self {
        Self {
            inner,
            store,
            config,
        }
    }
}

impl<S, St> Service<Request<Body>> for IdempotencyService<S, St>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: LeaseStore,
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
        // The readied service goes with this request; a clone stays behind
        // for the next one (tower's usual hand-over).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (store, config) = (self.store.clone(), Arc::clone(&self.config));
        Box::pin(handle(inner, store, config, request))
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

fn problem(problem: &Problem) -> Response {
    problem_response(problem)
}

fn unavailable() -> Response {
    problem(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS))
}

/// The allow-listed headers of a response, for storage.
fn kept_headers(config: &Config, headers: &HeaderMap) -> Vec<(String, String)> {
    let mut kept = Vec::new();
    for name in &config.replay_headers {
        for value in headers.get_all(name) {
            if let Ok(value) = value.to_str() {
                kept.push((name.as_str().to_owned(), value.to_owned()));
            }
        }
    }
    kept
}

/// A stored response sent again.
fn replay(stored: Option<LeaseResponse>) -> Response {
    let Some(stored) = stored else {
        warn!("completed lease record without a response");
        return unavailable();
    };
    let Some(body) = stored.body else {
        return problem(&response_not_stored());
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.append(name, value);
        }
    }
    headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

async fn handle<S, St>(
    mut inner: S,
    store: St,
    config: Arc<Config>,
    request: Request<Body>,
) -> Result<Response, S::Error>
where
    S: Service<Request<Body>, Response = Response>,
    St: LeaseStore,
{
    let (parts, body) = request.into_parts();
    let key_lines = parts.headers.get_all(KEY_HEADER);
    let key = match IdempotencyKey::from_field_lines(
        key_lines.iter().map(HeaderValue::as_bytes),
        config.key_profile,
    ) {
        Ok(key) => key,
        Err(err) => return Ok(problem(&err.to_problem())),
    };
    let Some(scope) = (config.scope)(&parts) else {
        return Ok(problem(&Problem::unauthorized()));
    };
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    if let Some(Err(too_large)) = declared.map(|n| check_body_len(n, config.max_request_body)) {
        return Ok(problem(&too_large));
    }
    let read = to_bytes(body, config.max_request_body);
    let Ok(read) = tokio::time::timeout(config.body_read_timeout, read).await else {
        warn!("the request body did not arrive in time; closing the connection");
        return Ok(crate::problems::body_timeout_response());
    };
    let bytes: Bytes = match read {
        Ok(bytes) => bytes,
        Err(err) if is_length_limit(&err) => {
            return Ok(problem(&Problem::payload_too_large(
                config.max_request_body,
            )));
        }
        // The client stopped sending half-way; nobody may read this answer.
        Err(_) => {
            return Ok(problem(&Problem::new(
                ProblemCode::RequestInvalid,
                "The request body could not be read.",
            )));
        }
    };
    let fingerprint = match (config.fingerprint)(&config.operation, &parts, &bytes) {
        Ok(fingerprint) => fingerprint,
        Err(rejected) => return Ok(problem(&rejected)),
    };
    let key = LeaseKey {
        scope,
        operation: config.operation.clone(),
        key,
    };

    let mut claimed = None;
    for _ in 0..MAX_ATTEMPTS {
        let now = config.clock.now();
        let claim = NewClaim {
            token: ClaimToken::random(),
            fingerprint,
            now,
            lease_until: now.plus_millis(millis(config.lease)),
        };
        let record = match store.claim(&key, &claim).await {
            Ok(ClaimOutcome::Claimed) => {
                claimed = Some((claim.token, Decision::Execute));
                break;
            }
            Ok(ClaimOutcome::Existing(record)) => record,
            Err(err) => return Ok(ApiError::Store(err).into_response()),
        };
        let decision = decide(record.stored, fingerprint, now, config.expiry_policy);
        debug!(decision = decision.as_str(), "key already taken");
        match decision {
            Decision::Replay => {
                info!(decision = "replay", "replaying a stored response");
                return Ok(replay(record.response));
            }
            Decision::TakeOver | Decision::Reexecute => {
                match store.take_over(&key, record.token, &claim).await {
                    Ok(true) => {
                        claimed = Some((claim.token, decision));
                        break;
                    }
                    // Someone else took it first: read it again.
                    Ok(false) => {}
                    Err(err) => return Ok(ApiError::Store(err).into_response()),
                }
            }
            // The row vanished between the insert and the read: claim again.
            Decision::Execute => {}
            rejected => {
                if let Some(answer) = rejected.problem(None) {
                    info!(decision = rejected.as_str(), "request rejected");
                    return Ok(problem(&answer));
                }
            }
        }
    }
    let Some((token, decision)) = claimed else {
        warn!("the key's record kept changing; answering 503");
        return Ok(unavailable());
    };
    info!(decision = decision.as_str(), "running the handler");

    let response = match inner
        .call(Request::from_parts(parts, Body::from(bytes)))
        .await
    {
        Ok(response) => response,
        Err(err) => {
            release(&store, &key, token).await;
            return Err(err);
        }
    };
    if response.status().is_server_error() {
        release(&store, &key, token).await;
        return Ok(response);
    }
    let (head, body) = response.into_parts();
    let (stored_body, body) = match read_capped(body, config.max_stored_response).await {
        Ok(Capped::Whole(bytes)) => (Some(bytes.clone()), Body::from(bytes)),
        Ok(Capped::Over(body)) => {
            info!(
                cap = config.max_stored_response,
                "response over the storage cap: stored without its body"
            );
            (None, body)
        }
        Err(err) => {
            warn!(error = %err, "the handler's response body failed; releasing the key");
            release(&store, &key, token).await;
            return Ok(unavailable());
        }
    };
    let stored = LeaseResponse {
        status: head.status.as_u16(),
        headers: kept_headers(&config, &head.headers),
        body: stored_body,
    };
    let replay_until = config.clock.now().plus_millis(millis(config.replay_ttl));
    match store.complete(&key, token, &stored, replay_until).await {
        Ok(true) => {}
        Ok(false) => warn!("the lease was taken over while the handler ran; response not stored"),
        // The client still gets the real answer; a retry after the lease
        // runs the handler again (lease mode is at-least-once).
        Err(err) => warn!(error = %err, "cannot store the response"),
    }
    Ok(Response::from_parts(head, body))
}

/// Deletes the claim so that the client may retry; on failure the claim
/// stays until its lease ends.
async fn release<St: LeaseStore>(store: &St, key: &LeaseKey, token: ClaimToken) {
    match store.release(key, token).await {
        Ok(true) => debug!("claim released"),
        Ok(false) => warn!("the lease was taken over while the handler ran"),
        Err(err) => warn!(error = %err, "cannot release the claim; it ends with its lease"),
    }
}

//! Turning the core's [`Problem`]s into HTTP responses, and the error type of
//! the routes.
//!
//! Bodies are exactly [`Problem::to_json`] and headers exactly
//! [`Problem::headers`]: the server writes no problem text of its own, and
//! no SQL, stack trace or internal message ever reaches a client.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idemkey_core::Problem;
use tracing::warn;

use crate::store::StoreError;

/// Seconds a client should wait after a 503 before retrying with the same key.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;

/// Seconds a client should wait after a lock wait timed out (409).
pub const LOCKED_RETRY_AFTER_SECS: u64 = 1;

/// The HTTP response for a problem.
pub fn problem_response(problem: &Problem) -> Response {
    let status =
        StatusCode::from_u16(problem.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Body::from(problem.to_json()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in problem.headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    response
}

/// Default longest wait for a request body, from the end of its head.
pub const DEFAULT_BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The answer when a request body did not arrive within the body read
/// deadline: 400 `request-invalid` from the core, with `Connection: close`
/// so the connection (and whatever the client still sends) is dropped.
pub fn body_timeout_response() -> Response {
    let problem = Problem::new(
        idemkey_core::ProblemCode::RequestInvalid,
        "The request body did not arrive in time.",
    );
    let mut response = problem_response(&problem);
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        HeaderValue::from_static("close"),
    );
    response
}

/// Why a request body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// It did not arrive within the read deadline: answer
    /// [`body_timeout_response`] (the connection is closed).
    TimedOut,
    /// Over the limit (413), or the client stopped sending half-way (400).
    Rejected(Problem),
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        match self {
            Self::TimedOut => body_timeout_response(),
            Self::Rejected(problem) => problem_response(&problem),
        }
    }
}

/// Reads a request body of at most `max` bytes within `within`: the one
/// body read of the Layer and of a route that reads its own body, so both
/// answer an oversized body 413 and a late one with
/// [`body_timeout_response`].
pub async fn read_body(body: Body, max: usize, within: Duration) -> Result<Bytes, BodyError> {
    let Ok(read) = tokio::time::timeout(within, axum::body::to_bytes(body, max)).await else {
        warn!("the request body did not arrive in time; closing the connection");
        return Err(BodyError::TimedOut);
    };
    match read {
        Ok(bytes) => Ok(bytes),
        Err(err) if is_length_limit(&err) => {
            Err(BodyError::Rejected(Problem::payload_too_large(max)))
        }
        // The client stopped sending half-way; nobody may read this answer.
        Err(_) => Err(BodyError::Rejected(Problem::new(
            idemkey_core::ProblemCode::RequestInvalid,
            "The request body could not be read.",
        ))),
    }
}

/// Whether a body read failed on its length limit (413), rather than on
/// the connection (400).
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

/// Why a route did not answer normally.
#[derive(Debug)]
pub enum ApiError {
    /// A problem from the core's contract.
    Problem(Problem),
    /// The store failed; answered as 409 (lock wait) or 503.
    Store(StoreError),
}

impl From<Problem> for ApiError {
    fn from(problem: Problem) -> Self {
        Self::Problem(problem)
    }
}

impl From<idemkey_core::KeyError> for ApiError {
    fn from(err: idemkey_core::KeyError) -> Self {
        Self::Problem(err.to_problem())
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

impl ApiError {
    /// The problem this error is answered with.
    pub fn to_problem(&self) -> Problem {
        match self {
            Self::Problem(problem) => problem.clone(),
            Self::Store(StoreError::LockTimeout) => Problem::in_progress(LOCKED_RETRY_AFTER_SECS),
            // Every other store failure is the contract's 503: the client
            // may retry with the same key, and nothing of it was stored
            // as its result.
            Self::Store(_) => Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Store(err) = &self {
            if err.is_transient() {
                // The reason stays in the log; the client gets the
                // contract's 503.
                warn!(reason = %err, "answering 503");
            } else {
                tracing::error!(reason = %err, "answering 503 for a store failure that will not pass");
            }
        }
        problem_response(&self.to_problem())
    }
}

/// A JSON response with `status` and `body`.
pub fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey_core::ProblemCode;

    #[test]
    fn store_errors_map_to_the_contract() {
        let locked = ApiError::Store(StoreError::LockTimeout).to_problem();
        assert_eq!(locked.code(), ProblemCode::IdempotencyRequestInProgress);
        assert_eq!(locked.retry_after(), Some(1));
        let down = ApiError::Store(StoreError::Unavailable("SELECT secret".into()));
        let problem = down.to_problem();
        assert_eq!(problem.code(), ProblemCode::ServiceUnavailable);
        assert!(!problem.to_json().contains("SELECT"));
    }

    #[test]
    fn responses_carry_the_problem_headers() {
        let response = problem_response(&Problem::service_unavailable(3));
        assert_eq!(response.status(), 503);
        let h = response.headers();
        assert_eq!(h["content-type"], "application/problem+json");
        assert_eq!(h["cache-control"], "no-store");
        assert_eq!(h["retry-after"], "3");
    }
}

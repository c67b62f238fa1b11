//! What every create route does before its own work: the core's head checks
//! in the core's order (authorization, key, content type, declared length),
//! the bearer token hashed, and the body read within its limit and time.

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::response::Response;
use idemkey_core::{HeadRules, IdempotencyKey, Problem, RequestHead, check_head};

use crate::AppState;
use crate::auth::hash_token;
use crate::db::TokenHash;
use axum::response::IntoResponse as _;
use idemkey::problems::{ApiError, BodyError, read_body};

/// A create request that passed the head checks, its body read.
pub(super) struct Checked {
    /// The caller's hashed bearer token (not verified yet).
    pub(super) token: TokenHash,
    /// The request's key.
    pub(super) key: IdempotencyKey,
    /// The body, at most the route's limit.
    pub(super) body: Bytes,
    /// The request's head.
    pub(super) parts: Parts,
}

/// How reading a create request ended.
pub(super) enum Read {
    /// Ready for the route's own checks.
    Ready(Checked),
    /// Answered already (the body did not arrive in time), with the outcome
    /// label the metrics count it under.
    Answered(&'static str, Response),
}

/// Runs the head checks and reads the body of `request`, at most
/// `max_body` bytes.
pub(super) async fn read(
    state: &AppState,
    request: Request,
    max_body: usize,
) -> Result<Read, ApiError> {
    let (parts, body) = request.into_parts();
    let settings = state.settings();
    let headers = &parts.headers;
    let lines =
        |name| -> Vec<&[u8]> { headers.get_all(name).iter().map(|v| v.as_bytes()).collect() };
    let (authorization, key_lines, content_type) = (
        lines(axum::http::header::AUTHORIZATION.as_str()),
        lines(idemkey_core::KEY_HEADER),
        lines(CONTENT_TYPE.as_str()),
    );
    let content_length = match headers.get(CONTENT_LENGTH) {
        None => None,
        // A Content-Length hyper accepted is a number; anything else is
        // left to the limit on the bytes actually read.
        Some(v) => v.to_str().ok().and_then(|s| s.parse().ok()),
    };
    let head = RequestHead {
        authorization: &authorization,
        idempotency_key: &key_lines,
        content_type: &content_type,
        content_length,
    };
    let rules = HeadRules {
        key_profile: settings.key_profile,
        require_auth: true,
        max_body_bytes: max_body,
    };
    let checked = check_head(&head, &rules)?;
    let token = checked
        .bearer
        .map(hash_token)
        .ok_or_else(Problem::unauthorized)?;
    let key = checked.key;

    let bytes = match read_body(body, max_body, settings.body_read_timeout).await {
        Ok(bytes) => bytes,
        Err(BodyError::TimedOut) => {
            return Ok(Read::Answered(
                "invalid",
                BodyError::TimedOut.into_response(),
            ));
        }
        Err(BodyError::Rejected(problem)) => return Err(problem.into()),
    };
    Ok(Read::Ready(Checked {
        token,
        key,
        body: bytes,
        parts,
    }))
}

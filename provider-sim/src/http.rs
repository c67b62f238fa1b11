//! What the routes' handlers share: the provider's state, and the reading
//! of a request and the writing of an answer alike for every effect.

use std::collections::HashSet;
use std::sync::Arc;

use axum::http::header::{CONTENT_TYPE, LOCATION};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use idemkey::problems::json_response;
use idemkey_core::{
    IdempotencyKey, KEY_HEADER, KeyProfile, Problem, ProblemCode, is_json_media_type,
};
use serde::Serialize;

use crate::store::{Db, Endpoint};

/// What the routes share.
#[derive(Clone, Debug)]
pub(crate) struct Provider {
    pub(crate) db: Db,
    /// The amounts of `--decline-amount`.
    pub(crate) declined: Arc<HashSet<i64>>,
}

/// The request's `Idempotency-Key` (the layer has checked it already for
/// the handlers; this reads the same value).
pub(crate) fn request_key(headers: &HeaderMap) -> Result<IdempotencyKey, Problem> {
    IdempotencyKey::from_field_lines(
        headers
            .get_all(KEY_HEADER)
            .iter()
            .map(HeaderValue::as_bytes),
        KeyProfile::Lenient,
    )
    .map_err(|err| err.to_problem())
}

/// Whether a request body is declared JSON (415 otherwise).
pub(crate) fn json_body(headers: &HeaderMap) -> Result<(), Problem> {
    if headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| is_json_media_type(v.as_bytes()))
    {
        Ok(())
    } else {
        Err(Problem::unsupported_media_type())
    }
}

/// The value of `name` in a query (`a=b&c=d`; the values the simulator
/// reads are plain words, never percent-encoded).
pub(crate) fn query_member<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// 400 for a query member naming no endpoint (or `all`, where allowed).
pub(crate) fn unknown_member(name: &str, all: bool) -> Problem {
    let mut names: Vec<&str> = Endpoint::ALL.iter().map(|e| e.as_str()).collect();
    if all {
        names.push("all");
    }
    Problem::new(
        ProblemCode::RequestInvalid,
        format!("The query's {name} must be one of: {}.", names.join(", ")),
    )
}

/// A JSON answer (these bodies always serialise).
pub(crate) fn json(status: StatusCode, body: &impl Serialize) -> Response {
    json_response(status, serde_json::to_string(body).unwrap_or_default())
}

/// 201 with `body` and the `Location` where the effect is looked up.
pub(crate) fn created(endpoint: Endpoint, key: &IdempotencyKey, body: &impl Serialize) -> Response {
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

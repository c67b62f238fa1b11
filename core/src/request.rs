//! The checks every idempotent POST passes before anything is stored, in the
//! one order that every adapter follows, so that a request with two faults
//! gets the same answer from the edge and from the origin:
//!
//! 1. `Authorization` carries a bearer token (401 `unauthorized`); the origin
//!    then verifies the token itself;
//! 2. exactly one valid `Idempotency-Key` (400 `idempotency-key-missing` /
//!    `idempotency-key-invalid`);
//! 3. `Content-Type: application/json` (415 `unsupported-media-type`);
//! 4. a declared `Content-Length` within the limit (413 `payload-too-large`);
//!    the body actually read is held to the same limit ([`check_body_len`]);
//! 5. the body itself, validated by the operation (400 `request-invalid`),
//!    e.g. [`NewOrder::from_json`](crate::NewOrder::from_json).

use crate::key::{IdempotencyKey, KeyProfile};
use crate::problem::Problem;

/// The request head as an adapter sees it: raw field lines, untouched.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestHead<'a> {
    /// Every `Authorization` field line.
    pub authorization: &'a [&'a [u8]],
    /// Every `Idempotency-Key` field line.
    pub idempotency_key: &'a [&'a [u8]],
    /// Every `Content-Type` field line.
    pub content_type: &'a [&'a [u8]],
    /// The declared `Content-Length`, when there is one.
    pub content_length: Option<u64>,
}

/// The rules of one operation for [`check_head`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadRules {
    /// How the key is read.
    pub key_profile: KeyProfile,
    /// Whether a bearer token is required.
    pub require_auth: bool,
    /// Largest body accepted, in bytes.
    pub max_body_bytes: usize,
}

/// What passed [`check_head`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedHead<'a> {
    /// The bearer token, still to be verified by the origin.
    pub bearer: Option<&'a str>,
    /// The parsed key.
    pub key: IdempotencyKey,
}

/// Runs checks 1 to 4 (see the module docs) in order; the first failure wins.
///
/// ```
/// use idemkey_core::{check_head, HeadRules, KeyProfile, ProblemCode, RequestHead};
/// let rules = HeadRules { key_profile: KeyProfile::Lenient, require_auth: true, max_body_bytes: 8192 };
/// let head = RequestHead {
///     authorization: &[b"Bearer t0ken"],
///     idempotency_key: &[],
///     content_type: &[b"text/plain"],
///     content_length: Some(10),
/// };
/// // Two faults (no key, wrong type): the key is checked first.
/// let problem = check_head(&head, &rules).unwrap_err();
/// assert_eq!(problem.code(), ProblemCode::IdempotencyKeyMissing);
/// ```
pub fn check_head<'a>(
    head: &RequestHead<'a>,
    rules: &HeadRules,
) -> Result<CheckedHead<'a>, Problem> {
    let bearer = match head.authorization {
        [one] => bearer_token(one),
        _ => None,
    };
    if rules.require_auth && bearer.is_none() {
        return Err(Problem::unauthorized());
    }
    let key =
        IdempotencyKey::from_field_lines(head.idempotency_key.iter().copied(), rules.key_profile)
            .map_err(|e| e.to_problem())?;
    match head.content_type {
        [one] if is_json_media_type(one) => {}
        _ => return Err(Problem::unsupported_media_type()),
    }
    if let Some(len) = head.content_length {
        check_body_len(len, rules.max_body_bytes)?;
    }
    Ok(CheckedHead { bearer, key })
}

/// Check 4 on the bytes actually received.
pub fn check_body_len(len: u64, max_body_bytes: usize) -> Result<(), Problem> {
    if len > max_body_bytes as u64 {
        Err(Problem::payload_too_large(max_body_bytes))
    } else {
        Ok(())
    }
}

/// The token of `Authorization: Bearer <token>` (RFC 6750, section 2.1: the
/// scheme is case-insensitive; the token is a `b64token`).
pub fn bearer_token(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim_start_matches(' ');
    let body = token.trim_end_matches('=');
    let ok = !body.is_empty()
        && token.len() <= 512
        && body.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        });
    ok.then_some(token)
}

/// `application/json`, any letter case, with optional parameters; a
/// `charset` parameter, if present, must be `utf-8` (RFC 8259, section 8.1).
pub fn is_json_media_type(value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or("").trim_matches([' ', '\t']);
    if !essence.eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|param| {
        let Some((name, val)) = param.split_once('=') else {
            return false;
        };
        let name = name.trim_matches([' ', '\t']);
        let val = val.trim_matches([' ', '\t']).trim_matches('"');
        !name.eq_ignore_ascii_case("charset") || val.eq_ignore_ascii_case("utf-8")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer_token(b"Bearer abc.def"), Some("abc.def"));
        assert_eq!(bearer_token(b"bearer  x=="), Some("x=="));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
        assert_eq!(bearer_token(b"Bearer a b"), None);
        assert_eq!(bearer_token(b"Bearer \xff"), None);
    }

    #[test]
    fn json_media_types() {
        assert!(is_json_media_type(b"application/json"));
        assert!(is_json_media_type(b"Application/JSON; charset=UTF-8"));
        assert!(!is_json_media_type(b"application/json; charset=latin1"));
        assert!(!is_json_media_type(b"text/json"));
        assert!(!is_json_media_type(b"application/jsonx"));
    }
}

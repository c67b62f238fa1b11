//! Which response headers are stored with a result and sent again when it is
//! replayed.
//!
//! A replay must look like the first response where it matters to the
//! client (the status, the body, where the resource is and what the body
//! is), and must not carry what belonged to the first connection or the
//! first moment only. Every adapter (the order route, the tower layer, any
//! store) filters with [`is_replayed_header`], so they store the same
//! headers for the same configuration.

use crate::REPLAYED_HEADER;

/// Response headers stored with a result and sent again on replay, unless an
/// adapter is configured with others: what a client needs to read the
/// replayed body (`content-type`) and find the resource it created
/// (`location`), as the draft's replay promise and DESIGN.md section 5 say.
pub const DEFAULT_REPLAY_HEADERS: &[&str] = &["content-type", "location"];

/// Headers never stored for replay whatever an adapter is configured with,
/// lowercase: they describe one connection or one response, not the result.
///
/// - `connection`, `proxy-connection`, `keep-alive`, `transfer-encoding`,
///   `te`, `trailer`, `upgrade`: hop-by-hop (RFC 9110, section 7.6.1; RFC
///   9112, section 9.6); they belong to the connection the first response
///   went over, and make an HTTP/2 or HTTP/3 response malformed (RFC 9113,
///   section 8.2.2).
/// - `proxy-authenticate`, `proxy-authorization`: addressed to the next proxy
///   on that connection only (RFC 9110, sections 11.7.1 and 11.7.2).
/// - `content-length`: the framing of the bytes actually sent; the replaying
///   server computes it again from the stored body (a stale one would cut or
///   hang the response).
/// - `set-cookie`: per-response state (a session, a CSRF token) that must not
///   be handed again to whoever sends the key later.
/// - `date`: the moment the first response was generated; a replay has its
///   own (RFC 9110, section 6.6.1).
/// - `idempotent-replayed` ([`REPLAYED_HEADER`]): the replay marker, added
///   by the adapter on each replay; a stored one would mark a first response
///   as a replay or appear twice.
pub const NEVER_REPLAYED_HEADERS: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
    "content-length",
    "set-cookie",
    "date",
    REPLAYED_HEADER,
];

/// Whether a response header `name` (any letter case, as field names are
/// case-insensitive) is stored for replay under the allowlist `allow`
/// (lowercase names, e.g. [`DEFAULT_REPLAY_HEADERS`]): it is in `allow` and
/// not in [`NEVER_REPLAYED_HEADERS`]. An allowlist cannot re-enable a header
/// that is never replayed.
///
/// ```
/// use idemkey_core::{DEFAULT_REPLAY_HEADERS, is_replayed_header};
/// assert!(is_replayed_header("Location", DEFAULT_REPLAY_HEADERS));
/// assert!(!is_replayed_header("x-request-id", DEFAULT_REPLAY_HEADERS));
/// assert!(!is_replayed_header("Set-Cookie", &["set-cookie"]));
/// ```
pub fn is_replayed_header(name: &str, allow: &[&str]) -> bool {
    let listed = |list: &[&str]| list.iter().any(|n| n.eq_ignore_ascii_case(name));
    listed(allow) && !listed(NEVER_REPLAYED_HEADERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_replayed_in_any_case() {
        for name in ["content-type", "Content-Type", "LOCATION", "location"] {
            assert!(is_replayed_header(name, DEFAULT_REPLAY_HEADERS), "{name}");
        }
        assert!(!is_replayed_header("etag", DEFAULT_REPLAY_HEADERS));
        assert!(!is_replayed_header("", DEFAULT_REPLAY_HEADERS));
        assert!(!is_replayed_header("content-type", &[]));
    }

    #[test]
    fn never_replayed_wins_over_the_allowlist() {
        for &name in NEVER_REPLAYED_HEADERS {
            assert!(!is_replayed_header(name, NEVER_REPLAYED_HEADERS), "{name}");
            let upper = name.to_ascii_uppercase();
            assert!(!is_replayed_header(&upper, &[name]), "{upper}");
        }
    }

    #[test]
    fn lists_are_lowercase_and_disjoint() {
        for &name in DEFAULT_REPLAY_HEADERS.iter().chain(NEVER_REPLAYED_HEADERS) {
            assert_eq!(name, name.to_ascii_lowercase());
        }
        for &name in DEFAULT_REPLAY_HEADERS {
            assert!(!NEVER_REPLAYED_HEADERS.contains(&name), "{name}");
        }
    }

    #[test]
    fn a_configured_header_is_replayed() {
        let allow = ["content-type", "location", "etag", "x-order-id"];
        assert!(is_replayed_header("ETag", &allow));
        assert!(is_replayed_header("X-Order-Id", &allow));
        assert!(!is_replayed_header("x-order", &allow));
    }
}

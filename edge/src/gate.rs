//! The edge's decision for one request, with no JS in sight: which route it
//! is, what the core says about its head and body, and where to forward it.
//!
//! Every rule comes from `idemkey-core` ([`check_head`], [`check_body_len`],
//! [`NewOrder::from_json`]) in the core's order; this module only turns
//! request parts into the core's inputs and the core's [`Problem`] into the
//! bytes of a response.

use idemkey_core::{
    HeadRules, KeyProfile, MAX_ORDER_BODY_BYTES, NewOrder, Problem, RequestHead, check_body_len,
    check_head,
};

/// The path of the one operation the edge guards.
pub const ORDERS_PATH: &str = "/orders";

/// What the edge does with a request, decided from its method and path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    /// `POST /orders`: check head and body, then forward the same bytes.
    CreateOrder,
    /// Anything else: forward untouched; the origin answers.
    PassThrough,
}

impl Route {
    /// The route of `method` on `path` (the path without its query).
    pub fn of(method: &str, path: &str) -> Self {
        // Methods are case-sensitive (RFC 9110, section 9.1), as on the origin.
        if method == "POST" && path == ORDERS_PATH {
            Self::CreateOrder
        } else {
            Self::PassThrough
        }
    }
}

/// The head fields the core looks at, collected from a request's headers.
///
/// A Worker only sees each field once: the runtime joins repeated field lines
/// with `", "` (RFC 9110, section 5.3: "A recipient MAY combine multiple
/// field lines within a field section that have the same field name into one
/// field line ... by appending each subsequent field line value to the
/// initial field line value in order, separated by a comma"). The
/// `Idempotency-Key` value is split back at commas outside quoted strings,
/// so two key lines are [`Repeated`](idemkey_core::KeyError::Repeated) here
/// as on the origin. (A key can hold a comma only inside an sf-string's
/// quotes; a bare comma is invalid under every profile.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadFields {
    authorization: Vec<Vec<u8>>,
    idempotency_key: Vec<Vec<u8>>,
    content_type: Vec<Vec<u8>>,
    content_length: Option<u64>,
}

impl HeadFields {
    /// Collects the fields from `(name, value)` pairs in any letter case.
    pub fn from_pairs<I, N, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (N, V)>,
        N: AsRef<str>,
        V: AsRef<str>,
    {
        let mut fields = Self::default();
        for (name, value) in pairs {
            let (name, value) = (name.as_ref(), value.as_ref());
            if name.eq_ignore_ascii_case("authorization") {
                fields.authorization.push(value.as_bytes().to_vec());
            } else if name.eq_ignore_ascii_case(idemkey_core::KEY_HEADER) {
                fields
                    .idempotency_key
                    .extend(split_list(value).map(|line| line.as_bytes().to_vec()));
            } else if name.eq_ignore_ascii_case("content-type") {
                fields.content_type.push(value.as_bytes().to_vec());
            } else if name.eq_ignore_ascii_case("content-length") {
                fields.content_length = value.trim().parse().ok();
            }
        }
        fields
    }
}

/// Splits a combined field value at commas outside double-quoted strings
/// (RFC 9110, section 5.6.4, quoted-string with `\` escapes).
fn split_list(value: &str) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    let (mut start, mut in_quotes, mut escaped) = (0, false, false);
    for (i, b) in value.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_quotes => escaped = true,
            b'"' => in_quotes = !in_quotes,
            b',' if !in_quotes => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    // The joiner's space after each comma is optional whitespace that the
    // core strips, as it strips the origin's own.
    parts.into_iter()
}

/// The checks of `POST /orders` as the origin runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderGate {
    rules: HeadRules,
}

impl OrderGate {
    /// A gate reading keys under `key_profile` (the origin's `--key-profile`).
    pub fn new(key_profile: KeyProfile) -> Self {
        Self {
            rules: HeadRules {
                key_profile,
                require_auth: true,
                max_body_bytes: MAX_ORDER_BODY_BYTES,
            },
        }
    }

    /// The largest body accepted, in bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.rules.max_body_bytes
    }

    /// Checks 1 to 4 of the core (token present, key, content type, declared
    /// length), first failure wins.
    pub fn check_head(&self, fields: &HeadFields) -> Result<(), Problem> {
        let authorization: Vec<&[u8]> = fields.authorization.iter().map(Vec::as_slice).collect();
        let idempotency_key: Vec<&[u8]> =
            fields.idempotency_key.iter().map(Vec::as_slice).collect();
        let content_type: Vec<&[u8]> = fields.content_type.iter().map(Vec::as_slice).collect();
        let head = RequestHead {
            authorization: &authorization,
            idempotency_key: &idempotency_key,
            content_type: &content_type,
            content_length: fields.content_length,
        };
        check_head(&head, &self.rules).map(|_| ())
    }

    /// Check 4 on the bytes received so far: call it as chunks arrive and
    /// stop reading at the first error.
    pub fn check_received(&self, received: u64) -> Result<(), Problem> {
        check_body_len(received, self.rules.max_body_bytes)
    }

    /// Check 5: the body's shape.
    pub fn check_body(&self, body: &[u8]) -> Result<(), Problem> {
        self.check_received(body.len() as u64)?;
        NewOrder::from_json(body).map(|_| ())
    }
}

/// A problem as response parts: the exact bytes every adapter sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProblemReply {
    /// HTTP status.
    pub status: u16,
    /// Header fields, in the core's order.
    pub headers: Vec<(&'static str, String)>,
    /// The body, [`Problem::to_json`].
    pub body: String,
}

impl From<&Problem> for ProblemReply {
    fn from(problem: &Problem) -> Self {
        Self {
            status: problem.status(),
            headers: problem.headers(),
            body: problem.to_json(),
        }
    }
}

/// The URL to forward to: the origin (scheme, host, port and an optional
/// path prefix, e.g. `http://127.0.0.1:3000` or `https://api.example/v/`)
/// followed by the request's path and query, unchanged.
pub fn forward_url(origin: &str, path: &str, query: Option<&str>) -> String {
    let base = origin.trim_end_matches('/');
    match query {
        Some(query) => format!("{base}{path}?{query}"),
        None => format!("{base}{path}"),
    }
}

#[cfg(test)]
mod tests {
    use idemkey_core::ProblemCode;

    use super::*;

    const KEY: &str = "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"";

    fn fields(pairs: &[(&str, &str)]) -> HeadFields {
        HeadFields::from_pairs(pairs.iter().copied())
    }

    fn head_code(pairs: &[(&str, &str)]) -> Option<ProblemCode> {
        OrderGate::new(KeyProfile::Lenient)
            .check_head(&fields(pairs))
            .err()
            .map(|p| p.code())
    }

    #[test]
    fn only_post_orders_is_guarded() {
        assert_eq!(Route::of("POST", "/orders"), Route::CreateOrder);
        for (method, path) in [
            ("GET", "/orders"),
            ("post", "/orders"),
            ("POST", "/orders/"),
            ("POST", "/orders/1"),
            ("PUT", "/orders"),
            ("GET", "/healthz"),
        ] {
            assert_eq!(
                Route::of(method, path),
                Route::PassThrough,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn a_complete_head_passes() {
        let pairs = [
            ("Authorization", "Bearer t0ken"),
            ("Idempotency-Key", KEY),
            ("Content-Type", "application/json"),
            ("Content-Length", "31"),
        ];
        assert_eq!(head_code(&pairs), None);
    }

    #[test]
    fn checks_run_in_the_cores_order() {
        // No token, no key, wrong type, too long: the token is checked first.
        let all_wrong = [("content-type", "text/plain"), ("content-length", "9000")];
        assert_eq!(head_code(&all_wrong), Some(ProblemCode::Unauthorized));
        let pairs = [
            ("authorization", "Bearer t"),
            ("content-type", "text/plain"),
        ];
        assert_eq!(head_code(&pairs), Some(ProblemCode::IdempotencyKeyMissing));
        let pairs = [
            ("authorization", "Bearer t"),
            ("idempotency-key", "k"),
            ("content-type", "text/plain"),
            ("content-length", "9000"),
        ];
        assert_eq!(head_code(&pairs), Some(ProblemCode::UnsupportedMediaType));
        let pairs = [
            ("authorization", "Bearer t"),
            ("idempotency-key", "k"),
            ("content-type", "application/json"),
            ("content-length", "8193"),
        ];
        assert_eq!(head_code(&pairs), Some(ProblemCode::PayloadTooLarge));
    }

    #[test]
    fn joined_key_lines_are_repeated_keys() {
        let joined = format!("{KEY}, {KEY}");
        let gate = OrderGate::new(KeyProfile::Lenient);
        let edge = gate
            .check_head(&fields(&[
                ("authorization", "Bearer t"),
                ("idempotency-key", &joined),
                ("content-type", "application/json"),
            ]))
            .unwrap_err();
        assert_eq!(edge.detail(), "Send exactly one Idempotency-Key header.");
    }

    #[test]
    fn commas_inside_quotes_do_not_split() {
        let parts: Vec<_> = split_list(r#""a,b", "c\",d", e"#).collect();
        assert_eq!(parts, [r#""a,b""#, r#" "c\",d""#, " e"]);
        let one: Vec<_> = split_list(" \"x\" ").collect();
        assert_eq!(one, [" \"x\" "]);
        let empty_tail: Vec<_> = split_list("a,").collect();
        assert_eq!(empty_tail, ["a", ""]);
    }

    #[test]
    fn body_is_held_to_the_limit_then_validated() {
        let gate = OrderGate::new(KeyProfile::Lenient);
        assert!(
            gate.check_body(br#"{"sku":"LIBRO-TS","quantity":2}"#)
                .is_ok()
        );
        let big = vec![b' '; MAX_ORDER_BODY_BYTES + 1];
        assert_eq!(
            gate.check_body(&big).unwrap_err().code(),
            ProblemCode::PayloadTooLarge
        );
        assert_eq!(
            gate.check_body(b"{").unwrap_err().code(),
            ProblemCode::RequestInvalid
        );
    }

    #[test]
    fn replies_carry_the_cores_bytes() {
        let problem = Problem::service_unavailable(2);
        let reply = ProblemReply::from(&problem);
        assert_eq!(reply.status, 503);
        assert_eq!(reply.body, problem.to_json());
        assert_eq!(reply.headers, problem.headers());
    }

    #[test]
    fn urls_keep_path_and_query() {
        assert_eq!(
            forward_url("http://127.0.0.1:3000/", "/orders", Some("x=1&y=%20")),
            "http://127.0.0.1:3000/orders?x=1&y=%20"
        );
        assert_eq!(
            forward_url("https://api.example/v", "/healthz", None),
            "https://api.example/v/healthz"
        );
        assert_eq!(forward_url("http://o", "/", Some("")), "http://o/?");
    }
}

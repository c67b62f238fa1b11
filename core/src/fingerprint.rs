//! Request fingerprints: SHA-256 over a canonical JSON encoding of
//! `[FINGERPRINT_VERSION, operation id, validated payload]`.
//!
//! # The canonical form (version 1)
//! A browser, a Worker and the server compute this, so it is specified
//! exactly. The payload is first converted to a JSON value (from the typed,
//! validated payload through `serde`, or parsed from JSON text), then written
//! with no whitespace at all:
//! - `null`, `true`, `false` as such;
//! - integers that fit `i64`/`u64` in plain decimal (`-12`, `2`); any other
//!   number as the shortest decimal that reads back to the same `f64`
//!   (the `ryu` algorithm, as `serde_json` prints it: `2.5`, `0.1`, `1e20`
//!   is written `1e+20`, `2.0` stays `2.0`); number text is read with correct
//!   rounding (`serde_json`'s `float_roundtrip`);
//! - strings in double quotes; `"` and `\` escaped with a backslash; U+0008,
//!   U+000C, U+000A, U+000D and U+0009 as `\b \f \n \r \t`; other characters
//!   below U+0020 as `\u00XX` with lowercase hex; every other character,
//!   non-ASCII included, as its raw UTF-8 bytes;
//! - arrays as `[a,b]` in order;
//! - objects as `{"k":v}` with members sorted by the UTF-8 bytes of their
//!   names (ascending; equal to Unicode code point order); a name repeated in
//!   JSON text keeps its last value.
//!
//! The hash input for operation `POST /orders:v1` and payload
//! `{"sku":"LIBRO-TS","quantity":2}` is therefore the 46 bytes
//! `[1,"POST /orders:v1",{"quantity":2,"sku":"LIBRO-TS"}]`.
//!
//! The fingerprint compares content; it does not authenticate anyone.

use std::fmt;
use std::io;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::operation::OperationId;
use crate::request::is_json_media_type;

/// Version of the canonical form; the first element of the hashed array.
pub const FINGERPRINT_VERSION: u32 = 1;

/// A SHA-256 fingerprint of a validated request; shown as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

/// Why a fingerprint could not be computed or read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FingerprintError {
    /// The payload text is not JSON.
    #[error("the payload is not valid JSON: {0}")]
    InvalidJson(String),
    /// The payload could not be represented as JSON (e.g. a map with
    /// non-string keys).
    #[error("the payload cannot be represented as JSON: {0}")]
    Unrepresentable(String),
    /// A hex string that is not 64 hex digits.
    #[error("a fingerprint is 64 hexadecimal digits")]
    InvalidHex,
}

impl Fingerprint {
    /// Fingerprints a typed, validated payload.
    ///
    /// ```
    /// use idemkey_core::{Fingerprint, OperationId};
    /// # #[derive(serde::Serialize)] struct Order { sku: &'static str, quantity: u8 }
    /// let op = OperationId::from_static("POST /orders:v1");
    /// let a = Fingerprint::of(&op, &Order { sku: "LIBRO-TS", quantity: 2 }).unwrap();
    /// let b = Fingerprint::of_json(&op, r#"{"quantity": 2, "sku": "LIBRO-TS"}"#).unwrap();
    /// assert_eq!(a, b);
    /// ```
    pub fn of<T: Serialize + ?Sized>(
        operation: &OperationId,
        payload: &T,
    ) -> Result<Self, FingerprintError> {
        let value = serde_json::to_value(payload)
            .map_err(|e| FingerprintError::Unrepresentable(e.to_string()))?;
        Ok(Self::of_value(operation, &value))
    }

    /// Fingerprints a payload given as JSON text (what a browser holds).
    pub fn of_json(operation: &OperationId, payload_json: &str) -> Result<Self, FingerprintError> {
        let value: Value = serde_json::from_str(payload_json)
            .map_err(|e| FingerprintError::InvalidJson(e.to_string()))?;
        Ok(Self::of_value(operation, &value))
    }

    /// Fingerprints a payload already held as a JSON value.
    pub fn of_value(operation: &OperationId, payload: &Value) -> Self {
        let mut sink = HashSink(Sha256::new());
        sink.put(b"[");
        sink.put(FINGERPRINT_VERSION.to_string().as_bytes());
        sink.put(b",");
        write_string(&mut sink, operation.as_str());
        sink.put(b",");
        write_canonical(&mut sink, payload);
        sink.put(b"]");
        Self(sink.0.finalize().into())
    }

    /// The generic fingerprint of an HTTP request, for handlers whose payload
    /// the core does not know (the server's tower layer, lease mode):
    /// [`Fingerprint::of_value`]`(operation, {"method": METHOD, "path":
    /// PATH_AND_QUERY, "body": BODY})`, where `BODY` is
    ///
    /// - `null` for an empty body (whatever the content type);
    /// - `{"json": VALUE}` when `content_type` is a JSON media type
    ///   ([`is_json_media_type`]) and the bytes parse as JSON (`serde_json`,
    ///   at most 128 levels of nesting): member order and insignificant
    ///   whitespace do not change it;
    /// - otherwise `{"base64": …}`, the standard padded base64 (RFC 4648,
    ///   section 4) of the raw bytes.
    ///
    /// `method` and `path_and_query` are taken as received (`"POST"`,
    /// `"/pay?x=1"`). Other headers are not part of it: the same bytes under
    /// two non-JSON content types share a fingerprint. Records written by the
    /// layer before this function moved to the core keep matching: it is the
    /// same computation.
    ///
    /// ```
    /// use idemkey_core::{Fingerprint, OperationId};
    /// let op = OperationId::from_static("http:v1");
    /// let json = Some(&b"application/json"[..]);
    /// let one = Fingerprint::of_http(&op, "POST", "/pay", json, br#"{"amount": 5, "to": "x"}"#);
    /// let two = Fingerprint::of_http(&op, "POST", "/pay", json, br#"{"to":"x","amount":5}"#);
    /// assert_eq!(one, two);
    /// assert_ne!(one, Fingerprint::of_http(&op, "POST", "/pay", None, br#"{"to":"x","amount":5}"#));
    /// ```
    pub fn of_http(
        operation: &OperationId,
        method: &str,
        path_and_query: &str,
        content_type: Option<&[u8]>,
        body: &[u8],
    ) -> Fingerprint {
        let body = if body.is_empty() {
            Value::Null
        } else {
            let json = content_type
                .filter(|ct| is_json_media_type(ct))
                .and_then(|_| serde_json::from_slice::<Value>(body).ok());
            let mut member = serde_json::Map::new();
            match json {
                Some(value) => member.insert("json".to_owned(), value),
                None => member.insert("base64".to_owned(), Value::String(STANDARD.encode(body))),
            };
            Value::Object(member)
        };
        let mut payload = serde_json::Map::new();
        payload.insert("method".to_owned(), Value::from(method));
        payload.insert("path".to_owned(), Value::from(path_and_query));
        payload.insert("body".to_owned(), body);
        Self::of_value(operation, &Value::Object(payload))
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// From raw bytes (as stored).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(64);
        for b in self.0 {
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0x0f)] as char);
        }
        out
    }

    /// Reads 64 hex digits (either case).
    pub fn from_hex(hex: &str) -> Result<Self, FingerprintError> {
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return Err(FingerprintError::InvalidHex);
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_val(pair[0]).ok_or(FingerprintError::InvalidHex)?;
            let lo = hex_val(pair[1]).ok_or(FingerprintError::InvalidHex)?;
            out[i] = (hi << 4) | lo;
        }
        Ok(Self(out))
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The canonical bytes of `value` (see the module docs); what
/// [`Fingerprint::of_value`] hashes for the payload part.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut sink = VecSink(Vec::new());
    write_canonical(&mut sink, value);
    sink.0
}

trait Sink: io::Write {
    fn put(&mut self, bytes: &[u8]);
}

struct HashSink(Sha256);
struct VecSink(Vec<u8>);

impl io::Write for HashSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for HashSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl io::Write for VecSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for VecSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

fn write_string<S: Sink>(sink: &mut S, s: &str) {
    // Writing into our in-memory sinks never fails.
    let _ = serde_json::to_writer(&mut *sink, s);
}

fn write_canonical<S: Sink>(sink: &mut S, value: &Value) {
    match value {
        Value::Null => sink.put(b"null"),
        Value::Bool(true) => sink.put(b"true"),
        Value::Bool(false) => sink.put(b"false"),
        Value::Number(n) => {
            // Writing into our in-memory sinks never fails.
            let _ = serde_json::to_writer(&mut *sink, n);
        }
        Value::String(s) => write_string(sink, s),
        Value::Array(items) => {
            sink.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    sink.put(b",");
                }
                write_canonical(sink, item);
            }
            sink.put(b"]");
        }
        Value::Object(members) => {
            // Sorted here, not by relying on serde_json's map type: another
            // crate enabling `preserve_order` would silently change it.
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            if !sorted.is_sorted_by(|a, b| a.0.as_bytes() <= b.0.as_bytes()) {
                sorted.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            }
            sink.put(b"{");
            for (i, (name, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    sink.put(b",");
                }
                write_string(sink, name);
                sink.put(b":");
                write_canonical(sink, item);
            }
            sink.put(b"}");
        }
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.to_hex())
    }
}

impl FromStr for Fingerprint {
    type Err = FingerprintError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_hex(s)
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Self::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OP: OperationId = OperationId::from_static("POST /orders:v1");

    #[test]
    fn documented_example_hashes_the_documented_bytes() {
        let value: Value = serde_json::from_str(r#"{"sku":"LIBRO-TS","quantity":2}"#).unwrap();
        let expected = Sha256::digest(br#"[1,"POST /orders:v1",{"quantity":2,"sku":"LIBRO-TS"}]"#);
        assert_eq!(
            Fingerprint::of_value(&OP, &value).as_bytes()[..],
            expected[..]
        );
    }

    #[test]
    fn canonical_form_escapes_and_sorts() {
        let value: Value =
            serde_json::from_str(r#"{ "b": [1, 2.5, "x\u0001\n\"é"], "a": null, "É": true }"#)
                .unwrap();
        assert_eq!(
            String::from_utf8(canonical_json(&value)).unwrap(),
            "{\"a\":null,\"b\":[1,2.5,\"x\\u0001\\n\\\"é\"],\"É\":true}"
        );
    }

    fn sha(bytes: &[u8]) -> Fingerprint {
        Fingerprint::from_bytes(Sha256::digest(bytes).into())
    }

    const HTTP: OperationId = OperationId::from_static("http:v1");
    const JSON: Option<&[u8]> = Some(b"application/json");

    #[test]
    fn http_fingerprint_hashes_the_documented_bytes() {
        assert_eq!(
            Fingerprint::of_http(&HTTP, "POST", "/pay?x=1", JSON, br#"{ "b": 1, "a": [2] }"#),
            sha(br#"[1,"http:v1",{"body":{"json":{"a":[2],"b":1}},"method":"POST","path":"/pay?x=1"}]"#)
        );
        assert_eq!(
            Fingerprint::of_http(&HTTP, "PATCH", "/p", Some(b"text/plain"), b"hi"),
            sha(br#"[1,"http:v1",{"body":{"base64":"aGk="},"method":"PATCH","path":"/p"}]"#)
        );
        assert_eq!(
            Fingerprint::of_http(&HTTP, "POST", "/p", JSON, b""),
            sha(br#"[1,"http:v1",{"body":null,"method":"POST","path":"/p"}]"#)
        );
        // Invalid JSON under a JSON type, and JSON under no type: bytes.
        assert_eq!(
            Fingerprint::of_http(&HTTP, "POST", "/p", JSON, b"{"),
            sha(br#"[1,"http:v1",{"body":{"base64":"ew=="},"method":"POST","path":"/p"}]"#)
        );
        assert_eq!(
            Fingerprint::of_http(&HTTP, "POST", "/p", None, b"1"),
            sha(br#"[1,"http:v1",{"body":{"base64":"MQ=="},"method":"POST","path":"/p"}]"#)
        );
    }

    /// The tower layer's `default_fingerprint` as it was written in the
    /// server before it moved here (with the head's parts as arguments):
    /// records it wrote must keep matching.
    fn layer_fingerprint_before_the_move(
        operation: &OperationId,
        method: &str,
        path: &str,
        content_type: Option<&[u8]>,
        body: &[u8],
    ) -> Fingerprint {
        let is_json = content_type.is_some_and(is_json_media_type);
        let body = if body.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(value) if is_json => serde_json::json!({ "json": value }),
                _ => serde_json::json!({ "base64": STANDARD.encode(body) }),
            }
        };
        let payload = serde_json::json!({ "method": method, "path": path, "body": body });
        Fingerprint::of_value(operation, &payload)
    }

    #[test]
    fn http_fingerprint_equals_the_layers_former_one() {
        let types: [Option<&[u8]>; 6] = [
            None,
            JSON,
            Some(b"Application/JSON; charset=UTF-8"),
            Some(b"application/json; charset=latin1"),
            Some(b"text/plain"),
            Some(b"application/\xff"),
        ];
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let bodies: [&[u8]; 10] = [
            b"",
            b"{}",
            br#"{"z":1,"a":{"c":2.5,"b":null}}"#,
            b"[1,2,3]",
            b"\"text\"",
            b"{",
            b" 7 ",
            "caf\u{e9} \u{1f389}".as_bytes(),
            b"\x00\xff\xfe binary",
            deep.as_bytes(),
        ];
        for method in ["POST", "PATCH"] {
            for path in ["/", "/pay?x=1&y=%20", ""] {
                for ct in types {
                    for body in bodies {
                        assert_eq!(
                            Fingerprint::of_http(&HTTP, method, path, ct, body),
                            layer_fingerprint_before_the_move(&HTTP, method, path, ct, body),
                            "{method} {path} {ct:?} {body:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn hex_round_trips() {
        let fp = Fingerprint::of_json(&OP, "{}").unwrap();
        assert_eq!(Fingerprint::from_hex(&fp.to_hex()), Ok(fp));
        assert_eq!(Fingerprint::from_hex(&fp.to_hex().to_uppercase()), Ok(fp));
        assert!(Fingerprint::from_hex("zz").is_err());
    }
}

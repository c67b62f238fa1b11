//! The reference operation, `POST /orders:v1`: its payload, validation and
//! fingerprint, shared by the server, the edge and the browser; and the
//! purchase, `POST /purchases:v1`, which takes the same body.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fingerprint::Fingerprint;
use crate::operation::OperationId;
use crate::problem::{FieldError, Problem, ProblemCode};

/// The operation id of order creation.
pub const ORDER_OPERATION: OperationId = OperationId::from_static("POST /orders:v1");

/// The operation id of a purchase (`POST /purchases`: reserve stock, charge,
/// confirm), whose body is exactly a [`NewOrder`].
///
/// A separate operation, not [`ORDER_OPERATION`]: a purchase and an order
/// sent under the same key are different operations, so their key records
/// never collide (the operation is part of every key record and of the
/// fingerprint), and the same body fingerprints differently under each
/// ([`NewOrder::fingerprint_for`]).
pub const PURCHASE_OPERATION: OperationId = OperationId::from_static("POST /purchases:v1");

/// Largest order body accepted, in bytes (8 KiB).
pub const MAX_ORDER_BODY_BYTES: usize = 8 * 1024;

/// Smallest and largest quantity of one order.
pub const QUANTITY_RANGE: std::ops::RangeInclusive<u8> = 1..=20;

/// Longest `sku`, in characters.
pub const SKU_MAX_LEN: usize = 32;

/// The `sku` rule as an anchored ECMA-262 regex (also valid for Rust's
/// `regex` and Python's `re`), for the published contract: 1 to
/// [`SKU_MAX_LEN`] characters of `A-Z`, `0-9` and `-`. A test checks it
/// against the validation below.
pub const SKU_PATTERN: &str = "^[A-Z0-9-]{1,32}$";

/// Longest purchase `reference`, in characters.
pub const REFERENCE_MAX_LEN: usize = 64;

/// The `reference` rule as an anchored ECMA-262 regex (also valid for
/// Rust's `regex` and Python's `re`), for the published contract: 1 to
/// [`REFERENCE_MAX_LEN`] characters of `A-Z`, `a-z`, `0-9`, `.`, `_` and
/// `-`, so a purchase-order number from another system fits unchanged. A
/// test checks it against the validation below.
pub const REFERENCE_PATTERN: &str = "^[A-Za-z0-9._-]{1,64}$";

/// A validated order request: exactly `{"sku": string matching
/// ^[A-Z0-9-]{1,32}$, "quantity": integer 1..=20}` and optionally
/// `"reference": string matching ^[A-Za-z0-9._-]{1,64}$`, no other members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrder {
    /// Stock-keeping unit, 1 to 32 characters of `A-Z`, `0-9` and `-`.
    pub sku: String,
    /// How many, 1 to 20.
    pub quantity: u8,
    /// The caller's own purchase reference (1 to 64 characters of `A-Z`,
    /// `a-z`, `0-9`, `.`, `_`, `-`), unique per account for ever: the
    /// business identity that outlives the key's replay window. Part of the
    /// fingerprint when present; absent, the fingerprint is the one orders
    /// had before references existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

fn is_valid_sku(sku: &str) -> bool {
    (1..=SKU_MAX_LEN).contains(&sku.len())
        && sku
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-')
}

fn is_valid_reference(reference: &str) -> bool {
    (1..=REFERENCE_MAX_LEN).contains(&reference.len())
        && reference
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// RFC 6901, section 3: `~` is written `~0` and `/` is written `~1`.
fn pointer_to(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

impl NewOrder {
    /// Parses and validates a request body; every failing member is listed
    /// in the `request-invalid` problem.
    ///
    /// ```
    /// use idemkey_core::{NewOrder, ProblemCode};
    /// let order = NewOrder::from_json(br#"{"quantity":2,"sku":"LIBRO-TS"}"#).unwrap();
    /// assert_eq!(order.quantity, 2);
    /// let err = NewOrder::from_json(br#"{"sku":"libro","quantity":0}"#).unwrap_err();
    /// assert_eq!(err.code(), ProblemCode::RequestInvalid);
    /// assert_eq!(err.errors().len(), 2);
    /// ```
    pub fn from_json(body: &[u8]) -> Result<Self, Problem> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            invalid(vec![FieldError::new(
                "",
                format!("The body is not valid JSON: {e}."),
            )])
        })?;
        let Value::Object(members) = value else {
            return Err(invalid(vec![FieldError::new("", "must be a JSON object")]));
        };
        let mut repeated = Vec::new();
        let names = top_level_names(body);
        if names.len() > members.len() {
            let mut names = names;
            names.sort_unstable();
            repeated = names
                .windows(2)
                .filter(|pair| pair[0] == pair[1])
                .map(|pair| pair[0].clone())
                .collect();
        }
        Self::from_members(&members, repeated)
    }

    fn from_members(
        members: &Map<String, Value>,
        mut repeated: Vec<String>,
    ) -> Result<Self, Problem> {
        let mut errors = Vec::new();
        let sku = match members.get("sku") {
            None => {
                errors.push(FieldError::new("/sku", "is required"));
                None
            }
            Some(Value::String(s)) if is_valid_sku(s) => Some(s.clone()),
            Some(Value::String(_)) => {
                errors.push(FieldError::new(
                    "/sku",
                    "must be 1 to 32 characters from A-Z, 0-9 and -",
                ));
                None
            }
            Some(_) => {
                errors.push(FieldError::new("/sku", "must be a string"));
                None
            }
        };
        let quantity = match members.get("quantity") {
            None => {
                errors.push(FieldError::new("/quantity", "is required"));
                None
            }
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                match n.as_u64().and_then(|q| u8::try_from(q).ok()) {
                    Some(q) if QUANTITY_RANGE.contains(&q) => Some(q),
                    _ => {
                        errors.push(FieldError::new("/quantity", "must be from 1 to 20"));
                        None
                    }
                }
            }
            Some(_) => {
                errors.push(FieldError::new("/quantity", "must be an integer"));
                None
            }
        };
        let reference = match members.get("reference") {
            None => None,
            Some(Value::String(s)) if is_valid_reference(s) => Some(s.clone()),
            Some(Value::String(_)) => {
                errors.push(FieldError::new(
                    "/reference",
                    "must be 1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'",
                ));
                None
            }
            Some(_) => {
                errors.push(FieldError::new("/reference", "must be a string"));
                None
            }
        };
        let mut unknown: Vec<&String> = members
            .keys()
            .filter(|k| !matches!(k.as_str(), "sku" | "quantity" | "reference"))
            .collect();
        unknown.sort_unstable();
        errors.extend(
            unknown
                .into_iter()
                .map(|name| FieldError::new(pointer_to(name), "is not allowed")),
        );
        // RFC 8259, section 4: "The names within an object SHOULD be unique";
        // a repeated member would make the order depend on which copy a
        // parser keeps, so it is refused.
        repeated.sort_unstable();
        repeated.dedup();
        errors.extend(
            repeated
                .iter()
                .map(|name| FieldError::new(pointer_to(name), "must appear only once")),
        );
        match (sku, quantity) {
            (Some(sku), Some(quantity)) if errors.is_empty() => Ok(Self {
                sku,
                quantity,
                reference,
            }),
            _ => Err(invalid(errors)),
        }
    }

    /// The fingerprint of this order under [`ORDER_OPERATION`]: of the
    /// validated members, so `reference` counts only when it was sent (an
    /// order without one keeps the fingerprint it always had). The same as
    /// [`NewOrder::fingerprint_for`]`(&ORDER_OPERATION)`.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint_for(&ORDER_OPERATION)
    }

    /// The fingerprint of this body under `operation` (such as
    /// [`PURCHASE_OPERATION`], whose body is a `NewOrder`): of the validated
    /// members, `reference` only when it was sent, as in
    /// [`NewOrder::fingerprint`]. The same body under two operations has two
    /// fingerprints.
    ///
    /// ```
    /// use idemkey_core::{NewOrder, ORDER_OPERATION, PURCHASE_OPERATION};
    /// let order = NewOrder::from_json(br#"{"sku":"LIBRO-TS","quantity":2}"#).unwrap();
    /// assert_eq!(order.fingerprint_for(&ORDER_OPERATION), order.fingerprint());
    /// assert_ne!(order.fingerprint_for(&PURCHASE_OPERATION), order.fingerprint());
    /// ```
    pub fn fingerprint_for(&self, operation: &OperationId) -> Fingerprint {
        let mut members = Map::new();
        members.insert("quantity".to_owned(), Value::from(self.quantity));
        members.insert("sku".to_owned(), Value::from(self.sku.as_str()));
        if let Some(reference) = &self.reference {
            members.insert("reference".to_owned(), Value::from(reference.as_str()));
        }
        Fingerprint::of_value(operation, &Value::Object(members))
    }
}

/// A request body parsed as a top-level object, with the names that appear
/// more than once (a plain `Value` would silently keep the last copy). Any
/// other JSON value fails with a `Data` error (see [`NewOrder::from_json`]).
/// The member names of a top-level JSON object, in order and with
/// repetitions (a parsed `Value` keeps only the last copy). `text` must
/// already be known to be valid JSON.
fn top_level_names(text: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut expect_name = false;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    // Skip the escaped character, whatever it is.
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && expect_name {
                    let raw = text.get(start..=i).unwrap_or_default();
                    // Decoded as a `Value`, the one JSON reader the browser
                    // build already carries.
                    if let Ok(Value::String(name)) = serde_json::from_slice::<Value>(raw) {
                        names.push(name);
                    }
                    expect_name = false;
                }
            }
            b'{' | b'[' => {
                depth += 1;
                expect_name = depth == 1 && text[i] == b'{';
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expect_name = true,
            _ => {}
        }
        i += 1;
    }
    names
}

pub(crate) fn invalid(errors: Vec<FieldError>) -> Problem {
    Problem::new(
        ProblemCode::RequestInvalid,
        "The request body does not match the contract of POST /orders.",
    )
    .with_errors(errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_members_are_listed_with_escaped_pointers() {
        let err = NewOrder::from_json(br#"{"sku":"A","quantity":1,"a/b":1,"c~":2}"#).unwrap_err();
        let pointers: Vec<_> = err.errors().iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/a~1b", "/c~0"]);
    }

    #[test]
    fn top_level_names_keep_repeats_and_skip_nested_and_string_content() {
        let body = br#"{"a":{"a":1,"z":[{"q":2}]},"b":"a,\"x\":{","\u0061":2}"#;
        assert_eq!(top_level_names(body), ["a", "b", "a"]);
        let err = NewOrder::from_json(br#"{"sku":"A","quantity":1,"\u0073ku":"B"}"#).unwrap_err();
        assert_eq!(err.errors()[0].pointer, "/sku");
    }

    #[test]
    fn fingerprint_matches_generic_path() {
        let mut order = NewOrder {
            sku: "LIBRO-TS".into(),
            quantity: 2,
            reference: None,
        };
        assert_eq!(
            order.fingerprint(),
            Fingerprint::of(&ORDER_OPERATION, &order).unwrap()
        );
        let without = order.fingerprint();
        order.reference = Some("PO-1001".into());
        assert_eq!(
            order.fingerprint(),
            Fingerprint::of(&ORDER_OPERATION, &order).unwrap()
        );
        assert_ne!(order.fingerprint(), without);
    }

    #[test]
    fn purchase_fingerprint_matches_generic_path_and_differs_from_the_order() {
        for reference in [None, Some("PO-1001".to_owned())] {
            let order = NewOrder {
                sku: "LIBRO-TS".into(),
                quantity: 2,
                reference,
            };
            let purchase = order.fingerprint_for(&PURCHASE_OPERATION);
            assert_eq!(
                purchase,
                Fingerprint::of(&PURCHASE_OPERATION, &order).unwrap()
            );
            assert_ne!(purchase, order.fingerprint());
            assert_eq!(order.fingerprint_for(&ORDER_OPERATION), order.fingerprint());
        }
        assert_ne!(PURCHASE_OPERATION, ORDER_OPERATION);
    }

    #[test]
    fn rejects_non_integer_and_large_quantities() {
        for body in [
            &br#"{"sku":"A","quantity":2.0}"#[..],
            br#"{"sku":"A","quantity":256}"#,
            br#"{"sku":"A","quantity":-1}"#,
            br#"{"sku":"A","quantity":"2"}"#,
        ] {
            assert!(NewOrder::from_json(body).is_err());
        }
    }
}

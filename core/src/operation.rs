//! Versioned operation identifiers, e.g. `POST /orders:v1`.
//!
//! The operation is part of the uniqueness scope `(account, operation, key)`
//! and of every fingerprint, so the same key sent to two endpoints, or to two
//! versions of one endpoint's contract, never collides.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Longest operation id accepted, in bytes.
pub const MAX_OPERATION_LEN: usize = 128;

/// A validated operation id: printable ASCII (1 to 128 bytes) ending in a
/// version suffix `:v<N>` (N from 1 to 9999, no leading zero), e.g.
/// `POST /orders:v1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(Cow<'static, str>);

/// An operation id that breaks the rules of [`OperationId`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "invalid operation id {0:?}: expected printable ASCII ending in :v<N>, e.g. \"POST /orders:v1\""
)]
pub struct InvalidOperation(pub String);

/// The one validator behind both constructors (`const` so literals are
/// checked at compile time).
const fn is_valid(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > MAX_OPERATION_LEN {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] < 0x20 || b[i] > 0x7e {
            return false;
        }
        i += 1;
    }
    // Find the version suffix ":v<digits>" at the end.
    let mut digits = 0;
    let mut j = b.len();
    while j > 0 && b[j - 1].is_ascii_digit() {
        j -= 1;
        digits += 1;
    }
    digits >= 1
        && digits <= 4
        && j >= 3 // at least one character before ":v"
        && b[j - 1] == b'v'
        && b[j - 2] == b':'
        && b[j] != b'0'
}

impl OperationId {
    /// An operation id from a literal, checked at compile time when used in
    /// a `const`.
    ///
    /// ```
    /// use idemkey_core::OperationId;
    /// const OP: OperationId = OperationId::from_static("POST /orders:v1");
    /// assert_eq!(OP.as_str(), "POST /orders:v1");
    /// ```
    ///
    /// # Panics
    /// If `s` is not a valid operation id (a compile error in `const` context).
    pub const fn from_static(s: &'static str) -> Self {
        assert!(is_valid(s), "invalid operation id");
        Self(Cow::Borrowed(s))
    }

    /// Validates an operation id given at run time.
    pub fn new(s: &str) -> Result<Self, InvalidOperation> {
        if is_valid(s) {
            Ok(Self(Cow::Owned(s.to_owned())))
        } else {
            Err(InvalidOperation(s.to_owned()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for OperationId {
    type Err = InvalidOperation;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_versioned_ids() {
        for ok in [
            "POST /orders:v1",
            "POST /pedidos:v1",
            "x:v9999",
            "PATCH /a/{id}:v12",
        ] {
            assert!(OperationId::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_unversioned_or_odd_ids() {
        for bad in [
            "",
            ":v1",
            "POST /orders",
            "POST /orders:v0",
            "POST /orders:v01",
            "a:v12345",
            "é:v1",
            "a\n:v1",
        ] {
            assert!(OperationId::new(bad).is_err(), "{bad:?}");
        }
    }
}

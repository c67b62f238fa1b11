//! Who a call is for: an API token's hash, the account it resolves to, and
//! the answer for a token that resolves to none.

use idemkey::idempotency::Scope;
use uuid::Uuid;

/// SHA-256 of an API token: the only form in which tokens are stored.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash(pub [u8; 32]);

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Even the hash stays out of logs.
        f.write_str("TokenHash(..)")
    }
}

/// An account's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AccountId(pub Uuid);

impl AccountId {
    /// The scope of this account's idempotency records.
    pub fn scope(self) -> Scope {
        Scope::account(self.0)
    }
}

/// The answer to a call for a caller: the token is unknown, or the result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authed<T> {
    /// The token belongs to no account.
    Unauthorized,
    /// The caller's result.
    Ok(T),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hash_debug_hides_the_bytes() {
        assert_eq!(format!("{:?}", TokenHash([7; 32])), "TokenHash(..)");
    }
}

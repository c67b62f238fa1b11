//! API tokens: how they are made, and the only form in which they are kept.
//!
//! A token is `idk_` followed by 32 random bytes in unpadded base64url. It is
//! shown once, when created; the database holds its SHA-256 only, and the
//! account of a request comes from that hash, never from a header the caller
//! picks. The hash is looked up inside each store statement, so verifying a
//! token costs no extra round trip.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use idemkey_core::bearer_token;
use sha2::{Digest, Sha256};

use crate::db::TokenHash;

/// Prefix of every token, so leaked tokens are easy to recognise.
pub const TOKEN_PREFIX: &str = "idk_";

/// A freshly generated API token. Its `Debug` hides the secret.
pub struct NewToken(String);

impl NewToken {
    /// Draws 32 bytes from the operating system's CSPRNG.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(format!(
            "{TOKEN_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(bytes)
        )))
    }

    /// The token, to show once.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// What the database keeps.
    pub fn hash(&self) -> TokenHash {
        hash_token(&self.0)
    }
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewToken(..)")
    }
}

/// SHA-256 of a token's text.
pub fn hash_token(token: &str) -> TokenHash {
    TokenHash(Sha256::digest(token.as_bytes()).into())
}

/// The hash of the request's bearer token, if it sends exactly one
/// well-formed `Authorization: Bearer` field (the core's syntax).
pub fn bearer_hash(headers: &HeaderMap) -> Option<TokenHash> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    bearer_token(first.as_bytes()).map(hash_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_url_safe() {
        let a = NewToken::generate().unwrap();
        let b = NewToken::generate().unwrap();
        assert_ne!(a.reveal(), b.reveal());
        assert!(a.reveal().starts_with(TOKEN_PREFIX));
        assert_eq!(a.reveal().len(), TOKEN_PREFIX.len() + 43);
        assert!(bearer_token(format!("Bearer {}", a.reveal()).as_bytes()).is_some());
        assert_eq!(format!("{a:?}"), "NewToken(..)");
    }

    #[test]
    fn bearer_hash_reads_one_header() {
        let mut headers = HeaderMap::new();
        assert!(bearer_hash(&headers).is_none());
        headers.insert(AUTHORIZATION, "Bearer idk_abc".parse().unwrap());
        assert_eq!(bearer_hash(&headers), Some(hash_token("idk_abc")));
        headers.append(AUTHORIZATION, "Bearer idk_abc".parse().unwrap());
        assert!(bearer_hash(&headers).is_none());
    }
}

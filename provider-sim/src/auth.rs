//! Who calls: a bearer secret of `--token`, the scope it names, and the
//! middleware that admits a request under that scope or answers 401.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use idemkey::problems::problem_response;
use idemkey_core::{Problem, bearer_token};
use sha2::{Digest as _, Sha256};

/// A bearer secret: kept out of `Debug` (and so out of logs).
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// The secret's characters, for the `Authorization` field.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match bearer_token(format!("Bearer {s}").as_bytes()) {
            Some(token) if token == s => Ok(Self(s.to_owned())),
            _ => Err("a token is 1 to 512 characters of A-Z a-z 0-9 - . _ ~ + / =".into()),
        }
    }
}

/// The scope of a caller: the hex SHA-256 of its bearer secret.
pub fn scope_of(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The authenticated caller's scope, put in the request's extensions.
#[derive(Clone, Debug)]
pub(crate) struct Caller(pub(crate) String);

/// Middleware: the caller's scope from its bearer secret, if it is one of
/// `scopes` (the configured secrets'), or 401.
pub(crate) async fn authenticate(
    State(scopes): State<Arc<HashSet<String>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let scope = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()))
        .map(scope_of)
        .filter(|scope| scopes.contains(scope));
    let Some(scope) = scope else {
        return problem_response(&Problem::unauthorized());
    };
    request.extensions_mut().insert(Caller(scope));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_is_the_hex_sha256_of_the_secret() {
        assert_eq!(
            scope_of("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let secret: Secret = "s3cret-value".parse().expect("a valid secret");
        assert_eq!(format!("{secret:?}"), "Secret(..)");
        assert!("two words".parse::<Secret>().is_err());
        assert!("".parse::<Secret>().is_err());
    }
}

//! The answer to a call for a caller, as a route sees it.

use idemkey::problems::ApiError;
use idemkey_core::Problem;

use crate::db::{Authed, TokenHash};
use crate::state::AppState;

/// The caller's result, or 401 for a token that is unknown or revoked; a
/// token that authenticated is noted for its `last_used_at`.
pub(crate) fn authed<T>(
    state: &AppState,
    token: TokenHash,
    answer: Authed<T>,
) -> Result<T, ApiError> {
    match answer {
        Authed::Unauthorized => Err(Problem::unauthorized().into()),
        Authed::Ok(value) => {
            state.token_usage().note(token);
            Ok(value)
        }
    }
}

//! `GET /account`: the account a bearer token authenticates, so that a
//! client scopes its stored keys by the account itself rather
//! than by a name it was given or a literal.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use idemkey::problems::{ApiError, json_response};
use idemkey_core::Problem;
use serde::Serialize;
use uuid::Uuid;

use super::authed::authed;
use crate::auth::bearer_hash;
use crate::state::AppState;

/// The body: the account's id, stable across its tokens' rotations.
#[derive(Serialize)]
struct AccountBody {
    id: Uuid,
}

/// The caller's account, `{"id": "<uuid>"}`; 401 without a token that
/// authenticates.
pub(super) async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let token = bearer_hash(&headers).ok_or_else(Problem::unauthorized)?;
    let account = authed(&state, token, state.db().account(token).await?)?;
    let body = serde_json::to_string(&AccountBody { id: account.0 }).unwrap_or_default();
    Ok(json_response(StatusCode::OK, body))
}

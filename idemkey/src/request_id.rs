//! A request id per request: `X-Request-Id` kept from the client when it is
//! a short token of safe characters, else a new UUIDv4; set on the request
//! (for handlers), echoed on the response, and recorded as `request_id` in
//! the `request` span that every log line of the request is written in.
//! (Kept by hand: tower-http's `SetRequestId`/`PropagateRequestId` keep any
//! client value as it is, and a client's id goes into our log lines.)

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

/// The header carrying the request id.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-chosen request id kept, in bytes.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The request's id, as a request extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(pub String);

/// Whether a client's request id is kept: 1 to [`MAX_REQUEST_ID_LEN`] bytes
/// of `A-Z a-z 0-9 - _ . : / + =`, so no log line can be forged with it.
pub fn is_acceptable(value: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(b))
}

/// Middleware: assigns the request id and runs the request in its span.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let id = match request.headers().get(&REQUEST_ID_HEADER) {
        Some(v) if is_acceptable(v.as_bytes()) => v.clone(),
        _ => HeaderValue::from_str(&uuid::Uuid::new_v4().to_string())
            .unwrap_or_else(|_| HeaderValue::from_static("unknown")),
    };
    let text = id.to_str().unwrap_or("unknown").to_owned();
    request.headers_mut().insert(REQUEST_ID_HEADER, id.clone());
    request.extensions_mut().insert(RequestId(text.clone()));
    let span = tracing::info_span!("request", request_id = %text);
    let mut response = next.run(request).instrument(span).await;
    response.headers_mut().insert(REQUEST_ID_HEADER, id);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_safe_ids_are_kept() {
        assert!(is_acceptable(b"abc-123_x.y:z/+="));
        assert!(!is_acceptable(b""));
        assert!(!is_acceptable(b"a b"));
        assert!(!is_acceptable(b"a\nlevel=error"));
        assert!(!is_acceptable(&[b'a'; MAX_REQUEST_ID_LEN + 1]));
    }
}

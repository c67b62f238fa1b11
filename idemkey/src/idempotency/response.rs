//! A response as stored for replay, and its conversion to and from HTTP.

#[cfg(feature = "axum")]
use axum::body::Body;
#[cfg(feature = "axum")]
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
#[cfg(feature = "axum")]
use axum::response::Response;
use bytes::Bytes;
#[cfg(feature = "axum")]
use idemkey_core::{REPLAYED_HEADER, is_replayed_header};

/// A response as stored for replay: the status, the allow-listed headers
/// and the body. The body is `None` when it was too large to store: the
/// effect happened, but the response cannot be sent again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte; `None` when it was not stored.
    pub body: Option<Bytes>,
}

impl StoredResponse {
    /// A response with a body and no headers.
    pub fn new(status: u16, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Some(body.into()),
        }
    }

    /// Adds a header (stored as given; lowercase names are expected).
    #[must_use]
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Keeps, of `headers`, those the allowlist `allow` (lowercase names)
    /// admits under the core's rule ([`is_replayed_header`]).
    #[cfg(feature = "axum")]
    pub fn kept_headers(headers: &HeaderMap, allow: &[&str]) -> Vec<(String, String)> {
        headers
            .iter()
            .filter(|(name, _)| is_replayed_header(name.as_str(), allow))
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect()
    }

    /// Whether a response with this status may be stored: 408, 425, 429
    /// and 5xx say "try again", so storing them would replay a temporary
    /// failure for the whole window; the key is released instead.
    pub const fn is_final(status: u16) -> bool {
        !matches!(status, 408 | 425 | 429 | 500..=599)
    }

    /// The headers as the JSON text stored in the record.
    pub fn headers_json(&self) -> String {
        serde_json::to_string(&self.headers).unwrap_or_else(|_| "[]".to_owned())
    }

    /// The HTTP response; a replay carries `Idempotent-Replayed: true`. A
    /// response stored without its body has none.
    #[cfg(feature = "axum")]
    pub fn to_response(&self, replayed: bool) -> Response {
        let body = self.body.clone().map_or_else(Body::empty, Body::from);
        let mut response = Response::new(body);
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(name, value);
            }
        }
        if replayed {
            headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_statuses_are_not_final() {
        for status in [408, 425, 429, 500, 503, 599] {
            assert!(!StoredResponse::is_final(status), "{status}");
        }
        for status in [200, 201, 204, 400, 404, 409, 410, 422] {
            assert!(StoredResponse::is_final(status), "{status}");
        }
    }

    #[cfg(feature = "axum")]
    #[test]
    fn replays_are_marked_and_keep_the_stored_headers() {
        let r = StoredResponse::new(201, "x").with_header("location", "/a");
        let response = r.to_response(true);
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()["location"], "/a");
        assert_eq!(response.headers()[REPLAYED_HEADER], "true");
        assert!(!r.to_response(false).headers().contains_key(REPLAYED_HEADER));
    }

    #[cfg(feature = "axum")]
    #[test]
    fn only_allow_listed_headers_are_kept() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert("set-cookie", HeaderValue::from_static("a=b"));
        headers.insert("x-other", HeaderValue::from_static("1"));
        let kept = StoredResponse::kept_headers(&headers, &["content-type", "set-cookie"]);
        assert_eq!(
            kept,
            vec![("content-type".to_owned(), "text/plain".to_owned())]
        );
    }
}

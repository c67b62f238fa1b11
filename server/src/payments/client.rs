//! [`ProviderClient`]: the HTTP client of a payment provider that speaks
//! `idemkey-server provider`'s API (`POST /charges` under an
//! `Idempotency-Key`, `GET /charges/{key}`), as the outbox's delivery worker
//! uses it.
//!
//! Every call ends in one [`Attempt`], and the classification is the whole
//! point: a caller may send a charge again only when the provider surely
//! did not apply it ([`Attempt::Retry`]), and must **look it up** first when
//! the request may have reached it ([`Attempt::Uncertain`]). A connection
//! refused happened before anything was sent; a timeout or a connection
//! closed after the request was written may have charged.
//!
//! The bearer secret is sent in a sensitive header and never appears in a
//! `Debug` output, a log line or an [`Attempt`]'s reason.

use std::time::Duration;

use axum::http::HeaderValue;
use idemkey_core::{IdempotencyKey, KEY_HEADER, KeyProfile, Problem, parse_retry_after};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use serde::Serialize;
use thiserror::Error;
use tracing::debug;
use uuid::Uuid;

/// The outcome of one call to the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The provider holds this charge (made now, replayed, or found).
    Charged {
        /// The provider's charge id (`ch_…`).
        charge_id: String,
    },
    /// A lookup found no charge under the key: sending it is safe.
    NotFound,
    /// Refused for good (402, or another 4xx such as a bad request or a bad
    /// secret): sending it again gets the same answer.
    Declined {
        /// The provider's problem code and detail, or the status.
        reason: String,
    },
    /// Surely not applied (connection refused, 409 in progress, 429, 5xx):
    /// send it again, after `after` when the provider said so.
    Retry {
        /// The provider's `Retry-After`, if any.
        after: Option<Duration>,
        /// What happened.
        reason: String,
    },
    /// Sent, but no answer (a timeout, the connection closed after the
    /// request was written, a 2xx whose body did not arrive, a 410 for a
    /// key past the provider's replay window): the charge may exist; look
    /// it up before sending it again.
    Uncertain {
        /// What happened.
        reason: String,
    },
}

/// Why a [`ProviderClient`] cannot be built.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The secret cannot be sent in an `Authorization` field.
    #[error("the provider token is not a valid bearer token")]
    InvalidToken,
    /// The base URL is not an absolute http(s) URL.
    #[error("the provider URL must be http://host:port (optionally with a path)")]
    InvalidUrl,
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// A client of one provider with one secret. Cheap to clone (the
/// connection pool is shared).
#[derive(Clone)]
pub struct ProviderClient {
    http: reqwest::Client,
    base: String,
    authorization: HeaderValue,
}

impl std::fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct ChargeRequest<'a> {
    order_id: String,
    amount_cents: i64,
    currency: &'a str,
}

impl ProviderClient {
    /// A client of the provider at `base_url` (e.g. `http://127.0.0.1:3002`)
    /// sending `token` as its bearer secret; each call gives up after
    /// `timeout` (connecting included).
    pub fn new(base_url: &str, token: &str, timeout: Duration) -> Result<Self, ClientError> {
        let base = base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://"))
            || reqwest::Url::parse(base).is_err()
        {
            return Err(ClientError::InvalidUrl);
        }
        if idemkey_core::bearer_token(format!("Bearer {token}").as_bytes()) != Some(token) {
            return Err(ClientError::InvalidToken);
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientError::InvalidToken)?;
        authorization.set_sensitive(true);
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // A redirect would turn the POST into another request.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError::Http(e.without_url().to_string()))?;
        Ok(Self {
            http,
            base: base.to_owned(),
            authorization,
        })
    }

    /// `POST /charges` under `key` (the key's characters, e.g. a
    /// downstream key's UUID): the same key always means the same charge.
    pub async fn charge(
        &self,
        key: &str,
        order_id: Uuid,
        amount_cents: i64,
        currency: &str,
    ) -> Attempt {
        let key = match checked_key(key) {
            Ok(key) => key,
            Err(attempt) => return attempt,
        };
        let body = ChargeRequest {
            order_id: order_id.to_string(),
            amount_cents,
            currency,
        };
        let request = self
            .http
            .post(format!("{}/charges", self.base))
            .header(AUTHORIZATION, self.authorization.clone())
            .header(KEY_HEADER, key.to_header_value())
            .header(CONTENT_TYPE, "application/json")
            .json(&body);
        classify(request.send().await, false).await
    }

    /// `GET /charges/{key}`: the charge made under `key`, if any.
    pub async fn lookup(&self, key: &str) -> Attempt {
        let key = match checked_key(key) {
            Ok(key) => key,
            Err(attempt) => return attempt,
        };
        let path =
            percent_encoding::utf8_percent_encode(key.as_str(), percent_encoding::NON_ALPHANUMERIC);
        let request = self
            .http
            .get(format!("{}/charges/{path}", self.base))
            .header(AUTHORIZATION, self.authorization.clone());
        classify(request.send().await, true).await
    }
}

/// The key as the provider reads it; a key it would refuse is a permanent
/// refusal, found before anything is sent.
fn checked_key(key: &str) -> Result<IdempotencyKey, Attempt> {
    let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
    IdempotencyKey::parse(quoted.as_bytes(), KeyProfile::Strict).map_err(|err| Attempt::Declined {
        reason: format!("the idempotency key cannot be sent: {}", err.reason()),
    })
}

/// What a request and its answer mean (see [`Attempt`]).
async fn classify(sent: reqwest::Result<reqwest::Response>, lookup: bool) -> Attempt {
    let response = match sent {
        Ok(response) => response,
        Err(err) => return transport(&err),
    };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, crate::display_now()))
        .map(Duration::from_millis);
    let body = match response.text().await {
        Ok(body) => body,
        // The status arrived, the rest did not: for a 2xx the charge exists.
        Err(err) if status.is_success() => return transport(&err),
        Err(_) => String::new(),
    };
    if status.is_success() {
        let id = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_owned));
        return match id {
            Some(charge_id) => Attempt::Charged { charge_id },
            None => Attempt::Uncertain {
                reason: format!("{status} without a charge id"),
            },
        };
    }
    let reason = problem_reason(status, &body);
    match status {
        StatusCode::NOT_FOUND if lookup => Attempt::NotFound,
        // Past the provider's replay window: the charge may exist.
        StatusCode::GONE => Attempt::Uncertain { reason },
        StatusCode::CONFLICT
        | StatusCode::TOO_MANY_REQUESTS
        | StatusCode::REQUEST_TIMEOUT
        | StatusCode::TOO_EARLY => Attempt::Retry {
            after: retry_after,
            reason,
        },
        s if s.is_server_error() => Attempt::Retry {
            after: retry_after,
            reason,
        },
        _ => Attempt::Declined { reason },
    }
}

/// `code: detail` of a problem body, else the status.
fn problem_reason(status: StatusCode, body: &str) -> String {
    match Problem::from_json(body) {
        Some(problem) => match (problem.code, problem.detail) {
            (Some(code), Some(detail)) => format!("{code}: {detail}"),
            (Some(code), None) => code,
            (None, Some(detail)) => format!("{status}: {detail}"),
            (None, None) => status.to_string(),
        },
        None => status.to_string(),
    }
}

/// A request that got no status: refused before sending (safe to send
/// again) or lost after it (uncertain).
fn transport(err: &reqwest::Error) -> Attempt {
    let detail = describe(err);
    debug!(error = %detail, "provider request failed");
    if err.is_connect() {
        Attempt::Retry {
            after: None,
            reason: format!("cannot connect: {detail}"),
        }
    } else if err.is_timeout() {
        Attempt::Uncertain {
            reason: format!("no answer in time: {detail}"),
        }
    } else {
        Attempt::Uncertain {
            reason: format!("connection lost after sending: {detail}"),
        }
    }
}

/// The error and its causes, without the URL (which may carry
/// credentials).
fn describe(err: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = source {
        parts.push(e.to_string());
        source = e.source();
    }
    if parts.is_empty() {
        parts.push(if err.is_timeout() {
            "timed out".to_owned()
        } else {
            "request failed".to_owned()
        });
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sent_as_sf_strings_and_bad_ones_refused_before_sending() {
        let key = checked_key("8e03978e-40d5-43e8-bc93-6894a57f9324").expect("a key");
        assert_eq!(
            key.to_header_value(),
            "\"8e03978e-40d5-43e8-bc93-6894a57f9324\""
        );
        assert!(matches!(checked_key(""), Err(Attempt::Declined { .. })));
        assert!(matches!(checked_key("é"), Err(Attempt::Declined { .. })));
    }

    #[test]
    fn the_secret_stays_out_of_debug() {
        let client = ProviderClient::new("http://127.0.0.1:9", "s3cret", Duration::from_secs(1))
            .expect("a client");
        assert!(!format!("{client:?}").contains("s3cret"));
        assert!(ProviderClient::new("ftp://x", "s", Duration::from_secs(1)).is_err());
        assert!(ProviderClient::new("http://x", "a b", Duration::from_secs(1)).is_err());
    }

    /// What a response with this status, `Retry-After` and body comes to.
    async fn outcome(status: u16, retry_after: Option<&str>, body: &str, lookup: bool) -> Attempt {
        let mut response = axum::http::Response::builder().status(status);
        if let Some(value) = retry_after {
            response = response.header("retry-after", value);
        }
        let response = response.body(body.to_owned()).expect("a response");
        classify(Ok(reqwest::Response::from(response)), lookup).await
    }

    #[tokio::test]
    async fn statuses_are_classified_as_the_contract_says() {
        let problem = |code: &str| format!(r#"{{"code":"{code}","detail":"d"}}"#);
        assert_eq!(
            outcome(201, None, r#"{"id":"ch_1"}"#, false).await,
            Attempt::Charged {
                charge_id: "ch_1".into()
            }
        );
        assert!(matches!(
            outcome(201, None, "{}", false).await,
            Attempt::Uncertain { .. }
        ));
        assert_eq!(
            outcome(404, None, &problem("not-found"), true).await,
            Attempt::NotFound
        );
        assert_eq!(
            outcome(404, None, &problem("not-found"), false).await,
            Attempt::Declined {
                reason: "not-found: d".into()
            }
        );
        for (status, code) in [
            (402, "payment-declined"),
            (400, "request-invalid"),
            (401, "unauthorized"),
            (422, "idempotency-key-reused"),
        ] {
            assert_eq!(
                outcome(status, None, &problem(code), false).await,
                Attempt::Declined {
                    reason: format!("{code}: d")
                },
                "{status}"
            );
        }
        for status in [409, 429, 408, 425, 500, 502, 503, 504] {
            assert_eq!(
                outcome(status, Some("3"), &problem("x"), false).await,
                Attempt::Retry {
                    after: Some(Duration::from_secs(3)),
                    reason: "x: d".into()
                },
                "{status}"
            );
        }
        assert!(matches!(
            outcome(503, Some("soon"), "", false).await,
            Attempt::Retry { after: None, .. }
        ));
        assert!(matches!(
            outcome(410, None, &problem("idempotency-key-expired"), false).await,
            Attempt::Uncertain { .. }
        ));
        assert!(matches!(
            outcome(302, None, "", false).await,
            Attempt::Declined { .. }
        ));
    }

    #[test]
    fn reasons_come_from_the_problem() {
        let body = r#"{"code":"payment-declined","detail":"No."}"#;
        assert_eq!(
            problem_reason(StatusCode::PAYMENT_REQUIRED, body),
            "payment-declined: No."
        );
        assert_eq!(
            problem_reason(StatusCode::BAD_GATEWAY, "<html>"),
            "502 Bad Gateway"
        );
    }
}

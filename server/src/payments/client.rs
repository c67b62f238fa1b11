//! [`ProviderClient`]: the HTTP client of a payment provider that speaks
//! `idemkey-server provider`'s API, as the outbox's delivery worker and a
//! purchase's steps use it: `POST /charges`, `/confirmations` and `/refunds`
//! under an `Idempotency-Key`, and `GET /{effect}/{key}` to look one up.
//!
//! Every call ends in one classified outcome, and the classification is the
//! whole point: a caller may send an effect again only when the provider
//! surely did not apply it (`Retry`), and must **look it up** first when the
//! request may have reached it (`Uncertain`). A connection refused happened
//! before anything was sent; a timeout or a connection closed after the
//! request was written may have charged (sent, refunded). A charge's calls
//! answer an [`Attempt`] (what the outbox worker matches on); every effect's
//! calls, a charge's included ([`ProviderClient::charge_effect`],
//! [`ProviderClient::lookup_charge`]), answer an [`Effect`], one type for
//! each step of a multi-step purchase: "look it up first when it may have
//! been sent, else send it" is [`Effect::or_send`].
//!
//! The bearer secret is sent in a sensitive header and never appears in a
//! `Debug` output, a log line or an [`Attempt`]'s reason.

use std::future::Future;
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
    Charged(FoundCharge),
    /// A lookup found no charge under the key: sending it is safe.
    NotFound,
    /// Refused for good by the provider itself (402, or another 4xx it
    /// answers with its problem document, such as a bad request): sending
    /// it again gets the same answer. A 401, 403 or 404, or an error page
    /// that is not the provider's problem document, is a [`Attempt::Retry`]:
    /// a secret being rotated or a wrong route says nothing about the
    /// payment.
    Declined {
        /// The provider's problem code and detail, or the status.
        reason: String,
    },
    /// Surely not applied (connection refused, 409 in progress, 429, 5xx,
    /// 401/403/404, an error page that is not the provider's): send it
    /// again, after `after` when the provider said so.
    Retry {
        /// The provider's `Retry-After`, if any, at most
        /// [`MAX_RETRY_AFTER`].
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

/// A charge as the provider answered it: its id and what it says it
/// charged, so a caller can tell its own charge from another one found
/// under the same key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundCharge {
    /// The provider's charge id (`ch_…`).
    pub charge_id: String,
    /// The order it names, if the answer said.
    pub order_id: Option<String>,
    /// Its amount in cents, if the answer said.
    pub amount_cents: Option<i64>,
    /// Its currency, if the answer said.
    pub currency: Option<String>,
}

impl FoundCharge {
    /// A charge known by its id only.
    pub fn id(charge_id: &str) -> Self {
        Self {
            charge_id: charge_id.to_owned(),
            order_id: None,
            amount_cents: None,
            currency: None,
        }
    }

    /// Whether it is the charge of this order, amount and currency: every
    /// one of them present and equal.
    pub fn is_for(&self, order_id: Uuid, amount_cents: i64, currency: &str) -> bool {
        self.order_id
            .as_deref()
            .and_then(|id| Uuid::try_parse(id).ok())
            == Some(order_id)
            && self.amount_cents == Some(amount_cents)
            && self.currency.as_deref() == Some(currency)
    }
}

impl From<Effect<FoundCharge>> for Attempt {
    fn from(effect: Effect<FoundCharge>) -> Self {
        match effect {
            Effect::Delivered(found) => Self::Charged(found),
            Effect::NotFound => Self::NotFound,
            Effect::Refused { reason, .. } => Self::Declined { reason },
            Effect::Retry { after, reason } => Self::Retry { after, reason },
            Effect::Uncertain { reason } => Self::Uncertain { reason },
        }
    }
}

/// The outcome of one call about one effect at the provider (a charge, a
/// confirmation, a refund), classified as [`Attempt`] is: `T` is what the
/// provider answered about the effect ([`FoundCharge`],
/// [`FoundConfirmation`], [`FoundRefund`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect<T> {
    /// The provider holds this effect (made now, replayed, or found). Check
    /// that it is the one meant (`is_for`) before counting it done: a key
    /// reused by mistake finds another.
    Delivered(T),
    /// A lookup found nothing under the key: sending it is safe.
    NotFound,
    /// Refused for good by the provider itself (a 4xx with its problem
    /// document, or a code it documents as final on another status, such
    /// as a refund's 404 `charge-not-found` and 409
    /// `charge-already-refunded`): sending it again gets the same answer.
    Refused {
        /// The provider's problem code, for a caller that treats one
        /// refusal apart (an already refunded charge, say).
        code: Option<String>,
        /// The provider's problem code and detail, or the status.
        reason: String,
    },
    /// Surely not applied (see [`Attempt::Retry`]): send it again, after
    /// `after` when the provider said so.
    Retry {
        /// The provider's `Retry-After`, if any, at most
        /// [`MAX_RETRY_AFTER`].
        after: Option<Duration>,
        /// What happened.
        reason: String,
    },
    /// Sent, but no answer (see [`Attempt::Uncertain`]): the effect may
    /// exist; look it up before sending it again.
    Uncertain {
        /// What happened.
        reason: String,
    },
}

impl<T> Effect<T> {
    /// This lookup's outcome, or, when it found nothing, the outcome of
    /// `send`: the step of a purchase whose effect may have been sent
    /// (an earlier attempt was uncertain) looks it up and sends it only if
    /// it is not there. A lookup that failed (retry, uncertain) is that
    /// step's outcome: nothing is sent until the provider says "none".
    ///
    /// ```no_run
    /// # use idemkey_server::payments::client::{Effect, ProviderClient};
    /// # async fn step(client: &ProviderClient, maybe_sent: bool, key: &str) {
    /// let (charge, amount) = ("ch_8e03978e40d543e8bc936894a57f9324", 5980);
    /// let outcome = if maybe_sent {
    ///     let sent = client.refund(key, charge, amount);
    ///     client.lookup_refund(key).await.or_send(sent).await
    /// } else {
    ///     client.refund(key, charge, amount).await
    /// };
    /// if let Effect::Delivered(refund) = &outcome {
    ///     assert!(refund.is_for(charge, amount));
    /// }
    /// # }
    /// ```
    pub async fn or_send(self, send: impl Future<Output = Self>) -> Self {
        match self {
            Self::NotFound => send.await,
            found_or_failed => found_or_failed,
        }
    }
}

/// What a 2xx answer says about one effect.
trait Found: Sized {
    /// What the answer must hold, for a reason: `a charge id`.
    const ID: &'static str;

    /// The effect in a JSON answer; `None` without its id.
    fn from_answer(answer: &serde_json::Value) -> Option<Self>;
}

impl Found for FoundCharge {
    const ID: &'static str = "a charge id";

    fn from_answer(v: &serde_json::Value) -> Option<Self> {
        Some(Self {
            charge_id: v["id"].as_str()?.to_owned(),
            order_id: v["order_id"].as_str().map(str::to_owned),
            amount_cents: v["amount_cents"].as_i64(),
            currency: v["currency"].as_str().map(str::to_owned),
        })
    }
}

/// A confirmation as the provider answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundConfirmation {
    /// The provider's confirmation id (`cf_…`).
    pub confirmation_id: String,
    /// The order it names, if the answer said.
    pub order_id: Option<String>,
    /// Its recipient, if the answer said.
    pub recipient: Option<String>,
    /// Its text, if the answer said.
    pub text: Option<String>,
}

impl FoundConfirmation {
    /// Whether it is the confirmation of this order to this recipient
    /// (both present and equal). The text is not compared: a text rendered
    /// again by a later release is still the one confirmation the key sent.
    pub fn is_for(&self, order_id: Uuid, recipient: &str) -> bool {
        self.order_id
            .as_deref()
            .and_then(|id| Uuid::try_parse(id).ok())
            == Some(order_id)
            && self.recipient.as_deref() == Some(recipient)
    }
}

impl Found for FoundConfirmation {
    const ID: &'static str = "a confirmation id";

    fn from_answer(v: &serde_json::Value) -> Option<Self> {
        Some(Self {
            confirmation_id: v["id"].as_str()?.to_owned(),
            order_id: v["order_id"].as_str().map(str::to_owned),
            recipient: v["recipient"].as_str().map(str::to_owned),
            text: v["text"].as_str().map(str::to_owned),
        })
    }
}

/// A refund as the provider answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRefund {
    /// The provider's refund id (`re_…`).
    pub refund_id: String,
    /// The charge it refunds (`ch_…`), if the answer said.
    pub charge_id: Option<String>,
    /// The order of that charge, if the answer said.
    pub order_id: Option<String>,
    /// The amount given back in cents, if the answer said.
    pub amount_cents: Option<i64>,
    /// Its currency, if the answer said.
    pub currency: Option<String>,
}

impl FoundRefund {
    /// Whether it refunds this charge by this amount (both present and
    /// equal).
    pub fn is_for(&self, charge_id: &str, amount_cents: i64) -> bool {
        self.charge_id.as_deref() == Some(charge_id) && self.amount_cents == Some(amount_cents)
    }
}

impl Found for FoundRefund {
    const ID: &'static str = "a refund id";

    fn from_answer(v: &serde_json::Value) -> Option<Self> {
        Some(Self {
            refund_id: v["id"].as_str()?.to_owned(),
            charge_id: v["charge_id"].as_str().map(str::to_owned),
            order_id: v["order_id"].as_str().map(str::to_owned),
            amount_cents: v["amount_cents"].as_i64(),
            currency: v["currency"].as_str().map(str::to_owned),
        })
    }
}

/// The codes a provider answers a refund with that are decisions whatever
/// their status (a 404 or a 409 is otherwise not one: a wrong route, a
/// request in progress).
/// The provider's problem type for a charge it does not know (its
/// contract; the simulator answers the same).
const CHARGE_NOT_FOUND: &str = "charge-not-found";
/// The provider's problem type for a charge refunded before.
const CHARGE_ALREADY_REFUNDED: &str = "charge-already-refunded";

const REFUND_DECISIONS: &[&str] = &[CHARGE_NOT_FOUND, CHARGE_ALREADY_REFUNDED];

/// The longest `Retry-After` honoured: a larger (or absurd) value waits
/// this long, so a provider's answer can neither park a message for years
/// nor overflow a timestamp, and a retry stays well inside the provider's
/// key retention.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

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

/// `url` without its userinfo (`https://user:secret@host` becomes
/// `https://***@host`), for logs and messages: a `--payments-url` may carry
/// credentials, and they never reach a log line, an error or `/metrics`.
pub fn redacted_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return if url.contains('@') {
            "***".to_owned()
        } else {
            url.to_owned()
        };
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}://***@{}", &url[..scheme_end], &rest[at + 1..]),
        None => url.to_owned(),
    }
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
            .field("base", &redacted_url(&self.base))
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct ChargeRequest<'a> {
    order_id: String,
    amount_cents: i64,
    currency: &'a str,
}

#[derive(Serialize)]
struct ConfirmationRequest<'a> {
    order_id: String,
    recipient: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
struct RefundRequest<'a> {
    charge_id: &'a str,
    amount_cents: i64,
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
            // One client per process, shared by its workers and steps: its
            // connections are kept alive and reused (a worker's concurrent
            // calls each take one from the pool), and a request goes out
            // without waiting for Nagle.
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
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
        self.charge_effect(key, order_id, amount_cents, currency)
            .await
            .into()
    }

    /// `GET /charges/{key}`: the charge made under `key`, if any.
    pub async fn lookup(&self, key: &str) -> Attempt {
        self.lookup_charge(key).await.into()
    }

    /// [`ProviderClient::charge`] as an [`Effect`], the type of every
    /// effect's calls (a refusal keeps its problem code).
    pub async fn charge_effect(
        &self,
        key: &str,
        order_id: Uuid,
        amount_cents: i64,
        currency: &str,
    ) -> Effect<FoundCharge> {
        let body = ChargeRequest {
            order_id: order_id.to_string(),
            amount_cents,
            currency,
        };
        self.send("charges", key, &body, &[]).await
    }

    /// [`ProviderClient::lookup`] as an [`Effect`].
    pub async fn lookup_charge(&self, key: &str) -> Effect<FoundCharge> {
        self.look_up("charges", key).await
    }

    /// `POST /confirmations` under `key`: the provider's mail sink keeps one
    /// confirmation per key, so the same key always means the same
    /// message, sent once.
    pub async fn confirm(
        &self,
        key: &str,
        order_id: Uuid,
        recipient: &str,
        text: &str,
    ) -> Effect<FoundConfirmation> {
        let body = ConfirmationRequest {
            order_id: order_id.to_string(),
            recipient,
            text,
        };
        self.send("confirmations", key, &body, &[]).await
    }

    /// `GET /confirmations/{key}`: the confirmation sent under `key`, if any.
    pub async fn lookup_confirmation(&self, key: &str) -> Effect<FoundConfirmation> {
        self.look_up("confirmations", key).await
    }

    /// `POST /refunds` under `key`: gives back the whole `amount_cents` of
    /// the charge `charge_id` (the provider's `ch_…` id), once. A charge the
    /// caller does not have, another amount, or a charge refunded under
    /// another key is [`Effect::Refused`] with the provider's code
    /// (`charge-not-found`, `refund-amount-mismatch`,
    /// `charge-already-refunded`).
    pub async fn refund(
        &self,
        key: &str,
        charge_id: &str,
        amount_cents: i64,
    ) -> Effect<FoundRefund> {
        let body = RefundRequest {
            charge_id,
            amount_cents,
        };
        self.send("refunds", key, &body, REFUND_DECISIONS).await
    }

    /// `GET /refunds/{key}`: the refund made under `key`, if any.
    pub async fn lookup_refund(&self, key: &str) -> Effect<FoundRefund> {
        self.look_up("refunds", key).await
    }

    /// `POST /{collection}` of `body` under `key`; `decisions` are the
    /// problem codes that refuse for good whatever their status.
    async fn send<T: Found>(
        &self,
        collection: &str,
        key: &str,
        body: &impl Serialize,
        decisions: &[&str],
    ) -> Effect<T> {
        let key = match checked_key(key) {
            Ok(key) => key,
            Err(refused) => return refused,
        };
        let request = self
            .http
            .post(format!("{}/{collection}", self.base))
            .header(AUTHORIZATION, self.authorization.clone())
            .header(KEY_HEADER, key.to_header_value())
            .header(CONTENT_TYPE, "application/json")
            .json(body);
        classify_effect(request.send().await, false, decisions).await
    }

    /// `GET /{collection}/{key}`.
    async fn look_up<T: Found>(&self, collection: &str, key: &str) -> Effect<T> {
        let key = match checked_key(key) {
            Ok(key) => key,
            Err(refused) => return refused,
        };
        let path =
            percent_encoding::utf8_percent_encode(key.as_str(), percent_encoding::NON_ALPHANUMERIC);
        let request = self
            .http
            .get(format!("{}/{collection}/{path}", self.base))
            .header(AUTHORIZATION, self.authorization.clone());
        classify_effect(request.send().await, true, &[]).await
    }
}

/// The key as the provider reads it; a key it would refuse is a permanent
/// refusal, found before anything is sent.
fn checked_key<T>(key: &str) -> Result<IdempotencyKey, Effect<T>> {
    let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
    IdempotencyKey::parse(quoted.as_bytes(), KeyProfile::Strict).map_err(|err| Effect::Refused {
        code: None,
        reason: format!("the idempotency key cannot be sent: {}", err.reason()),
    })
}

/// What a charge request and its answer mean (see [`Attempt`]).
#[cfg(test)]
async fn classify(sent: reqwest::Result<reqwest::Response>, lookup: bool) -> Attempt {
    classify_effect::<FoundCharge>(sent, lookup, &[])
        .await
        .into()
}

/// What a request and its answer mean (see [`Effect`]); `decisions` as in
/// [`ProviderClient::send`].
async fn classify_effect<T: Found>(
    sent: reqwest::Result<reqwest::Response>,
    lookup: bool,
    decisions: &[&str],
) -> Effect<T> {
    let response = match sent {
        Ok(response) => response,
        Err(err) => return transport(&err),
    };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, crate::shown_clock::display_now()))
        .map(|ms| Duration::from_millis(ms).min(MAX_RETRY_AFTER));
    let body = match response.text().await {
        Ok(body) => body,
        // The status arrived, the rest did not: for a 2xx the charge exists.
        Err(err) if status.is_success() => return transport(&err),
        Err(_) => String::new(),
    };
    if status.is_success() {
        let value = serde_json::from_str::<serde_json::Value>(&body).ok();
        return match value.as_ref().and_then(T::from_answer) {
            Some(found) => Effect::Delivered(found),
            None => Effect::Uncertain {
                reason: format!("{status} without {}", T::ID),
            },
        };
    }
    let problem = Problem::from_json(&body).filter(|p| p.code.is_some());
    let code = problem.as_ref().and_then(|p| p.code.clone());
    let reason = problem_reason(status, &body);
    let retry = |reason: String| Effect::Retry {
        after: retry_after,
        reason,
    };
    match status {
        // Only the provider's own "no such effect" proves there is none; a
        // 404 page of a proxy or a wrong path proves nothing.
        StatusCode::NOT_FOUND if lookup && problem.is_some() => Effect::NotFound,
        // A refusal the provider documents as final though its status is
        // not (a refund's charge-not-found, charge-already-refunded).
        s if s.is_client_error() && code.as_deref().is_some_and(|c| decisions.contains(&c)) => {
            Effect::Refused { code, reason }
        }
        // Past the provider's replay window: the effect may exist.
        StatusCode::GONE => Effect::Uncertain { reason },
        StatusCode::CONFLICT
        | StatusCode::TOO_MANY_REQUESTS
        | StatusCode::REQUEST_TIMEOUT
        | StatusCode::TOO_EARLY => retry(reason),
        s if s.is_server_error() => retry(reason),
        // Our secret or the route is wrong (a rotation, a proxy, a moved
        // endpoint): nothing was charged, and an operator can fix it.
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
            retry(format!("the provider did not take the request ({reason})"))
        }
        // Only the provider's problem document is its decision; an HTML
        // error page or an empty body came from something in between.
        s if s.is_client_error() && problem.is_some() => Effect::Refused { code, reason },
        _ => retry(format!("not an answer of the provider ({reason})")),
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
fn transport<T>(err: &reqwest::Error) -> Effect<T> {
    let detail = describe(err);
    debug!(error = %detail, "provider request failed");
    if err.is_connect() {
        Effect::Retry {
            after: None,
            reason: format!("cannot connect: {detail}"),
        }
    } else if err.is_timeout() {
        Effect::Uncertain {
            reason: format!("no answer in time: {detail}"),
        }
    } else {
        Effect::Uncertain {
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
        let key =
            checked_key::<FoundCharge>("8e03978e-40d5-43e8-bc93-6894a57f9324").expect("a key");
        assert_eq!(
            key.to_header_value(),
            "\"8e03978e-40d5-43e8-bc93-6894a57f9324\""
        );
        for bad in ["", "é"] {
            assert!(matches!(
                checked_key::<FoundCharge>(bad),
                Err(Effect::Refused { code: None, .. })
            ));
        }
    }

    #[test]
    fn credentials_in_a_url_are_redacted() {
        for (url, shown) in [
            (
                "https://user:s3cret@pay.example/v1",
                "https://***@pay.example/v1",
            ),
            ("http://s3cret@127.0.0.1:9", "http://***@127.0.0.1:9"),
            ("http://a:b@c:s3cret@host/x@y", "http://***@host/x@y"),
            ("http://127.0.0.1:9/p?q=a@b", "http://127.0.0.1:9/p?q=a@b"),
            ("user:s3cret@host", "***"),
            ("http://host", "http://host"),
        ] {
            assert_eq!(redacted_url(url), shown);
        }
        let client = ProviderClient::new(
            "http://user:s3cret@127.0.0.1:9",
            "token",
            Duration::from_secs(1),
        )
        .expect("a client");
        assert!(!format!("{client:?}").contains("s3cret"));
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
            Attempt::Charged(FoundCharge::id("ch_1"))
        );
        let body = r#"{"id":"ch_2","order_id":"8e03978e-40d5-43e8-bc93-6894a57f9324","amount_cents":5980,"currency":"EUR"}"#;
        let Attempt::Charged(found) = outcome(200, None, body, true).await else {
            panic!("a charge");
        };
        let order = Uuid::parse_str("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap();
        assert!(found.is_for(order, 5980, "EUR"));
        assert!(!found.is_for(order, 5981, "EUR"));
        assert!(!found.is_for(Uuid::nil(), 5980, "EUR"));
        assert!(!FoundCharge::id("ch_1").is_for(order, 5980, "EUR"));
        assert!(matches!(
            outcome(201, None, "{}", false).await,
            Attempt::Uncertain { .. }
        ));
        assert_eq!(
            outcome(404, None, &problem("not-found"), true).await,
            Attempt::NotFound
        );
        for (status, code) in [
            (402, "payment-declined"),
            (400, "request-invalid"),
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
        // Auth and routing failures, and error pages that are not the
        // provider's problem document, are not decisions about the payment.
        let html = "<html><body>Bad Gateway</body></html>";
        for (status, body, lookup) in [
            (401, problem("unauthorized"), false),
            (403, problem("forbidden"), false),
            (404, problem("not-found"), false),
            (404, html.to_owned(), true),
            (404, String::new(), true),
            (400, html.to_owned(), false),
            (402, html.to_owned(), false),
            (413, String::new(), false),
            (302, String::new(), false),
        ] {
            let got = outcome(status, None, &body, lookup).await;
            assert!(
                matches!(got, Attempt::Retry { after: None, .. }),
                "{status} {body:?}: {got:?}"
            );
            assert!(!format!("{got:?}").contains("<html>"), "{got:?}");
        }
        assert!(matches!(
            outcome(503, Some("soon"), "", false).await,
            Attempt::Retry { after: None, .. }
        ));
        assert!(matches!(
            outcome(410, None, &problem("idempotency-key-expired"), false).await,
            Attempt::Uncertain { .. }
        ));
    }

    #[tokio::test]
    async fn a_huge_retry_after_is_capped() {
        for value in [
            "99999999999999999999999",
            "18446744073709551615",
            "315360000",
            "Fri, 31 Dec 9999 23:59:59 GMT",
        ] {
            assert_eq!(
                outcome(503, Some(value), "", false).await,
                Attempt::Retry {
                    after: Some(MAX_RETRY_AFTER),
                    reason: "503 Service Unavailable".into()
                },
                "{value}"
            );
        }
    }

    /// What a response comes to for an effect of type `T`.
    async fn effect<T: Found>(
        status: u16,
        body: &str,
        lookup: bool,
        decisions: &[&str],
    ) -> Effect<T> {
        let response = axum::http::Response::builder()
            .status(status)
            .body(body.to_owned())
            .expect("a response");
        classify_effect(Ok(reqwest::Response::from(response)), lookup, decisions).await
    }

    #[tokio::test]
    async fn confirmations_and_refunds_are_classified_as_charges_are() {
        let problem = |code: &str| format!(r#"{{"code":"{code}","detail":"d"}}"#);
        let order = Uuid::parse_str("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap();
        let body = format!(
            r#"{{"id":"cf_1","order_id":"{order}","recipient":"ana@example.com","text":"t"}}"#
        );
        let Effect::Delivered(found) = effect::<FoundConfirmation>(201, &body, false, &[]).await
        else {
            panic!("a confirmation");
        };
        assert_eq!(found.confirmation_id, "cf_1");
        assert_eq!(found.text.as_deref(), Some("t"));
        assert!(found.is_for(order, "ana@example.com"));
        assert!(!found.is_for(order, "bob@example.com"));
        assert!(!found.is_for(Uuid::nil(), "ana@example.com"));
        let body = r#"{"id":"re_1","charge_id":"ch_1","amount_cents":5980,"currency":"EUR"}"#;
        let Effect::Delivered(found) =
            effect::<FoundRefund>(200, body, true, REFUND_DECISIONS).await
        else {
            panic!("a refund");
        };
        assert!(found.is_for("ch_1", 5980));
        assert!(!found.is_for("ch_1", 5981));
        assert!(!found.is_for("ch_2", 5980));
        assert_eq!(
            effect::<FoundRefund>(201, "{}", false, REFUND_DECISIONS).await,
            Effect::Uncertain {
                reason: "201 Created without a refund id".into()
            }
        );
        assert_eq!(
            effect::<FoundConfirmation>(404, &problem("not-found"), true, &[]).await,
            Effect::NotFound
        );
        // A refund's own refusals are final whatever their status; the same
        // statuses with other codes are what they are for a charge.
        for (status, code) in [
            (404, "charge-not-found"),
            (409, "charge-already-refunded"),
            (422, "refund-amount-mismatch"),
            (422, "idempotency-key-reused"),
            (400, "request-invalid"),
        ] {
            assert_eq!(
                effect::<FoundRefund>(status, &problem(code), false, REFUND_DECISIONS).await,
                Effect::Refused {
                    code: Some(code.into()),
                    reason: format!("{code}: d")
                },
                "{status} {code}"
            );
        }
        for (status, code) in [
            (409, "idempotency-request-in-progress"),
            (404, "not-found"),
            (503, "service-unavailable"),
        ] {
            assert!(
                matches!(
                    effect::<FoundRefund>(status, &problem(code), false, REFUND_DECISIONS).await,
                    Effect::Retry { .. }
                ),
                "{status} {code}"
            );
        }
        // Not a charge's decisions: a charge's 409 is a retry, whatever the code.
        assert!(matches!(
            effect::<FoundCharge>(409, &problem("charge-already-refunded"), false, &[]).await,
            Effect::Retry { .. }
        ));
        assert!(matches!(
            effect::<FoundConfirmation>(410, &problem("idempotency-key-expired"), false, &[]).await,
            Effect::Uncertain { .. }
        ));
    }

    #[tokio::test]
    async fn or_send_sends_only_after_a_lookup_that_found_nothing() {
        let sent = std::sync::atomic::AtomicUsize::new(0);
        let send = || async {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Effect::Delivered("new")
        };
        assert_eq!(
            Effect::NotFound.or_send(send()).await,
            Effect::Delivered("new")
        );
        assert_eq!(
            Effect::Delivered("old").or_send(send()).await,
            Effect::Delivered("old")
        );
        let uncertain = Effect::Uncertain {
            reason: "lost".into(),
        };
        assert_eq!(uncertain.clone().or_send(send()).await, uncertain);
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn an_effect_of_a_charge_is_an_attempt() {
        assert_eq!(
            Attempt::from(Effect::Refused {
                code: Some("payment-declined".into()),
                reason: "payment-declined: no".into()
            }),
            Attempt::Declined {
                reason: "payment-declined: no".into()
            }
        );
        assert_eq!(
            Attempt::from(Effect::Delivered(FoundCharge::id("ch_1"))),
            Attempt::Charged(FoundCharge::id("ch_1"))
        );
        assert_eq!(Attempt::from(Effect::NotFound), Attempt::NotFound);
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

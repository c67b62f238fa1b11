//! Demo mode's switch on the payment provider: `POST
//! /demo/lose-next-charge-response` arms the provider's own one-shot switch
//! (`POST /faults/lose-next` of `idemkey-server provider`), so the next
//! charge commits at the provider and its answer is lost. The delivery
//! worker then sees an uncertain outcome, looks the charge up by its key
//! and finds it: a person watches reconciliation happen in the page, and
//! the order still has exactly one charge.
//!
//! The page never sees the provider's secret: the server forwards with the
//! `--payments-token` it already holds. The route sits with the other
//! `/demo/*` routes, behind their cross-site checks.

use std::time::Duration;

use axum::Extension;
use axum::http::StatusCode;
use axum::response::Response;
use idemkey_core::Problem;
use tracing::{info, warn};

use idemkey::problems::json_response;
use idemkey::problems::{UNAVAILABLE_RETRY_AFTER_SECS, problem_response};

/// How long the forwarded call may take (the provider answers at once).
const ARM_TIMEOUT: Duration = Duration::from_secs(5);

/// Where demo mode's payment provider is and the secret the server knows it
/// by. Added by `main` as an [`axum::Extension`] when `--demo` runs with a
/// `--payments-url`; without it the switch answers 404.
#[derive(Clone)]
pub struct DemoProvider {
    http: reqwest::Client,
    switch_url: String,
    token: String,
}

impl std::fmt::Debug for DemoProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoProvider")
            .field(
                "switch_url",
                &crate::payments::client::redacted_url(&self.switch_url),
            )
            .finish_non_exhaustive()
    }
}

impl DemoProvider {
    /// The switch of the provider at `base_url`, called with `token`.
    pub fn new(base_url: &str, token: &str) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(ARM_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the demo's provider client: {e}"))?;
        Ok(Self {
            http,
            switch_url: format!("{}/faults/lose-next", base_url.trim_end_matches('/')),
            token: token.to_owned(),
        })
    }

    /// Arms the provider's switch; the reason when it did not answer 2xx.
    async fn arm(&self) -> Result<(), String> {
        let response = self
            .http
            .post(&self.switch_url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("the provider answered {}", response.status()))
        }
    }
}

/// `POST /demo/lose-next-charge-response`: 200 `{"armed":true}` once the
/// provider armed its switch; 404 without a provider; 503 (Retry-After)
/// when the provider could not be reached or refused.
pub(super) async fn lose_next_charge_response(
    provider: Option<Extension<DemoProvider>>,
) -> Response {
    let Some(Extension(provider)) = provider else {
        return problem_response(&Problem::not_found());
    };
    match provider.arm().await {
        Ok(()) => {
            info!("demo: the provider loses the next charge's response");
            json_response(StatusCode::OK, r#"{"armed":true}"#.to_owned())
        }
        Err(reason) => {
            warn!(%reason, "demo: cannot arm the provider's lose-next switch");
            problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS))
        }
    }
}

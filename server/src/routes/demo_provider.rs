//! Demo mode's switches on the payment provider: each arms the provider's
//! own one-shot switch (`POST /faults/lose-next?endpoint=…` of
//! `idemkey-server provider`) for one endpoint, so the next effect of that
//! endpoint commits at the provider and its answer is lost:
//!
//! - `POST /demo/lose-next-step-response?step=charge|confirm`: a purchase's
//!   external step (`charge`: the provider's `charges`, which an order's
//!   charge uses too; `confirm`: its `confirmations`);
//! - `POST /demo/lose-next-charge-response`: the charge (the page's older
//!   switch, kept: the same as `?step=charge`).
//!
//! The worker then sees an uncertain outcome, looks the effect up by the
//! step's key and finds it: a person watches reconciliation happen in the
//! page, and there is still exactly one charge (or confirmation). The
//! provider keeps one switch: arming another endpoint replaces it.
//!
//! The page never sees the provider's secret: the server forwards with the
//! `--payments-token` it already holds. The routes sit with the other
//! `/demo/*` routes, behind their cross-site checks.

use std::time::Duration;

use axum::Extension;
use axum::extract::RawQuery;
use axum::http::StatusCode;
use axum::response::Response;
use idemkey_core::{Problem, ProblemCode};
use tracing::{info, warn};

use idemkey::problems::json_response;
use idemkey::problems::{UNAVAILABLE_RETRY_AFTER_SECS, problem_response};

/// How long the forwarded call may take (the provider answers at once).
const ARM_TIMEOUT: Duration = Duration::from_secs(5);

/// A purchase's external step whose next answer the demo can lose, and the
/// provider's endpoint it calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemoStep {
    /// `charge`: the provider's `charges` (an order's charge too).
    Charge,
    /// `confirm`: the provider's `confirmations` (its mail sink).
    Confirm,
}

impl DemoStep {
    /// Every step with a switch, in the purchase's order.
    pub const ALL: [Self; 2] = [Self::Charge, Self::Confirm];

    /// The step's name in a purchase's state document (`?step=`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Charge => "charge",
            Self::Confirm => "confirm",
        }
    }

    /// The provider's endpoint (`POST /faults/lose-next?endpoint=`).
    pub const fn endpoint(self) -> &'static str {
        match self {
            Self::Charge => "charges",
            Self::Confirm => "confirmations",
        }
    }

    /// The step named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Where demo mode's payment provider is and the secret the server knows it
/// by. Added by `main` as an [`axum::Extension`] when `--demo` runs with a
/// `--payments-url`; without it the switches answer 404.
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

    /// Arms the provider's switch for `step`'s endpoint; the reason when it
    /// did not answer 2xx.
    async fn arm(&self, step: DemoStep) -> Result<(), String> {
        let response = self
            .http
            .post(&self.switch_url)
            .query(&[("endpoint", step.endpoint())])
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

/// Arms `step`'s switch and answers `body` (200) once the provider did;
/// 404 without a provider; 503 (Retry-After) when the provider could not be
/// reached or refused.
async fn arm_step(
    provider: Option<Extension<DemoProvider>>,
    step: DemoStep,
    body: String,
) -> Response {
    let Some(Extension(provider)) = provider else {
        return problem_response(&Problem::not_found());
    };
    match provider.arm(step).await {
        Ok(()) => {
            info!(
                step = step.name(),
                endpoint = step.endpoint(),
                "demo: the provider loses the next answer of one endpoint"
            );
            json_response(StatusCode::OK, body)
        }
        Err(reason) => {
            warn!(%reason, step = step.name(), "demo: cannot arm the provider's lose-next switch");
            problem_response(&Problem::service_unavailable(UNAVAILABLE_RETRY_AFTER_SECS))
        }
    }
}

/// `POST /demo/lose-next-charge-response`: the charge's switch (the
/// provider's `charges` only), 200 `{"armed":true}`; otherwise as
/// [`lose_next_step_response`].
pub(super) async fn lose_next_charge_response(
    provider: Option<Extension<DemoProvider>>,
) -> Response {
    arm_step(provider, DemoStep::Charge, r#"{"armed":true}"#.to_owned()).await
}

/// `POST /demo/lose-next-step-response?step=charge|confirm`: 200
/// `{"armed":true,"step":"confirm","endpoint":"confirmations"}` once the
/// provider armed its switch for that step's endpoint; 400
/// `request-invalid` for another or no step; 404 without a provider; 503
/// (Retry-After) when the provider could not be reached or refused.
pub(super) async fn lose_next_step_response(
    provider: Option<Extension<DemoProvider>>,
    RawQuery(query): RawQuery,
) -> Response {
    let named = query.as_deref().and_then(|q| {
        q.split('&')
            .filter_map(|pair| pair.split_once('='))
            .find_map(|(key, value)| (key == "step").then_some(value))
    });
    let Some(step) = named.and_then(DemoStep::from_name) else {
        let names: Vec<_> = DemoStep::ALL.iter().map(|s| s.name()).collect();
        return problem_response(&Problem::new(
            ProblemCode::RequestInvalid,
            format!("The query's step must be one of: {}.", names.join(", ")),
        ));
    };
    let body = serde_json::json!({
        "armed": true,
        "step": step.name(),
        "endpoint": step.endpoint(),
    })
    .to_string();
    arm_step(provider, step, body).await
}

#[cfg(test)]
mod tests {
    use super::DemoStep;

    #[test]
    fn each_step_names_its_providers_endpoint() {
        let pairs: Vec<_> = DemoStep::ALL
            .iter()
            .map(|s| (s.name(), s.endpoint()))
            .collect();
        assert_eq!(pairs, [("charge", "charges"), ("confirm", "confirmations")]);
        assert_eq!(DemoStep::from_name("confirm"), Some(DemoStep::Confirm));
        for other in ["reserve", "refund", "charges", "", "Charge"] {
            assert_eq!(DemoStep::from_name(other), None, "{other}");
        }
    }
}

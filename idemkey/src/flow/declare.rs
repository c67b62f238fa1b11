//! How a service declares an operation of several steps: an ordered list
//! of named steps, each local (SQL in the journal's own transaction) or
//! external (a call to another system with the step's derived key), each
//! optionally undone by a compensation, and the responses the operation
//! ends with.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::idempotency::StoredResponse;
pub use crate::store::step::{Failure, Local, StepContext, StepError};

/// Where the problem types of operations are documented.
pub(crate) const TYPE_BASE: &str = "https://idemkey.dev/problems/";

/// What one call of an external step came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Attempt {
    /// The effect happened (or was found done); its output is recorded
    /// and handed to the steps after it.
    Done(Value),
    /// Refused for good (a declined card): the operation fails and the
    /// steps before this one are compensated. A compensation is never
    /// refused for good: its refusal is retried until its attempts run out.
    Refused(String),
    /// Surely not applied: try again later (not before `after` when the
    /// downstream said so).
    Retry {
        /// The downstream's `Retry-After`.
        after: Option<Duration>,
        /// What happened.
        reason: String,
    },
    /// Maybe applied (no answer): the next attempt looks it up first.
    Uncertain(String),
}
/// The future an external step returns.
pub type StepFuture = Pin<Box<dyn Future<Output = Attempt> + Send>>;
type ExternalFn = Arc<dyn Fn(StepContext) -> StepFuture + Send + Sync>;
/// An external step: a call to another system, made by the outbox worker
/// with [`StepContext::downstream_key`], looked up first whenever
/// [`StepContext::maybe_sent`].
#[derive(Clone)]
pub struct External {
    pub(crate) run: ExternalFn,
    pub(crate) undo: Option<ExternalFn>,
}

impl External {
    /// The step's call.
    pub fn new<F, Fut>(run: F) -> Self
    where
        F: Fn(StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Attempt> + Send + 'static,
    {
        Self {
            run: Arc::new(move |ctx| Box::pin(run(ctx))),
            undo: None,
        }
    }

    /// Its compensation (a refund), made with the compensation's own key.
    #[must_use]
    pub fn undo<F, Fut>(mut self, undo: F) -> Self
    where
        F: Fn(StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Attempt> + Send + 'static,
    {
        self.undo = Some(Arc::new(move |ctx| Box::pin(undo(ctx))));
        self
    }
}

/// A step of a flow.
#[derive(Clone)]
pub(crate) enum Kind {
    Local(Local),
    External(External),
}

#[derive(Clone)]
pub(crate) struct Step {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
}

impl Step {
    pub(crate) fn compensable(&self) -> bool {
        match &self.kind {
            Kind::Local(local) => local.compensable(),
            Kind::External(external) => external.undo.is_some(),
        }
    }
}

type Render = Arc<dyn Fn(&StepContext) -> StoredResponse + Send + Sync>;

/// An operation of several steps, declared once and registered with
/// [`super::Flows`]. Step names are stable: they are stored in the journal
/// and shown to clients in the state document.
#[derive(Clone)]
pub struct Flow {
    pub(crate) name: &'static str,
    pub(crate) steps: Vec<Step>,
    pub(crate) done: Render,
    pub(crate) failed: Render,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<_> = self.steps.iter().map(|s| s.name).collect();
        f.debug_struct("Flow")
            .field("name", &self.name)
            .field("steps", &steps)
            .finish_non_exhaustive()
    }
}

impl Flow {
    /// A flow with no step, answering `200` with every output when done and
    /// a `409 operation-failed` problem naming the step when failed.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            steps: Vec::new(),
            done: Arc::new(|ctx: &StepContext| {
                let body = serde_json::json!({ "id": ctx.flow_id, "outputs": ctx.outputs });
                StoredResponse::new(200, body.to_string())
                    .with_header("content-type", "application/json")
            }),
            failed: Arc::new(failed_problem),
        }
    }

    /// Appends a local step.
    #[must_use]
    pub fn local(mut self, name: &'static str, step: Local) -> Self {
        self.steps.push(Step {
            name,
            kind: Kind::Local(step),
        });
        self
    }

    /// Appends an external step.
    #[must_use]
    pub fn external(mut self, name: &'static str, step: External) -> Self {
        self.steps.push(Step {
            name,
            kind: Kind::External(step),
        });
        self
    }

    /// The response the operation answers (and replays) once every step is
    /// done, from their outputs.
    #[must_use]
    pub fn done(
        mut self,
        render: impl Fn(&StepContext) -> StoredResponse + Send + Sync + 'static,
    ) -> Self {
        self.done = Arc::new(render);
        self
    }

    /// The response the operation answers (and replays) once it failed and
    /// its compensations ran ([`StepContext::failure`] names the step).
    #[must_use]
    pub fn failed(
        mut self,
        render: impl Fn(&StepContext) -> StoredResponse + Send + Sync + 'static,
    ) -> Self {
        self.failed = Arc::new(render);
        self
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its steps' names, in order.
    pub fn step_names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.name).collect()
    }

    /// Why this flow cannot run on `backend`, if it cannot.
    pub(crate) fn check(&self, backend: &str) -> Result<(), String> {
        if self.steps.is_empty() {
            return Err(format!("flow {} has no step", self.name));
        }
        for (i, step) in self.steps.iter().enumerate() {
            if self.steps[..i].iter().any(|s| s.name == step.name) {
                return Err(format!("flow {} names step {} twice", self.name, step.name));
            }
            if let Kind::Local(local) = &step.kind
                && local.function(backend, false).is_none()
            {
                return Err(format!(
                    "step {} of flow {} has no {backend} function",
                    step.name, self.name
                ));
            }
            if let Kind::Local(local) = &step.kind
                && local.compensable()
                && local.function(backend, true).is_none()
            {
                return Err(format!(
                    "step {} of flow {} is undone on another backend but has no {backend} undo",
                    step.name, self.name
                ));
            }
        }
        Ok(())
    }
}

/// The default final response of a failed operation: `409` with code
/// `operation-failed`, naming the step and its reason.
pub fn failed_problem(ctx: &StepContext) -> StoredResponse {
    let (step, reason) = ctx
        .failure
        .as_ref()
        .map_or(("", ""), |f| (f.step.as_str(), f.reason.as_str()));
    let body = serde_json::json!({
        "type": format!("{TYPE_BASE}operation-failed"),
        "title": "Operation failed",
        "status": 409,
        "detail": format!("Step {step} failed: {reason}. The steps before it were undone."),
        "code": "operation-failed",
        "id": ctx.flow_id,
        "failed_step": step,
    });
    StoredResponse::new(409, body.to_string())
        .with_header("content-type", "application/problem+json")
}

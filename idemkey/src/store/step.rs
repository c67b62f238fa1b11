//! What a flow's step sees and what its local functions are, as the
//! journal and every backend's store name them: the step's context, its
//! error, and a local step's functions keyed by backend (each backend's
//! builder and journal give them their type).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use idemkey_core::{DownstreamKey, StepAction, step_downstream_key_of};
use serde_json::Value;
use uuid::Uuid;

/// A local step's function for one backend, type-erased: the backend that
/// stored it downcasts it to its own function type.
pub(crate) type LocalFn = dyn std::any::Any + Send + Sync;

/// Everything a step sees: the operation's identity and input, and the
/// outputs the steps before it recorded (replayed from the journal, never
/// recomputed).
#[derive(Clone, Debug)]
pub struct StepContext {
    /// The execution's id (the flow row's; one per execution of a key).
    pub flow_id: Uuid,
    /// The key's scope (an account id).
    pub scope: String,
    /// The key's operation.
    pub operation: String,
    /// The client's key.
    pub key: String,
    /// This step's name.
    pub step: &'static str,
    /// Whether this call runs the step or undoes it.
    pub action: StepAction,
    /// The request's validated payload, as the first request stored it.
    pub input: Value,
    /// The outputs of the steps recorded `done` so far, by step name.
    pub outputs: BTreeMap<String, Value>,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
    /// Whether an earlier attempt may have reached the downstream (it was
    /// sent, or its worker died while sending): look the effect up by
    /// [`StepContext::downstream_key`] before sending it again.
    pub maybe_sent: bool,
    /// Why the operation failed, for compensations and the failure's
    /// response.
    pub failure: Option<Failure>,
}

impl StepContext {
    /// The key this step (or its compensation) is sent with: derived by the
    /// core from the key tuple, this execution, the step's name and the
    /// action, so every re-delivery carries the same one and no two steps,
    /// executions or actions share one.
    pub fn downstream_key(&self) -> DownstreamKey {
        step_downstream_key_of(
            &self.scope,
            &self.operation,
            &self.key,
            &self.flow_id.to_string(),
            self.step,
            self.action,
        )
    }

    /// The output a step before this one recorded.
    pub fn output(&self, step: &str) -> Option<&Value> {
        self.outputs.get(step)
    }
}

/// Why an operation failed: the step that refused and its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The step that failed for good.
    pub step: String,
    /// What it said.
    pub reason: String,
}

/// What a local step's function failed with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// Refused for good (out of stock): the operation fails and the steps
    /// before are compensated; nothing of this step is kept.
    #[error("refused: {0}")]
    Refused(String),
    /// A temporary failure: the transaction rolls back and the step runs
    /// again later (a retry of the key, or the worker).
    #[error("temporary failure: {0}")]
    Retry(String),
}

impl From<crate::error::StoreError> for StepError {
    fn from(err: crate::error::StoreError) -> Self {
        Self::Retry(err.to_string())
    }
}

/// A local step: SQL that commits in the journal's transaction, with the
/// step's row and the next step's message: one function per backend the
/// service runs on, each typed by that backend's transaction (its builder,
/// e.g. `Local::postgres`, lives with the backend); a store without one
/// refuses the flow.
#[derive(Clone, Default)]
pub struct Local {
    /// The step's function by backend name, as that backend stored it.
    run: HashMap<&'static str, Arc<LocalFn>>,
    /// Its compensation by backend name.
    undo: HashMap<&'static str, Arc<LocalFn>>,
}

impl Local {
    /// A local step with no function yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Its function on `backend` (a backend's builder calls it with its
    /// own function type, which its journal downcasts to).
    #[allow(dead_code)] // Called by the backends' builders: none in a build without one.
    pub(crate) fn on(mut self, backend: &'static str, f: Arc<LocalFn>) -> Self {
        self.run.insert(backend, f);
        self
    }

    /// Its compensation on `backend`.
    #[allow(dead_code)] // Called by the backends' builders: none in a build without one.
    pub(crate) fn undo_on(mut self, backend: &'static str, f: Arc<LocalFn>) -> Self {
        self.undo.insert(backend, f);
        self
    }

    /// The function (or, `undo`, the compensation) for `backend`.
    pub(crate) fn function(&self, backend: &str, undo: bool) -> Option<&LocalFn> {
        let map = if undo { &self.undo } else { &self.run };
        map.get(backend).map(|f| &**f)
    }

    /// Whether it declares an undo on any backend: a step compensable on
    /// one backend must be compensable on the one it runs on
    /// (`Flow::check`), or a failure would skip its undo and keep its
    /// effect (stock held) for good.
    pub(crate) fn compensable(&self) -> bool {
        !self.undo.is_empty()
    }
}

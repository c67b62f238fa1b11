//! Operations of several steps under **one** key, each step done once,
//! every retry resuming where the last attempt stopped.
//!
//! A purchase may reserve stock (in your database), charge a card (at a
//! provider) and send a confirmation (through a mail service): one logical
//! operation, three systems. Declare it as a [`Flow`] of named steps, and
//! [`Flows::start`] runs it under the request's `Idempotency-Key`:
//!
//! - **The first request** claims the key and, in that same transaction,
//!   writes the execution's journal row, runs the leading [`Local`] steps
//!   (your SQL on the open transaction) and puts the next step's message in
//!   the outbox: the first **recovery point**. It answers the final
//!   response if the execution ends within [`FlowSettings::wait`], else
//!   `202 Accepted` with a [`StateDocument`] and a `Location` to poll.
//! - **Each further step** runs from the outbox [`Worker`](crate::outbox::Worker)
//!   ([`Flows::attach`]): an [`External`] step is called with its own
//!   derived key ([`StepContext::downstream_key`]: the core's
//!   `step_downstream_key_of` of the key tuple, the execution, the step and
//!   the action), looked up first whenever an earlier attempt may have
//!   reached the downstream ([`StepContext::maybe_sent`]). Its output, the
//!   journal row and the next step's message then commit in one
//!   transaction: the next recovery point. Outputs are recorded once and
//!   handed to later steps from the journal, never recomputed.
//! - **Fencing**: a recording commits only while the execution is still at
//!   that step and the worker's claim on the step's message (a lease ended
//!   by the store's clock) is still its own; a stale owner records nothing,
//!   and the journal's primary key refuses a second row for one step.
//! - **A retry** with the same key resumes the execution (its next step due
//!   now) and answers the same state document; once ended, the key replays
//!   its final response like any other.
//! - **A permanent failure** ([`Attempt::Refused`], [`StepError::Refused`])
//!   undoes the done steps before it in reverse order, each compensation
//!   itself once with its own key; the execution ends `failed`, naming the
//!   step. Temporary failures are retried with the outbox's backoff for
//!   the worker's budget, a duration ([`crate::outbox::WorkerSettings::retry_for`]);
//!   then the step's message is a dead letter, listed and retried like any
//!   outbox message, and revived by a retry of the key
//!   ([`FlowSettings::revive_within`]). A `Retry-After` pauses that step
//!   only ([`Flows::paused_for`]).
//! - **Re-execution**: an execution that has not ended is never
//!   re-executed, whatever the expiry policy; its final answer replays for
//!   the replay window counted from its end.
//!
//! What it does not promise: a downstream that does not deduplicate by the
//! key may apply a step twice (the lookup before a resend narrows that to
//! a downstream that lost both the effect's record and its answer); and
//! "once" ends where the downstream's key retention ends. See
//! `docs/multi-step.md`.

mod declare;
pub(crate) mod machine;
mod run;
mod state;

pub use crate::store::flow::STEP_EFFECT;
pub use declare::{
    Attempt, External, Failure, Flow, Local, StepContext, StepError, StepFuture, failed_problem,
};
pub use run::{DEFAULT_REVIVE_WITHIN, FlowSettings, Flows, View};
pub use state::{FlowRow, FlowState, NextMessage, StateDocument, StepRow, StepView};

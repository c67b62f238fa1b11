//! What the step journal's world holds: the store's flow row, step rows
//! and outbox message (changed only by atomic transactions), each worker's
//! place, what each downstream remembers under each step key, the client,
//! and ghost variables that only the properties read.

/// A step of the flow, by its index (`RESERVE`, `CHARGE`, `CONFIRM`).
pub type StepIndex = u8;

/// What a message asks of its step: the step key's `action` part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepAction {
    /// Run the step.
    Run,
    /// Undo a step that is done.
    Compensate,
}

impl StepAction {
    /// The name in the outbox payload and in the step key.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Compensate => "compensate",
        }
    }

    /// Index into per-action tables.
    pub const fn index(self) -> usize {
        match self {
            Self::Run => 0,
            Self::Compensate => 1,
        }
    }
}

/// The flow row's state column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowState {
    /// Steps run forward.
    Running,
    /// A step was refused; the done steps are undone, highest first.
    Compensating,
    /// Every step is done; the final response is written.
    Done,
    /// Refused and compensated; the final response names the failing step.
    Failed,
}

impl FlowState {
    /// Whether the flow has its final response.
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Failed)
    }
}

/// The flow row (`idemkey_flows`), written in the key's first transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Its state.
    pub state: FlowState,
    /// The step the next transaction must be about (the fence compares it):
    /// the next step to run, or while compensating the step being undone.
    pub position: StepIndex,
    /// The step that was refused, once one was.
    pub failed_step: Option<StepIndex>,
}

/// A step row's state (`idemkey_steps.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepState {
    /// The step ran and its effect stands.
    Done,
    /// The step was refused for good.
    Failed,
    /// The step ran and was undone.
    Compensated,
}

/// What a downstream (or a local step) answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Applied.
    Ok,
    /// Refused for good (the card is declined): nothing applied.
    Declined,
}

/// The flow's one live outbox message (effect `flow-step`): the recovery
/// point. Settling it and enqueuing the next happen in one transaction, so
/// there is never more than one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    /// The step it is about.
    pub step: StepIndex,
    /// Run or compensate.
    pub action: StepAction,
    /// The token of the claim whose lease is current, if any (`None`:
    /// pending, any worker may claim it).
    pub lease: Option<u8>,
    /// Claims so far; from the second on, an earlier attempt may have sent
    /// the effect, so the worker looks it up first.
    pub attempts: u8,
}

/// A claimed message as a worker handles it: the claim's token (the fence
/// compares it at commit) and what the message asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Job {
    /// The claim.
    pub token: u8,
    /// The message's step.
    pub step: StepIndex,
    /// The message's action.
    pub action: StepAction,
}

/// Where one worker is in handling one claimed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Worker {
    /// No message.
    Idle,
    /// Next: look the effect up at the downstream by its step key.
    Lookup(Job),
    /// Next: call the downstream with the step key.
    Calling(Job),
    /// Next: the recording transaction (for a local step it also runs the
    /// step's SQL), with what the downstream answered (a local step: `Ok`).
    Recording(Job, Outcome),
    /// The call's answer was lost: next, the transaction that puts the
    /// message back to pending (fenced by the token too).
    Uncertain {
        /// The claim.
        token: u8,
    },
}

impl Worker {
    /// The message this worker handles, unless idle or uncertain.
    pub const fn job(&self) -> Option<Job> {
        match *self {
            Self::Lookup(job) | Self::Calling(job) | Self::Recording(job, _) => Some(job),
            Self::Idle | Self::Uncertain { .. } => None,
        }
    }

    /// The claim this worker acts under, if busy.
    pub const fn token(&self) -> Option<u8> {
        match *self {
            Self::Idle => None,
            Self::Lookup(Job { token, .. })
            | Self::Calling(Job { token, .. })
            | Self::Recording(Job { token, .. }, _)
            | Self::Uncertain { token } => Some(token),
        }
    }
}

/// The client retrying its one request with the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Requests sent so far.
    pub sent: u8,
    /// The final response, once a replay gave it (`Done` or `Failed`).
    pub answer: Option<FlowState>,
}

/// Per step and action (`[step][action.index()]`).
pub type PerKey<T> = [[T; 2]; 3];

/// Facts about the history that the properties check; the protocol never
/// reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Effects applied, per step and action: at the downstream for an
    /// external step, in the store for a local one.
    pub applied: PerKey<u8>,
    /// A recording committed under a token that was not the message's
    /// current lease.
    pub fenced_out_recorded: bool,
    /// A compensation was recorded while a lower step was already
    /// compensated (not in reverse order).
    pub out_of_order: bool,
    /// Compensations recorded, in order, as a bit per step.
    pub compensated: u8,
    /// A claim was made while another worker still held an earlier claim
    /// of the same message.
    pub taken_over: bool,
    /// Step keys whose call's answer was lost, one bit per `step * 2 + action`.
    pub lost: u8,
    /// A lookup found an effect whose answer an earlier attempt lost.
    pub lost_then_found: bool,
    /// A recording transaction was rolled back by the fence.
    pub fenced: bool,
}

/// The whole world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The flow row (with the idempotency record, which holds the same
    /// 202 / final response and is written in the same transactions).
    pub flow: Option<Flow>,
    /// The step rows (`PRIMARY KEY (flow_id, idx)`: at most one per step).
    pub steps: [Option<StepState>; 3],
    /// The flow's live outbox message.
    pub message: Option<Message>,
    /// The next claim token (each claim draws a fresh one).
    pub next_token: u8,
    /// Each worker's place.
    pub workers: Vec<Worker>,
    /// The client.
    pub client: Client,
    /// What each downstream remembers under each step key (a local step's
    /// entries stay `None`).
    pub downstream: PerKey<Option<Outcome>>,
    /// Faults used so far: crashes, leases ended under a running owner,
    /// lost answers.
    pub faults: [u8; 3],
    /// What the properties read.
    pub ghost: Ghost,
}

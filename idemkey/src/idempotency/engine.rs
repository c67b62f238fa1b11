//! The engine: claim, decide, take over or answer, run the effect, store or
//! release. The only caller of [`idemkey_core::decide`] in the server.

use std::time::Duration;

use idemkey_core::{Decision, ExpiryPolicy, Fingerprint, IdempotencyKey, Problem, ProblemCode};
use thiserror::Error;
use tracing::{debug, warn};

use super::records::{Claimed, NewClaim, Read, Record, RecordKey, Records};
use super::{ClaimToken, StoredResponse};
use crate::store::StoreError;

/// How many times one request claims again when the row changed under it
/// (released, trimmed, or taken over by a concurrent request).
const ATTEMPTS: usize = 3;

/// How often a request that waits for an in-flight one reads the key again.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// Where the effect lives, which decides what a failure after it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The effect is in the records' transaction: a failure to store the
    /// response rolls the effect back, and the caller answers 503.
    Transactional,
    /// The effect is outside (lease mode): once it ran, its response goes
    /// to the client even if it cannot be stored.
    Lease,
}

/// The policies one front end applies.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// Where the effect lives.
    pub mode: Mode,
    /// How long a claim holds the key before another request may take it
    /// over (lease mode; in a transaction the claim is never visible).
    pub lease: Duration,
    /// How long a stored response is replayed.
    pub replay_ttl: Duration,
    /// What happens after the replay window.
    pub expiry: ExpiryPolicy,
    /// The `Retry-After` of a 409 for a request in progress: a short hint,
    /// never more than the lease left.
    pub retry_after: Duration,
    /// Lease mode only: wait up to this long for an in-flight request with
    /// the same key and replay its result, instead of answering 409.
    pub wait_for_in_flight: Option<Duration>,
    /// Where a client looks an operation up (linked from 410s).
    pub lookup: Option<fn(&IdempotencyKey) -> String>,
}

/// The default hint of a 409's `Retry-After`.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

impl Policy {
    /// Policy `reject`, a one-second 409 hint, no waiting, no lookup link.
    pub const fn new(mode: Mode, lease: Duration, replay_ttl: Duration) -> Self {
        Self {
            mode,
            lease,
            replay_ttl,
            expiry: ExpiryPolicy::Reject,
            retry_after: DEFAULT_RETRY_AFTER,
            wait_for_in_flight: None,
            lookup: None,
        }
    }
}

/// What a request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The effect ran (`decision`: execute, take over or re-execute).
    /// `stored` is false when its response was not stored: a temporary
    /// status (the key was released, and in a transaction the effect must
    /// be rolled back), or a lease-mode store failure.
    Executed {
        /// Why it ran.
        decision: Decision,
        /// What the effect returned besides the stored response.
        value: T,
        /// The response the effect produced.
        response: StoredResponse,
        /// Whether the response is the key's stored result.
        stored: bool,
    },
    /// The stored response, sent again.
    Replayed(StoredResponse),
    /// 409, 410 or 422: nothing ran and nothing was written.
    Rejected {
        /// The decision behind the answer.
        decision: Decision,
        /// The answer.
        problem: Problem,
    },
}

impl<T> Outcome<T> {
    /// The snake_case name of what happened, for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Executed { stored: false, .. } => "released",
            Self::Executed { .. } => "executed",
            Self::Replayed(_) => "replayed",
            Self::Rejected { decision, .. } => decision.as_str(),
        }
    }

    /// Whether a copy of the key's completed record could have given this
    /// answer (a replay, or 422 for another payload): what a cache of
    /// completed records may keep and answer from ([`Source::Copy`]).
    pub fn answerable_from_copy(&self) -> bool {
        match self {
            Self::Replayed(_) => true,
            Self::Rejected { decision, .. } => copy_may_reject(*decision),
            Self::Executed { .. } => false,
        }
    }
}

/// An answer given without running anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Send the stored response again.
    Replayed(StoredResponse),
    /// 409, 410 or 422.
    Rejected {
        /// The decision behind the answer.
        decision: Decision,
        /// The answer.
        problem: Problem,
    },
}

impl<T> From<Answer> for Outcome<T> {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Replayed(r) => Self::Replayed(r),
            Answer::Rejected { decision, problem } => Self::Rejected { decision, problem },
        }
    }
}

/// What to do about what a key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Answer without running anything.
    Answer(Answer),
    /// Nothing holds the key (any more): claim it.
    Claim,
    /// Replace this record with a new claim, then run.
    TakeOver(Decision, Record),
}

/// Why [`run`] failed; nothing was stored.
#[derive(Debug, Error)]
pub enum Error<E> {
    /// The effect failed (its claim was released).
    #[error("the effect failed: {0}")]
    Effect(E),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The answer of a retry whose original response was too large to store.
pub fn response_not_stored() -> Problem {
    Problem::new(
        ProblemCode::IdempotencyKeyExpired,
        "The operation with this Idempotency-Key ran, but its response was too large to store and cannot be replayed. Look the operation up instead of sending it again.",
    )
}

/// Decides what to do about what `read` found, at the store's clock.
pub fn step(read: &Read, key: &RecordKey, fingerprint: Fingerprint, policy: &Policy) -> Step {
    let Some(record) = &read.record else {
        return Step::Claim;
    };
    let decision = idemkey_core::decide(record.stored, fingerprint, read.now, policy.expiry);
    debug!(decision = decision.as_str(), "key already taken");
    let rejected = |problem| Step::Answer(Answer::Rejected { decision, problem });
    match decision {
        Decision::Replay => match &record.response {
            Some(response) if response.body.is_some() => {
                Step::Answer(Answer::Replayed(response.clone()))
            }
            Some(_) => rejected(response_not_stored()),
            // The schema keeps a response with every completed row.
            None => rejected(Problem::service_unavailable(1)),
        },
        Decision::Execute => Step::Claim,
        Decision::TakeOver | Decision::Reexecute => Step::TakeOver(decision, record.clone()),
        Decision::InProgress { retry_after_secs } => {
            let hint = policy.retry_after.as_secs().max(1);
            rejected(Problem::in_progress(retry_after_secs.min(hint)))
        }
        other => rejected(
            other
                .problem(policy.lookup.map(|link| link(&key.key)))
                .unwrap_or_else(|| Problem::service_unavailable(1)),
        ),
    }
}

/// Whether a copy of a completed record proves this rejection: 422 for
/// another payload; everything else depends on time or on the store.
const fn copy_may_reject(decision: Decision) -> bool {
    matches!(decision, Decision::Reused)
}

/// Where a read a front end already holds came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The store, at its clock: a row its own statement returned (e.g. a
    /// fused claim-and-effect statement that found the key taken).
    Store,
    /// A copy of a completed record kept outside the store (a replay
    /// cache), aged by its own clock: only what a copy can prove is answered
    /// (a replay, or 422 for another payload); anything else is the store's
    /// to decide.
    Copy,
}

/// The answer to a request from a read the front end already holds, when
/// there is one: the same decision table as [`run`], so that a front end
/// with a fast path (one statement, or a cache) decides nothing itself.
/// `None`: nothing can be answered from this read; run the request
/// through [`run`] (a claim, a take-over or a re-execution), or, for a
/// copy, ask the store.
pub fn answer_for(
    read: &Read,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    source: Source,
) -> Option<Answer> {
    match (step(read, key, fingerprint, policy), source) {
        (Step::Answer(answer), Source::Store) => Some(answer),
        (Step::Answer(answer), Source::Copy)
            if match &answer {
                Answer::Replayed(_) => true,
                Answer::Rejected { decision, .. } => copy_may_reject(*decision),
            } =>
        {
            Some(answer)
        }
        _ => None,
    }
}

/// Claims the key (or takes it over) for a run, or answers.
async fn acquire<R: Records>(
    records: &R,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
) -> Result<Result<(ClaimToken, Decision), Answer>, StoreError> {
    let deadline = policy
        .wait_for_in_flight
        .filter(|_| policy.mode == Mode::Lease)
        .map(|wait| tokio::time::Instant::now() + wait);
    let mut changes = 0;
    while changes < ATTEMPTS {
        let claim = NewClaim {
            token: ClaimToken::random(),
            fingerprint,
            lease: policy.lease,
            replay_ttl: policy.replay_ttl,
        };
        let read = match records.claim(key, &claim).await? {
            Claimed::Won => return Ok(Ok((claim.token, Decision::Execute))),
            Claimed::Taken(read) => read,
        };
        match step(&read, key, fingerprint, policy) {
            Step::Answer(Answer::Rejected {
                decision: Decision::InProgress { .. },
                ..
            }) if deadline.is_some_and(|d| tokio::time::Instant::now() < d) => {
                tokio::time::sleep(WAIT_POLL).await;
            }
            Step::Answer(answer) => return Ok(Err(answer)),
            Step::Claim => changes += 1,
            Step::TakeOver(decision, previous) => {
                if records.take_over(key, &previous, &claim).await? {
                    return Ok(Ok((claim.token, decision)));
                }
                changes += 1;
            }
        }
    }
    Err(StoreError::Unavailable(
        "the key's record kept changing".to_owned(),
    ))
}

/// What an effect produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done<T> {
    /// The response to store and replay.
    pub response: StoredResponse,
    /// The resource the effect created (e.g. a row id), kept with the
    /// record so lookups can point to it.
    pub resource: Option<String>,
    /// Anything else the front end needs back.
    pub value: T,
}

/// Runs `effect` at most once per lease (lease mode) or exactly once
/// (transactional mode) per `key`, and answers retries from the record.
///
/// A response with a temporary status (408, 425, 429, 5xx) is not stored:
/// the key is released (lease mode) or the caller rolls the transaction
/// back (transactional mode), so a retry runs again.
pub async fn run<R, T, E>(
    records: &R,
    key: &RecordKey,
    fingerprint: Fingerprint,
    policy: &Policy,
    effect: impl AsyncFnOnce() -> Result<Done<T>, E>,
) -> Result<Outcome<T>, Error<E>>
where
    R: Records,
{
    let (token, decision) = match acquire(records, key, fingerprint, policy).await? {
        Ok(claimed) => claimed,
        Err(answer) => return Ok(answer.into()),
    };
    // In a transaction the caller's rollback undoes the claim; only a
    // committed lease-mode claim needs releasing.
    let lease = policy.mode == Mode::Lease;
    let Done {
        response,
        resource,
        value,
    } = match effect().await {
        Ok(done) => done,
        Err(err) => {
            if lease {
                release(records, key, token).await;
            }
            return Err(Error::Effect(err));
        }
    };
    if !StoredResponse::is_final(response.status) {
        if lease {
            release(records, key, token).await;
        }
        return Ok(Outcome::Executed {
            decision,
            value,
            response,
            stored: false,
        });
    }
    let stored = match records
        .complete(
            key,
            token,
            &response,
            policy.replay_ttl,
            resource.as_deref(),
        )
        .await
    {
        Ok(true) => true,
        Ok(false) => {
            warn!("the claim was taken over while the effect ran; response not stored");
            false
        }
        // The store holds the response but cannot promise a failover keeps
        // it: acknowledging it could promise what a failover then loses,
        // so the client gets 503 and its retry replays the stored answer
        // (or, if a failover lost it, runs the effect again after the
        // lease: at least once).
        Err(err @ StoreError::Unconfirmed(_)) => return Err(err.into()),
        Err(err) if policy.mode == Mode::Lease => {
            // The effect happened outside the store: the client still gets
            // its answer, and a retry after the lease runs it again.
            warn!(error = %err, "cannot store the response");
            false
        }
        Err(err) => return Err(err.into()),
    };
    Ok(Outcome::Executed {
        decision,
        value,
        response,
        stored,
    })
}

/// Releases a claim; on failure it ends with its lease (or its transaction).
async fn release<R: Records>(records: &R, key: &RecordKey, token: ClaimToken) {
    match records.release(key, token).await {
        Ok(true) => debug!("claim released"),
        Ok(false) => warn!("the claim was taken over before it was released"),
        Err(err) => warn!(error = %err, "cannot release the claim; it ends with its lease"),
    }
}

//! # idemkey-core
//!
//! The pure core of idemkey, which makes HTTP POSTs safe to retry with the
//! `Idempotency-Key` header. It parses keys (an RFC 9651 structured-field
//! string, under a [`KeyProfile`]), computes canonical SHA-256
//! [`Fingerprint`]s of validated payloads, decides what to do with a request
//! given what the store holds ([`decide`]: execute, replay, 422, 409, 410),
//! owns every RFC 9457 [`Problem`] the project sends, and the client
//! [`RetryPolicy`]. It also owns what the adapters would otherwise each
//! copy: the generic HTTP fingerprint ([`Fingerprint::of_http`]), which
//! response headers a replay repeats ([`is_replayed_header`]) and the states
//! the lookup endpoint reports ([`LookupState`]), the seed [`CATALOGUE`],
//! and the key an effect outside the transaction is sent with
//! ([`downstream_key`]; one flow step's, [`step_downstream_key_of`]). It does no IO, no async, reads no clock and draws no
//! random numbers: time ([`UnixMillis`]) and randomness are arguments. The
//! server, the edge Worker and the browser package all call it, so they
//! never disagree.
//!
//! ```
//! use idemkey_core::{
//!     decide, Decision, ExpiryPolicy, IdempotencyKey, KeyProfile, NewOrder, Stored, UnixMillis,
//! };
//!
//! // A request arrives: parse its key and validate its body.
//! let key = IdempotencyKey::parse(br#""8e03978e-40d5-43e8-bc93-6894a57f9324""#, KeyProfile::Uuid)?;
//! let order = NewOrder::from_json(br#"{"sku":"LIBRO-TS","quantity":2}"#)?;
//! let fingerprint = order.fingerprint();
//!
//! // The store has nothing for (account, operation, key): execute.
//! let now = UnixMillis(1_700_000_000_000);
//! assert_eq!(decide(Stored::Nothing, fingerprint, now, ExpiryPolicy::Reject), Decision::Execute);
//!
//! // The response was lost; the client retries with the same key and body: replay.
//! let stored = Stored::Completed { fingerprint, replay_until: now.plus_millis(86_400_000) };
//! assert_eq!(decide(stored, fingerprint, now.plus_millis(500), ExpiryPolicy::Reject), Decision::Replay);
//!
//! // Same key, another quantity: 422, and the original order is untouched.
//! let other = NewOrder::from_json(br#"{"sku":"LIBRO-TS","quantity":3}"#)?.fingerprint();
//! let decision = decide(stored, other, now, ExpiryPolicy::Reject);
//! let problem = decision.problem(None).expect("a rejection");
//! assert_eq!((problem.status(), problem.code().as_str()), (422, "idempotency-key-reused"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod catalogue;
mod decision;
mod downstream;
mod fingerprint;
mod key;
mod lookup;
mod operation;
mod order;
mod order_problems;
mod problem;
mod replay;
mod request;
mod retry;
mod unknown;

pub use catalogue::{CATALOGUE, CURRENCY, unit_price};
pub use decision::{Decision, ExpiryPolicy, Stored, UnixMillis, decide, retry_after_secs};
pub use downstream::{
    DOWNSTREAM_KEY_DOMAIN, DownstreamKey, INSTANCE_DOWNSTREAM_KEY_DOMAIN, STEP_KEY_DOMAIN,
    StepAction, UnknownStepAction, downstream_key, downstream_key_of, instance_downstream_key_of,
    step_downstream_key_of,
};
pub use fingerprint::{FINGERPRINT_VERSION, Fingerprint, FingerprintError, canonical_json};
pub use key::{IdempotencyKey, KeyError, KeyProfile, MAX_KEY_LEN, UnknownProfile};
pub use lookup::{LookupState, lookup_path};
pub use operation::{InvalidOperation, MAX_OPERATION_LEN, OperationId};
pub use order::{
    MAX_ORDER_BODY_BYTES, NewOrder, ORDER_OPERATION, PURCHASE_OPERATION, QUANTITY_RANGE,
    REFERENCE_MAX_LEN, REFERENCE_PATTERN, SKU_MAX_LEN, SKU_PATTERN,
};
pub use problem::{
    FieldError, PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_PREFIX, ParsedProblem, Problem, ProblemCode,
};
pub use replay::{DEFAULT_REPLAY_HEADERS, NEVER_REPLAYED_HEADERS, is_replayed_header};
pub use request::{
    CheckedHead, HeadRules, RequestHead, bearer_token, check_body_len, check_head,
    is_json_media_type,
};
pub use retry::{AttemptOutcome, Earlier, RetryPolicy, RetryStep, parse_retry_after};
pub use unknown::UnknownStep;

/// Response header that marks a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The request header that carries the key.
pub const KEY_HEADER: &str = "idempotency-key";

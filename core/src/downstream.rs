//! The key an effect outside our transaction (a charge at a payment
//! provider) is sent with, derived from the request's own identity.
//!
//! The order commits together with an outbox message; a worker delivers the
//! message later, perhaps several times (a crash after sending, a lost
//! answer, a second worker after a lease ran out). The provider can only
//! deduplicate those deliveries if every one of them carries the same
//! `Idempotency-Key`. Deriving that key from what identifies the operation
//! (the account, the operation id, the client's key and the effect's name)
//! rather than drawing it at random makes it the same in every process, after
//! every restart and on every re-delivery, with nothing to store or look up
//! first; and two effects of one request (say `charge` and `ship`) get
//! different keys, as do two accounts that chose the same client key.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};
use thiserror::Error;
use uuid::Uuid;

use crate::key::IdempotencyKey;
use crate::operation::OperationId;

/// The domain tag hashed before the inputs: keys derived for another
/// purpose, or by a future construction (`v2`), never collide with these.
pub const DOWNSTREAM_KEY_DOMAIN: &str = "idemkey/downstream-key/v1";

/// The domain tag of [`instance_downstream_key_of`]: the key of one
/// *instance* of an effect (one order's charge), never equal to a version 1
/// key of the same tuple.
pub const INSTANCE_DOWNSTREAM_KEY_DOMAIN: &str = "idemkey/downstream-key/v2";

/// The domain tag of [`step_downstream_key_of`]: a step's key never equals
/// a key derived for another purpose from the same strings.
pub const STEP_KEY_DOMAIN: &str = "idemkey/step-key/v1";

/// What a flow's step message does with step `i`: run it, or undo it after a
/// later step failed for good. Hashed into [`step_downstream_key_of`], so a
/// compensation (a refund) never reaches the provider under the key of the
/// effect it undoes (the charge), which the provider would answer with the
/// charge's stored response instead of refunding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepAction {
    /// The step itself.
    Run,
    /// The step's compensation.
    Compensate,
}

impl StepAction {
    /// Both actions.
    pub const ALL: [Self; 2] = [Self::Run, Self::Compensate];

    /// The name hashed into the key, and written in a step message's
    /// payload: `run` or `compensate`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Compensate => "compensate",
        }
    }
}

/// A step action name other than `run` or `compensate`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown step action {0:?}: expected run or compensate")]
pub struct UnknownStepAction(pub String);

impl FromStr for StepAction {
    type Err = UnknownStepAction;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownStepAction(s.to_owned()))
    }
}

/// A derived downstream key: a UUIDv8 (RFC 9562, section 5.8) whose 122
/// free bits come from SHA-256. Displays as the lowercase hyphenated UUID,
/// which every key profile accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DownstreamKey {
    uuid: Uuid,
    /// The hyphenated lowercase text, kept so [`DownstreamKey::as_str`]
    /// borrows instead of formatting.
    text: [u8; 36],
}

impl DownstreamKey {
    /// The key as a lowercase hyphenated UUID, e.g.
    /// `65e5beb7-8001-8b87-92c5-6019c2be1f43`.
    pub fn as_str(&self) -> &str {
        // Always 36 ASCII bytes written by `Uuid::hyphenated`.
        std::str::from_utf8(&self.text).unwrap_or_default()
    }

    /// The key as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.uuid
    }

    /// The `Idempotency-Key` field value to send: the key as a quoted
    /// structured-field string (RFC 9651, section 3.3.3).
    pub fn to_header_value(&self) -> String {
        format!("\"{}\"", self.as_str())
    }
}

impl fmt::Display for DownstreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The downstream key of `effect` for the request identified by (`scope`,
/// `operation`, `key`): for an order, `scope` is the account id (lowercase
/// hyphenated UUID), `operation` is [`crate::ORDER_OPERATION`] and `effect`
/// is `charge`.
///
/// Construction (version 1; `core/vectors/downstream_keys.json` holds
/// vectors computed independently with Python's hashlib):
///
/// 1. SHA-256 over the UTF-8 bytes of [`DOWNSTREAM_KEY_DOMAIN`] followed by
///    each of `scope`, `operation`, the key's characters (as
///    [`IdempotencyKey::as_str`] gives them: unquoted, and lowercase under
///    the `uuid` profile) and `effect`, each as its byte length (a 32-bit
///    big-endian integer) then its UTF-8 bytes. The length prefixes make the
///    encoding injective: `("ab", "c")` and `("a", "bc")` hash differently.
/// 2. The first 16 bytes of the digest, with the version nibble set to 8
///    and the variant bits to `10` (RFC 9562): a UUIDv8.
///
/// ```
/// use idemkey_core::{downstream_key, IdempotencyKey, KeyProfile, ORDER_OPERATION};
/// let key = IdempotencyKey::parse(b"8e03978e-40d5-43e8-bc93-6894a57f9324", KeyProfile::Uuid)?;
/// let account = "0b8e3d4c-1f2a-4b5c-8d6e-7f8091a2b3c4";
/// let charge = downstream_key(account, &ORDER_OPERATION, &key, "charge");
/// // The same inputs give the same key, in any process, at any time.
/// assert_eq!(charge, downstream_key(account, &ORDER_OPERATION, &key, "charge"));
/// assert_ne!(charge, downstream_key(account, &ORDER_OPERATION, &key, "ship"));
/// assert_eq!(charge.to_string(), "65e5beb7-8001-8b87-92c5-6019c2be1f43"); // a UUIDv8
/// # Ok::<(), idemkey_core::KeyError>(())
/// ```
pub fn downstream_key(
    scope: &str,
    operation: &OperationId,
    key: &IdempotencyKey,
    effect: &str,
) -> DownstreamKey {
    downstream_key_of(scope, operation.as_str(), key.as_str(), effect)
}

/// [`downstream_key`] of the tuple as stored: an operation and a key read
/// back from a database (an outbox message) were validated when they were
/// written, and parsing them again under a key profile could change them.
pub fn downstream_key_of(scope: &str, operation: &str, key: &str, effect: &str) -> DownstreamKey {
    derive(DOWNSTREAM_KEY_DOMAIN, &[scope, operation, key, effect])
}

/// The downstream key of one **instance** of `effect`: the tuple of
/// [`downstream_key_of`] plus what tells this instance from another one of
/// the same key (for an order's charge, the order id).
///
/// A key whose record expired may be executed again (the `reexecute`
/// expiry policy): the second execution creates a second order with the
/// same (`scope`, `operation`, `key`), and a key derived from that tuple
/// alone would make the provider take the second order's charge for a
/// repeat of the first one. With the instance in the hash, each order's
/// charge has its own key, and the provider deduplicates the deliveries of
/// one order only.
///
/// Construction: as [`downstream_key_of`], with the domain tag
/// [`INSTANCE_DOWNSTREAM_KEY_DOMAIN`] and `instance` hashed as a fifth
/// length-prefixed part.
///
/// ```
/// use idemkey_core::{downstream_key_of, instance_downstream_key_of};
/// let (acct, op, key) = ("acct", "POST /orders:v1", "k");
/// let first = instance_downstream_key_of(acct, op, key, "charge", "order-1");
/// let second = instance_downstream_key_of(acct, op, key, "charge", "order-2");
/// assert_ne!(first, second);
/// assert_ne!(first, downstream_key_of(acct, op, key, "charge"));
/// ```
pub fn instance_downstream_key_of(
    scope: &str,
    operation: &str,
    key: &str,
    effect: &str,
    instance: &str,
) -> DownstreamKey {
    derive(
        INSTANCE_DOWNSTREAM_KEY_DOMAIN,
        &[scope, operation, key, effect, instance],
    )
}

/// The downstream key of `step` of one flow **instance** (its `action`:
/// the step itself or its compensation), for a flow started by the request
/// (`scope`, `operation`, `key`); `instance` is the flow id (lowercase
/// hyphenated UUID).
///
/// A worker may deliver one step several times (a crash after sending, a
/// lost answer, a take-over after a lease ran out): every delivery carries
/// this one key, so the provider deduplicates them. The flow id tells a
/// re-executed key's second flow from the first (as the order id does in
/// [`instance_downstream_key_of`]); the step tells two steps of one flow
/// apart; and the action keeps a compensation from sharing the key of the
/// step it undoes.
///
/// Construction: as [`downstream_key_of`], with the domain tag
/// [`STEP_KEY_DOMAIN`] and the parts `scope`, `operation`, `key`,
/// `instance`, `step` and [`StepAction::as_str`] (vectors:
/// `core/vectors/step_keys.json`, computed independently with Python).
///
/// ```
/// use idemkey_core::{step_downstream_key_of, StepAction};
/// let (acct, op, key, flow) = ("acct", "POST /checkout:v1", "k", "flow-1");
/// let charge = step_downstream_key_of(acct, op, key, flow, "charge", StepAction::Run);
/// // Every delivery of the step sends the same key ...
/// assert_eq!(charge, step_downstream_key_of(acct, op, key, flow, "charge", StepAction::Run));
/// // ... and its compensation, another step or another flow gets its own.
/// assert_ne!(charge, step_downstream_key_of(acct, op, key, flow, "charge", StepAction::Compensate));
/// assert_ne!(charge, step_downstream_key_of(acct, op, key, flow, "ship", StepAction::Run));
/// assert_ne!(charge, step_downstream_key_of(acct, op, key, "flow-2", "charge", StepAction::Run));
/// ```
pub fn step_downstream_key_of(
    scope: &str,
    operation: &str,
    key: &str,
    instance: &str,
    step: &str,
    action: StepAction,
) -> DownstreamKey {
    derive(
        STEP_KEY_DOMAIN,
        &[scope, operation, key, instance, step, action.as_str()],
    )
}

/// SHA-256 over `domain` and the length-prefixed `parts`, as a UUIDv8.
fn derive(domain: &str, parts: &[&str]) -> DownstreamKey {
    let mut hasher = Sha256::new();
    hasher.update(domain.as_bytes());
    for part in parts {
        // Inputs are far below 4 GiB (a key is at most 255 bytes, an
        // operation 128); saturating keeps the function total regardless.
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        hasher.update(len.to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let uuid = Uuid::from_bytes(bytes);
    let mut text = [0u8; 36];
    uuid.hyphenated().encode_lower(&mut text);
    DownstreamKey { uuid, text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyProfile;

    fn key(value: &str) -> IdempotencyKey {
        IdempotencyKey::parse(value.as_bytes(), KeyProfile::Lenient).unwrap()
    }

    #[test]
    fn is_a_uuidv8_that_displays_as_its_text() {
        let op = OperationId::from_static("POST /orders:v1");
        let k = downstream_key("acct", &op, &key("abc"), "charge");
        assert_eq!(k.as_uuid().get_version_num(), 8);
        assert_eq!(k.as_uuid().get_variant(), uuid::Variant::RFC4122);
        assert_eq!(k.to_string(), k.as_uuid().hyphenated().to_string());
        assert_eq!(k.as_str(), k.to_string());
        assert_eq!(k.to_header_value(), format!("\"{k}\""));
        // What it sends parses back, under the strictest profile too.
        let sent = IdempotencyKey::parse(k.to_header_value().as_bytes(), KeyProfile::Uuid);
        assert_eq!(sent.unwrap().as_str(), k.as_str());
    }

    #[test]
    fn every_input_counts_and_boundaries_cannot_shift() {
        let op = OperationId::from_static("POST /orders:v1");
        let base = downstream_key("ab", &op, &key("c"), "charge");
        // Adjacent inputs: without the length prefixes these would hash
        // the same bytes.
        let split = downstream_key("ab", &op, &key("cc"), "harge");
        assert_ne!(base, split);
        assert_ne!(base, downstream_key("ab", &op, &key("c"), "ship"));
        assert_ne!(base, downstream_key("ab", &op, &key("d"), "charge"));
        let v2 = OperationId::from_static("POST /orders:v2");
        assert_ne!(base, downstream_key("ab", &v2, &key("c"), "charge"));
        assert_eq!(base, downstream_key("ab", &op, &key("\"c\""), "charge"));
    }

    #[test]
    fn instance_keys_match_an_independent_computation() {
        // Python: d = hashlib.sha256(b"idemkey/downstream-key/v2" + b"".join(
        //   len(p).to_bytes(4, "big") + p for p in parts)).digest()[:16],
        // then the version and variant bits set as for a UUIDv8.
        let k = instance_downstream_key_of(
            "0b8e3d4c-1f2a-4b5c-8d6e-7f8091a2b3c4",
            "POST /orders:v1",
            "8e03978e-40d5-43e8-bc93-6894a57f9324",
            "charge",
            "5b0c7f4e-2a53-4c1e-9d8b-0f6a4e2d1c3b",
        );
        assert_eq!(k.to_string(), "c46b6345-3b68-8f72-b27b-0caa623f7096");
        assert_eq!(k.as_uuid().get_version_num(), 8);
        let other = instance_downstream_key_of("a", "o", "k", "charge", "2");
        assert_ne!(
            other,
            instance_downstream_key_of("a", "o", "k", "charge", "1")
        );
        assert_ne!(other, downstream_key_of("a", "o", "k", "charge"));
    }

    #[test]
    fn step_keys_match_an_independent_computation() {
        // Python, as above with b"idemkey/step-key/v1" and the parts
        // (scope, operation, key, instance, step, action).
        let k = step_downstream_key_of(
            "0b8e3d4c-1f2a-4b5c-8d6e-7f8091a2b3c4",
            "POST /checkout:v1",
            "8e03978e-40d5-43e8-bc93-6894a57f9324",
            "3f1c9a7e-5b2d-4e8f-a1c3-7d9e0b2f4a6c",
            "charge",
            StepAction::Run,
        );
        assert_eq!(k.to_string(), "0a0c6a13-3402-8d61-afaf-097a384dc392");
        assert_eq!(k.as_uuid().get_version_num(), 8);
        assert_eq!(k.as_uuid().get_variant(), uuid::Variant::RFC4122);
    }

    #[test]
    fn action_and_step_each_change_the_step_key() {
        let step = |step, action| step_downstream_key_of("a", "o", "k", "flow", step, action);
        let run = step("charge", StepAction::Run);
        assert_eq!(run, step("charge", StepAction::Run));
        assert_ne!(run, step("charge", StepAction::Compensate));
        assert_ne!(run, step("ship", StepAction::Run));
        assert_ne!(
            step("charge", StepAction::Compensate),
            step("ship", StepAction::Compensate)
        );
        // The instance counts too, and the boundary between instance and
        // step cannot shift.
        assert_ne!(
            run,
            step_downstream_key_of("a", "o", "k", "flow-2", "charge", StepAction::Run)
        );
        assert_ne!(
            step_downstream_key_of("a", "o", "k", "ab", "c", StepAction::Run),
            step_downstream_key_of("a", "o", "k", "a", "bc", StepAction::Run)
        );
    }

    #[test]
    fn a_step_key_is_never_an_instance_key_of_the_same_parts() {
        for action in StepAction::ALL {
            let step = step_downstream_key_of("a", "o", "k", "flow", "charge", action);
            // The same strings as an instance key, in either order of
            // effect and instance, and as a version 1 key: other domains.
            assert_ne!(
                step,
                instance_downstream_key_of("a", "o", "k", "charge", "flow")
            );
            assert_ne!(
                step,
                instance_downstream_key_of("a", "o", "k", "flow", "charge")
            );
            assert_ne!(step, downstream_key_of("a", "o", "k", "charge"));
        }
    }

    #[test]
    fn step_actions_round_trip_through_their_names() {
        assert_eq!(StepAction::Run.as_str(), "run");
        assert_eq!(StepAction::Compensate.as_str(), "compensate");
        for action in StepAction::ALL {
            assert_eq!(action.as_str().parse(), Ok(action));
        }
        assert_eq!(
            "Run".parse::<StepAction>(),
            Err(UnknownStepAction("Run".into()))
        );
        assert!("".parse::<StepAction>().is_err());
    }
}

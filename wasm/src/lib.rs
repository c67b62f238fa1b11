//! # idemkey-wasm
//!
//! The browser's (and Node's) view of `idemkey-core`, through wasm-bindgen:
//! a new key from the platform CSPRNG, key parsing under a profile, request
//! fingerprints, order validation, derived downstream (and flow step) keys
//! and the client retry policy. It only converts between JavaScript values
//! and the core's types; every rule lives in the core, so a browser computes
//! exactly what the server computes. The
//! clock is read in one place ([`retry_step`], through `Date.now()`), and
//! only to measure an HTTP-date `Retry-After`.
//!
//! Problem documents are plain JSON with a stable `code`: read them with
//! `JSON.parse`. (Reading them through the core's typed `Problem::from_json`
//! would add about 18 KB gzipped, mostly float formatting for serde's error
//! messages, to a module whose budget is 60.5 KiB.)
//!
//! Errors are thrown as JavaScript `Error`s whose `code` is the core's stable
//! problem code (`idempotency-key-invalid`, `request-invalid`, ...) or, for a
//! bad argument, `invalid-argument`.
//!
//! ```js
//! import init, { newKey, parseKey, fingerprint, retryStep, orderOperation } from "./pkg/idemkey_wasm.js";
//! await init();
//! const key = newKey();                       // "\"1b4e28ba-2fa1-4d3b-a3f5-ef19b5a7633b\""
//! parseKey(key, "uuid");                      // "1b4e28ba-2fa1-4d3b-a3f5-ef19b5a7633b"
//! fingerprint(orderOperation(), '{"sku":"LIBRO-TS","quantity":2}'); // 64 hex digits
//! retryStep(1, { networkError: true }, Math.random()); // { action: "wait", delayMs: 173 }
//! retryStep(1, { status: 422 }, 0.5);                // { action: "stop" }
//! ```

use idemkey_core::{
    AttemptOutcome, Earlier, Fingerprint, FingerprintError, IdempotencyKey, KeyError, KeyProfile,
    NewOrder, ORDER_OPERATION, OperationId, PURCHASE_OPERATION, ProblemCode, RetryPolicy,
    UnixMillis, UnknownProfile, parse_retry_after,
};
use serde::Serialize;
use wasm_bindgen::prelude::*;

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::FreeListAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::FreeListAllocator::new());

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** What one attempt produced: a response (status and its Retry-After header, if any) or a network error. */
export interface RetryOutcome { status?: number; retryAfter?: string | null; retryAfterMs?: number | null; code?: string | null; networkError?: boolean }
/** After a lookup answered `unknown`: resend the same key after `delayMs` (inside the replay window), or hand the operation to the application (past it). */
export interface UnknownStep { action: "resend" | "needsDecision"; delayMs?: number }
/** The client's next step: wait and resend with the same key, stop (the request must change), hold for sign-in (401/403: keep the key, resume after sign-in), reconcile (look the operation up) or done. */
export interface RetryStep { action: "wait" | "stop" | "holdForAuth" | "reconcile" | "done"; delayMs?: number }
/** Retry parameters; the defaults are base 250 ms, cap 30 s, 8 attempts. */
export interface RetryPolicy { baseMs: number; capMs: number; maxAttempts: number }
/** An RFC 9457 problem document as sent by idemkey (read it with JSON.parse). */
export interface Problem { type: string; title: string; status: number; detail: string; code: string; retry_after?: number; lookup?: string; errors?: { pointer: string; detail: string }[] }
/** A validated order, with its fingerprint; `reference` only when the body had one. */
export interface ValidOrder { sku: string; quantity: number; reference?: string; fingerprint: string }
"#;

/// `newKey(): string`: a UUIDv4 key from `crypto.getRandomValues`, in header
/// form (a quoted structured-field string), ready for `Idempotency-Key`.
#[wasm_bindgen(js_name = newKey)]
pub fn new_key() -> Result<String, JsValue> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| error("random-unavailable", &e.to_string()))?;
    Ok(IdempotencyKey::from_random_bytes(bytes).to_header_value())
}

/// `parseKey(headerValue, profile)`: the key's value, unquoted (lowercase
/// under `uuid`). Throws an `Error` with `code` (`idempotency-key-invalid`)
/// and `reason` (`syntax`, `empty`, `too-long`, `not-uuid`, ...).
#[wasm_bindgen(js_name = parseKey)]
pub fn parse_key(
    #[wasm_bindgen(js_name = headerValue)] header_value: &str,
    #[wasm_bindgen(unchecked_param_type = r#""strict" | "lenient" | "uuid""#)] profile: &str,
) -> Result<String, JsValue> {
    let profile = parse_profile(profile)?;
    IdempotencyKey::parse(header_value.as_bytes(), profile)
        .map(|key| key.as_str().to_owned())
        .map_err(key_error)
}

fn parse_operation(operation: &str) -> Result<OperationId, JsValue> {
    OperationId::new(operation).map_err(|_| {
        invalid_argument("operation must be printable ASCII ending in :v<N>, e.g. POST /orders:v1")
    })
}

fn parse_profile(profile: &str) -> Result<KeyProfile, JsValue> {
    profile
        .parse()
        // Not `UnknownProfile`'s Display: its `{:?}` pulls Unicode escaping
        // tables into the module.
        .map_err(|_: UnknownProfile| invalid_argument("profile must be strict, lenient or uuid"))
}

fn key_error(e: KeyError) -> JsValue {
    let err = error(e.code().as_str(), &e.to_string());
    set(&err, "reason", &e.reason().into());
    err
}

/// `parseKeyLines(lines, profile)` (feature `field-lines`, for server-side
/// JavaScript; the browser package leaves it out): like `parseKey`, for all the
/// `Idempotency-Key` field lines of a request (none is
/// `idempotency-key-missing`; more than one is reason `repeated`).
#[cfg(feature = "field-lines")]
#[wasm_bindgen(js_name = parseKeyLines)]
pub fn parse_key_lines(
    lines: Vec<String>,
    #[wasm_bindgen(unchecked_param_type = r#""strict" | "lenient" | "uuid""#)] profile: &str,
) -> Result<String, JsValue> {
    let profile = parse_profile(profile)?;
    let lines = lines.iter().map(|line| line.as_bytes());
    IdempotencyKey::from_field_lines(lines, profile)
        .map(|key| key.as_str().to_owned())
        .map_err(key_error)
}

/// `fingerprint(operation, payloadJson)`: the request fingerprint, 64
/// lowercase hex digits, identical to the server's for the same payload.
#[wasm_bindgen]
pub fn fingerprint(
    operation: &str,
    #[wasm_bindgen(js_name = payloadJson)] payload_json: &str,
) -> Result<String, JsValue> {
    let operation = parse_operation(operation)?;
    // What `Fingerprint::of_json` does, but parsed from bytes like
    // `NewOrder::from_json`, so the module holds one JSON reader, not two.
    let payload: serde_json::Value = serde_json::from_slice(payload_json.as_bytes())
        .map_err(|e| invalid_argument(&FingerprintError::InvalidJson(e.to_string()).to_string()))?;
    Ok(Fingerprint::of_value(&operation, &payload).to_hex())
}

/// `orderOperation()`: the operation id of order creation, `POST /orders:v1`.
#[wasm_bindgen(js_name = orderOperation)]
pub fn order_operation() -> String {
    ORDER_OPERATION.as_str().to_owned()
}

/// `purchaseOperation()`: the operation id of a purchase, `POST /purchases:v1`
/// (a purchase's body is an order's, fingerprinted under this id).
#[wasm_bindgen(js_name = purchaseOperation)]
pub fn purchase_operation() -> String {
    PURCHASE_OPERATION.as_str().to_owned()
}

/// `lookupPath(operation, keyValue)`: where the key's operation is looked up,
/// `/operations/{key}` plus `?operation=purchases` for a purchase (the
/// core's `lookup_path`).
#[wasm_bindgen(js_name = lookupPath)]
pub fn lookup_path(operation: &str, #[wasm_bindgen(js_name = keyValue)] key_value: &str) -> String {
    idemkey_core::lookup_path(operation, key_value)
}

/// `validateOrder(json)`: the order body checked against the contract of
/// `POST /orders`, with its fingerprint. Throws an `Error` with `code`
/// `request-invalid` and `problem` (the full problem document, field errors
/// included).
#[wasm_bindgen(js_name = validateOrder, unchecked_return_type = "ValidOrder")]
pub fn validate_order(json: &str) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    struct ValidOrder<'a> {
        sku: &'a str,
        quantity: u8,
        #[serde(skip_serializing_if = "Option::is_none")]
        reference: Option<&'a str>,
        fingerprint: String,
    }
    let order = NewOrder::from_json(json.as_bytes()).map_err(|problem| {
        let err = error(problem.code().as_str(), problem.detail());
        set(&err, "problem", &json_value(&problem.to_json()));
        err
    })?;
    let out = ValidOrder {
        sku: &order.sku,
        quantity: order.quantity,
        reference: order.reference.as_deref(),
        fingerprint: order.fingerprint().to_hex(),
    };
    Ok(to_js(&out))
}

/// `downstreamKey(scope, operation, keyHeader, profile, effect)`: the key an
/// effect outside the transaction (e.g. `charge`) is sent to its provider
/// with, for the request identified by `scope` (the account id), the
/// operation and the `Idempotency-Key` field value `keyHeader` parsed under
/// `profile`: a lowercase hyphenated UUIDv8, the same in every process and
/// on every delivery (the core's `downstream_key`). Throws like `parseKey`.
#[cfg(feature = "downstream-key")]
#[wasm_bindgen(js_name = downstreamKey)]
pub fn downstream_key_js(
    scope: &str,
    operation: &str,
    #[wasm_bindgen(js_name = keyHeader)] key_header: &str,
    #[wasm_bindgen(unchecked_param_type = r#""strict" | "lenient" | "uuid""#)] profile: &str,
    effect: &str,
) -> Result<String, JsValue> {
    let operation = parse_operation(operation)?;
    let key =
        IdempotencyKey::parse(key_header.as_bytes(), parse_profile(profile)?).map_err(key_error)?;
    Ok(idemkey_core::downstream_key(scope, &operation, &key, effect).to_string())
}

/// `stepDownstreamKey(scope, operation, key, instance, step, action)`: the
/// key a flow worker sends a provider for `step` of the flow `instance` (the
/// flow id), `action` `"run"` for the step itself or `"compensate"` for its
/// undoing, of the request (`scope`, `operation`, `key`) as stored (the key
/// unquoted, as `parseKey` returns it): a lowercase hyphenated UUIDv8, the
/// same on every delivery of that step, never the key of its compensation
/// (the core's `step_downstream_key_of`). Throws `invalid-argument` for
/// another `action`.
#[cfg(feature = "downstream-key")]
#[wasm_bindgen(js_name = stepDownstreamKey)]
pub fn step_downstream_key_js(
    scope: &str,
    operation: &str,
    key: &str,
    instance: &str,
    step: &str,
    #[wasm_bindgen(unchecked_param_type = r#""run" | "compensate""#)] action: &str,
) -> Result<String, JsValue> {
    let action = action
        .parse()
        // Not `UnknownStepAction`'s Display, as for `parse_profile`.
        .map_err(|_: idemkey_core::UnknownStepAction| {
            invalid_argument("action must be run or compensate")
        })?;
    Ok(
        idemkey_core::step_downstream_key_of(scope, operation, key, instance, step, action)
            .to_string(),
    )
}

/// `retryStep(attempt, outcome, random, policy?, maybeApplied?)`: what the
/// client does after attempt number `attempt` (1 for the first send) ended
/// with `outcome`; `random` is uniform in `[0, 1)`, e.g. `Math.random()`;
/// `maybeApplied` is whether an earlier attempt of the operation may have
/// been applied (default false; see `attemptMayHaveApplied`): then a 404,
/// 400, 422, ... is looked up instead of ending the operation. Returns
/// `{action: "wait", delayMs}`, `{action: "stop"}`, `{action: "holdForAuth"}`,
/// `{action: "reconcile"}` or `{action: "done"}`.
#[wasm_bindgen(js_name = retryStep, unchecked_return_type = "RetryStep")]
pub fn retry_step(
    attempt: u32,
    #[wasm_bindgen(unchecked_param_type = "RetryOutcome")] outcome: JsValue,
    random: f64,
    #[wasm_bindgen(unchecked_param_type = "RetryPolicy | undefined")] policy: JsValue,
    #[wasm_bindgen(js_name = maybeApplied)] maybe_applied: Option<bool>,
) -> Result<JsValue, JsValue> {
    let outcome = Outcome::from_js(&outcome)?;
    let policy = policy_from_js(&policy)?;
    let earlier = if maybe_applied == Some(true) {
        Earlier::MaybeApplied
    } else {
        Earlier::NotApplied
    };
    // The one place this crate reads the clock (an HTTP-date Retry-After is
    // measured from now).
    let now = || UnixMillis(js_sys::Date::now() as u64);
    Ok(to_js(&policy.step_after(
        attempt,
        earlier,
        outcome.into_core(now),
        random,
    )))
}

/// `attemptMayHaveApplied(outcome)`: whether the server may have applied an
/// attempt that ended with `outcome` (no answer, a 5xx, 408, 409 in
/// progress, 410, 2xx): from then on, pass `maybeApplied` to `retryStep`.
#[wasm_bindgen(js_name = attemptMayHaveApplied)]
pub fn attempt_may_have_applied(
    #[wasm_bindgen(unchecked_param_type = "RetryOutcome")] outcome: JsValue,
) -> Result<bool, JsValue> {
    // A Retry-After does not change the answer: no clock needed.
    let outcome = Outcome::from_js(&outcome)?.into_core(|| UnixMillis(0));
    Ok(outcome.may_have_applied())
}

/// `afterUnknown(attempt, firstSentAt, now, replayWindowMs, random, policy?)`:
/// what the client does when the lookup of its operation answered `unknown`
/// at `now` (Unix ms), the operation having been first sent at
/// `firstSentAt` and having made `attempt` attempts. Returns
/// `{action: "resend", delayMs}` (inside the replay window: the same key,
/// after the policy's backoff) or `{action: "needsDecision"}` (past it).
#[wasm_bindgen(js_name = afterUnknown, unchecked_return_type = "UnknownStep")]
pub fn after_unknown(
    attempt: u32,
    #[wasm_bindgen(js_name = firstSentAt)] first_sent_at: f64,
    now: f64,
    #[wasm_bindgen(js_name = replayWindowMs)] replay_window_ms: f64,
    random: f64,
    #[wasm_bindgen(unchecked_param_type = "RetryPolicy | undefined")] policy: JsValue,
) -> Result<JsValue, JsValue> {
    let step = policy_from_js(&policy)?.after_unknown(
        attempt,
        UnixMillis(whole(first_sent_at, "firstSentAt")?),
        UnixMillis(whole(now, "now")?),
        whole(replay_window_ms, "replayWindowMs")?,
        random,
    );
    Ok(to_js(&step))
}

/// `defaultRetryPolicy()`: the core's default retry parameters.
#[wasm_bindgen(js_name = defaultRetryPolicy, unchecked_return_type = "RetryPolicy")]
pub fn default_retry_policy() -> JsValue {
    to_js(&RetryPolicy::default())
}

/// The JavaScript shape of a retry outcome: `retryAfter` is the header's
/// text, `retryAfterMs` an already measured wait (the header wins), `code`
/// the problem body's `code` if any.
#[derive(Debug, Default)]
struct Outcome {
    status: Option<u16>,
    retry_after: Option<String>,
    retry_after_ms: Option<u64>,
    code: Option<String>,
    network_error: bool,
}

impl Outcome {
    /// Reads the members by hand rather than through serde: smaller code.
    fn from_js(value: &JsValue) -> Result<Self, JsValue> {
        if !value.is_object() {
            return Err(invalid_argument("outcome must be an object"));
        }
        let status = match number(value, "status")? {
            None => None,
            Some(n) => Some(
                u16::try_from(n).map_err(|_| invalid_argument("status must be an HTTP status"))?,
            ),
        };
        Ok(Self {
            status,
            retry_after: get(value, "retryAfter").as_string(),
            retry_after_ms: number(value, "retryAfterMs")?,
            code: get(value, "code").as_string(),
            network_error: get(value, "networkError").as_bool().unwrap_or(false),
        })
    }

    /// `now` is called only for a `Retry-After` header.
    fn into_core(self, now: impl FnOnce() -> UnixMillis) -> AttemptOutcome {
        match self.status {
            Some(status) if !self.network_error => AttemptOutcome::Response {
                status,
                retry_after_ms: match self.retry_after {
                    Some(header) => parse_retry_after(&header, now()),
                    None => self.retry_after_ms,
                },
                code: self.code.as_deref().and_then(ProblemCode::from_code),
            },
            // No status means no response arrived.
            _ => AttemptOutcome::NetworkError,
        }
    }
}

/// `{baseMs, capMs, maxAttempts}`, each member optional (the default's).
fn policy_from_js(value: &JsValue) -> Result<RetryPolicy, JsValue> {
    let default = RetryPolicy::default();
    if value.is_undefined() || value.is_null() {
        return Ok(default);
    }
    Ok(RetryPolicy {
        base_ms: number(value, "baseMs")?.unwrap_or(default.base_ms),
        cap_ms: number(value, "capMs")?.unwrap_or(default.cap_ms),
        max_attempts: match number(value, "maxAttempts")? {
            Some(n) => {
                u32::try_from(n).map_err(|_| invalid_argument("maxAttempts is too large"))?
            }
            None => default.max_attempts,
        },
    })
}

fn get(target: &JsValue, name: &str) -> JsValue {
    js_sys::Reflect::get(target, &name.into()).unwrap_or(JsValue::UNDEFINED)
}

/// A member that must be absent, `null`, or a whole number `>= 0`.
fn number(target: &JsValue, name: &str) -> Result<Option<u64>, JsValue> {
    let value = get(target, name);
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    whole(value.as_f64().unwrap_or(f64::NAN), name).map(Some)
}

/// A whole number `>= 0` that a JavaScript number holds exactly.
fn whole(n: f64, name: &str) -> Result<u64, JsValue> {
    if n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 {
        // Whole and in range, so the cast is exact.
        Ok(n as u64)
    } else {
        Err(invalid_argument(&format!(
            "{name} must be a whole number >= 0"
        )))
    }
}

/// A serialisable value as a plain JavaScript object (through JSON, which
/// every value here round-trips through exactly).
fn to_js<T: Serialize>(value: &T) -> JsValue {
    serde_json::to_string(value).map_or(JsValue::NULL, |s| json_value(&s))
}

fn json_value(json: &str) -> JsValue {
    js_sys::JSON::parse(json).unwrap_or(JsValue::NULL)
}

/// A JavaScript `Error` carrying a stable `code`.
fn error(code: &str, message: &str) -> JsValue {
    let err: JsValue = js_sys::Error::new(message).into();
    set(&err, "code", &code.into());
    err
}

fn invalid_argument(message: &str) -> JsValue {
    error("invalid-argument", message)
}

fn set(target: &JsValue, name: &str, value: &JsValue) {
    // Setting a property on a fresh Error object cannot fail.
    let _ = js_sys::Reflect::set(target, &name.into(), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never() -> UnixMillis {
        panic!("the clock must not be read without a Retry-After")
    }

    fn response(status: u16) -> Outcome {
        Outcome {
            status: Some(status),
            ..Outcome::default()
        }
    }

    #[test]
    fn outcomes_map_to_the_core() {
        let net = Outcome {
            network_error: true,
            ..response(200)
        };
        assert_eq!(net.into_core(never), AttemptOutcome::NetworkError);
        assert_eq!(
            Outcome::default().into_core(never),
            AttemptOutcome::NetworkError
        );
        let busy = Outcome {
            retry_after: Some("2".into()),
            ..response(409)
        };
        assert_eq!(
            busy.into_core(|| UnixMillis(0)),
            AttemptOutcome::Response {
                status: 409,
                retry_after_ms: Some(2_000),
                code: None,
            }
        );
        let measured = Outcome {
            retry_after_ms: Some(1_500),
            ..response(503)
        };
        assert_eq!(
            measured.into_core(never),
            AttemptOutcome::Response {
                status: 503,
                retry_after_ms: Some(1_500),
                code: None,
            }
        );
        assert_eq!(
            response(201).into_core(never),
            AttemptOutcome::Response {
                status: 201,
                retry_after_ms: None,
                code: None,
            }
        );
    }

    #[test]
    fn http_date_retry_after_is_measured_from_now() {
        let o = Outcome {
            retry_after: Some("Sun, 06 Nov 1994 08:49:40 GMT".into()),
            ..response(503)
        };
        assert_eq!(
            o.into_core(|| UnixMillis(784_111_777_000)),
            AttemptOutcome::Response {
                status: 503,
                retry_after_ms: Some(3_000),
                code: None,
            }
        );
    }
}

//! Runs the shared test vectors' inputs through the core as built into the
//! Worker, so a test under workerd can compare the answers with the native
//! ones (`core/vectors/*.json`, which `core/tests/vectors.rs` checks natively).
//!
//! The Worker exposes this only when its `EDGE_SELFTEST` variable is `1`
//! (`edge/serve.sh` sets it only when asked to): `POST /__edge/selftest` with
//!
//! ```json
//! {"keys": [{"profile": "strict", "lines": ["\"abc\""]}],
//!  "fingerprints": [{"operation": "POST /orders:v1", "payload": "{\"sku\":\"A\",\"quantity\":1}"}],
//!  "orders": [{"body": "{\"sku\":\"A\",\"quantity\":1}"}],
//!  "http_fingerprints": [{"operation": "http:v1", "method": "POST", "path": "/pay",
//!                         "content_type": "application/json", "body_hex": "7b7d"}],
//!  "downstream_keys": [{"scope": "acct", "operation": "POST /orders:v1",
//!                       "key_header": "\"abc\"", "profile": "strict", "effect": "charge"}],
//!  "step_keys": [{"scope": "acct", "operation": "POST /checkout:v1", "key": "abc",
//!                 "instance": "flow-1", "step": "charge", "action": "run"}]}
//! ```
//!
//! answers each list in order, in the vectors' own vocabulary: keys
//! `{"ok": key}` or `{"error": {"code", "reason"}}`; fingerprints
//! `{"canonical", "hex"}` or `{"error"}`; orders `{"ok": order}` or
//! `{"problem": body}`; HTTP fingerprints (`Fingerprint::of_http`, whose
//! body bytes travel as hex) `{"hex"}`; downstream keys
//! (`downstream_key`, the key header parsed under its profile) `{"uuid"}` or
//! `{"error": {"code", "reason"}}`; step keys (`step_downstream_key_of` of the
//! stored tuple) `{"uuid"}` (an action other than `run` or `compensate` is a
//! batch not understood).
//!
//! The Worker itself never computes an HTTP fingerprint (it guards `POST
//! /orders`, whose fingerprint is the order's, and forwards the rest); the
//! HTTP fingerprint vectors run here so that the core as built into the
//! Worker is checked against them all the same; so do the downstream and
//! step key vectors (the outbox and flow workers derive those keys at the
//! origin).

use idemkey_core::{
    FINGERPRINT_VERSION, Fingerprint, IdempotencyKey, KeyProfile, NewOrder, OperationId,
    StepAction, canonical_json, downstream_key, step_downstream_key_of,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// The path of the self-test route.
pub const SELFTEST_PATH: &str = "/__edge/selftest";

#[derive(Deserialize)]
struct Batch {
    #[serde(default)]
    keys: Vec<KeyCase>,
    #[serde(default)]
    fingerprints: Vec<FingerprintCase>,
    #[serde(default)]
    orders: Vec<OrderCase>,
    #[serde(default)]
    http_fingerprints: Vec<HttpFingerprintCase>,
    #[serde(default)]
    downstream_keys: Vec<DownstreamCase>,
    #[serde(default)]
    step_keys: Vec<StepKeyCase>,
}

#[derive(Deserialize)]
struct StepKeyCase {
    scope: String,
    operation: String,
    key: String,
    instance: String,
    step: String,
    action: String,
}

#[derive(Deserialize)]
struct DownstreamCase {
    scope: String,
    operation: String,
    key_header: String,
    profile: String,
    effect: String,
}

#[derive(Deserialize)]
struct KeyCase {
    profile: String,
    lines: Vec<String>,
}

#[derive(Deserialize)]
struct FingerprintCase {
    operation: String,
    payload: String,
}

#[derive(Deserialize)]
struct OrderCase {
    body: String,
}

#[derive(Deserialize)]
struct HttpFingerprintCase {
    operation: String,
    method: String,
    path: String,
    content_type: Option<String>,
    body_hex: String,
}

/// The bytes of an even-length string of hex digits.
fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd-length hex: {hex:?}"));
    }
    digits
        .chunks_exact(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("not hex: {hex:?}"))
        })
        .collect()
}

/// Answers a batch (see the module docs); `Err` with a message when the
/// batch itself is not understood.
pub fn answer(batch: &[u8]) -> Result<Value, String> {
    let batch: Batch = serde_json::from_slice(batch).map_err(|e| e.to_string())?;
    let keys = batch
        .keys
        .iter()
        .map(|case| {
            let profile: KeyProfile = case.profile.parse().map_err(|e| format!("{e}"))?;
            let lines = case.lines.iter().map(|l| l.as_bytes());
            Ok(match IdempotencyKey::from_field_lines(lines, profile) {
                Ok(key) => json!({ "ok": key.as_str() }),
                Err(e) => json!({ "error": { "code": e.code().as_str(), "reason": e.reason() } }),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let fingerprints = batch
        .fingerprints
        .iter()
        .map(|case| {
            let op = OperationId::new(&case.operation).map_err(|e| e.to_string())?;
            Ok(match serde_json::from_str::<Value>(&case.payload) {
                Ok(value) => {
                    let payload = String::from_utf8_lossy(&canonical_json(&value)).into_owned();
                    let op_json = serde_json::to_string(op.as_str()).map_err(|e| e.to_string())?;
                    json!({
                        "canonical": format!("[{FINGERPRINT_VERSION},{op_json},{payload}]"),
                        "hex": Fingerprint::of_value(&op, &value).to_hex(),
                    })
                }
                Err(e) => json!({ "error": e.to_string() }),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let orders = batch
        .orders
        .iter()
        .map(|case| match NewOrder::from_json(case.body.as_bytes()) {
            Ok(order) => json!({ "ok": order }),
            Err(problem) => json!({ "problem": problem.to_json() }),
        })
        .collect::<Vec<_>>();
    let http_fingerprints = batch
        .http_fingerprints
        .iter()
        .map(|case| {
            let op = OperationId::new(&case.operation).map_err(|e| e.to_string())?;
            let body = from_hex(&case.body_hex)?;
            let content_type = case.content_type.as_deref().map(str::as_bytes);
            let fp = Fingerprint::of_http(&op, &case.method, &case.path, content_type, &body);
            Ok(json!({ "hex": fp.to_hex() }))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let downstream_keys = batch
        .downstream_keys
        .iter()
        .map(|case| {
            let op = OperationId::new(&case.operation).map_err(|e| e.to_string())?;
            let profile: KeyProfile = case.profile.parse().map_err(|e| format!("{e}"))?;
            Ok(
                match IdempotencyKey::parse(case.key_header.as_bytes(), profile) {
                    Ok(key) => json!({
                        "uuid": downstream_key(&case.scope, &op, &key, &case.effect).as_str()
                    }),
                    Err(e) => {
                        json!({ "error": { "code": e.code().as_str(), "reason": e.reason() } })
                    }
                },
            )
        })
        .collect::<Result<Vec<_>, String>>()?;
    let step_keys = batch
        .step_keys
        .iter()
        .map(|case| {
            let action: StepAction = case.action.parse().map_err(|e| format!("{e}"))?;
            let key = step_downstream_key_of(
                &case.scope,
                &case.operation,
                &case.key,
                &case.instance,
                &case.step,
                action,
            );
            Ok(json!({ "uuid": key.as_str() }))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(json!({
        "keys": keys,
        "fingerprints": fingerprints,
        "orders": orders,
        "http_fingerprints": http_fingerprints,
        "downstream_keys": downstream_keys,
        "step_keys": step_keys,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(name: &str) -> Value {
        // The package's directory as the test runner sets it when the test runs, not
        // as it was when the binary was built: a build directory shared by two checkouts
        // can hand this one a test binary another checkout compiled.
        let dir = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
        let path = format!("{dir}/../core/vectors/{name}");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// A vector file, with at least the cases `minimums.json` sets for it.
    fn vectors(name: &str) -> Value {
        let doc = read(name);
        let least = read("minimums.json")["files"][name]["cases"]
            .as_u64()
            .unwrap();
        let len = doc["cases"].as_array().map_or(0, Vec::len) as u64;
        assert!(len >= least, "{name}: {len} cases, fewer than {least}");
        doc
    }

    /// The same batch the workerd test sends, answered natively: what the
    /// Worker must reproduce.
    #[test]
    fn native_answers_match_the_vectors() {
        let (keys, fps, orders) = (
            vectors("keys.json"),
            vectors("fingerprints.json"),
            vectors("orders.json"),
        );
        let batch = json!({
            "keys": keys["cases"],
            "fingerprints": fps["cases"],
            "orders": orders["cases"],
        });
        let got = answer(batch.to_string().as_bytes()).unwrap();
        for (list, doc) in [("keys", &keys), ("fingerprints", &fps), ("orders", &orders)] {
            assert_eq!(
                got[list].as_array().map(Vec::len),
                doc["cases"].as_array().map(Vec::len)
            );
        }
        for (case, got) in keys["cases"]
            .as_array()
            .unwrap()
            .iter()
            .zip(got["keys"].as_array().unwrap())
        {
            match case.get("ok") {
                Some(ok) => assert_eq!(&got["ok"], ok, "{}", case["name"]),
                None => assert_eq!(&got["error"], &case["error"], "{}", case["name"]),
            }
        }
        // Fingerprint vectors are the core's own business (core/tests/vectors.rs);
        // here the adapter must give what the core's API gives.
        for (case, got) in fps["cases"]
            .as_array()
            .unwrap()
            .iter()
            .zip(got["fingerprints"].as_array().unwrap())
        {
            let op = OperationId::new(case["operation"].as_str().unwrap()).unwrap();
            let fp = Fingerprint::of_json(&op, case["payload"].as_str().unwrap()).unwrap();
            assert_eq!(got["hex"], fp.to_hex(), "{}", case["name"]);
        }
        for (case, got) in orders["cases"]
            .as_array()
            .unwrap()
            .iter()
            .zip(got["orders"].as_array().unwrap())
        {
            match case.get("ok") {
                Some(ok) => assert_eq!(&got["ok"], ok, "{}", case["name"]),
                None => assert_eq!(&got["problem"], &case["problem"], "{}", case["name"]),
            }
        }
    }

    /// The HTTP fingerprint vectors as the workerd test sends them (body
    /// bytes as hex), answered natively: each gives the vector's hex.
    #[test]
    fn native_http_fingerprints_match_the_vectors() {
        let doc = vectors("http_fingerprints.json");
        let cases = doc["cases"].as_array().unwrap();
        assert!(!cases.is_empty());
        assert_eq!(Some(cases.len() as u64), doc["count"].as_u64());
        let to_hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let batch: Vec<Value> = cases
            .iter()
            .map(|c| {
                let body_hex = match (&c["body"], &c["body_hex"]) {
                    (Value::String(text), _) => to_hex(text.as_bytes()),
                    (_, hex) => hex.as_str().unwrap().to_owned(),
                };
                json!({
                    "operation": c["operation"], "method": c["method"], "path": c["path"],
                    "content_type": c["content_type"], "body_hex": body_hex,
                })
            })
            .collect();
        let got = answer(json!({ "http_fingerprints": batch }).to_string().as_bytes()).unwrap();
        let got = got["http_fingerprints"].as_array().unwrap();
        assert_eq!(got.len(), cases.len());
        for (case, got) in cases.iter().zip(got) {
            assert_eq!(got["hex"], case["hex"], "{}", case["name"]);
        }
    }

    /// The downstream key vectors as the workerd test sends them, answered
    /// natively: each gives the vector's UUID.
    #[test]
    fn native_downstream_keys_match_the_vectors() {
        let doc = vectors("downstream_keys.json");
        let cases = doc["cases"].as_array().unwrap();
        assert_eq!(Some(cases.len() as u64), doc["count"].as_u64());
        let got = answer(json!({ "downstream_keys": cases }).to_string().as_bytes()).unwrap();
        let got = got["downstream_keys"].as_array().unwrap();
        assert_eq!(got.len(), cases.len());
        for (case, got) in cases.iter().zip(got) {
            assert_eq!(got, &json!({ "uuid": case["uuid"] }), "{}", case["name"]);
        }
        let bad = json!({ "downstream_keys": [{ "scope": "a", "operation": "POST /x:v1",
            "key_header": "abc", "profile": "uuid", "effect": "charge" }] });
        let got = answer(bad.to_string().as_bytes()).unwrap();
        assert_eq!(got["downstream_keys"][0]["error"]["reason"], "not-uuid");
    }

    /// The step key vectors as the workerd test sends them, answered
    /// natively: each gives the vector's UUID.
    #[test]
    fn native_step_keys_match_the_vectors() {
        let doc = vectors("step_keys.json");
        let cases = doc["cases"].as_array().unwrap();
        assert_eq!(Some(cases.len() as u64), doc["count"].as_u64());
        let got = answer(json!({ "step_keys": cases }).to_string().as_bytes()).unwrap();
        let got = got["step_keys"].as_array().unwrap();
        assert_eq!(got.len(), cases.len());
        for (case, got) in cases.iter().zip(got) {
            assert_eq!(got, &json!({ "uuid": case["uuid"] }), "{}", case["name"]);
        }
    }

    #[test]
    fn a_batch_that_is_not_understood_is_an_error() {
        assert!(answer(b"3").is_err());
        assert!(answer(br#"{"keys":[{"profile":"loose","lines":[]}]}"#).is_err());
        let http = |hex: &str| {
            let case = json!({ "operation": "http:v1", "method": "POST", "path": "/",
                "content_type": null, "body_hex": hex });
            answer(
                json!({ "http_fingerprints": [case] })
                    .to_string()
                    .as_bytes(),
            )
        };
        assert!(http("7b7d").is_ok());
        assert!(http("7b7").is_err());
        assert!(http("zz").is_err());
        assert!(http("é").is_err());
        let step = |action: &str| {
            let case = json!({ "scope": "a", "operation": "POST /x:v1", "key": "k",
                "instance": "flow", "step": "charge", "action": action });
            answer(json!({ "step_keys": [case] }).to_string().as_bytes())
        };
        assert!(step("compensate").is_ok());
        assert!(step("undo").is_err());
    }
}

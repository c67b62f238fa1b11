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
//!  "orders": [{"body": "{\"sku\":\"A\",\"quantity\":1}"}]}
//! ```
//!
//! answers each list in order, in the vectors' own vocabulary: keys
//! `{"ok": key}` or `{"error": {"code", "reason"}}`; fingerprints
//! `{"canonical", "hex"}` or `{"error"}`; orders `{"ok": order}` or
//! `{"problem": body}`.

use idemkey_core::{
    FINGERPRINT_VERSION, Fingerprint, IdempotencyKey, KeyProfile, NewOrder, OperationId,
    canonical_json,
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
    Ok(json!({ "keys": keys, "fingerprints": fingerprints, "orders": orders }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors(name: &str) -> Value {
        let path = format!("{}/../core/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
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

    #[test]
    fn a_batch_that_is_not_understood_is_an_error() {
        assert!(answer(b"3").is_err());
        assert!(answer(br#"{"keys":[{"profile":"loose","lines":[]}]}"#).is_err());
    }
}

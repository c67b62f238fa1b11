//! The shared vectors of what the browser package does not export (lookup
//! states, replayed headers, the generic HTTP fingerprint, derived downstream
//! and flow step keys) against
//! `idemkey-core` compiled to wasm32, in Node and in headless Chromium:
//! the core runs in a JavaScript engine exactly as natively, without adding
//! exports (and bytes) to the package. `scripts/test.d/50-wasm-browser.sh`
//! runs this file with `wasm-bindgen-test-runner` twice: in Node, then with
//! `WASM_BINDGEN_USE_BROWSER=1` in Chromium. The vectors are compiled in, as
//! a browser has no file system.
#![cfg(target_arch = "wasm32")]

use idemkey_core::{
    DEFAULT_REPLAY_HEADERS, Fingerprint, IdempotencyKey, KeyProfile, LookupState,
    NEVER_REPLAYED_HEADERS, OperationId, STEP_KEY_DOMAIN, StepAction, Stored, UnixMillis,
    downstream_key, is_replayed_header, step_downstream_key_of,
};
use serde_json::Value;
use wasm_bindgen_test::wasm_bindgen_test;

const LOOKUPS: &str = include_str!("../../core/vectors/lookups.json");
const REPLAY_HEADERS: &str = include_str!("../../core/vectors/replay_headers.json");
const HTTP_FINGERPRINTS: &str = include_str!("../../core/vectors/http_fingerprints.json");
const DOWNSTREAM_KEYS: &str = include_str!("../../core/vectors/downstream_keys.json");
const STEP_KEYS: &str = include_str!("../../core/vectors/step_keys.json");

const MINIMUMS: &str = include_str!("../../core/vectors/minimums.json");

/// A vector file and its cases; the file states how many there are, at
/// least the minimum `minimums.json` sets for `name`.
fn load(name: &str, text: &str) -> (Value, usize) {
    let doc: Value = serde_json::from_str(text).expect("vector JSON");
    let count = doc["count"].as_u64().expect("a count") as usize;
    let minimums: Value = serde_json::from_str(MINIMUMS).expect("minimums JSON");
    let least = minimums["files"][name]["cases"]
        .as_u64()
        .unwrap_or_else(|| panic!("no minimum for {name}")) as usize;
    assert!(
        count >= least && doc["cases"].as_array().map(Vec::len) == Some(count),
        "{name}: {count} cases, fewer than the minimum {least} (or not as counted)"
    );
    (doc, count)
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

#[wasm_bindgen_test]
fn lookup_vectors() {
    let (doc, count) = load("lookups.json", LOOKUPS);
    let op = OperationId::from_static("POST /x:v1");
    let a = Fingerprint::of_json(&op, "\"A\"").unwrap();
    let mut ran = 0;
    for case in doc["cases"].as_array().unwrap() {
        let name = str_of(case, "name");
        let s = &case["stored"];
        assert!(
            matches!(s["fingerprint"].as_str(), None | Some("A")),
            "{name}"
        );
        let millis = |field: &str| UnixMillis(s[field].as_u64().unwrap());
        let stored = match str_of(s, "state") {
            "nothing" => Stored::Nothing,
            "in_flight" => Stored::InFlight {
                fingerprint: a,
                lease_until: millis("lease_until"),
            },
            "completed" => Stored::Completed {
                fingerprint: a,
                replay_until: millis("replay_until"),
            },
            "tombstone" => Stored::Tombstone { fingerprint: a },
            other => panic!("{name}: unknown state {other}"),
        };
        let state = LookupState::of(stored, UnixMillis(case["now"].as_u64().unwrap()));
        assert_eq!(state.as_str(), str_of(case, "state"), "{name}");
        ran += 1;
    }
    assert_eq!(ran, count);
}

#[wasm_bindgen_test]
fn replay_header_vectors() {
    let (doc, count) = load("replay_headers.json", REPLAY_HEADERS);
    assert_eq!(doc["default"], serde_json::json!(DEFAULT_REPLAY_HEADERS));
    assert_eq!(doc["never"], serde_json::json!(NEVER_REPLAYED_HEADERS));
    let mut ran = 0;
    for case in doc["cases"].as_array().unwrap() {
        let allow: Vec<&str> = case["allow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let got = is_replayed_header(str_of(case, "header"), &allow);
        assert_eq!(Some(got), case["replayed"].as_bool(), "{}", case["name"]);
        ran += 1;
    }
    assert_eq!(ran, count);
}

#[wasm_bindgen_test]
fn http_fingerprint_vectors() {
    let (doc, count) = load("http_fingerprints.json", HTTP_FINGERPRINTS);
    let mut ran = 0;
    for case in doc["cases"].as_array().unwrap() {
        let name = str_of(case, "name");
        let body: Vec<u8> = match (&case["body"], &case["body_hex"]) {
            (Value::String(text), Value::Null) => text.as_bytes().to_vec(),
            (Value::Null, Value::String(hex)) => (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect(),
            _ => panic!("{name}: body or body_hex"),
        };
        let op = OperationId::new(str_of(case, "operation")).unwrap();
        let fp = Fingerprint::of_http(
            &op,
            str_of(case, "method"),
            str_of(case, "path"),
            case["content_type"].as_str().map(str::as_bytes),
            &body,
        );
        assert_eq!(fp.to_hex(), str_of(case, "hex"), "{name}");
        ran += 1;
    }
    assert_eq!(ran, count);
}

/// The core's derivation, and the Node build's `downstreamKey` export over it
/// (the browser package leaves the export out; this file runs in Chromium).
#[wasm_bindgen_test]
fn downstream_key_vectors() {
    let (doc, count) = load("downstream_keys.json", DOWNSTREAM_KEYS);
    let mut ran = 0;
    for case in doc["cases"].as_array().unwrap() {
        let name = str_of(case, "name");
        let (scope, effect) = (str_of(case, "scope"), str_of(case, "effect"));
        let profile: KeyProfile = str_of(case, "profile").parse().unwrap();
        let key = IdempotencyKey::parse(str_of(case, "key_header").as_bytes(), profile).unwrap();
        let op = OperationId::new(str_of(case, "operation")).unwrap();
        let derived = downstream_key(scope, &op, &key, effect);
        assert_eq!(derived.as_str(), str_of(case, "uuid"), "{name}");
        #[cfg(feature = "downstream-key")]
        assert_eq!(
            idemkey_wasm::downstream_key_js(
                scope,
                op.as_str(),
                str_of(case, "key_header"),
                str_of(case, "profile"),
                effect,
            )
            .ok()
            .as_deref(),
            Some(str_of(case, "uuid")),
            "{name}: downstreamKey"
        );
        ran += 1;
    }
    assert_eq!(ran, count);
}

/// The core's step key derivation, and the Node build's `stepDownstreamKey`
/// export over it (left out of the browser package like `downstreamKey`).
#[wasm_bindgen_test]
fn step_key_vectors() {
    let (doc, count) = load("step_keys.json", STEP_KEYS);
    assert_eq!(doc["domain"], STEP_KEY_DOMAIN);
    let mut ran = 0;
    for case in doc["cases"].as_array().unwrap() {
        let name = str_of(case, "name");
        let [scope, operation, key, instance, step, action] =
            ["scope", "operation", "key", "instance", "step", "action"].map(|f| str_of(case, f));
        let parsed: StepAction = action.parse().unwrap();
        let derived = step_downstream_key_of(scope, operation, key, instance, step, parsed);
        assert_eq!(derived.as_str(), str_of(case, "uuid"), "{name}");
        #[cfg(feature = "downstream-key")]
        assert_eq!(
            idemkey_wasm::step_downstream_key_js(scope, operation, key, instance, step, action)
                .ok()
                .as_deref(),
            Some(str_of(case, "uuid")),
            "{name}: stepDownstreamKey"
        );
        ran += 1;
    }
    assert_eq!(ran, count);
}

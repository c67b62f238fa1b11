//! The shared test vectors in `core/vectors/` (also read by the wasm and JS
//! tests) against the native core.

use std::path::PathBuf;

use idemkey_core::{
    AttemptOutcome, DEFAULT_REPLAY_HEADERS, Decision, Earlier, ExpiryPolicy, Fingerprint,
    IdempotencyKey, KeyProfile, LookupState, NEVER_REPLAYED_HEADERS, NewOrder, ORDER_OPERATION,
    OperationId, Problem, ProblemCode, RetryPolicy, RetryStep, StepAction, Stored, UnixMillis,
    canonical_json, decide, downstream_key, is_replayed_header, step_downstream_key_of,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

// The package's directory as the test runner sets it when the test runs, not
// as it was when the binary was built: a build directory shared by two checkouts
// can hand this one a test binary another checkout compiled.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

fn read(name: &str) -> Value {
    let path = manifest_dir().join("vectors").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// A vector file, checked to hold at least its minimum number of entries in
/// each list `minimums.json` names for it.
fn load(name: &str) -> Value {
    let doc = read(name);
    let minimums = read("minimums.json");
    let lists = minimums["files"][name]
        .as_object()
        .unwrap_or_else(|| panic!("minimums.json has no entry for {name}"));
    for (list, least) in lists {
        let least = least.as_u64().unwrap();
        let len = doc[list].as_array().map_or(0, Vec::len) as u64;
        assert!(
            len >= least,
            "{name}: {list} has {len} entries, fewer than its minimum {least}"
        );
    }
    doc
}

#[test]
fn every_vector_file_has_a_minimum() {
    let minimums = read("minimums.json");
    let dir = manifest_dir().join("vectors");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json") && n != "minimums.json")
        .collect();
    files.sort();
    let mut listed: Vec<String> = minimums["files"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    listed.sort();
    assert_eq!(files, listed);
    assert!(files.len() >= 10, "{files:?}");
}

fn cases(doc: &Value) -> &Vec<Value> {
    doc["cases"].as_array().expect("a cases array")
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

#[test]
fn key_vectors() {
    let doc = load("keys.json");
    for case in cases(&doc) {
        let name = str_of(case, "name");
        let profile: KeyProfile = str_of(case, "profile").parse().unwrap();
        let lines: Vec<&str> = case["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        let got = IdempotencyKey::from_field_lines(lines.iter().map(|l| l.as_bytes()), profile);
        match (&case["ok"], &case["error"], got) {
            (Value::String(want), Value::Null, Ok(key)) => {
                assert_eq!(key.as_str(), want, "{name} ({profile})");
                // What a client sends back parses to the same key.
                let again = IdempotencyKey::parse(key.to_header_value().as_bytes(), profile);
                assert_eq!(again.as_ref(), Ok(&key), "{name} ({profile}) round trip");
            }
            (Value::Null, want @ Value::Object(_), Err(err)) => {
                assert_eq!(err.reason(), str_of(want, "reason"), "{name} ({profile})");
                assert_eq!(
                    err.code().as_str(),
                    str_of(want, "code"),
                    "{name} ({profile})"
                );
                let problem = err.to_problem();
                assert_eq!(problem.status(), 400, "{name} ({profile})");
            }
            (_, _, got) => panic!("{name} ({profile}): expected {case}, got {got:?}"),
        }
    }
}

#[test]
fn fingerprint_vectors() {
    let doc = load("fingerprints.json");
    for case in cases(&doc) {
        let name = str_of(case, "name");
        let op = OperationId::new(str_of(case, "operation")).unwrap();
        let payload = str_of(case, "payload");
        let value: Value = serde_json::from_str(payload).unwrap();
        let canonical = String::from_utf8(canonical_json(&value)).unwrap();
        let expected_canonical = str_of(case, "canonical");
        assert_eq!(
            format!(
                "[1,{},{canonical}]",
                serde_json::to_string(op.as_str()).unwrap()
            ),
            expected_canonical,
            "{name}: canonical form"
        );
        let fp = Fingerprint::of_json(&op, payload).unwrap();
        assert_eq!(fp.to_hex(), str_of(case, "hex"), "{name}");
        assert_eq!(Fingerprint::of_value(&op, &value), fp, "{name}: of_value");
    }
}

#[test]
fn reordered_members_share_a_fingerprint_and_other_payloads_do_not() {
    let doc = load("fingerprints.json");
    // Computed by the core from each case's inputs, not read from the file.
    let hex = |name: &str| {
        let case = cases(&doc)
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        let op = OperationId::new(str_of(case, "operation")).unwrap();
        Fingerprint::of_json(&op, str_of(case, "payload"))
            .unwrap()
            .to_hex()
    };
    assert_eq!(
        hex("order body"),
        hex("order body, members reordered and spaced")
    );
    assert_ne!(hex("order body"), hex("other quantity"));
    assert_ne!(hex("order body"), hex("same body, other operation version"));
}

/// The fingerprint a symbol of decisions.json and lookups.json stands for:
/// "A" and "B" are two different requests.
fn symbol(v: &Value) -> Fingerprint {
    let op = OperationId::from_static("POST /x:v1");
    match v.as_str() {
        Some(s @ ("A" | "B")) => Fingerprint::of_json(&op, &format!("{s:?}")).unwrap(),
        other => panic!("unknown fingerprint symbol {other:?}"),
    }
}

/// A `stored` object of decisions.json and lookups.json.
fn stored_of(s: &Value, fp: impl Fn(&Value) -> Fingerprint) -> Stored {
    match str_of(s, "state") {
        "nothing" => Stored::Nothing,
        "in_flight" => Stored::InFlight {
            fingerprint: fp(&s["fingerprint"]),
            lease_until: UnixMillis(s["lease_until"].as_u64().unwrap()),
        },
        "completed" => Stored::Completed {
            fingerprint: fp(&s["fingerprint"]),
            replay_until: UnixMillis(s["replay_until"].as_u64().unwrap()),
        },
        "tombstone" => Stored::Tombstone {
            fingerprint: fp(&s["fingerprint"]),
        },
        other => panic!("unknown state {other}"),
    }
}

/// The cases of a file that states its `count`, checked to be that many and
/// more than none.
fn counted(doc: &Value) -> &Vec<Value> {
    let all = cases(doc);
    assert!(!all.is_empty(), "no cases");
    assert_eq!(Some(all.len() as u64), doc["count"].as_u64(), "count");
    all
}

#[test]
fn decision_vectors() {
    let fp = symbol;
    let doc = load("decisions.json");
    let mut seen = std::collections::BTreeSet::new();
    for case in cases(&doc) {
        let name = str_of(case, "name");
        let stored = stored_of(&case["stored"], fp);
        let policy: ExpiryPolicy = str_of(case, "policy").parse().unwrap();
        let now = UnixMillis(case["now"].as_u64().unwrap());
        let decision = decide(stored, fp(&case["request"]), now, policy);
        let want: Decision = serde_json::from_value(case["decision"].clone()).unwrap();
        assert_eq!(decision, want, "{name}");
        seen.insert(decision.as_str());
        match (decision.problem(None), &case["problem"]) {
            (None, Value::Null) => {}
            (Some(problem), want) => {
                assert_eq!(problem.code().as_str(), str_of(want, "code"), "{name}");
                assert_eq!(
                    u64::from(problem.status()),
                    want["status"].as_u64().unwrap()
                );
                assert_eq!(
                    problem.retry_after(),
                    want["retry_after"].as_u64(),
                    "{name}"
                );
            }
            (None, want) => panic!("{name}: expected problem {want}"),
        }
    }
    // Every row of the decision table is covered.
    let all = [
        "execute",
        "take_over",
        "reexecute",
        "replay",
        "reused",
        "in_progress",
        "expired",
    ];
    assert_eq!(seen, all.into_iter().collect());
}

#[test]
fn retry_vectors() {
    let doc = load("retry.json");
    let policy: RetryPolicy = serde_json::from_value(doc["policy"].clone()).unwrap();
    assert_eq!(
        policy,
        RetryPolicy::default(),
        "the vectors use the default policy"
    );
    for case in cases(&doc) {
        let name = str_of(case, "name");
        let outcome: AttemptOutcome = serde_json::from_value(case["outcome"].clone()).unwrap();
        let attempt = u32::try_from(case["attempt"].as_u64().unwrap()).unwrap();
        let random = case["random"].as_f64().unwrap();
        let want: RetryStep = serde_json::from_value(case["step"].clone()).unwrap();
        let earlier: Earlier = serde_json::from_value(case["earlier"].clone()).unwrap();
        assert_eq!(
            policy.step_after(attempt, earlier, outcome, random),
            want,
            "{name}"
        );
        if earlier == Earlier::NotApplied {
            assert_eq!(policy.step(attempt, outcome, random), want, "{name}: step");
        }
        assert_eq!(
            Some(outcome.may_have_applied()),
            case["mayHaveApplied"].as_bool(),
            "{name}: may_have_applied"
        );
        // The wire form the wasm layer returns is exactly the vector's.
        assert_eq!(serde_json::to_value(want).unwrap(), case["step"], "{name}");
    }
}

#[test]
fn problem_vectors() {
    let doc = load("problems.json");
    let codes = doc["codes"].as_array().unwrap();
    assert_eq!(
        codes.len(),
        ProblemCode::ALL.len(),
        "every code has a vector"
    );
    for entry in codes {
        let code = ProblemCode::from_code(str_of(entry, "code")).unwrap();
        assert_eq!(u64::from(code.status()), entry["status"].as_u64().unwrap());
        assert_eq!(code.title(), str_of(entry, "title"));
        assert_eq!(code.type_uri(), str_of(entry, "type"));
    }
    for entry in doc["bodies"].as_array().unwrap() {
        let name = str_of(entry, "name");
        let secs = entry["retry_after"].as_u64();
        let problem = match str_of(entry, "ctor") {
            "in_progress" => Problem::in_progress(secs.unwrap()),
            "key_reused" => Problem::key_reused(),
            "key_expired" => Problem::key_expired(entry["lookup"].as_str().map(str::to_owned)),
            "service_unavailable" => Problem::service_unavailable(secs.unwrap()),
            "unauthorized" => Problem::unauthorized(),
            "cross_site_request" => Problem::cross_site_request(),
            "not_found" => Problem::not_found(),
            "unsupported_media_type" => Problem::unsupported_media_type(),
            "payload_too_large" => Problem::payload_too_large(
                usize::try_from(entry["limit"].as_u64().unwrap()).unwrap(),
            ),
            "sku_not_in_catalogue" => Problem::sku_not_in_catalogue(),
            "order_reference_exists" => {
                Problem::order_reference_exists(str_of(entry, "order").parse().unwrap())
            }
            "payment_declined" => Problem::payment_declined(str_of(entry, "reason")),
            "out_of_stock" => Problem::out_of_stock(str_of(entry, "sku")),
            other => panic!("unknown constructor {other}"),
        };
        assert_eq!(problem.to_json(), str_of(entry, "body"), "{name}");
        let headers: Vec<Value> = problem
            .headers()
            .into_iter()
            .map(|(k, v)| serde_json::json!([k, v]))
            .collect();
        assert_eq!(Value::Array(headers), entry["headers"], "{name}: headers");
    }
}

#[test]
fn order_vectors() {
    let doc = load("orders.json");
    for case in cases(&doc) {
        let name = str_of(case, "name");
        let got = NewOrder::from_json(str_of(case, "body").as_bytes());
        match (got, &case["ok"], &case["problem"]) {
            (Ok(order), want @ Value::Object(_), Value::Null) => {
                assert_eq!(order.sku, str_of(want, "sku"), "{name}");
                assert_eq!(
                    u64::from(order.quantity),
                    want["quantity"].as_u64().unwrap()
                );
                assert_eq!(
                    order.reference.as_deref(),
                    want["reference"].as_str(),
                    "{name}"
                );
                // The whole order as the vectors write it (the edge's
                // self-test sends exactly this), and its fingerprint.
                assert_eq!(&serde_json::to_value(&order).unwrap(), want, "{name}");
                assert_eq!(
                    order.fingerprint().to_hex(),
                    str_of(case, "fingerprint"),
                    "{name}"
                );
                let body = Fingerprint::of_json(&ORDER_OPERATION, str_of(case, "body")).unwrap();
                assert_eq!(
                    order.fingerprint(),
                    body,
                    "{name}: the body's own fingerprint"
                );
            }
            (Err(problem), Value::Null, Value::String(body)) => {
                assert_eq!(&problem.to_json(), body, "{name}");
            }
            (got, _, _) => panic!("{name}: expected {case}, got {got:?}"),
        }
    }
}

#[test]
fn unknown_vectors() {
    let doc = load("unknown.json");
    let policy: RetryPolicy = serde_json::from_value(doc["policy"].clone()).unwrap();
    assert_eq!(policy, RetryPolicy::default());
    let all = cases(&doc);
    let mut seen = std::collections::BTreeSet::new();
    for case in all {
        let name = str_of(case, "name");
        let int = |field: &str| {
            case[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: {field}"))
        };
        let step = policy.after_unknown(
            u32::try_from(int("attempt")).unwrap(),
            UnixMillis(int("firstSentAt")),
            UnixMillis(int("now")),
            int("replayWindowMs"),
            case["random"].as_f64().unwrap(),
        );
        let want: idemkey_core::UnknownStep = serde_json::from_value(case["step"].clone()).unwrap();
        assert_eq!(step, want, "{name}");
        // The wire form the wasm layer returns is exactly the vector's.
        assert_eq!(serde_json::to_value(step).unwrap(), case["step"], "{name}");
        seen.insert(str_of(&case["step"], "action").to_owned());
    }
    assert_eq!(seen.len(), 2, "both steps are covered: {seen:?}");
}

#[test]
fn lookup_vectors() {
    let doc = load("lookups.json");
    let mut seen = std::collections::BTreeSet::new();
    for case in counted(&doc) {
        let name = str_of(case, "name");
        let stored = stored_of(&case["stored"], symbol);
        let now = UnixMillis(case["now"].as_u64().unwrap());
        let state = LookupState::of(stored, now);
        assert_eq!(state.as_str(), str_of(case, "state"), "{name}");
        let want: LookupState = serde_json::from_value(case["state"].clone()).unwrap();
        assert_eq!(state, want, "{name}");
        seen.insert(state.as_str());
    }
    // Every state is reached.
    assert_eq!(seen, LookupState::ALL.map(LookupState::as_str).into());
}

#[test]
fn replay_header_vectors() {
    let doc = load("replay_headers.json");
    let list = |field: &str| -> Vec<String> {
        serde_json::from_value(doc[field].clone()).unwrap_or_else(|e| panic!("{field}: {e}"))
    };
    assert_eq!(list("default"), DEFAULT_REPLAY_HEADERS);
    assert_eq!(list("never"), NEVER_REPLAYED_HEADERS);
    for case in counted(&doc) {
        let name = str_of(case, "name");
        let allow: Vec<&str> = case["allow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let got = is_replayed_header(str_of(case, "header"), &allow);
        assert_eq!(Some(got), case["replayed"].as_bool(), "{name}");
    }
}

/// The bytes of an HTTP fingerprint case's body: `body` (UTF-8 text) or
/// `body_hex`.
fn body_bytes(case: &Value) -> Vec<u8> {
    match (&case["body"], &case["body_hex"]) {
        (Value::String(text), Value::Null) => text.as_bytes().to_vec(),
        (Value::Null, Value::String(hex)) => (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect(),
        _ => panic!("body or body_hex in {case}"),
    }
}

#[test]
fn http_fingerprint_vectors() {
    let doc = load("http_fingerprints.json");
    assert_eq!(doc["version"], 1);
    for case in counted(&doc) {
        let name = str_of(case, "name");
        let op = OperationId::new(str_of(case, "operation")).unwrap();
        let content_type = case["content_type"].as_str().map(str::as_bytes);
        let body = body_bytes(case);
        let fp = Fingerprint::of_http(
            &op,
            str_of(case, "method"),
            str_of(case, "path"),
            content_type,
            &body,
        );
        assert_eq!(fp.to_hex(), str_of(case, "hex"), "{name}");
        // The canonical text is what the hex hashes (a check of the file).
        let digest = Fingerprint::from_bytes(Sha256::digest(str_of(case, "canonical")).into());
        assert_eq!(digest, fp, "{name}: canonical");
    }
}

#[test]
fn http_fingerprints_equal_where_the_contract_says() {
    let doc = load("http_fingerprints.json");
    // Computed by the core from each case's inputs, not read from the file.
    let hex = |name: &str| {
        let case = cases(&doc)
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        Fingerprint::of_http(
            &OperationId::new(str_of(case, "operation")).unwrap(),
            str_of(case, "method"),
            str_of(case, "path"),
            case["content_type"].as_str().map(str::as_bytes),
            &body_bytes(case),
        )
        .to_hex()
    };
    let same = [
        ("JSON body", "JSON body, members reordered and spaced"),
        ("JSON body", "JSON type in capitals with charset utf-8"),
        (
            "JSON text as text/plain is bytes",
            "JSON text with no content type is bytes",
        ),
        (
            "empty body under a JSON type is null",
            "empty body with no content type is null",
        ),
    ];
    for (a, b) in same {
        assert_eq!(hex(a), hex(b), "{a} / {b}");
    }
    let differ = [
        ("JSON body", "JSON text as text/plain is bytes"),
        ("JSON body", "other method, same body"),
        ("JSON body", "other operation, same request"),
        ("query string is part of the path", "other query string"),
        (
            "JSON null is not an empty body",
            "empty body under a JSON type is null",
        ),
    ];
    for (a, b) in differ {
        assert_ne!(hex(a), hex(b), "{a} / {b}");
    }
}

#[test]
fn instance_downstream_key_vectors() {
    let doc = load("downstream_keys.json");
    assert_eq!(
        doc["instance_domain"],
        idemkey_core::INSTANCE_DOWNSTREAM_KEY_DOMAIN
    );
    let cases = doc["instance_cases"].as_array().expect("instance_cases");
    let mut seen = std::collections::BTreeSet::new();
    for case in cases {
        let name = str_of(case, "name");
        let derived = idemkey_core::instance_downstream_key_of(
            str_of(case, "scope"),
            str_of(case, "operation"),
            str_of(case, "key"),
            str_of(case, "effect"),
            str_of(case, "instance"),
        );
        assert_eq!(derived.to_string(), str_of(case, "uuid"), "{name}");
        // Never the version 1 key of the same tuple.
        let v1 = idemkey_core::downstream_key_of(
            str_of(case, "scope"),
            str_of(case, "operation"),
            str_of(case, "key"),
            str_of(case, "effect"),
        );
        assert_ne!(derived, v1, "{name}: differs from version 1");
        seen.insert(derived);
    }
    assert_eq!(seen.len(), cases.len(), "every case gives its own key");
}

#[test]
fn step_key_vectors() {
    let doc = load("step_keys.json");
    assert_eq!(doc["domain"], idemkey_core::STEP_KEY_DOMAIN);
    let mut seen = std::collections::BTreeSet::new();
    let mut actions = std::collections::BTreeSet::new();
    for case in counted(&doc) {
        let name = str_of(case, "name");
        let action: StepAction = str_of(case, "action").parse().unwrap();
        assert_eq!(action.as_str(), str_of(case, "action"), "{name}");
        let parts = ["scope", "operation", "key", "instance", "step"].map(|f| str_of(case, f));
        let [scope, operation, key, instance, step] = parts;
        let derived = step_downstream_key_of(scope, operation, key, instance, step, action);
        assert_eq!(derived.as_str(), str_of(case, "uuid"), "{name}");
        // The UUID is the digest's first 16 bytes with version and variant set.
        let mut hex = derived.as_uuid().simple().to_string();
        assert_eq!(hex.remove(12), '8', "{name}: version 8");
        assert!("89ab".contains(hex.remove(15)), "{name}: RFC 9562 variant");
        let mut plain = str_of(case, "sha256")[..32].to_owned();
        plain.remove(12);
        plain.remove(15);
        assert_eq!(hex, plain, "{name}: the digest's other bits");
        // The other action gives another key; an instance key of the same
        // strings is another key too.
        let other = match action {
            StepAction::Run => StepAction::Compensate,
            StepAction::Compensate => StepAction::Run,
        };
        let undo = step_downstream_key_of(scope, operation, key, instance, step, other);
        assert_ne!(derived, undo, "{name}: the other action");
        let as_instance =
            idemkey_core::instance_downstream_key_of(scope, operation, key, step, instance);
        assert_ne!(derived, as_instance, "{name}: an instance key");
        seen.insert(derived);
        actions.insert(action.as_str());
    }
    assert_eq!(
        seen.len(),
        counted(&doc).len(),
        "every case gives its own key"
    );
    assert_eq!(actions.len(), 2, "both actions have vectors");
}

#[test]
fn downstream_key_vectors() {
    let doc = load("downstream_keys.json");
    assert_eq!(doc["domain"], idemkey_core::DOWNSTREAM_KEY_DOMAIN);
    let mut seen = std::collections::BTreeSet::new();
    for case in counted(&doc) {
        let name = str_of(case, "name");
        let profile: KeyProfile = str_of(case, "profile").parse().unwrap();
        let key = IdempotencyKey::parse(str_of(case, "key_header").as_bytes(), profile).unwrap();
        assert_eq!(key.as_str(), str_of(case, "key"), "{name}: parsed key");
        let op = OperationId::new(str_of(case, "operation")).unwrap();
        let derived = downstream_key(str_of(case, "scope"), &op, &key, str_of(case, "effect"));
        assert_eq!(derived.to_string(), str_of(case, "uuid"), "{name}");
        assert_eq!(derived.as_str(), str_of(case, "uuid"), "{name}");
        // The tuple as an outbox message stores it gives the same key.
        let stored = idemkey_core::downstream_key_of(
            str_of(case, "scope"),
            str_of(case, "operation"),
            str_of(case, "key"),
            str_of(case, "effect"),
        );
        assert_eq!(stored, derived, "{name}: from the stored tuple");
        // The UUID is the digest's first 16 bytes with version and variant set.
        let digest = str_of(case, "sha256");
        let mut hex = derived.as_uuid().simple().to_string();
        assert_eq!(hex.remove(12), '8', "{name}: version 8");
        assert!("89ab".contains(hex.remove(15)), "{name}: RFC 9562 variant");
        let (mut plain, digest) = (digest[..32].to_owned(), &digest[..32]);
        plain.remove(12);
        plain.remove(15);
        assert_eq!(hex, plain, "{name}: the digest's other bits ({digest})");
        seen.insert(derived);
    }
    // Three spellings of one key give one result; every other case differs.
    assert_eq!(seen.len(), counted(&doc).len() - 2);
}

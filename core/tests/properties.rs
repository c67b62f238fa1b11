//! Property tests: keys round-trip through the header form, fingerprints
//! ignore member order, `decide` and the retry policy are total.

use idemkey_core::{
    AttemptOutcome, Decision, Earlier, ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile,
    OperationId, RetryPolicy, RetryStep, Stored, UnixMillis, decide,
};
use proptest::prelude::*;
use serde_json::{Map, Value};

const OP: OperationId = OperationId::from_static("POST /orders:v1");

/// Printable ASCII, the characters an sf-string may hold.
fn sf_chars() -> impl Strategy<Value = String> {
    proptest::collection::vec(0x20u8..=0x7e, 1..=255)
        .prop_map(|bytes| bytes.into_iter().map(char::from).collect())
}

/// A JSON value of bounded depth.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1.0e9f64..1.0e9).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((".{0,8}", inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// The same value with every object's members inserted in reverse order
/// (serde_json's map sorts them, so write the JSON text by hand instead).
fn to_text_reversed(value: &Value) -> String {
    match value {
        Value::Object(members) => {
            let parts: Vec<String> = members
                .iter()
                .rev()
                .map(|(k, v)| {
                    format!(
                        "{} : {}",
                        serde_json::to_string(k).unwrap(),
                        to_text_reversed(v)
                    )
                })
                .collect();
            format!("{{ {} }}", parts.join(" , "))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(to_text_reversed).collect();
            format!("[ {} ]", parts.join(", "))
        }
        other => serde_json::to_string(other).unwrap(),
    }
}

fn stored() -> impl Strategy<Value = Stored> {
    let fp = prop_oneof![
        Just(Fingerprint::from_bytes([1; 32])),
        Just(Fingerprint::from_bytes([2; 32]))
    ];
    prop_oneof![
        Just(Stored::Nothing),
        (fp.clone(), any::<u64>()).prop_map(|(fingerprint, t)| Stored::InFlight {
            fingerprint,
            lease_until: UnixMillis(t)
        }),
        (fp.clone(), any::<u64>()).prop_map(|(fingerprint, t)| Stored::Completed {
            fingerprint,
            replay_until: UnixMillis(t)
        }),
        fp.prop_map(|fingerprint| Stored::Tombstone { fingerprint }),
    ]
}

proptest! {
    #[test]
    fn strict_keys_round_trip_through_the_header_form(raw in sf_chars()) {
        let quoted = IdempotencyKey::from_random_bytes([0; 16]).to_header_value();
        prop_assert!(IdempotencyKey::parse(quoted.as_bytes(), KeyProfile::Strict).is_ok());
        // Build the sf-string by hand, as a client library would.
        let header = format!("\"{}\"", raw.replace('\\', "\\\\").replace('"', "\\\""));
        let key = IdempotencyKey::parse(header.as_bytes(), KeyProfile::Strict).unwrap();
        prop_assert_eq!(key.as_str(), raw.as_str());
        prop_assert_eq!(key.to_header_value(), header);
    }

    #[test]
    fn lenient_bare_and_quoted_spellings_are_the_same_key(
        raw in proptest::collection::vec(0x21u8..=0x7e, 1..=255)
            .prop_filter("bare characters", |b| !b.iter().any(|c| matches!(c, b'"' | b',' | b';')))
    ) {
        let bare = IdempotencyKey::parse(&raw, KeyProfile::Lenient).unwrap();
        let quoted = IdempotencyKey::parse(bare.to_header_value().as_bytes(), KeyProfile::Lenient).unwrap();
        prop_assert_eq!(bare, quoted);
    }

    #[test]
    fn key_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for profile in KeyProfile::ALL {
            if let Ok(key) = IdempotencyKey::parse(&bytes, profile) {
                prop_assert!((1..=255).contains(&key.as_str().len()));
                prop_assert!(key.as_str().bytes().all(|b| (0x20..=0x7e).contains(&b)));
            }
        }
    }

    #[test]
    fn uuid_keys_from_any_random_bytes_parse_under_every_profile(bytes in any::<[u8; 16]>()) {
        let key = IdempotencyKey::from_random_bytes(bytes);
        let header = key.to_header_value();
        for profile in KeyProfile::ALL {
            let parsed = IdempotencyKey::parse(header.as_bytes(), profile);
            prop_assert_eq!(parsed.as_ref(), Ok(&key));
        }
    }

    #[test]
    fn fingerprints_ignore_member_order_and_whitespace(value in json_value()) {
        let text = serde_json::to_string(&value).unwrap();
        let reversed = to_text_reversed(&value);
        prop_assert_eq!(
            Fingerprint::of_json(&OP, &text).unwrap(),
            Fingerprint::of_json(&OP, &reversed).unwrap()
        );
        prop_assert_eq!(Fingerprint::of_json(&OP, &text).unwrap(), Fingerprint::of_value(&OP, &value));
    }

    #[test]
    fn a_changed_member_changes_the_fingerprint(a in any::<i64>(), b in any::<i64>()) {
        prop_assume!(a != b);
        let with = |q: i64| {
            let mut m = Map::new();
            m.insert("quantity".into(), Value::from(q));
            Fingerprint::of_value(&OP, &Value::Object(m))
        };
        prop_assert_ne!(with(a), with(b));
    }

    #[test]
    fn decide_is_total_and_consistent(
        stored in stored(),
        same in any::<bool>(),
        now in any::<u64>(),
        reexecute in any::<bool>(),
    ) {
        let request = match (stored, same) {
            (Stored::InFlight { fingerprint, .. }
            | Stored::Completed { fingerprint, .. }
            | Stored::Tombstone { fingerprint }, true) => fingerprint,
            _ => Fingerprint::from_bytes([3; 32]),
        };
        let policy = if reexecute { ExpiryPolicy::Reexecute } else { ExpiryPolicy::Reject };
        let decision = decide(stored, request, UnixMillis(now), policy);
        // A rejection always has a problem; an execution or replay never does.
        let rejects = matches!(decision, Decision::Reused | Decision::InProgress { .. } | Decision::Expired);
        prop_assert_eq!(decision.problem(None).is_some(), rejects);
        if let Decision::InProgress { retry_after_secs } = decision {
            prop_assert!(retry_after_secs >= 1);
        }
        // Another payload is never executed or replayed against a stored key.
        if !same && stored != Stored::Nothing {
            prop_assert_eq!(decision, Decision::Reused);
        }
    }

    #[test]
    fn retry_waits_respect_retry_after_and_the_budget(
        attempt in 1u32..20,
        status in prop_oneof![Just(0u16), 100u16..600],
        retry_after in proptest::option::of(0u64..100_000),
        random in any::<f64>(),
        maybe_applied in any::<bool>(),
    ) {
        let policy = RetryPolicy::default();
        let outcome = if status == 0 {
            AttemptOutcome::NetworkError
        } else {
            AttemptOutcome::Response { status, retry_after_ms: retry_after, code: None }
        };
        let earlier = if maybe_applied { Earlier::MaybeApplied } else { Earlier::NotApplied };
        match policy.step_after(attempt, earlier, outcome, random) {
            RetryStep::Wait { delay_ms } => {
                prop_assert!(attempt < policy.max_attempts);
                if status != 0 {
                    prop_assert!(delay_ms >= retry_after.unwrap_or(0));
                }
                prop_assert!(delay_ms <= policy.cap_ms.max(retry_after.unwrap_or(0)));
            }
            RetryStep::Done => prop_assert!((200..400).contains(&status)),
            RetryStep::HoldForAuth => prop_assert!(status == 401 || status == 403),
            // Once an earlier attempt may have applied, only a code that
            // proves nothing was stored ends the operation (none here).
            RetryStep::Stop => prop_assert!(!maybe_applied),
            RetryStep::Reconcile => {}
        }
    }
}

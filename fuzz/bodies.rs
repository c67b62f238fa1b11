//! The bodies of the fuzz targets, shared with the regression test
//! (`core/tests/fuzz_regressions.rs`), which replays the committed corpus and
//! every kept crasher through exactly what the fuzzer ran. Each function
//! panics when an invariant breaks, and never otherwise.

use idemkey_core::{
    ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, MAX_ORDER_BODY_BYTES, NewOrder, Problem,
    Stored, UnixMillis, decide,
};

/// Key parsing from raw header bytes: accepted keys obey the invariants,
/// and parse → to_header_value → parse gives the same key.
pub fn parse_key(data: &[u8]) {
    for profile in KeyProfile::ALL {
        if let Ok(key) = IdempotencyKey::parse(data, profile) {
            let s = key.as_str();
            assert!((1..=255).contains(&s.len()));
            assert!(s.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            let header = key.to_header_value();
            let again = IdempotencyKey::parse(header.as_bytes(), profile).expect("re-parse");
            assert_eq!(again, key);
            if profile == KeyProfile::Uuid {
                assert_eq!(s, s.to_ascii_lowercase());
            }
        }
    }
}

/// An order request from raw bytes to a decision: the first byte picks the
/// key profile and the stored state, the rest splits at the first newline
/// into a key field value and a body. Every rejection is a well-formed
/// problem.
pub fn order_request(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let split = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
    let (key_field, body) = rest.split_at(split);
    let body = body.get(1..).unwrap_or_default();
    let profile = KeyProfile::ALL[usize::from(selector % 3)];
    if let Err(e) = IdempotencyKey::parse(key_field, profile) {
        check(&e.to_problem());
        return;
    }
    if body.len() > MAX_ORDER_BODY_BYTES {
        return;
    }
    let order = match NewOrder::from_json(body) {
        Ok(order) => order,
        Err(problem) => {
            check(&problem);
            return;
        }
    };
    let fp = order.fingerprint();
    let other = Fingerprint::from_bytes([selector; 32]);
    let stored_fp = if selector & 0x10 == 0 { fp } else { other };
    let t = UnixMillis(u64::from(selector) * 1000);
    let stored = match selector >> 6 {
        0 => Stored::Nothing,
        1 => Stored::InFlight {
            fingerprint: stored_fp,
            lease_until: t,
        },
        2 => Stored::Completed {
            fingerprint: stored_fp,
            replay_until: t,
        },
        _ => Stored::Tombstone {
            fingerprint: stored_fp,
        },
    };
    let policy = if selector & 0x20 == 0 {
        ExpiryPolicy::Reject
    } else {
        ExpiryPolicy::Reexecute
    };
    let decision = decide(stored, fp, UnixMillis(128_000), policy);
    if let Some(problem) = decision.problem(None) {
        check(&problem);
    }
}

/// A problem's JSON carries its own status and code.
fn check(problem: &Problem) {
    let body: serde_json::Value = serde_json::from_str(&problem.to_json()).expect("problem JSON");
    assert_eq!(body["status"].as_u64(), Some(u64::from(problem.status())));
    assert_eq!(body["code"].as_str(), Some(problem.code().as_str()));
}

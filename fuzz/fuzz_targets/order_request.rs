//! An order request from raw bytes to a decision: the first byte picks the
//! stored state, the rest splits into a key field value and a body. Never
//! panics; every rejection is a well-formed problem.
#![no_main]

use idemkey_core::{
    ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, MAX_ORDER_BODY_BYTES, NewOrder, Problem,
    Stored, UnixMillis, decide,
};
use libfuzzer_sys::fuzz_target;

fn check(problem: &Problem) {
    let body: serde_json::Value = serde_json::from_str(&problem.to_json()).expect("problem JSON");
    assert_eq!(body["status"].as_u64(), Some(u64::from(problem.status())));
    assert_eq!(body["code"].as_str(), Some(problem.code().as_str()));
}

fuzz_target!(|data: &[u8]| {
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
});

//! Exports that reach the core's key parser, fingerprint and decision table,
//! so that the linker keeps them (and anything they import) in the module.
//! Inputs are derived from the argument so nothing is constant-folded away.

use idemkey_core::{
    ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, NewOrder, OperationId, Stored,
    UnixMillis, decide,
};

/// Parses a key built from `seed` under every profile; returns a bit per
/// profile that accepted it, plus the key's length.
#[unsafe(no_mangle)]
pub extern "C" fn idemkey_probe_key(seed: u32) -> u32 {
    let uuid = format!("\"8e03978e-40d5-43e8-bc93-{seed:012x}\"");
    let bare = format!("key-{seed}");
    let mut bits = 0;
    for (i, profile) in [KeyProfile::Strict, KeyProfile::Lenient, KeyProfile::Uuid]
        .into_iter()
        .enumerate()
    {
        for value in [uuid.as_bytes(), bare.as_bytes()] {
            if let Ok(key) = IdempotencyKey::parse(value, profile) {
                bits |= 1 << i;
                bits += key.as_str().len() as u32 * 8;
            }
        }
    }
    bits
}

/// Fingerprints an order whose quantity is `quantity`, then runs the
/// decision table on it; returns the fingerprint's first bytes mixed with
/// the decision.
#[unsafe(no_mangle)]
pub extern "C" fn idemkey_probe_fingerprint(quantity: u32) -> u32 {
    let operation = OperationId::new("POST /orders:v1").expect("valid operation id");
    let json = format!("{{\"sku\":\"LIBRO-TS\",\"quantity\":{quantity}}}");
    let raw = match Fingerprint::of_json(&operation, &json) {
        Ok(fingerprint) => fingerprint,
        Err(_) => return 0,
    };
    let order = match NewOrder::from_json(json.as_bytes()) {
        Ok(order) => order.fingerprint(),
        Err(problem) => return u32::from(problem.status()),
    };
    let now = UnixMillis(u64::from(quantity));
    let stored = Stored::Completed {
        fingerprint: raw,
        replay_until: now.plus_millis(1000),
    };
    let decision = decide(stored, order, now, ExpiryPolicy::Reject);
    let bytes = raw.as_bytes();
    let status = decision
        .problem(None)
        .map_or(200, |p| u32::from(p.status()));
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) ^ status
}

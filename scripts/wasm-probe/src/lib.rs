//! Exports that reach the core's key parser, fingerprints (JSON and HTTP),
//! decision table, lookup states and replayed-header rule,
//! so that the linker keeps them (and anything they import) in the module.
//! Inputs are derived from the argument so nothing is constant-folded away.

use idemkey_core::{
    DEFAULT_REPLAY_HEADERS, ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, LookupState,
    NewOrder, OperationId, Stored, UnixMillis, decide, is_replayed_header,
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

/// Fingerprints an HTTP request whose body is `seed`'s bytes (as JSON and as
/// raw bytes), names the lookup state of a record and asks whether a header
/// is replayed; returns the fingerprints' first bytes mixed with both.
#[unsafe(no_mangle)]
pub extern "C" fn idemkey_probe_http(seed: u32) -> u32 {
    let operation = OperationId::new("http:v1").expect("valid operation id");
    let body = format!("{{\"n\":{seed}}}");
    let json = Fingerprint::of_http(
        &operation,
        "POST",
        "/p?q=1",
        Some(b"application/json"),
        body.as_bytes(),
    );
    let raw = Fingerprint::of_http(&operation, "POST", "/p", None, &seed.to_le_bytes());
    let stored = Stored::Completed {
        fingerprint: json,
        replay_until: UnixMillis(u64::from(seed)),
    };
    let state = LookupState::of(stored, UnixMillis(1000)).as_str().len() as u32;
    let header = if seed.is_multiple_of(2) {
        "Location"
    } else {
        "Set-Cookie"
    };
    let replayed = u32::from(is_replayed_header(header, DEFAULT_REPLAY_HEADERS));
    let (a, b) = (json.as_bytes(), raw.as_bytes());
    u32::from_le_bytes([a[0] ^ b[0], a[1] ^ b[1], a[2], b[3]]) ^ (state << 1) ^ replayed
}

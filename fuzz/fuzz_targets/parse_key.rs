//! Key parsing from raw header bytes: never panics, accepted keys obey the
//! invariants, and parse → to_header_value → parse gives the same key.
#![no_main]

use idemkey_core::{IdempotencyKey, KeyProfile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
});

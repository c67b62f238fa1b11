//! Replays every input kept under `fuzz/regressions/` (crashers found by
//! `scripts/fuzz.sh`) through the same invariants the fuzz targets check.

use std::path::Path;

use idemkey_core::{IdempotencyKey, KeyProfile, NewOrder};

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| e.file_name() != ".gitkeep")
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect()
}

#[test]
fn kept_key_inputs_parse_without_panicking_and_round_trip() {
    for data in inputs("parse_key") {
        for profile in KeyProfile::ALL {
            if let Ok(key) = IdempotencyKey::parse(&data, profile) {
                let again = IdempotencyKey::parse(key.to_header_value().as_bytes(), profile);
                assert_eq!(again, Ok(key));
            }
        }
    }
}

#[test]
fn kept_order_inputs_validate_without_panicking() {
    for data in inputs("order_request") {
        if let Err(problem) = NewOrder::from_json(&data) {
            assert_eq!(problem.status(), 400);
        }
    }
}

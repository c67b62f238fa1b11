//! Key parsing from raw header bytes (`bodies::parse_key`).
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::parse_key(data));

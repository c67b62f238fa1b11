//! An order request from raw bytes to a decision (`bodies::order_request`).
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::order_request(data));

//! Microbenchmarks of the core: key parsing, fingerprints (against plain
//! SHA-256 over the same bytes), and the decision table.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use idemkey_core::{
    ExpiryPolicy, Fingerprint, IdempotencyKey, KeyProfile, ORDER_OPERATION, Stored, UnixMillis,
    canonical_json, decide,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::hint::black_box;

fn payload_of_len(target: usize) -> String {
    // An object of short string members whose JSON text is about `target` bytes.
    let mut members = Vec::new();
    let mut len = 2;
    let mut i = 0;
    while len < target {
        let m = format!("\"field{i:04}\":\"value-{i:08}\"");
        len += m.len() + 1;
        members.push(m);
        i += 1;
    }
    format!("{{{}}}", members.join(","))
}

fn keys(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse_key");
    let quoted = br#""8e03978e-40d5-43e8-bc93-6894a57f9324""#;
    for profile in KeyProfile::ALL {
        g.bench_function(BenchmarkId::from_parameter(profile), |b| {
            b.iter(|| IdempotencyKey::parse(black_box(quoted), profile))
        });
    }
    g.bench_function("lenient_bare", |b| {
        b.iter(|| IdempotencyKey::parse(black_box(b"abc-123-def"), KeyProfile::Lenient))
    });
    g.finish();
}

fn fingerprints(c: &mut Criterion) {
    let small = r#"{"sku":"LIBRO-TS","quantity":2,"note":"x"}"#.to_owned(); // 40 bytes
    let large = payload_of_len(8 * 1024);
    for (name, text) in [("40B", small), ("8KiB", large)] {
        let value: Value = serde_json::from_str(&text).unwrap();
        let canonical = canonical_json(&value);
        let mut g = c.benchmark_group(format!("fingerprint_{name}"));
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function("of_value", |b| {
            b.iter(|| Fingerprint::of_value(&ORDER_OPERATION, black_box(&value)))
        });
        g.bench_function("of_json_text", |b| {
            b.iter(|| Fingerprint::of_json(&ORDER_OPERATION, black_box(&text)))
        });
        g.bench_function("plain_sha256_baseline", |b| {
            b.iter(|| Sha256::digest(black_box(&canonical)))
        });
        g.finish();
    }
}

fn decisions(c: &mut Criterion) {
    let fp = Fingerprint::of_json(&ORDER_OPERATION, "{}").unwrap();
    let stored = Stored::Completed {
        fingerprint: fp,
        replay_until: UnixMillis(2_000),
    };
    c.bench_function("decide_replay", |b| {
        b.iter(|| {
            decide(
                black_box(stored),
                black_box(fp),
                UnixMillis(1_000),
                ExpiryPolicy::Reject,
            )
        })
    });
}

criterion_group!(benches, keys, fingerprints, decisions);
criterion_main!(benches);

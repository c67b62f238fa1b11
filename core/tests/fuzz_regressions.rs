//! Replays the fuzz targets' committed seed corpus (`fuzz/seeds/TARGET/`)
//! and every kept crasher (`fuzz/regressions/TARGET/`, written by
//! `scripts/fuzz.sh`) through the targets' own bodies (`fuzz/bodies.rs`):
//! a crasher keeps failing here until the bug is fixed, on stable Rust,
//! without cargo-fuzz. A missing directory or an empty corpus fails.

#[path = "../../fuzz/bodies.rs"]
mod bodies;

use std::path::PathBuf;

// The package's directory as the test runner sets it when the test runs, not
// as it was when the binary was built: a build directory shared by two checkouts
// can hand this one a test binary another checkout compiled.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The files of `fuzz/KIND/TARGET/` (`.gitkeep` aside); panics when the
/// directory is missing.
fn inputs(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = manifest_dir().join("../fuzz").join(kind).join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()) && e.file_name() != ".gitkeep")
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}

/// Runs `body` on every corpus input and kept crasher of `target`.
fn replay(target: &str, body: fn(&[u8])) {
    let corpus = inputs("seeds", target);
    assert!(
        corpus.len() >= 5,
        "{target}: the committed seed corpus has {} inputs",
        corpus.len()
    );
    let kept = inputs("regressions", target);
    for (path, data) in corpus.iter().chain(&kept) {
        let run = std::panic::catch_unwind(|| body(data));
        assert!(run.is_ok(), "{target}: {} fails", path.display());
    }
    eprintln!(
        "{target}: {} corpus inputs and {} kept crashers replayed",
        corpus.len(),
        kept.len()
    );
}

#[test]
fn parse_key_inputs_replay() {
    replay("parse_key", bodies::parse_key);
}

#[test]
fn order_request_inputs_replay() {
    replay("order_request", bodies::order_request);
}

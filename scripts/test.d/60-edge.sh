#!/usr/bin/env bash
# Issue 6: the edge Worker. Installs what is missing (npm packages from
# edge/package-lock.json, wasm-bindgen-cli, worker-build), lints the Worker
# glue for wasm32, builds the Worker (edge/build.sh), the origin and the
# native self-test, then runs the tests under workerd against a real origin
# (edge/test/*.test.mjs, node's test runner).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

command -v node >/dev/null || { echo "60-edge.sh: node (20+) is required" >&2; exit 1; }

# The glue (edge/src/glue.rs) only compiles for wasm32; the workspace clippy
# step covers the host-side modules.
edge/build.sh
cargo clippy -p idemkey-edge --target wasm32-unknown-unknown -- -D warnings
cargo build -p idemkey-server -p idemkey-testkit --bins
cargo build -p idemkey-edge --example selftest
node --test edge/test/*.test.mjs

#!/usr/bin/env bash
# The run command: ./scripts/run.sh [extra `idemkey-server serve` flags]
#
# Builds the browser package (installing the wasm32 target, wasm-bindgen-cli
# at the version in Cargo.lock and the npm tools when missing), then starts
# the order service with its demo on the embedded SQLite store
# (./idemkey.db), on http://127.0.0.1:3000/. The demo account's token (a new
# one at each start, the previous one revoked) is printed at start-up. Stop
# with Ctrl-C.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

if ! command -v npm >/dev/null 2>&1 && [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm
fi
./wasm/build.sh
exec cargo run --release -p idemkey-server -- serve --demo "$@"

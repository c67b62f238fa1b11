#!/usr/bin/env bash
# Issue 12, item 9: the demo's payment story in a real browser.
#   scripts/test.d/demo-payments.test.mjs  js-demo in Debian's headless
#       Chromium (playwright-core) against a real `idemkey-server serve
#       --demo` on SQLite delivering charges to a real `idemkey-server
#       provider`: a payment pending then charged on the page, the provider's
#       answer lost on purpose (the page's switch) and still one charge, a
#       declined card, a reused purchase reference (409 with a link); and
#       purchases of three steps (operations of several steps): the confirmation's answer lost
#       on purpose (confirm uncertain, then done, one confirmation), a
#       declined card undone (reserve compensated), no stock (409), a reload.
# Needs what 50-wasm-browser.sh installs (Chromium, wasm/node_modules, the
# browser package in js-demo/pkg) and installs it the same way when missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

command -v node >/dev/null || { echo "55-demo-payments.sh: node (20+) is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "55-demo-payments.sh: python3 is required" >&2; exit 1; }
if [[ ! -x /usr/bin/chromium ]]; then
    echo "installing Debian's chromium"
    sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y chromium
fi
if ! cmp -s wasm/package-lock.json wasm/node_modules/.idemkey-lock.json ||
    [[ ! -d wasm/node_modules/playwright-core ]]; then
    (cd wasm && npm ci --no-audit --no-fund)
    cp wasm/package-lock.json wasm/node_modules/.idemkey-lock.json
fi
[[ -f js-demo/pkg/idempotent-client.js ]] || wasm/build.sh

cargo build -p idemkey-server --bin idemkey-server --features provider-sim
export IDEMKEY_SERVER_BIN="$CARGO_TARGET_DIR/debug/idemkey-server"
node --test --test-concurrency=1 scripts/test.d/demo-payments.test.mjs

#!/usr/bin/env bash
# Issues 5 and 13: the browser package and the demo shop. Installs what is
# missing (Debian's chromium and chromium-driver, npm packages from
# wasm/package-lock.json: binaryen, playwright-core, esbuild, typescript;
# wasm-bindgen-cli at the Cargo.lock version), lints idemkey-wasm for wasm32,
# builds wasm/pkg (the npm package @idemkey/client) and wasm/pkg-node
# (wasm/build.sh, which also checks the 60.5 KiB gzipped budget), then runs:
#   wasm/tests/core_vectors.rs      the core's lookup, replayed-header and HTTP
#                                   fingerprint vectors through idemkey-core
#                                   compiled to wasm32 (wasm-bindgen-test), in
#                                   Node and in headless Chromium
#   wasm/tests/vectors.test.mjs     shared vectors through the Node build
#   wasm/tests/chromium.test.mjs    the same vectors in headless Chromium
#   wasm/tests/client.test.mjs      IdempotentClient in Chromium with a scripted fetch
#   wasm/tests/accepted.test.mjs    the same for operations answered 202: kept
#                                   until acknowledged, polled (backoff, timeout,
#                                   independent), final codes, two contexts'
#                                   sign-in, throwing listeners, the window's re-read
#   wasm/tests/e2e.test.mjs         js-demo in Chromium against a real
#                                   `idemkey-server serve --demo` on SQLite
#   wasm/tests/client-e2e.test.mjs  the same: account switch, late commit after
#                                   `unknown`, offline, two tabs of two accounts
#   wasm/tests/purchases-e2e.test.mjs  js-demo against a server and a provider:
#                                   a worker's purchase listed to its end, #token=
#                                   scopes, no IndexedDB
#   wasm/tests/package.test.mjs     npm pack, install into a scratch app,
#                                   tsc + esbuild, the bundle against a server
# Screenshots go to ${IDEMKEY_ARTIFACTS:-~/.cache/idemkey/artifacts}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

command -v node >/dev/null || { echo "50-wasm-browser.sh: node (20+) is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "50-wasm-browser.sh: python3 is required" >&2; exit 1; }

if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    echo "installing Debian's chromium and chromium-driver"
    sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y chromium chromium-driver
fi

# Reinstalled when a tool is missing or the lock file changed since the last install.
if ! cmp -s wasm/package-lock.json wasm/node_modules/.idemkey-lock.json ||
    [[ ! -d wasm/node_modules/playwright-core || ! -x wasm/node_modules/.bin/wasm-opt ||
        ! -x wasm/node_modules/.bin/esbuild || ! -x wasm/node_modules/.bin/tsc ]]; then
    (cd wasm && npm ci --no-audit --no-fund)
    cp wasm/package-lock.json wasm/node_modules/.idemkey-lock.json
fi

cargo clippy -p idemkey-wasm --target wasm32-unknown-unknown --all-targets -- -D warnings
wasm/build.sh
# wasm/build.sh installed wasm-bindgen-cli, whose wasm-bindgen-test-runner runs
# the wasm32 test binaries: in Node by default, in Chromium (through Debian's
# chromedriver, headless) with WASM_BINDGEN_USE_BROWSER.
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
cargo test -p idemkey-wasm --target wasm32-unknown-unknown --test core_vectors
WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver \
    cargo test -p idemkey-wasm --target wasm32-unknown-unknown --test core_vectors
cargo build -p idemkey-server --bin idemkey-server --features provider-sim
export IDEMKEY_SERVER_BIN="$CARGO_TARGET_DIR/debug/idemkey-server"
node --test --test-concurrency=1 wasm/tests/vectors.test.mjs wasm/tests/chromium.test.mjs \
    wasm/tests/client.test.mjs wasm/tests/accepted.test.mjs wasm/tests/e2e.test.mjs wasm/tests/client-e2e.test.mjs \
    wasm/tests/purchases-e2e.test.mjs wasm/tests/package.test.mjs

#!/usr/bin/env bash
# The run command: ./scripts/run.sh [extra `idemkey-server serve` flags]
#
# Builds the browser package (installing the wasm32 target, wasm-bindgen-cli
# at the version in Cargo.lock and the npm tools when missing) and the
# server, then starts two processes of that one binary:
#   - the payment provider simulator (`idemkey-server provider`) on
#     127.0.0.1 and a free port, its charges in ./idemkey-provider.db
#     (SQLite), its log in ./idemkey-provider.log, with a secret made up at
#     this start (passed in the environment, never on a command line);
#   - the order service with its demo on the embedded SQLite store
#     (./idemkey.db), on http://127.0.0.1:3000/, delivering each order's
#     charge (and each purchase's charge and confirmation) to that provider
#     with that secret; the provider answers after 300 ms and purchases
#     answer 202 at once, so the page shows their steps moving.
# The demo account's token (a new one at each start, the previous one
# revoked) is printed at start-up. Stop with Ctrl-C: it stops both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

if ! command -v npm >/dev/null 2>&1 && [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm
fi
./wasm/build.sh
cargo build --release -p idemkey-server --bin idemkey-server --features provider-sim
bin="$CARGO_TARGET_DIR/release/idemkey-server"

pids=()
stop() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait || true
}
trap stop EXIT
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM

secret=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
provider_log=idemkey-provider.log
: >"$provider_log"
# A provider that takes 300 ms per call, and a server that answers a
# purchase's 202 at once (through the environment, so a caller's own
# `--purchase-wait` still wins): the demo's steps are seen moving.
IDEMKEY_PROVIDER_TOKENS="$secret" NO_COLOR=1 "$bin" provider --bind 127.0.0.1:0 --latency-ms 300 \
    --database-url sqlite://idemkey-provider.db >>"$provider_log" 2>&1 &
pids+=("$!")
provider_url=
for _ in $(seq 300); do
    provider_url=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$provider_log" | head -n 1 | cut -d' ' -f3 || true)
    [[ -n "$provider_url" ]] && break
    if ! kill -0 "${pids[0]}" 2>/dev/null; then
        echo "run.sh: the payment provider did not start:" >&2
        cat "$provider_log" >&2
        exit 1
    fi
    sleep 0.1
done
[[ -n "$provider_url" ]] || { echo "run.sh: the payment provider did not start in 30 s (see $provider_log)" >&2; exit 1; }
echo "payment provider simulator on $provider_url (log: $provider_log)"

IDEMKEY_PURCHASE_WAIT="${IDEMKEY_PURCHASE_WAIT:-0s}" IDEMKEY_PAYMENTS_TOKEN="$secret" \
    "$bin" serve --demo --payments-url "$provider_url" "$@" &
pids+=("$!")
# The demo ends when either process does; the trap stops the other.
wait -n

#!/usr/bin/env bash
# Issue 19: Schemathesis, a property-based API tester, against the published
# contract. Installs Schemathesis (pinned, from PyPI) into a virtualenv under
# $IDEMKEY_CACHE when it is missing, starts `idemkey-server serve` on a
# throwaway SQLite file with an account made by `idemkey-server account
# create`, and runs every check, every phase (examples, coverage, fuzzing,
# stateful) with a fixed seed and a bounded number of examples
# (scripts/test.d/schemathesis.toml). Any failure fails the step.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export IDEMKEY_CACHE="${IDEMKEY_CACHE:-$HOME/.cache/idemkey}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$IDEMKEY_CACHE/target}"

SCHEMATHESIS_VERSION=4.32.5
venv="$IDEMKEY_CACHE/schemathesis-$SCHEMATHESIS_VERSION"

command -v python3 >/dev/null || { echo "70-schemathesis.sh: python3 is required" >&2; exit 1; }
if ! "$venv/bin/st" --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION"; then
    echo "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
"$venv/bin/st" --version

# The binary the other steps use (a no-op when it is already built).
cargo build -p idemkey-server --bin idemkey-server
server_bin="$CARGO_TARGET_DIR/debug/idemkey-server"

work=$(mktemp -d)
server_pid=
cleanup() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

database="sqlite://$work/idemkey.db"
token=$("$server_bin" account create schemathesis --database-url "$database" | tail -n 1)

# run_against PROFILE [ST OPTION...]: serves with that key profile (the
# document states that profile's key rule) and runs Schemathesis on it.
run_against() {
    local profile=$1
    shift
    local port base ready= status=0
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    base="http://127.0.0.1:$port"
    "$server_bin" serve --database-url "$database" --bind "127.0.0.1:$port" \
        --key-profile "$profile" --purchase-wait 0s >"$work/server-$profile.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do
        if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
            "$base/readyz" 2>/dev/null; then
            ready=1
            break
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z $ready ]]; then
        echo "70-schemathesis.sh: the server ($profile) did not become ready" >&2
        cat "$work/server-$profile.log" >&2
        return 1
    fi
    echo "==== key profile $profile ===="
    # Nothing written into the work tree (Hypothesis's .hypothesis/, a
    # __pycache__ beside the hooks), nothing carried between runs.
    HYPOTHESIS_STORAGE_DIRECTORY="$work/hypothesis" PYTHONDONTWRITEBYTECODE=1 \
        IDEMKEY_ST_TOKEN=$token "$venv/bin/st" --config-file scripts/test.d/schemathesis.toml \
        run "$base/openapi.json" \
        --checks all --phases examples,coverage,fuzzing,stateful --workers 1 \
        --no-color "$@" || status=$?
    if [[ $status -ne 0 ]]; then
        echo "--- server log (last 40 lines) ---"
        tail -n 40 "$work/server-$profile.log"
    fi
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
    return "$status"
}

# The default profile with the configured number of examples; the other
# two, whose key rules are simpler, with fewer.
run_against lenient
run_against strict --max-examples 30
run_against uuid --max-examples 30

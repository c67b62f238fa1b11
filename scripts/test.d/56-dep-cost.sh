#!/usr/bin/env bash
# What idemkey costs an application that already has the rest: the crates
# it adds, counted as an application outside the repository sees them, and
# held under the goals idemkey/README.md states ("What it costs to add"):
#   - axum + tokio + tokio-postgres, plus idemkey with `postgres,layer`:
#     at most 30 crates more;
#   - tokio + tokio-postgres, plus idemkey with `postgres` (an
#     `in_transaction` user): at most 20 more.
# Method: two scratch crates in a temporary directory, without and with
# idemkey (`default-features = false`), each resolved from the repository's
# Cargo.lock (so no network and the versions CI builds); the count is the
# package names in `cargo tree -e normal` of the second that the first
# lacks, idemkey and idemkey-core included. Builds nothing: a few seconds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
LAYER_GOAL=30
POSTGRES_GOAL=20

WORK=$(mktemp -d /tmp/idemkey-dep-cost.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The application's own dependencies, as the workspace names them.
AXUM='axum = { version = "0.8", default-features = false, features = ["http1", "json", "tokio", "query", "matched-path"] }'
TOKIO='tokio = { version = "1", features = ["rt-multi-thread", "macros", "net", "signal", "time", "sync"] }'
TOKIO_POSTGRES='tokio-postgres = "0.7"'

# tree NAME DEPENDENCY...: the sorted package names of a scratch crate's
# normal dependency tree.
tree() {
    local dir=$WORK/$1
    shift
    mkdir -p "$dir/src"
    echo 'fn main() {}' >"$dir/src/main.rs"
    {
        printf '[package]\nname = "dep-cost-app"\nversion = "0.0.0"\nedition = "2024"\npublish = false\n\n[workspace]\n\n[dependencies]\n'
        printf '%s\n' "$@"
    } >"$dir/Cargo.toml"
    cp "$ROOT/Cargo.lock" "$dir/Cargo.lock"
    (cd "$dir" && cargo tree -q -e normal --prefix none --format '{p}') |
        awk '{print $1}' | grep -vx dep-cost-app | sort -u
}

idemkey() {
    echo "idemkey = { path = \"$ROOT/idemkey\", default-features = false, features = [$1] }"
}

failed=0
# check LABEL GOAL BASE_DEPS... -- IDEMKEY_FEATURES
check() {
    local label=$1 goal=$2 features=$3
    shift 3
    local base with added n
    base=$(tree base "$@")
    with=$(tree with "$@" "$(idemkey "$features")")
    added=$(comm -13 <(echo "$base") <(echo "$with"))
    n=$(grep -c . <<<"$added" || true)
    echo "idemkey [$features] adds $n crates to $label (goal: at most $goal): $(tr '\n' ' ' <<<"$added")"
    grep -qx idemkey <<<"$added" || { echo "56-dep-cost.sh: FAILED: idemkey is not in the tree: is it the right one?" >&2; failed=1; }
    if ((n > goal)); then
        echo "56-dep-cost.sh: FAILED: $n crates for [$features] on $label, over the goal of $goal" >&2
        failed=1
    fi
    rm -rf "$WORK/base" "$WORK/with"
}

check "axum + tokio + tokio-postgres" "$LAYER_GOAL" '"postgres", "layer"' "$AXUM" "$TOKIO" "$TOKIO_POSTGRES"
check "tokio + tokio-postgres" "$POSTGRES_GOAL" '"postgres"' "$TOKIO" "$TOKIO_POSTGRES"
# Neither axum, hyper nor tower for the in_transaction user.
with=$(tree with "$TOKIO" "$TOKIO_POSTGRES" "$(idemkey '"postgres", "outbox", "flow"')")
for unwanted in axum hyper tower rustls; do
    if grep -qx "$unwanted" <<<"$with"; then
        echo "56-dep-cost.sh: FAILED: idemkey [postgres, outbox, flow] pulls $unwanted" >&2
        failed=1
    fi
done
((failed == 0)) || exit 1
echo "56-dep-cost: postgres,layer and postgres within their goals; no axum, hyper, tower or rustls without their features"

#!/usr/bin/env bash
# Runs each cargo-fuzz target for a short, bounded time from its committed
# seed corpus (fuzz/seeds/TARGET/), so that the harness itself is exercised
# on every run: IDEMKEY_FUZZ_SECONDS per target (default 20). New corpus
# entries go to a temporary directory, never into the clone. A crash fails
# the step; the crasher is kept under $IDEMKEY_CACHE/fuzz-artifacts/TARGET/
# and belongs in fuzz/regressions/TARGET/, which the regression test
# (core/tests/fuzz_regressions.rs) replays. Long runs: scripts/fuzz.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
export IDEMKEY_CACHE="${IDEMKEY_CACHE:-$HOME/.cache/idemkey}"
# The fuzz build step's target directory and flags, so nothing rebuilds.
export CARGO_TARGET_DIR="$IDEMKEY_CACHE/fuzz-target"
seconds=${IDEMKEY_FUZZ_SECONDS:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Fails when there is no target (a step that fuzzes nothing is no step).
targets=$(scripts/fuzz-targets.sh)
failed=()
for target in $targets; do
    seeds="$root/fuzz/seeds/$target"
    [[ -d $seeds ]] || { echo "$target: no committed seed corpus at $seeds" >&2; exit 1; }
    mkdir -p "$work/$target/corpus" "$work/$target/artifacts"
    status=0
    (cd fuzz && cargo +nightly fuzz run -O "$target" "$work/$target/corpus" "$seeds" -- \
        -max_total_time="$seconds" -artifact_prefix="$work/$target/artifacts/" \
        -print_final_stats=1) >"$work/$target.log" 2>&1 || status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log" | tail -n 1)
    shopt -s nullglob
    crashers=("$work/$target/artifacts"/*)
    shopt -u nullglob
    echo "$target: ${seconds}s, ${runs:-0} executions, exit $status, ${#crashers[@]} crashers"
    if [[ $status -ne 0 || ${#crashers[@]} -gt 0 || ${runs:-0} -eq 0 ]]; then
        grep -E "^(==|SUMMARY|panicked|thread '|ERROR)" "$work/$target.log" | head -n 20 || tail -n 20 "$work/$target.log"
        if [[ ${#crashers[@]} -gt 0 ]]; then
            mkdir -p "$IDEMKEY_CACHE/fuzz-artifacts/$target"
            cp "${crashers[@]}" "$IDEMKEY_CACHE/fuzz-artifacts/$target/"
            echo "$target: crashers kept in $IDEMKEY_CACHE/fuzz-artifacts/$target/; add them to fuzz/regressions/$target/"
        fi
        failed+=("$target")
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz: failed: ${failed[*]}" >&2
    exit 1
fi

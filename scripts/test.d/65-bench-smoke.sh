#!/usr/bin/env bash
# The benchmark command, small: bench/run.sh on its own throwaway cluster
# (idemkey-pg) with the debug server the tests built, one second per cell,
# PostgreSQL with 1 and 2 processes, replays at 4 connections, each cell
# measured by wrk and by bench/loadgen, one pgbench cell, a burst of one key
# over the two processes, the report. Checks that every part ran, that the
# burst made exactly one order, that the report holds both generators'
# rows, and that a few purchases measured end to end against their floor
# (bench/purchase-latency.sh, hence the server built with the provider
# simulator) all completed and every floor's steps answered 201: the
# figures of a debug build on a busy box mean nothing, the command working
# does. (The real run: docs/performance.md, "The command".)
#
# It runs from a copy of the repository with nothing beside it
# (scripts/alone.sh), as a user's fresh clone: a path that leaves the
# repository fails here. The article's Node lab, whose harness is not part
# of the repository, is asked for (node:1) and must be reported skipped,
# plainly, in the log and the report.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

fail() {
    echo "65-bench-smoke.sh: FAILED: $*" >&2
    exit 1
}

# shellcheck source=scripts/alone.sh
. scripts/alone.sh
cargo build -q -p idemkey-server --bin idemkey-server --features provider-sim
cargo build -q -p idemkey-loadgen
cargo build -q -p idemkey-ceiling
cargo build -q -p idemkey-testkit --bin idemkey-pg
OUT=$(mktemp -d /tmp/idemkey-bench-smoke-out.XXXXXX)
W=$(mktemp -d /tmp/idemkey-bench-smoke.XXXXXX)
COPY=$(alone_copy)
trap 'rm -rf "$OUT" "$W"; alone_remove "$COPY"' EXIT

# PEERDIR unset: bench/run.sh reads nothing outside the copy, and says the
# lab was skipped.
env -u PEERDIR W="$W" OUT="$OUT" SERVER="$CARGO_TARGET_DIR/debug/idemkey-server" \
    LOADGEN="$CARGO_TARGET_DIR/debug/idemkey-loadgen" PG_TOOL="$CARGO_TARGET_DIR/debug/idemkey-pg" \
    PGPORT=55461 BASE_PORT=38170 QUICK=1 DUR=1 WARM=0 CONNS=4 KINDS=replay \
    SYSTEMS="node:1 idemkey-pg:1 idemkey-pg:2" BURST_N=10 BURST_REPEAT=1 PGBENCH_PLAN="replay-select:4" \
    EXTRAS=0 LAYER_PEER=0 MICRO=0 QUIET_MAX=0 FSYNC_PROBE=0 CHART=0 \
    CEILING=1 CEILING_BIN="$CARGO_TARGET_DIR/debug/idemkey-ceiling" SUB_ROUNDS=1 SUB_DUR=1 \
    PURCHASE_LATENCY=1 PURCHASE_LATENCY_N=10 \
    bash "$COPY/bench/run.sh" >"$OUT/run.log" 2>&1 || { rc=$?; tail -30 "$OUT/run.log" >&2; fail "bench/run.sh exited $rc"; }

summary=$OUT/summary.md
grep -q "SKIPPED: the article's Node lab: no harness at (PEERDIR empty)" "$OUT/run.log" \
    || fail "bench/run.sh did not say that it skipped the Node lab, PEERDIR unset"
grep -q '^Not measured: Node lab (article, pool 5) (skipped: the Node lab harness is not beside' "$summary" \
    || fail "the report does not say that the Node lab was skipped"
grep -q '^## Two generators side by side' "$summary" || fail "no generators section in the report"
for gen in http.tsv http-loadgen.tsv; do
    for procs in 1 2; do
        row=$(awk -F'\t' -v p="$procs" '$1 == "idemkey-pg" && $3 == p && $4 == "replay"' "$OUT/$gen")
        [ -n "$row" ] || fail "$gen: no replay cell with $procs process(es)"
        requests=$(cut -f7 <<<"$row"); ok=$(cut -f13 <<<"$row"); replayed=$(cut -f19 <<<"$row")
        [ "${requests:-0}" -gt 0 ] || fail "$gen, $procs process(es): no request measured"
        [ "$ok" = "$requests" ] && [ "$replayed" = "$requests" ] \
            || fail "$gen, $procs process(es): $requests requests, $ok 201, $replayed replayed"
    done
done
grep -q 'p99 ≤ 3× the 1-process p99 (replay, c4)' "$summary" || fail "no 2-process tail target in the report"
bursts=$(awk -F'\t' 'NR > 1 && $1 == "idemkey-pg" && $2 == 2' "$OUT/bursts.tsv")
[ -n "$bursts" ] || fail "no burst of one key over 2 processes"
awk -F'\t' '$13 != "yes" { exit 1 }' <<<"$bursts" || fail "a burst of one key did not make exactly one order: $bursts"
# The ceiling's part: both loggings, each an A/B table of replays with the
# ceiling as A.
[ "$(grep -c '^| PostgreSQL, replays |' "$summary")" = 2 ] \
    || fail "the report does not hold the two replay rows against the ceiling"
for logging in default warn; do
    awk -F'\t' 'NR > 1 && $11 > 0 && $11 == $6 { ok++ } END { exit ok == 2 ? 0 : 1 }' "$OUT/ceiling-$logging/runs.tsv" \
        || fail "ceiling ($logging logging): not every run answered only replays"
done
# A purchase end to end against its floor: 10 of each, every purchase
# completed, every floor's order, charge and confirmation answered 201.
lat=$OUT/purchase-latency/samples.tsv
[ -s "$lat" ] || fail "bench/purchase-latency.sh left no samples (see its log in $OUT/logs)"
awk -F'\t' 'NR > 1 && $2 == "purchase" && $5 == "completed" { p++ } NR > 1 && $2 == "floor" && $5 == "ok" { f++ }
    NR > 1 { n++ } END { exit (p == 10 && f == 10 && n == 20) ? 0 : 1 }' "$lat" \
    || fail "purchase latency: not 10 completed purchases and 10 floors whose steps all answered 201: $(cut -f2,5 "$lat" | sort | uniq -c | tr '\n' ' ')"
grep -q '^## A purchase end to end against its floor' "$summary" || fail "no purchase latency section in the report"
echo "65-bench-smoke.sh: bench/run.sh ran every part from a copy with nothing beside it; both generators" \
    "measured 1 and 2 processes; replays against the ceiling; purchases against their floor; the Node lab," \
    "absent, reported skipped"

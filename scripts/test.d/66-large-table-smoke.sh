#!/usr/bin/env bash
# The large-table, partition-guard and SQLite trim benchmarks, small: bench/large-table.sh
# with 2,000 preloaded rows (COPY, the indexes dropped and built again and
# checked equal to the migrated ones), one round of one-second cells and a
# trim over a backlog; bench/partition-guard.sh with one round of the
# guarded claim over two partitions, its check that a key claimed twice is
# stored once, and a partition dropped; bench/sqlite-trim.sh over a backlog of
# 2 x 500 rows; bench/schema-variants.sh with every variant of both
# workloads for 20 transactions per connection each. Checks that every part ran and that
# every answer was the expected 201 or replayed 201: the figures of a debug
# build on a busy box mean nothing, the commands working does. (The real
# runs: docs/performance.md, "Twenty million records".) They run from a copy
# of the repository with nothing beside it (scripts/alone.sh): a path that
# leaves the repository fails here, not on a user's fresh clone.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

fail() {
    echo "66-large-table-smoke.sh: FAILED: $*" >&2
    exit 1
}

# shellcheck source=scripts/alone.sh
. scripts/alone.sh
cargo build -q -p idemkey-server --bin idemkey-server
cargo build -q -p idemkey-testkit --bin idemkey-pg
OUT=$(mktemp -d /tmp/idemkey-large-smoke-out.XXXXXX)
COPY=$(alone_copy)
trap 'rm -rf "$OUT"; alone_remove "$COPY"' EXIT
SERVER=$CARGO_TARGET_DIR/debug/idemkey-server
export PG_TOOL=$CARGO_TARGET_DIR/debug/idemkey-pg

OUT=$OUT/large SERVER=$SERVER PGPORT=55463 PORT=38190 ROWS=2000 ACCOUNTS=100 ROUNDS=1 DUR=1 WARM=0 \
    BACKLOG=1000 TRIM_SECS=1 TRIM_BATCHES=500 QUIET_MAX=0 \
    bash "$COPY/bench/large-table.sh" >"$OUT/large.log" 2>&1 || { rc=$?; tail -30 "$OUT/large.log" >&2; fail "bench/large-table.sh exited $rc"; }
runs=$OUT/large/runs.tsv
for kind in new replay; do
    for db in small large; do
        row=$(awk -F'\t' -v k="$kind" -v d="$db" '$2 == k && $3 == d' "$runs")
        [ -n "$row" ] || fail "large-table: no $kind cell on $db"
        requests=$(cut -f4 <<<"$row"); bad=$(cut -f9 <<<"$row")
        [ "${requests:-0}" -gt 0 ] || fail "large-table: $kind on $db measured no request"
        [ "$bad" = 0 ] || fail "large-table: $kind on $db: $bad of $requests answers not the expected 201 / replayed 201"
    done
done
trims=$(awk -F'\t' 'NR > 1' "$OUT/large/trim.tsv" | wc -l)
[ "$trims" = 2 ] || fail "large-table: $trims trim cells, expected 2"
awk -F'\t' 'NR > 1 && $6 + $7 == 0 { exit 1 }' "$OUT/large/trim.tsv" || fail "large-table: a trim cell trimmed nothing"
grep -q '^| new keys |' "$OUT/large/large-table.md" || fail "large-table: no report"

OUT=$OUT/guard SERVER=$SERVER PGPORT=55465 PARTS=2 ROUNDS=1 DUR=1 DROP_ROWS=1000 QUIET_MAX=0 \
    bash "$COPY/bench/partition-guard.sh" >"$OUT/guard.log" 2>&1 || { rc=$?; tail -30 "$OUT/guard.log" >&2; fail "bench/partition-guard.sh exited $rc"; }
cells=$(awk -F'\t' 'NR > 1 && $3 > 0' "$OUT/guard/cells.tsv" | wc -l)
[ "$cells" = 2 ] || fail "partition-guard: $cells measured cells, expected 2"
grep -q '; 0 left)' "$OUT/guard/partition-guard.md" || fail "partition-guard: the trim left rows behind"
OUT=$OUT/sqlite SERVER=$SERVER ROWS=2000 BACKLOG=500 BATCHES=100 \
    bash "$COPY/bench/sqlite-trim.sh" >"$OUT/sqlite.log" 2>&1 || { rc=$?; tail -30 "$OUT/sqlite.log" >&2; fail "bench/sqlite-trim.sh exited $rc"; }
awk -F'\t' 'NR > 1 && !($6 == 500 && $7 == 500) { exit 1 }' "$OUT/sqlite/sqlite-trim.tsv" \
    || fail "sqlite-trim: the backlog was not all trimmed: $(cat "$OUT/sqlite/sqlite-trim.tsv")"
for workload in order layer; do
    case $workload in
        order) variants="base nopay small pkid nopk nodue lean nochk onechk obtrig checks none+pkid" ;;
        layer) variants="base checks none onecheck" ;;
    esac
    OUT=$OUT/schema-$workload BIN=$SERVER PGPORT=55467 ROUNDS=1 TXNS=20 \
        bash "$COPY/bench/schema-variants.sh" "$workload" "$variants" >"$OUT/schema-$workload.log" 2>&1 \
        || { rc=$?; tail -30 "$OUT/schema-$workload.log" >&2; fail "bench/schema-variants.sh $workload exited $rc"; }
    measured=$(awk -F'\t' 'NR > 1 && $4 != "NA" && $4 > 0' "$OUT/schema-$workload/variants.tsv" | wc -l)
    [ "$measured" = "$(wc -w <<<"$variants")" ] \
        || fail "schema-variants $workload: $measured of $(wc -w <<<"$variants") variants measured"
done
echo "66-large-table-smoke.sh: bench/large-table.sh, bench/partition-guard.sh, bench/sqlite-trim.sh and bench/schema-variants.sh ran every part"

#!/usr/bin/env bash
# bench/sqlite-trim.sh: the ceiling of SQLite's row-by-row trim. A records file migrated by the
# server (`idemkey-server migrate`, WAL, synchronous=FULL as the server opens it) holds ROWS
# completed records inside their window plus a backlog of BACKLOG completed records past their
# window and BACKLOG tombstones past the retention; then the library's two trim statements
# (idemkey/src/store/sqlite/sql/trim.sql and purge.sql, what `maintenance::trim_round` runs for
# SQLite, one BEGIN IMMEDIATE transaction per batch) run batch after batch in one sqlite3 process
# until the backlog is gone, for each batch size in BATCHES (the store's clock read through
# julianday: the sqlite3 CLI here predates unixepoch('subsec')).
#
#   bench/sqlite-trim.sh          # 2 M rows, backlogs of 2 x 200,000, batches 500 and 5000 (~3 min)
#
# Output: OUT/sqlite-trim.md (also printed), OUT/sqlite-trim.tsv. Knobs: ROWS (2000000), BACKLOG
# (200000), BATCHES ("500 5000"), SERVER (a prebuilt idemkey-server; else built here), NICE (0),
# OUT (bench/results/sqlite-trim-<UTC stamp>/).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
ROWS=${ROWS:-2000000}
BACKLOG=${BACKLOG:-200000}
BATCHES=${BATCHES:-"500 5000"}
NICE=${NICE:-0}
RETENTION_MS=$((30 * 86400 * 1000))   # the server's default --tombstone-ttl (30d)
W=$(mktemp -d /tmp/idemkey-sqlite-trim.XXXXXX)
trap 'rm -rf -- "$W"' EXIT
OUT=${OUT:-$BENCH/results/sqlite-trim-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
command -v sqlite3 >/dev/null || { apt-get update -qq; apt-get install -y -qq sqlite3; }
if [ -z "${SERVER:-}" ]; then
  (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server)
  SERVER=${CARGO_TARGET_DIR:-$ROOT/target}/release/idemkey-server
fi
log() { echo "== $(date -u +%H:%M:%S) $*" >&2; }
DB=$W/records.sqlite
"$SERVER" migrate --database-url "sqlite://$DB" >"$W/migrate.log" 2>&1
Q() { sqlite3 -bail "$DB" "$@"; }
# The store's clock in ms as the library writes it needs unixepoch('subsec') (SQLite 3.42, bundled
# with the library); Debian's sqlite3 CLI is 3.40, so the statements below read it from julianday:
# the same value, the same per-row work.
LIB_NOW="CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"
NOW="CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"
DAY=86400000

# records: row i of kind 'live' (completed, window open), 'due' (completed, window closed in the
# last hour) or 'old' (a tombstone created 31 days ago); a 300-byte response, as an order's
insert_rows() {  # insert_rows KIND N
  local status=completed created="$NOW - ($DAY - 3600000) * i / $2" until="created_at + $DAY"
  case $1 in
    due) created="$NOW - $DAY - 3600000 * i / $2" ;;
    old) status=tombstone created="$NOW - 31 * $DAY" ;;
  esac
  Q "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
    INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim, status, response_status,
        response_headers, response_body, created_at, replay_until, lease_until, resource_id)
    SELECT 'acct-' || (i % 1000), 'orders v1', '$1-' || i || '-' || hex(randomblob(8)), randomblob(32),
           randomblob(16), '$status', CASE WHEN '$status' = 'completed' THEN 201 END,
           CASE WHEN '$status' = 'completed' THEN '[]' END,
           CASE WHEN '$status' = 'completed' THEN randomblob(300) END,
           created_at, $until, NULL, 'order-' || i
    FROM (SELECT i, $created AS created_at FROM n);" >/dev/null
}
log "a records file of $ROWS live rows"
insert_rows live "$ROWS"
TRIM=$(grep -v '^--' "$ROOT/idemkey/src/store/sqlite/sql/trim.sql")
PURGE=$(grep -v '^--' "$ROOT/idemkey/src/store/sqlite/sql/purge.sql")
TRIM=${TRIM//"$LIB_NOW"/$NOW} PURGE=${PURGE//"$LIB_NOW"/$NOW}
case "$TRIM$PURGE" in *unixepoch*) echo "the trim statements read the clock another way now: update this script" >&2; exit 1;; esac
TSV=$OUT/sqlite-trim.tsv
printf 'batch\tlive_rows\tbacklog\tbatches\tseconds\ttombstoned\tdeleted\trows_per_s\n' >"$TSV"
for batch in $BATCHES; do
  log "backlog: $BACKLOG past their window, $BACKLOG past the retention; batch $batch"
  insert_rows due "$BACKLOG"; insert_rows old "$BACKLOG"
  Q "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  before_due=$(Q "SELECT count(*) FROM idempotency_records WHERE key LIKE 'due-%' AND status = 'completed'")
  before_old=$(Q "SELECT count(*) FROM idempotency_records WHERE key LIKE 'old-%'")
  n=$(( (2 * BACKLOG + batch - 1) / batch + 1 ))
  {
    echo "PRAGMA journal_mode = WAL;"; echo "PRAGMA synchronous = FULL;"
    for _ in $(seq 1 "$n"); do
      echo "BEGIN IMMEDIATE;"
      printf '%s;\n' "${TRIM//\?1/$batch}"
      p=${PURGE//\?1/$RETENTION_MS}; printf '%s;\n' "${p//\?2/$batch}"
      echo "COMMIT;"
    done
  } >"$W/trim.sql"
  t0=$(date +%s%N)
  if [ "$NICE" != 0 ]; then nice -n "$NICE" sqlite3 -bail "$DB" <"$W/trim.sql" >/dev/null
  else sqlite3 -bail "$DB" <"$W/trim.sql" >/dev/null; fi
  t1=$(date +%s%N)
  left_due=$(Q "SELECT count(*) FROM idempotency_records WHERE key LIKE 'due-%' AND status = 'completed'")
  left_old=$(Q "SELECT count(*) FROM idempotency_records WHERE key LIKE 'old-%'")
  tomb=$((before_due - left_due)) del=$((before_old - left_old))
  secs=$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", d / 1e9 }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$batch" "$ROWS" "$BACKLOG" "$n" "$secs" "$tomb" "$del" \
    "$(awk -v r=$((tomb + del)) -v s="$secs" 'BEGIN { printf "%.0f", r / s }')" | tee -a "$TSV" >&2
  # the tombstones this round made go before the next round's backlog
  Q "DELETE FROM idempotency_records WHERE key LIKE 'due-%'" >/dev/null
done
{
  echo "# SQLite's trim at $ROWS rows (bench/sqlite-trim.sh)"
  echo
  echo "- $(date -u +%FT%TZ); git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo NA); SQLite $(sqlite3 --version | cut -d' ' -f1), WAL, synchronous=FULL; one transaction per batch (both statements); NICE=$NICE"
  echo
  echo '| batch | live rows | backlog (each kind) | batches | s | tombstoned | deleted | rows/s |'
  echo '|---:|---:|---:|---:|---:|---:|---:|---:|'
  awk -F'\t' 'NR > 1 { printf "| %s | %\047d | %\047d | %s | %s | %\047d | %\047d | **%\047d** |\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$TSV"
} >"$OUT/sqlite-trim.md"
cat "$OUT/sqlite-trim.md"

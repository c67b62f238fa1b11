#!/usr/bin/env bash
# bench/large-table.sh: the order route's new keys and replays against a records table of ROWS rows
# (and as many orders) spread over the replay window, next to the same route against a table that
# holds only the replayed keys, in alternating rounds; then the maintenance task's trim over a
# backlog at that size, alone and while new keys arrive.
#
#   bench/large-table.sh                       # 20 M rows, 3 rounds of 10 s per cell (~20 min)
#   ROWS=200000 ROUNDS=1 DUR=3 bench/large-table.sh   # to try it (~1 min)
#
# One throwaway PostgreSQL 15 cluster (idemkey-pg, lib.sh's start_own_cluster: initdb defaults, fsync on,
# shared_buffers 128 MB) with two databases migrated by the server itself (`idemkey-server
# migrate`): `small` and `large`. Both get, by COPY (never HTTP), the bench account's REPLAY_SET =
# ROWS / ACCOUNTS completed keys; `large` also gets the rest of ROWS records and ROWS orders over
# ACCOUNTS accounts, their creation times rising over the last 24 h (the order they would have come
# in), every record completed with a stored 201 and its window open (the steady state of a 24 h
# replay window; at 20 M rows, 231 new keys/s), but for its last hour: none leaves its window
# during the run, so the cells measure the route, not a trim that started with the server, and
# every replay is a replay (the server answers 410 once its own 24 h window is over). The big load
# drops the two tables' indexes and constraints first and builds them again from their own
# definitions afterwards (checked equal to the migrated ones), then VACUUM ANALYZE and CHECKPOINT:
# the table autovacuum would leave.
#
# Cells, ROUNDS rounds, `small` and `large` alternating (large first in odd rounds): new keys
# (bench/wrk/orders-new.lua, the server's defaults) and replays of keys drawn uniformly from the
# replay set (bench/wrk/orders-replay-set.lua, the replay cache off: every replay reads its row, so
# the table's size shows). Fresh server per cell, WARM s warm-up, CHECKPOINT, a quiet box, wrk -t2
# -cCONNS closed loop DUR s. Each cell's large/small ratio per round, and the median.
#
# Trim: BACKLOG completed records past their window and BACKLOG tombstones past the retention are
# added to `large` by COPY (what a maintenance task that stopped for a while finds), then the
# library's own trim statement (idemkey/src/store/postgres/sql/trim.sql, the statement
# `maintenance::trim_round` sends) runs in a loop on one connection (pgbench -c1, as the server's one
# task) for TRIM_SECS s per batch size in TRIM_BATCHES, alone and then beside new keys at c16;
# rows/s = backlog rows deleted plus backlog rows turned into tombstones, counted before and after
# by their keys (the trim also takes rows of the preload that came due meanwhile: not counted).
#
# Output: OUT/large-table.md (the command, sizes, both tables, also printed), OUT/runs.tsv,
# OUT/trim.tsv, OUT/logs/. Knobs: ROWS (20000000), ACCOUNTS (1000), ROUNDS (3), DUR (10), WARM (2),
# CONNS (16), BACKLOG (500000), TRIM_BATCHES ("500 5000"), TRIM_SECS (20), TRIM_SQL (a variant of
# the trim statement to measure; lib.sh), SERVER (a prebuilt
# idemkey-server; else built here), NICE (0), QUIET_MAX (20), QUIET_PCT (15), PGPORT (55469),
# PORT (38180), OUT (bench/results/large-<UTC stamp>/), KEEP (1: leave the cluster running and
# print how to reach it). Needs about 1 GB of disk per million rows.
set -euo pipefail
T_START=$(date +%s)
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)

CMDLINE=
for v in ROWS ACCOUNTS ROUNDS DUR WARM CONNS BACKLOG TRIM_BATCHES TRIM_SECS TRIM_SQL SERVER NICE QUIET_MAX PGPORT PORT OUT; do
  [ -n "${!v+x}" ] && CMDLINE+="$v=$(printf %q "${!v}") "
done
CMDLINE+=$(printf '%q ' "$0" "$@"); CMDLINE=${CMDLINE% }

ROWS=${ROWS:-20000000}
ACCOUNTS=${ACCOUNTS:-1000}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10}
WARM=${WARM:-2}
CONNS=${CONNS:-16}
BACKLOG=${BACKLOG:-500000}
TRIM_BATCHES=${TRIM_BATCHES:-"500 5000"}
TRIM_SECS=${TRIM_SECS:-20}
QUIET_MAX=${QUIET_MAX:-20}; export QUIET_MAX
PGPORT=${PGPORT:-55469}             # not run.sh's 55449 nor ab.sh's 55459
PORT=${PORT:-38180}            # not run.sh's 38100 nor the test smoke's 38170
KEEP=${KEEP:-0}
SET=$((ROWS / ACCOUNTS))            # the bench account's keys: every ACCOUNTS-th row
[ "$SET" -ge 1 ] || { echo "ROWS must be at least ACCOUNTS" >&2; exit 2; }
RETENTION_MS=$((30 * 86400 * 1000)) # the server's default --tombstone-ttl (30d)

W=$(mktemp -d /tmp/idemkey-large.XXXXXX); chmod 1777 "$W"
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"

trap own_cleanup EXIT
trap 'exit 130' INT TERM

refuse_busy_ports "$PGPORT" "$PORT"
command -v wrk >/dev/null || { apt-get update -qq; apt-get install -y -qq wrk; }

OUT=${OUT:-$BENCH/results/large-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT/logs"
LOGS=$OUT/logs

if [ -z "${SERVER:-}" ]; then
  log "build idemkey-server (release)"
  (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server)
  SERVER=${CARGO_TARGET_DIR:-$ROOT/target}/release/idemkey-server
fi
SERVER=$(readlink -f "$SERVER")

log "fresh PostgreSQL cluster on 127.0.0.1:$PGPORT (idemkey-pg, initdb defaults, fsync on) in $W/pg"
start_own_cluster "$LOGS/start-pg.log"
pg_url() { echo "postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/$1"; }

# ---- the template: migrated by the server, the bench account, one real order to copy from -------
PSQL postgres -c "CREATE DATABASE tpl"
"$SERVER" migrate --database-url "$(pg_url tpl)" >"$LOGS/setup.log" 2>&1
TOKEN=$("$SERVER" account create bench --database-url "$(pg_url tpl)" 2>>"$LOGS/setup.log" | tail -1)
[ -n "$TOKEN" ] || { echo "account create gave no token" >&2; exit 1; }
HEALTH_PATH=healthz start_proc tpl "$PORT" "$SERVER" serve --database-url "$(pg_url tpl)" --bind "127.0.0.1:$PORT"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/orders" -H 'Content-Type: application/json' \
  -H "Authorization: Bearer $TOKEN" -H 'Idempotency-Key: "00000000-0000-4000-8000-000000000000"' \
  --data '{"sku":"LIBRO-TS","quantity":2}')
stop_proc tpl
[ "$code" = 201 ] || { echo "the sample order got $code" >&2; exit 1; }
# Every preloaded record is this one's copy under another key: same fingerprint (the fingerprint
# is the body's and the operation's, not the key's), operation and stored response.
PSQL tpl -c "DELETE FROM outbox" -c "DELETE FROM orders" \
  -c "CREATE TABLE bench_sample AS SELECT * FROM idempotency_records" \
  -c "DELETE FROM idempotency_records" \
  -c "CREATE TABLE bench_accounts AS SELECT id, 0 AS n FROM accounts"
[ "$(PSQL tpl -tAc 'SELECT count(*) FROM bench_sample')" = 1 ] || { echo "no sample record" >&2; exit 1; }
PSQL tpl -c "INSERT INTO accounts (id, name) SELECT md5('acct' || n)::uuid, 'preloaded ' || n
  FROM generate_series(1, $ACCOUNTS - 1) n" \
  -c "INSERT INTO bench_accounts SELECT md5('acct' || n)::uuid, n FROM generate_series(1, $ACCOUNTS - 1) n"
BASE=$(PSQL tpl -tAc "SELECT statement_timestamp()")   # the preload's now: rows span BASE - 23 h .. BASE
PSQL postgres -c "CREATE DATABASE small TEMPLATE tpl" -c "CREATE DATABASE large TEMPLATE tpl"

# ---- the preload: row i (1..n) of account i % ACCOUNTS (0 = the bench account, whose key is the
# i / ACCOUNTS-th of the replay set; others a key of their own), created at BASE - 24 h + i/n of it
# (1 s before BASE at most) -----------------------------------------------------------------------
# rows_sql FIRST LAST STEP: the records and orders of rows FIRST, FIRST+STEP, .. LAST, as two SELECTs
row_cte() {
  cat <<SQL
WITH s AS (SELECT * FROM bench_sample), r AS (
  SELECT i, a.id AS account_id,
         CASE WHEN a.n = 0 THEN format('00000000-0000-4000-8000-%s', lpad(to_hex(i / $ACCOUNTS), 12, '0'))
              ELSE md5('key' || i)::uuid::text END AS key,
         md5('order' || i)::uuid AS order_id,
         timestamptz '$BASE' - interval '23 hours' + (i::float8 / ($ROWS + 1)) * interval '23 hours' AS t
  FROM generate_series($1, $2, $3) i JOIN bench_accounts a ON a.n = i % $ACCOUNTS)
SQL
}
records_copy() {
  echo "COPY ($(row_cte "$@")
  SELECT r.account_id::text, s.operation, r.key, s.fingerprint, 'completed', s.response_status,
         s.response_headers, s.response_body, r.t, r.t + interval '24 hours', NULL::timestamptz,
         r.order_id::text, md5('claim' || i)::uuid, r.t + interval '24 hours'
  FROM r, s) TO STDOUT"
}
orders_copy() {
  echo "COPY ($(row_cte "$@")
  SELECT r.order_id, r.account_id, 'LIBRO-TS', 2, r.t, 5980, 'EUR', NULL::text, NULL::bigint FROM r) TO STDOUT"
}
REC_COLS="(scope, operation, key, fingerprint, status, response_status, response_headers, response_body,
  created_at, replay_until, lease_until, resource_id, claim, check_at)"
ORD_COLS="(id, account_id, sku, quantity, created_at, amount_cents, currency, reference, charge_message)"
load() {  # load DB FIRST LAST STEP: both tables, two COPY pipelines side by side
  PSQL "$1" -c "$(records_copy "$2" "$3" "$4")" | PSQL "$1" -c "COPY idempotency_records $REC_COLS FROM STDIN" &
  local p1=$!
  PSQL "$1" -c "$(orders_copy "$2" "$3" "$4")" | PSQL "$1" -c "COPY orders $ORD_COLS FROM STDIN" &
  local p2=$!
  wait "$p1"; wait "$p2"
}
TABLES="'idempotency_records'::regclass, 'orders'::regclass"
schema_of() {  # the two tables' indexes and constraints, as definitions
  PSQL "$1" -tAc "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid IN ($TABLES)
    UNION ALL SELECT conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE conrelid IN ($TABLES) ORDER BY 1"
}

log "preload small: the replay set, $SET records and orders of the bench account (COPY)"
load small "$ACCOUNTS" "$ROWS" "$ACCOUNTS"
PSQL small -c "VACUUM ANALYZE idempotency_records" -c "VACUUM ANALYZE orders"

log "preload large: $ROWS records and $ROWS orders over $ACCOUNTS accounts (COPY; indexes dropped, then built again)"
t0=$(date +%s)
schema_of large >"$W/schema.before"
# constraints that back an index or refer to another table go first (foreign keys before keys)
PSQL large -tAc "SELECT format('ALTER TABLE %s DROP CONSTRAINT %I;', conrelid::regclass, conname)
  FROM pg_constraint WHERE (conrelid IN ($TABLES) OR confrelid IN ($TABLES)) AND contype IN ('f', 'p', 'u')
  ORDER BY contype <> 'f'" >"$W/drop.sql"
PSQL large -tAc "SELECT format('DROP INDEX %s;', indexrelid::regclass) FROM pg_index i
  WHERE indrelid IN ($TABLES) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)" >>"$W/drop.sql"
PSQL large -tAc "SELECT pg_get_indexdef(indexrelid) || ';' FROM pg_index i
  WHERE indrelid IN ($TABLES) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)" >"$W/idx.sql"
PSQL large -tAc "SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s;', conrelid::regclass, conname, pg_get_constraintdef(oid))
  FROM pg_constraint WHERE conrelid IN ($TABLES) AND contype IN ('p', 'u')" >"$W/keys.sql"
PSQL large -tAc "SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s;', conrelid::regclass, conname, pg_get_constraintdef(oid))
  FROM pg_constraint WHERE (conrelid IN ($TABLES) OR confrelid IN ($TABLES)) AND contype = 'f'" >"$W/fks.sql"
PSQL large -f "$W/drop.sql"
load large 1 "$ROWS" 1
t1=$(date +%s)
build() { PSQL large -c "SET maintenance_work_mem = '1GB'" -c "$1"; }
# the records' keys and the orders' keys side by side, then the other indexes, then the foreign keys
while IFS= read -r stmt; do [ -n "$stmt" ] && { build "$stmt" & }; done <"$W/keys.sql"; wait
while IFS= read -r stmt; do [ -n "$stmt" ] && { build "$stmt" & }; done <"$W/idx.sql"; wait
[ -s "$W/fks.sql" ] && PSQL large -f "$W/fks.sql"
schema_of large >"$W/schema.after"
diff "$W/schema.before" "$W/schema.after" >&2 || { echo "the rebuilt schema differs from the migrated one" >&2; exit 1; }
PSQL large -c "VACUUM ANALYZE idempotency_records" -c "VACUUM ANALYZE orders" -c CHECKPOINT
t2=$(date +%s)
LOAD_S=$((t1 - t0)) BUILD_S=$((t2 - t1))
log "preloaded in $LOAD_S s, indexes, vacuum and checkpoint in $BUILD_S s"
sizes() {  # sizes DB: rows and sizes of both tables
  PSQL "$1" -tAc "SELECT format('%s records (%s heap, %s indexes), %s orders (%s heap, %s indexes)',
    (SELECT reltuples::bigint FROM pg_class WHERE oid = 'idempotency_records'::regclass),
    pg_size_pretty(pg_table_size('idempotency_records')), pg_size_pretty(pg_indexes_size('idempotency_records')),
    (SELECT reltuples::bigint FROM pg_class WHERE oid = 'orders'::regclass),
    pg_size_pretty(pg_table_size('orders')), pg_size_pretty(pg_indexes_size('orders')))"
}
SIZE_SMALL=$(sizes small); SIZE_LARGE=$(sizes large)
log "small: $SIZE_SMALL"; log "large: $SIZE_LARGE"

# ---- the cells ------------------------------------------------------------------------------------
run_wrk() {  # run_wrk SECONDS SCRIPT
  KEYS_N=$SET TOKEN=$TOKEN PORTS=$PORT WRK_DIR=$BENCH/wrk CONNS=$CONNS \
    RUN_NICE wrk -t2 -c"$CONNS" -d"$1s" --latency -s "$BENCH/wrk/$2" "http://127.0.0.1:$PORT"
}
RUNS=$OUT/runs.tsv
printf 'round\tkind\tdb\trequests\trps\tp50_ms\tp99_ms\tok\tbad\tquiet\tbusy_pct\tforeign_cpu_s\tstart_utc\n' >"$RUNS"
run_one() {  # run_one ROUND KIND DB
  local r=$1 kind=$2 db=$3 script=orders-new.lua extra=() q=quiet name="r$1-$2-$3" res mon req ok start
  [ "$kind" = replay ] && { script=orders-replay-set.lua; extra=(--replay-cache-mib 0); }
  HEALTH_PATH=healthz start_proc "$db" "$PORT" "$SERVER" serve --database-url "$(pg_url "$db")" \
    --bind "127.0.0.1:$PORT" "${extra[@]}" || { log "server did not start ($name)"; exit 1; }
  if [ "$WARM" -gt 0 ]; then run_wrk "$WARM" "$script" >"$W/warm.out" 2>&1 || true; fi
  PSQL postgres -c CHECKPOINT
  wait_quiet || q=NOISY
  mon_start "$W/mon" "$(proc_pids)"
  start=$(date -u +%FT%TZ)
  run_wrk "$DUR" "$script" >"$LOGS/$name.wrk" 2>&1 || true
  mon=$(mon_stop "$W/mon"); MON_PID=
  stop_proc "$db"
  res=$(grep '^RESULT' "$LOGS/$name.wrk" || echo 'RESULT requests=0')
  req=$(num requests "$res")
  if [ "$kind" = new ]; then ok=$(num s201 "$res"); else ok=$(num replayed "$res"); fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$kind" "$db" "$req" "$(field rps "$res")" \
    "$(field p50_ms "$res")" "$(field p99_ms "$res")" "$ok" "$((req - ok))" "$q" "$(field busy_pct "$mon")" \
    "$(field foreign_cpu_s "$mon")" "$start" | tee -a "$RUNS" >&2
}
log "$ROUNDS rounds x {new, replay} x {small, large}, c$CONNS, ${DUR}s (+${WARM}s warm-up)"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="large small"; else order="small large"; fi
  for kind in new replay; do for db in $order; do run_one "$r" "$kind" "$db"; done; done
done

# ---- the trim at this size ------------------------------------------------------------------------
# The backlog: BACKLOG completed records whose window closed during the last hour before BASE
# (tombstoned by the trim) and BACKLOG tombstones whose retention (30 d) closed in that hour
# (deleted), interleaved in the order the trim walks them, by COPY
# into the table with its indexes, as a stopped task would find them; the new keys' own rows
# are not due.
backlog() {
  echo "COPY (SELECT a.id::text, s.operation, md5('due' || i)::uuid::text, s.fingerprint,
      CASE WHEN i % 2 = 0 THEN 'completed' ELSE 'tombstone' END,
      CASE WHEN i % 2 = 0 THEN s.response_status END, CASE WHEN i % 2 = 0 THEN s.response_headers END,
      CASE WHEN i % 2 = 0 THEN s.response_body END, c.t, c.t + interval '24 hours', NULL::timestamptz,
      md5('dueorder' || i)::uuid::text, md5('dueclaim' || i)::uuid,
      CASE WHEN i % 2 = 0 THEN c.t + interval '24 hours' ELSE c.t + interval '30 days' END
    FROM generate_series(1, 2 * $BACKLOG) i JOIN bench_accounts a ON a.n = i % $ACCOUNTS, bench_sample s,
    LATERAL (SELECT CASE WHEN i % 2 = 0
      THEN timestamptz '$BASE' - interval '25 hours' + (i::float8 / (2 * $BACKLOG + 1)) * interval '1 hour'
      ELSE timestamptz '$BASE' - interval '30 days 1 hour' + (i::float8 / (2 * $BACKLOG + 1)) * interval '1 hour' END AS t) c
  ) TO STDOUT"
}
# backlog_rows: row i of the backlog, by its primary key
backlog_rows="generate_series(1, 2 * $BACKLOG) i JOIN bench_accounts a ON a.n = i % $ACCOUNTS
  JOIN idempotency_records r ON r.scope = a.id::text AND r.operation = (SELECT operation FROM bench_sample)
   AND r.key = md5('due' || i)::uuid::text"
counts() {  # rows of the backlog still there, and those of them that are tombstones created in the last 25 h
  PSQL large -tAc "SELECT count(*) || ' ' || count(*) FILTER (WHERE i % 2 = 0 AND r.status = 'tombstone') FROM $backlog_rows"
}
TRIMS=$OUT/trim.tsv
printf 'batch\tload\tseconds\tbatches\twork_s\tdeleted\ttombstoned\trows_per_s\tnew_keys_rps\tnew_keys_p99_ms\n' >"$TRIMS"
for batch in $TRIM_BATCHES; do for with in alone new-keys; do
  log "trim, batch $batch, $with: backlog of $BACKLOG due and $BACKLOG expired"
  if [ "$with" = new-keys ]; then
    # the server's own trim runs once at its start, before the backlog is there: --trim-interval 1d
    HEALTH_PATH=healthz start_proc large "$PORT" "$SERVER" serve --database-url "$(pg_url large)" \
      --bind "127.0.0.1:$PORT" --trim-interval 1d || exit 1
    sleep 2
  fi
  PSQL large -c "$(backlog)" | PSQL large -c "COPY idempotency_records $REC_COLS FROM STDIN"
  PSQL large -c "VACUUM ANALYZE idempotency_records" -c CHECKPOINT
  pgbench_trim_script "$RETENTION_MS" "$batch" >"$W/trim.pgb"
  name="trim-$batch-$with"
  wait_quiet || true
  read -r n0 tomb0 < <(counts)
  if [ "$with" = new-keys ]; then run_wrk "$TRIM_SECS" orders-new.lua >"$LOGS/$name.wrk" 2>&1 & WRK=$!; fi
  rm -f "$W"/trimlog*
  (cd "$W" && RUN_NICE "$PGBIN/pgbench" -h "$(pg_sock)" -p "$PGPORT" -U postgres -n -c 1 -T "$TRIM_SECS" -l --log-prefix=trimlog \
    -f "$W/trim.pgb" large >"$LOGS/$name.pgbench" 2>&1)
  if [ "$with" = new-keys ]; then wait "$WRK" || true; stop_proc large; fi
  read -r n1 tomb1 < <(counts)
  batches=$(awk '/number of transactions actually processed/ {print $NF}' "$LOGS/$name.pgbench" | cut -d/ -f1)
  secs=$(awk '/^duration:/ {print $2}' "$LOGS/$name.pgbench")
  deleted=$((n0 - n1)) tombstoned=$((tomb1 - tomb0))
  # the time the batches that did the work took (pgbench's per-transaction log: latency in µs, 3rd
  # field), so a backlog that ran out before TRIM_SECS does not dilute the rate
  work=$(( (deleted + tombstoned + batch - 1) / batch ))
  work_s=$(awk -v n="$work" 'NR <= n { t += $3 } END { printf "%.2f", t / 1e6 }' "$W"/trimlog*)
  [ $((deleted + tombstoned)) -ge $((2 * BACKLOG)) ] && batches="$batches (backlog done)"
  res=$(grep '^RESULT' "$LOGS/$name.wrk" 2>/dev/null || echo 'RESULT rps=NA p99_ms=NA')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$batch" "$with" "$secs" "$batches" "$work_s" "$deleted" "$tombstoned" \
    "$(awk -v a="$deleted" -v b="$tombstoned" -v s="$work_s" 'BEGIN{ if (s > 0) printf "%.0f", (a + b) / s; else print 0 }')" \
    "$(field rps "$res")" "$(field p99_ms "$res")" | tee -a "$TRIMS" >&2
  # what is left of this backlog goes before the next one
  PSQL large -c "DELETE FROM idempotency_records d USING $backlog_rows WHERE d.ctid = r.ctid" \
    -c "VACUUM idempotency_records"
done; done
T_END=$(date +%s)

# ---- report ---------------------------------------------------------------------------------------
{
  echo "# The order route at $ROWS records (bench/large-table.sh)"
  echo
  echo "Command (in \`$PWD\`):"
  echo
  echo '```'
  echo "$CMDLINE"
  echo '```'
  echo
  echo "- \`$SERVER\` (sha256 $(sha256sum "$SERVER" | cut -c1-16)); git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo NA)"
  echo "- $(date -u -d "@$T_START" +%FT%TZ) to $(date -u -d "@$T_END" +%FT%TZ), $((T_END - T_START)) s in all; preload $LOAD_S s (COPY), indexes + VACUUM ANALYZE + CHECKPOINT $BUILD_S s"
  echo "- small: $SIZE_SMALL"
  echo "- large: $SIZE_LARGE"
  echo "- $(nproc) cores, PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') initdb defaults (shared_buffers 128 MB, fsync on); NICE=$NICE; wrk -t2 -c$CONNS, ${DUR} s per cell after ${WARM} s, $ROUNDS rounds (large first in odd rounds)"
  echo
  "$PY" - "$RUNS" "$TRIMS" <<'PYEOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
label = {'new': 'new keys', 'replay': 'replays, key drawn from the replay set, cache off'}
print('| cell | small req/s per round | large req/s per round | large/small per round | median | p99 ms small → large (median) |')
print('|---|---|---|---|---:|---|')
for kind in ('new', 'replay'):
    rounds = sorted({int(r['round']) for r in rows if r['kind'] == kind})
    get = lambda n, db: next((r for r in rows if r['kind'] == kind and r['db'] == db and int(r['round']) == n), None)
    mark = lambda r: ('*' if r['quiet'] != 'quiet' else '') + ('!' if int(r['bad'] or 0) else '')
    s_, l_, q_ = [], [], []
    for n in rounds:
        s, l = get(n, 'small'), get(n, 'large')
        s_.append(f"{float(s['rps']):,.0f}{mark(s)}"); l_.append(f"{float(l['rps']):,.0f}{mark(l)}")
        q_.append(float(l['rps']) / float(s['rps']) if float(s['rps']) else 0)
    p = lambda db: statistics.median(float(r['p99_ms']) for r in rows if r['kind'] == kind and r['db'] == db)
    print(f"| {label[kind]} | {' · '.join(s_)} | {' · '.join(l_)} | {' · '.join(f'{q:.2f}' for q in q_)} | "
          f"**{statistics.median(q_):.2f}** | {p('small'):.1f} → {p('large'):.1f} |")
print()
print('`*` the box was still busy when the run started; `!` answers other than the expected 201 / replayed 201.')
print()
trims = list(csv.DictReader(open(sys.argv[2]), delimiter='\t'))
print('| trim batch | beside | batches | s working | deleted | tombstoned | rows/s | new keys/s beside it (p99 ms) |')
print('|---:|---|---:|---:|---:|---:|---:|---|')
for t in trims:
    nk = f"{float(t['new_keys_rps']):,.0f} ({t['new_keys_p99_ms']})" if t['new_keys_rps'] != 'NA' else '—'
    print(f"| {t['batch']} | {'nothing' if t['load'] == 'alone' else 'new keys at c16'} | {t['batches']} | {t['work_s']} | "
          f"{int(t['deleted']):,} | {int(t['tombstoned']):,} | **{int(t['rows_per_s']):,}** | {nk} |")
PYEOF
} >"$OUT/large-table.md"
log "done in $((T_END - T_START)) s: $OUT/large-table.md"
cat "$OUT/large-table.md"

#!/usr/bin/env bash
# bench/run.sh: the one benchmark command. In one run on this machine:
#   1. builds idemkey-server (release), the core's criterion benches and, where its harness is
#      present, the article's Node lab (PEERDIR/build-lab.sh, under $W; PEERDIR is not part of this
#      repository: a clone without it skips the lab's cells and says so in the log and the report);
#   2. starts ONE throwaway PostgreSQL 15 cluster with the project's own idemkey-pg (lib.sh,
#      start_own_cluster): initdb defaults (fsync=on, synchronous_commit=on, shared_buffers=128MB,
#      max_connections=100), only listen_addresses/port/socket dir changed; database `idemkey` (our
#      migrations) and, with the lab, database `idempotencia` (the lab's esquema.sql) side by side;
#   3. counts SQL round trips of one new order and one replay against idemkey-server;
#   4. measures one after another, with the same wrk settings (-t2, CONNS, DUR s, closed loop), the
#      DB truncated + CHECKPOINT before every cell, after waiting for a quiet box:
#        node lab (article code, pg pool max 5) 1 and 2 processes; idemkey-server on PostgreSQL 1 and
#        2 processes; idemkey-server on SQLite (if the backend exists); workloads new key per request
#        and replay of one completed key; then bursts of one key by N clients at once; every cell is
#        measured a second time by bench/loadgen (GEN2=1), which times each request from its own send
#        to its own answer, side by side with wrk's (corrected) histogram;
#   5. pgbench ceilings on our schema (multi-statement transaction, the server's own 1-round-trip
#      statement, the replay SELECT, the server's replay statement);
#   6. optional extras (EXTRAS=1): server variants (RUST_LOG=warn, pool sizes), replays with the
#      replay cache off, and a synchronous_commit=off probe, to show which resource binds;
#   7. optional (LAYER_PEER=1): bench/layer-peer.sh, the Layer and the in-transaction API against the
#      same handler bare and behind axum-idempotent (its own cluster, Redis and servers);
#      core microbenchmarks (criterion) and the wasm package size;
#   8. optional, each on its own throwaway cluster with the same release server: bench/large-table.sh
#      (LARGE_TABLE=1: the order route at LARGE_ROWS preloaded records, and the trim at that size),
#      bench/partition-guard.sh (PARTITION_GUARD=1: a claim kept exact over time partitions) and
#      bench/outbox-pace.sh (OUTBOX_PACE=1: the delivery worker against the order rate and the
#      provider, PACE_MIX s of mixed load; twice: on the shared cores, and with the provider on a
#      core of its own, SPLIT=1), bench/payments.sh (PAYMENTS=1: new orders with and
#      without payments on both stores, this tree built a second time without them, PAYMENTS_ROUNDS
#      alternating rounds), bench/purchase-latency.sh (PURCHASE_LATENCY=1: PURCHASE_LATENCY_N
#      sequential purchases end to end against their floor, an order, a charge and a confirmation
#      sent directly, SUB_ROUNDS alternating rounds, SQLite) and bench/sqlite-trim.sh (SQLITE_TRIM=1:
#      SQLite's trim at LARGE_ROWS / 10 rows);
#      bench/ab.sh against bench/ceiling (CEILING=1: replays of one key against a bare axum handler
#      answering the same bytes, c64, SUB_ROUNDS alternating rounds; then the same with RUST_LOG=warn);
#   9. bench/report.py: TSVs -> summary.md (tables, ratios) + chart.png, then the reports of 7 and 8.
# Results: bench/results/<UTC stamp>/ (git-ignored). Stops its servers and its cluster at the end.
#
# Knobs: SERVER (a prebuilt binary), QUICK=1 (short runs, for trying the harness), DUR (15 s per cell), WARM (3), CONNS ("16 64"),
# SYSTEMS ("node:1 node:2 idemkey-pg:1 idemkey-pg:2 idemkey-sqlite:1"), KINDS ("new replay"),
# BURST_N (200), BURST_REPEAT (3), PGBENCH_PLAN, EXTRAS (1), LAYER_PEER (1; its ROUNDS 5 x SECS 5 via
# LAYER_PEER_ROUNDS, LAYER_PEER_SECS), LARGE_TABLE (1; LARGE_ROWS 20000000, 200000 with QUICK=1),
# PARTITION_GUARD (1),
# OUTBOX_PACE (1; PACE_MIX 60 s of mixed load), PAYMENTS (1; PAYMENTS_ROUNDS 5), PURCHASE_LATENCY (1;
# PURCHASE_LATENCY_N 300, 30 with QUICK=1), SQLITE_TRIM (1), CEILING (1;
# CEILING_BIN: a prebuilt bench/ceiling), SUB_ROUNDS and SUB_DUR (3 rounds of 10 s cells in
# those two), MICRO (1), QUIET_MAX (90 s per cell),
# NICE (0; -20 = cluster, servers, wrk, pgbench at high CPU priority on a box loaded by others),
# W (/tmp/idemkey-bench), PGPORT (55449), BASE_PORT (38100), REBUILD_LAB (0), OUT, GEN2 (1: the second
# generator), LOADGEN (a prebuilt bench/loadgen), FSYNC_PROBE (1: pg_test_fsync before and after),
# CHART (1: the chart, with matplotlib), PEERDIR (the article's Node lab harness; empty: none),
# PG_TOOL (a prebuilt idemkey-pg).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
# The article's Node lab is not part of this repository: its harness sits beside a checkout that
# has it, only where PEERDIR names it (the team names its peers folder); unset, nothing outside
# the repository is read. Only the node:N cells use it.
PEERDIR=${PEERDIR:-}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  DUR=${DUR:-4}; WARM=${WARM:-1}; BURST_N=${BURST_N:-50}; BURST_REPEAT=${BURST_REPEAT:-1}
  QUIET_MAX=${QUIET_MAX:-6}; EXTRAS=${EXTRAS:-0}; LAYER_PEER=${LAYER_PEER:-0}; MICRO_ARGS=(--warm-up-time 0.2 --measurement-time 0.5)
  LARGE_TABLE=${LARGE_TABLE:-0}; PARTITION_GUARD=${PARTITION_GUARD:-0}; OUTBOX_PACE=${OUTBOX_PACE:-0}; SQLITE_TRIM=${SQLITE_TRIM:-0}
  SUB_DUR=${SUB_DUR:-2}; SUB_ROUNDS=${SUB_ROUNDS:-1}; PACE_MIX=${PACE_MIX:-10}; LARGE_ROWS=${LARGE_ROWS:-200000}
  PAYMENTS=${PAYMENTS:-0}; PAYMENTS_ROUNDS=${PAYMENTS_ROUNDS:-2}; CEILING=${CEILING:-0}
  PURCHASE_LATENCY=${PURCHASE_LATENCY:-0}; PURCHASE_LATENCY_N=${PURCHASE_LATENCY_N:-30}
else
  DUR=${DUR:-15}; WARM=${WARM:-3}; BURST_N=${BURST_N:-200}; BURST_REPEAT=${BURST_REPEAT:-3}
  QUIET_MAX=${QUIET_MAX:-90}; EXTRAS=${EXTRAS:-1}; LAYER_PEER=${LAYER_PEER:-1}; MICRO_ARGS=(--warm-up-time 1 --measurement-time 3)
  LARGE_TABLE=${LARGE_TABLE:-1}; PARTITION_GUARD=${PARTITION_GUARD:-1}; OUTBOX_PACE=${OUTBOX_PACE:-1}; SQLITE_TRIM=${SQLITE_TRIM:-1}
  SUB_DUR=${SUB_DUR:-10}; SUB_ROUNDS=${SUB_ROUNDS:-3}; PACE_MIX=${PACE_MIX:-60}; LARGE_ROWS=${LARGE_ROWS:-20000000}
  PAYMENTS=${PAYMENTS:-1}; PAYMENTS_ROUNDS=${PAYMENTS_ROUNDS:-5}; CEILING=${CEILING:-1}
  PURCHASE_LATENCY=${PURCHASE_LATENCY:-1}; PURCHASE_LATENCY_N=${PURCHASE_LATENCY_N:-300}
fi
export QUIET_MAX
CONNS=${CONNS:-"16 64"}
SYSTEMS=${SYSTEMS:-"node:1 node:2 idemkey-pg:1 idemkey-pg:2 idemkey-sqlite:1"}
KINDS=${KINDS:-"new replay"}
PGBENCH_PLAN=${PGBENCH_PLAN:-"new-txn:16 new-1rt:16 new-1rt:64 replay-select:16 replay-select:64 replay-1rt:16"}
MICRO=${MICRO:-1}; REBUILD_LAB=${REBUILD_LAB:-0}
# GEN2=1 (default): every HTTP cell is measured twice, by wrk and by bench/loadgen (http-loadgen.tsv).
GEN2=${GEN2:-1}
FSYNC_PROBE=${FSYNC_PROBE:-1}   # pg_test_fsync before and after (0: skip, for the smoke)
BASE_PORT=${BASE_PORT:-38100}; P1=$BASE_PORT; P2=$((BASE_PORT + 1))
OUT=${OUT:-$BENCH/results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT/logs" "$W"; chmod 1777 "$W"
# LAB=1: the Node lab's harness is here and a node:N cell was asked for.
LAB=0
if [[ " $SYSTEMS " == *" node:"* ]]; then
  if [ -n "$PEERDIR" ] && [ -x "$PEERDIR/build-lab.sh" ] && [ -s "$PEERDIR/lab/esquema.sql" ]; then
    LAB=1; PEERDIR=$(cd "$PEERDIR" && pwd)
  else
    log "SKIPPED: the article's Node lab: no harness at ${PEERDIR:-(PEERDIR empty)} (it is not part of this repository; PEERDIR=DIR names one); its cells are not measured"
  fi
fi
export PEER=$W PGPORT          # for the lab's build-lab.sh
# SERVER=PATH runs a prebuilt idemkey-server instead (e.g. another commit's, for an A/B).
SERVER_GIVEN=${SERVER:-}
SERVER=${SERVER:-$CARGO_TARGET_DIR/release/idemkey-server}
SQLITE_DB=$W/idemkey.sqlite

cleanup() { stop_all_procs; stop_own_cluster; }
trap cleanup EXIT

# ---- 1. build ---------------------------------------------------------------------------------
command -v wrk >/dev/null || { apt-get update -qq; apt-get install -y -qq wrk; }
# CHART=0: no chart, so no matplotlib to install (the test command's smoke).
CHART=${CHART:-1}
if [ "$CHART" = 1 ]; then "$PY" -c 'import matplotlib' 2>/dev/null || "$PY" -m pip install -q matplotlib; fi
log "build idemkey-server (release) and the core's benches"
[ -n "$SERVER_GIVEN" ] || (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server --features provider-sim)
# The second generator (bench/loadgen): every request timed from its own send to its own answer.
# LOADGEN=PATH runs a prebuilt one (the test command's smoke gives its debug build).
if [ "$GEN2" = 1 ] && [ -z "${LOADGEN:-}" ]; then (cd "$ROOT" && cargo build -q --release -p idemkey-loadgen); fi
LOADGEN=${LOADGEN:-$CARGO_TARGET_DIR/release/idemkey-loadgen}
[ "$MICRO" = 1 ] && (cd "$ROOT" && cargo bench -q -p idemkey-core --bench core --no-run 2>/dev/null)
if [ "$LAB" = 1 ] && { [ "$REBUILD_LAB" = 1 ] || [ ! -s "$W/idempotencia-lab/dist/server.js" ]; }; then
  log "build the article's Node lab ($PEERDIR/build-lab.sh) in $W/idempotencia-lab"
  "$PEERDIR/build-lab.sh" >"$OUT/logs/build-lab.log" 2>&1 || { tail "$OUT/logs/build-lab.log"; exit 1; }
fi

# ---- 2. one cluster ----------------------------------------------------------------------------
log "fresh PostgreSQL cluster on 127.0.0.1:$PGPORT (idemkey-pg, initdb defaults, fsync on) in $W/pg"
start_own_cluster "$OUT/logs/start-pg.log"
PSQL postgres -c 'CREATE DATABASE idemkey'
if [ "$LAB" = 1 ]; then
  PSQL postgres -c 'CREATE DATABASE idempotencia'
  PSQL idempotencia -f "$PEERDIR/lab/esquema.sql"
fi
"$SERVER" migrate --database-url "$IDK_URL" >"$OUT/logs/migrate.log" 2>&1
TOKEN=$("$SERVER" account create bench --database-url "$IDK_URL" 2>>"$OUT/logs/migrate.log" | tail -1)
[ -n "$TOKEN" ] || { echo "no token" >&2; exit 1; }

# sqlite backend present? (account create on a sqlite:// URL succeeds)
SQLITE_TOKEN=
rm -f "$SQLITE_DB" "$SQLITE_DB"-*
if SQLITE_TOKEN=$("$SERVER" account create bench --database-url "sqlite://$SQLITE_DB" 2>"$OUT/logs/sqlite-probe.log" | tail -1) \
   && [ -n "$SQLITE_TOKEN" ]; then
  log "SQLite backend: available"
else
  SQLITE_TOKEN=; log "SQLite backend: not available ($(tail -1 "$OUT/logs/sqlite-probe.log"))"
fi

{
  set +e +o pipefail
  echo "date_utc: $(date -u +%FT%TZ)"; echo "git: $(git -C "$ROOT" rev-parse --short HEAD) $(git -C "$ROOT" status --porcelain -- server | wc -l) uncommitted server files"
  echo "nproc: $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -g | sed -n 2p; uname -r
  echo "node: $(node --version)"; wrk --version 2>&1 | head -1; "$PGBIN/postgres" --version
  echo "quick: $QUICK dur_s: $DUR conns: $CONNS wrk: -t2 closed loop nice: $NICE"
  if [ "$FSYNC_PROBE" = 1 ]; then
    echo "pg_test_fsync (1 s per test, one 8 kB write + flush):"
    "$PGBIN/pg_test_fsync" -s 1 -f "$W/fsync.tmp" 2>/dev/null | sed -n '/one 8kB write/,/^$/p'; rm -f "$W/fsync.tmp"
  fi
  set -e -o pipefail
} >"$OUT/machine.txt"
PSQL postgres -c "SELECT name, setting, unit, source FROM pg_settings WHERE name IN ('fsync','synchronous_commit',
  'shared_buffers','wal_sync_method','full_page_writes','max_connections','wal_level','max_wal_size',
  'checkpoint_timeout','commit_delay','work_mem') ORDER BY name" >"$OUT/settings.txt"
cat "$OUT/machine.txt" "$OUT/settings.txt" >&2

# ---- servers per system ------------------------------------------------------------------------
# start_system SYS PROCS [extra server args...] -> PORTS, TOK; HEALTH_PATH for the readiness probe.
start_system() {
  local sys=$1 procs=$2; shift 2
  local ports=$P1 p i=0
  [ "$procs" = 2 ] && ports="$P1,$P2"
  for p in ${ports//,/ }; do
    i=$((i + 1))
    # SERVER_ENV is unquoted on purpose: empty or one NAME=VALUE word for env.
    # shellcheck disable=SC2086
    case $sys in
      node) HEALTH_PATH='' start_proc "$sys-$i" "$p" \
              env -C "$W/idempotencia-lab" PORT="$p" DATABASE_URL="$LAB_URL" node dist/server.js ;;
      idemkey-pg) HEALTH_PATH=healthz start_proc "$sys-$i" "$p" \
              env ${SERVER_ENV:-} "$SERVER" serve --database-url "$IDK_URL" --bind "127.0.0.1:$p" "$@" ;;
      idemkey-sqlite) HEALTH_PATH=healthz start_proc "$sys-$i" "$p" \
              env ${SERVER_ENV:-} "$SERVER" serve --database-url "sqlite://$SQLITE_DB" --bind "127.0.0.1:$p" "$@" ;;
    esac || return 1
  done
  PORTS=$ports
  case $sys in node) API=lab; TOK=;; idemkey-pg) API=; TOK=$TOKEN;; idemkey-sqlite) API=; TOK=$SQLITE_TOKEN;; esac
}
count_orders() {
  case $1 in
    node) PSQL idempotencia -tAc 'SELECT count(*) FROM pedidos' ;;
    idemkey-pg) PSQL idemkey -tAc 'SELECT count(*) FROM orders' ;;
    idemkey-sqlite) sqlite3 -cmd '.timeout 5000' "$SQLITE_DB" 'SELECT count(*) FROM orders' 2>/dev/null || echo NA ;;
  esac
}
reset_db() {
  # A request still in flight when a cell ends can deadlock with the TRUNCATE: try again.
  local i
  if [ "$LAB" = 1 ]; then
    for i in 1 2 3 4 5; do PSQL idempotencia -c 'TRUNCATE pedidos, solicitudes_idempotentes' && break; sleep 1; done
  fi
  for i in 1 2 3 4 5; do PSQL idemkey -c 'TRUNCATE orders, idempotency_records, outbox' && break; sleep 1; done
  if [ -n "$SQLITE_TOKEN" ]; then
    sqlite3 -cmd '.timeout 5000' "$SQLITE_DB" 'DELETE FROM orders; DELETE FROM idempotency_records; DELETE FROM outbox; PRAGMA wal_checkpoint(TRUNCATE);' \
      >/dev/null 2>&1 || true
  fi
  PSQL postgres -c 'CHECKPOINT'
}
post_once() {  # post_once KEY -> HTTP status of one POST to the first port
  if [ "$API" = lab ]; then
    curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P1/pedidos" -H 'Content-Type: application/json' \
      -H "Idempotency-Key: \"$1\"" --data '{"sku":"LIBRO-TS","cantidad":2}'
  else
    curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P1/orders" -H 'Content-Type: application/json' \
      -H "Authorization: Bearer $TOK" -H "Idempotency-Key: \"$1\"" --data '{"sku":"LIBRO-TS","quantity":2}'
  fi
}
run_wrk() {  # run_wrk CONNS SECONDS SCRIPT [KEY] -> wrk output on stdout
  KEY=${4:-} API=$API TOKEN=$TOK PORTS=$PORTS WRK_DIR=$BENCH/wrk CONNS=$1 \
    RUN_NICE wrk -t2 -c"$1" -d"$2s" --latency -s "$BENCH/wrk/$3" "http://127.0.0.1:$P1"
}

# run_loadgen CONNS SECONDS KEY -> one RESULT line (bench/loadgen), the same requests as the wrk scripts;
# its per-request log goes to $LG_LOG when set.
run_loadgen() {
  local args=(--ports "$PORTS" -c "$1" -t 2 -d "$2" -H 'Content-Type: application/json')
  if [ "$API" = lab ]; then args+=(--path /pedidos --body '{"sku":"LIBRO-TS","cantidad":2}')
  else args+=(--path /orders --body '{"sku":"LIBRO-TS","quantity":2}' -H "Authorization: Bearer $TOK"); fi
  [ -n "${3:-}" ] && args+=(--key "$3")
  [ -n "${LG_LOG:-}" ] && args+=(--log "$LG_LOG")
  RUN_NICE "$LOADGEN" "${args[@]}"
}

HTTP_TSV=$OUT/http.tsv
LG_TSV=$OUT/http-loadgen.tsv
printf 'system\tvariant\tprocs\tkind\tconns\tdur_s\trequests\trps\tp50_ms\tp90_ms\tp99_ms\tmax_ms\ts201\ts2xx_other\ts409\ts422\ts503\tsother\treplayed\tsock_err\torders_rows\tserver_cpu_s\tserver_cpu_s_per_1k\trss_mb_sum\trss_mb_max\twal_syncs\tcommits\tquiet\tbusy_pct\tpg_cpu_s\tload_cpu_s\tforeign_cpu_s\tsteal_pct\tmean_ms\tlittle_ms\tp999_ms\n' | tee "$LG_TSV" >"$HTTP_TSV"

# http_cell SYS VARIANT PROCS KIND CONNS [GEN] (servers already up): GEN wrk (default; http.tsv) or
# loadgen (http-loadgen.tsv, extra columns p999_ms, mean_ms, little_ms).
http_cell() {
  local sys=$1 variant=$2 procs=$3 kind=$4 c=$5 gen=${6:-wrk} key='' script=orders-new.lua q=quiet name pids tsv=$HTTP_TSV
  reset_db
  if [ "$kind" = replay ]; then
    key=$(cat /proc/sys/kernel/random/uuid); script=orders-replay.lua
    [ "$(post_once "$key")" = 201 ] || { log "could not create the replay key on $sys"; return 0; }
  fi
  wait_quiet || q=NOISY
  name="$sys-$variant-p$procs-$kind-c$c"; pids=$(proc_pids)
  [ "$gen" = loadgen ] && { name=$name-loadgen; tsv=$LG_TSV; }
  local t0 w0 c0 t1 w1 c1 mon r
  t0=$(cpu_ticks "$pids"); read -r w0 c0 < <(wal_stats)
  [ "$sys" = idemkey-pg ] && pgstat_snap "$OUT/logs/$name.pgstat0"
  mon_start "$OUT/logs/$name.mon" "$pids"
  date -u +%s.%N >"$OUT/logs/$name.time"
  if [ "$gen" = loadgen ]; then LG_LOG=$OUT/logs/$name.requests run_loadgen "$c" "$DUR" "$key" >"$OUT/logs/$name.wrk" 2>&1 || true
  else run_wrk "$c" "$DUR" "$script" "$key" >"$OUT/logs/$name.wrk" 2>&1 || true; fi
  date -u +%s.%N >>"$OUT/logs/$name.time"
  mon=$(mon_stop "$OUT/logs/$name.mon")
  t1=$(cpu_ticks "$pids"); read -r w1 c1 < <(wal_stats)
  local hs hm; read -r hs hm < <(hwm_kb "$pids")
  r=$(grep '^RESULT' "$OUT/logs/$name.wrk" || echo 'RESULT requests=0')
  local req cpu se
  req=$(field requests "$r"); cpu=$(awk -v t=$((t1 - t0)) -v hz="$HZ" 'BEGIN{printf "%.2f", t/hz}')
  se=$(( $(num err_connect "$r") + $(num err_read "$r") + $(num err_write "$r") + $(num err_timeout "$r") ))
  [ "$sys" = idemkey-pg ] && pgstat_delta "$OUT/logs/$name.pgstat0" "$req" >"$OUT/logs/$name.pgstat"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$sys" "$variant" "$procs" "$kind" "$c" "$(field duration_s "$r")" "$req" "$(field rps "$r")" \
    "$(field p50_ms "$r")" "$(field p90_ms "$r")" "$(field p99_ms "$r")" "$(field max_ms "$r")" \
    "$(field s201 "$r")" "$(field s2xx "$r")" "$(field s409 "$r")" "$(field s422 "$r")" "$(field s503 "$r")" \
    "$(field sother "$r")" "$(field replayed "$r")" "$se" "$(count_orders "$sys")" "$cpu" \
    "$(awk -v c="$cpu" -v n="$req" 'BEGIN{ if (n > 0) printf "%.3f", 1000 * c / n; else print "NA" }')" \
    "$(awk -v k="$hs" 'BEGIN{printf "%.1f", k/1024}')" "$(awk -v k="$hm" 'BEGIN{printf "%.1f", k/1024}')" \
    "$((w1 - w0))" "$((c1 - c0))" "$q" "$(field busy_pct "$mon")" "$(field pg_cpu_s "$mon")" \
    "$(field load_cpu_s "$mon")" "$(field foreign_cpu_s "$mon")" "$(field steal_pct "$mon")" \
    "$(field mean_ms "$r")" "$(field little_ms "$r")" "$(field p999_ms "$r")" | tee -a "$tsv" >&2
}

BURST_TSV=$OUT/bursts.tsv
printf 'system\tprocs\trun\tn\tcounts\tdistinct_ids\torders_created\treplayed\twall_ms\tp50_ms\tp99_ms\tmax_ms\texactly_one\n' >"$BURST_TSV"
burst() {  # burst SYS PROCS
  local sys=$1 procs=$2 i before after out
  N=20 API=$API TOKEN=$TOK PORTS=$PORTS node "$BENCH/burst.mjs" >/dev/null || true   # warm-up
  for i in $(seq 1 "$BURST_REPEAT"); do
    wait_quiet 30 || true
    before=$(count_orders "$sys")
    out=$(N=$BURST_N API=$API TOKEN=$TOK PORTS=$PORTS RUN_NICE node "$BENCH/burst.mjs")
    sleep 0.2; after=$(count_orders "$sys")
    node -e '
      const o = JSON.parse(process.argv[1]); const [sys, procs, i, created] = process.argv.slice(2);
      const one = o.distinct_ids === 1 && created === "1" ? "yes" : "NO";
      console.log([sys, procs, i, o.n, JSON.stringify(o.counts), o.distinct_ids, created, o.replayed, o.wall_ms,
        o.p50_ms, o.p99_ms, o.max_ms, one].join("\t"));
    ' "$out" "$sys" "$procs" "$i" "$((after - before))" | tee -a "$BURST_TSV" >&2
  done
}

# ---- 3. round trips (log_min_duration_statement=0 shows parse / bind / execute separately) -----
roundtrips() {
  local f=$OUT/roundtrips.txt off k
  stop_all_procs
  start_system idemkey-pg 1 --pool-size 1 || return 0
  PSQL postgres -c "ALTER SYSTEM SET log_min_duration_statement = 0" -c "SELECT pg_reload_conf()" >/dev/null
  sleep 1
  rt_step() {  # rt_step LABEL KEY
    off=$(stat -c %s "$(pg_log)")
    echo "$1 -> HTTP $(post_once "$2")"; sleep 0.5
    tail -c +$((off + 1)) "$(pg_log)" | grep -oE 'duration: [0-9.]+ ms  (parse|bind|execute|statement)[^:]*:' \
      | sed -E 's/duration: [0-9.]+ ms  //; s/:$//' | sed 's/^/    /'
    local p e s
    p=$(tail -c +$((off + 1)) "$(pg_log)" | grep -cE 'ms  parse ' || true)
    e=$(tail -c +$((off + 1)) "$(pg_log)" | grep -cE 'ms  execute ' || true)
    s=$(tail -c +$((off + 1)) "$(pg_log)" | grep -cE 'ms  statement: ' || true)
    echo "  ROUNDTRIPS $1 parse=$p execute=$e simple=$s total=$((p + e + s))"
  }
  {
    echo "idemkey-server, --pool-size 1 (one connection, so 'warm' means its statements are prepared)."
    echo "tokio-postgres sends a prepare (Parse/Describe/Sync) and an execution (Bind/Execute/Sync) as"
    echo "separate round trips: round trips = parse + execute + simple-query lines."
    k=$(cat /proc/sys/kernel/random/uuid); rt_step "new-cold" "$k"
    rt_step "replay-cold" "$k"
    k=$(cat /proc/sys/kernel/random/uuid); rt_step "new-warm" "$k"
    rt_step "replay-warm" "$k"
  } | tee "$f" >&2
  PSQL postgres -c "ALTER SYSTEM RESET log_min_duration_statement" -c "SELECT pg_reload_conf()" >/dev/null
  stop_all_procs
}
log "round trips"
roundtrips

# ---- 4. HTTP matrix + bursts ---------------------------------------------------------------------
for item in $SYSTEMS; do
  sys=${item%%:*}; procs=${item##*:}
  stop_all_procs
  if [ "$sys" = node ] && [ "$LAB" = 0 ]; then
    printf '%s\tdefault\t%s\tall\t-\tskipped: the Node lab harness is not beside this repository (PEERDIR unset or empty)\n' \
      "$sys" "$procs" >>"$OUT/unavailable.tsv"; continue
  fi
  if [ "$sys" = idemkey-sqlite ] && [ -z "$SQLITE_TOKEN" ]; then
    printf '%s\tdefault\t%s\tall\t-\tnot available\n' "$sys" "$procs" >>"$OUT/unavailable.tsv"; continue
  fi
  log "system $sys, $procs process(es)"
  start_system "$sys" "$procs" || { printf '%s\tdefault\t%s\tall\t-\tdid not start\n' "$sys" "$procs" >>"$OUT/unavailable.tsv"; continue; }
  if [ "$WARM" != 0 ]; then                                                  # warm-up (JIT, pools)
    run_wrk 16 "$WARM" orders-new.lua >/dev/null 2>&1 || true
    k=$(cat /proc/sys/kernel/random/uuid); post_once "$k" >/dev/null
    run_wrk 16 "$WARM" orders-replay.lua "$k" >/dev/null 2>&1 || true
  fi
  for c in $CONNS; do for kind in $KINDS; do
    http_cell "$sys" default "$procs" "$kind" "$c"
    if [ "$GEN2" = 1 ]; then http_cell "$sys" default "$procs" "$kind" "$c" loadgen; fi
  done; done
  if [ "$procs" = 2 ] || [ "$sys" = idemkey-sqlite ]; then log "bursts $sys"; burst "$sys" "$procs"; fi
done
stop_all_procs

# ---- 5. pgbench ceilings on idemkey's schema -----------------------------------------------------
PGB_TSV=$OUT/pgbench.tsv
printf 'variant\tscript\tround_trips\tclients\tdur_s\ttps\tlat_avg_ms\tfailed\torders_rows\twal_syncs\tcommits\tquiet\tbusy_pct\tpg_cpu_s\tload_cpu_s\tforeign_cpu_s\tsteal_pct\n' >"$PGB_TSV"
mkdir -p "$OUT/pgbench"
cp "$BENCH/pgbench/new-txn.sql" "$OUT/pgbench/"
"$PY" "$BENCH/pgbench/gen.py" "$ROOT/server/src/db/postgres/sql" "$OUT/pgbench"
pgbench_order_vars   # PGB_VARS: the order statement's values, for gen.py's scripts
rt_of() { case $1 in new-txn) echo 5;; *) echo 1;; esac; }
pgbench_cell() {  # pgbench_cell VARIANT SCRIPT CLIENTS
  local variant=$1 s=$2 c=$3 j=2 extra=() q=quiet name mon w0 c0 w1 c1 txt
  [ "$c" -lt 2 ] && j=1
  reset_db
  if [[ $s == *replay-* ]]; then   # one completed key to replay, written by the server's own statement
    local rk; rk=$(cat /proc/sys/kernel/random/uuid)
    PGPASSWORD=$PGPASS "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" -U postgres -n -M prepared -t 1 "${PGB_VARS[@]}" \
      -D "rkey=$rk" -f "$OUT/pgbench/replay-1rt.sql" idemkey >/dev/null 2>&1
    extra=(-D "rkey=$rk")
  fi
  wait_quiet || q=NOISY
  name="pgbench-$variant-$s-c$c"; txt=$OUT/logs/$name.txt
  read -r w0 c0 < <(wal_stats)
  pgstat_snap "$OUT/logs/$name.pgstat0"
  mon_start "$OUT/logs/$name.mon" ""
  date -u +%s.%N >"$OUT/logs/$name.time"
  PGPASSWORD=$PGPASS PGOPTIONS='-c lock_timeout=2s -c statement_timeout=5s' RUN_NICE "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" \
    -U postgres -n -M prepared -c "$c" -j "$j" -T "$DUR" "${PGB_VARS[@]}" "${extra[@]}" -f "$OUT/pgbench/$s.sql" idemkey \
    >"$txt" 2>&1 || true
  date -u +%s.%N >>"$OUT/logs/$name.time"
  mon=$(mon_stop "$OUT/logs/$name.mon")
  pgstat_delta "$OUT/logs/$name.pgstat0" "$(grep -oP 'transactions actually processed: \K[0-9]+' "$txt" || echo 0)" \
    >"$OUT/logs/$name.pgstat"
  read -r w1 c1 < <(wal_stats)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$variant" "$s" "$(rt_of "$s")" "$c" "$DUR" \
    "$(grep -oP 'tps = \K[0-9.]+' "$txt" || echo NA)" "$(grep -oP 'latency average = \K[0-9.]+' "$txt" || echo NA)" \
    "$(grep -oP 'number of failed transactions: \K[0-9]+' "$txt" || echo NA)" "$(count_orders idemkey-pg)" \
    "$((w1 - w0))" "$((c1 - c0))" "$q" "$(field busy_pct "$mon")" "$(field pg_cpu_s "$mon")" \
    "$(field load_cpu_s "$mon")" "$(field foreign_cpu_s "$mon")" "$(field steal_pct "$mon")" | tee -a "$PGB_TSV" >&2
}
log "pgbench ceilings"
for item in $PGBENCH_PLAN; do pgbench_cell default "${item%%:*}" "${item##*:}"; done

# ---- 6. extras: what binds? ------------------------------------------------------------------------
if [ "$EXTRAS" = 1 ]; then
  log "extras: server variants and synchronous_commit=off (NOT default)"
  # the default again first, so that the variants compare with a cell measured minutes apart
  for v in "default-again::" "RUST_LOG=warn::" "pool4::--pool-size 4" "pool20::--pool-size 20"; do
    label=${v%%::*}; args=${v#*::}; SERVER_ENV=
    [ "$label" = RUST_LOG=warn ] && SERVER_ENV=RUST_LOG=warn
    stop_all_procs
    # shellcheck disable=SC2086
    start_system idemkey-pg 1 $args || continue
    run_wrk 16 "$WARM" orders-new.lua >/dev/null 2>&1 || true
    http_cell idemkey-pg "$label" 1 new 64
  done
  # the replay cache off: every replay read from the database
  SERVER_ENV=IDEMKEY_REPLAY_CACHE_MIB=0
  for sys in idemkey-pg idemkey-sqlite; do
    case " $SYSTEMS " in *" $sys:1 "*) ;; *) continue ;; esac
    stop_all_procs
    start_system "$sys" 1 || continue
    http_cell "$sys" nocache 1 replay 16
  done
  SERVER_ENV=
  PSQL postgres -c "ALTER SYSTEM SET synchronous_commit = off" -c "SELECT pg_reload_conf()" >/dev/null
  stop_all_procs; start_system idemkey-pg 1 && { run_wrk 16 "$WARM" orders-new.lua >/dev/null 2>&1 || true
    http_cell idemkey-pg async-commit 1 new 64; }
  stop_all_procs
  pgbench_cell async-commit new-1rt 64
  PSQL postgres -c "ALTER SYSTEM RESET synchronous_commit" -c "SELECT pg_reload_conf()" >/dev/null
fi
stop_all_procs
stop_own_cluster
if [ "$FSYNC_PROBE" = 1 ]; then
  { echo "pg_test_fsync after the measurements:"
    "$PGBIN/pg_test_fsync" -s 1 -f "$W/fsync.tmp" 2>/dev/null | grep -E '^\s+fdatasync' || true; rm -f "$W/fsync.tmp"; } >>"$OUT/machine.txt"
fi

# ---- 7. Layer / in-transaction vs axum-idempotent, core microbenchmarks, wasm size ------------------
if [ "$LAYER_PEER" = 1 ]; then
  log "Layer and in_transaction vs bare and axum-idempotent (bench/layer-peer.sh)"
  W=$W/layer-peer OUT=$OUT/layer-peer QUIET_MAX=$((QUIET_MAX < 30 ? QUIET_MAX : 30)) \
    "$BENCH/layer-peer.sh" "${LAYER_PEER_ROUNDS:-5}" "${LAYER_PEER_SECS:-5}" >"$OUT/logs/layer-peer.log" 2>&1 \
    || { log "layer-peer.sh failed:"; tail -5 "$OUT/logs/layer-peer.log" >&2; }
fi
if [ "$MICRO" = 1 ]; then
  log "core microbenchmarks (criterion)"
  (cd "$ROOT" && cargo bench -q -p idemkey-core --bench core -- "${MICRO_ARGS[@]}") >"$OUT/criterion.txt" 2>&1 || true
fi
{
  printf 'file\traw_bytes\tgzip9_bytes\n'
  for f in "$ROOT"/wasm/pkg*/*.wasm; do
    [ -e "$f" ] || continue
    printf '%s\t%s\t%s\n' "${f#"$ROOT"/}" "$(stat -c %s "$f")" "$(gzip -9c "$f" | wc -c)"
  done
} >"$OUT/wasm.tsv"

# ---- 8. the large table, the partition guard, the outbox's pace ----------------------------------------
# Each script has its own cluster, ports and knobs; the ones run.sh shares (DUR, WARM, CONNS, ROUNDS,
# PGPORT, W) are given explicitly.
if [ "$LARGE_TABLE" = 1 ]; then
  log "the order route at $LARGE_ROWS records (bench/large-table.sh)"
  # the trim's backlog: 1/20 of the rows (500,000 of each kind at 20 M), for twice a cell's time
  ROWS=$LARGE_ROWS BACKLOG=$((LARGE_ROWS / 40)) TRIM_SECS=$((2 * SUB_DUR)) ROUNDS=$SUB_ROUNDS DUR=$SUB_DUR \
    WARM=2 CONNS=16 PGPORT=55469 PORT=38180 \
    SERVER=$SERVER OUT=$OUT/large-table QUIET_MAX=$((QUIET_MAX < 20 ? QUIET_MAX : 20)) \
    "$BENCH/large-table.sh" >"$OUT/logs/large-table.log" 2>&1 \
    || { log "large-table.sh failed:"; tail -5 "$OUT/logs/large-table.log" >&2; }
fi
if [ "$PARTITION_GUARD" = 1 ]; then
  log "a claim kept exact over time partitions (bench/partition-guard.sh)"
  ROUNDS=$SUB_ROUNDS DUR=$SUB_DUR CONNS=16 PGPORT=55479 SERVER=$SERVER OUT=$OUT/partition-guard \
    QUIET_MAX=$((QUIET_MAX < 20 ? QUIET_MAX : 20)) \
    "$BENCH/partition-guard.sh" >"$OUT/logs/partition-guard.log" 2>&1 \
    || { log "partition-guard.sh failed:"; tail -5 "$OUT/logs/partition-guard.log" >&2; }
fi
if [ "$OUTBOX_PACE" = 1 ]; then
  log "the outbox worker against the order rate and the provider (bench/outbox-pace.sh)"
  (cd "$ROOT" && cargo build -q -p idemkey-testkit --bin idemkey-pg)
  BIN=$SERVER BEFORE_BIN='' W=$W/outbox-pace MIX_TARGETS="sink sim" DRAIN_MAX=30 \
    "$BENCH/outbox-pace.sh" "$((SUB_DUR < 8 ? SUB_DUR : 8))" "$PACE_MIX" >"$OUT/outbox-pace.txt" 2>"$OUT/logs/outbox-pace.log" \
    || { log "outbox-pace.sh failed:"; tail -5 "$OUT/logs/outbox-pace.log" >&2; }
  log "the same with the provider on a core of its own (SPLIT=1)"
  SPLIT=1 BIN=$SERVER BEFORE_BIN='' W=$W/outbox-pace MIX_TARGETS=sim DRAIN_MAX=30 \
    "$BENCH/outbox-pace.sh" "$((SUB_DUR < 8 ? SUB_DUR : 8))" "$PACE_MIX" >"$OUT/outbox-pace-split.txt" 2>"$OUT/logs/outbox-pace-split.log" \
    || { log "outbox-pace.sh SPLIT=1 failed:"; tail -5 "$OUT/logs/outbox-pace-split.log" >&2; }
fi

if [ "$PAYMENTS" = 1 ]; then
  log "new orders with and without payments, both stores (bench/payments.sh)"
  # Both builds from this tree: a SERVER given from elsewhere is not what the baseline is built from.
  SERVER=$([ -n "$SERVER_GIVEN" ] || echo "$SERVER") ROUNDS=$PAYMENTS_ROUNDS OUT=$OUT/payments QUIET_MAX=$((QUIET_MAX < 20 ? QUIET_MAX : 20)) \
    "$BENCH/payments.sh" >"$OUT/logs/payments.log" 2>&1 \
    || { log "payments.sh failed:"; tail -5 "$OUT/logs/payments.log" >&2; }
fi
if [ "$PURCHASE_LATENCY" = 1 ]; then
  log "a purchase end to end against its floor (bench/purchase-latency.sh)"
  # The release server run.sh built (or SERVER): it carries the provider simulator (provider-sim).
  SERVER=$SERVER N=$PURCHASE_LATENCY_N ROUNDS=$SUB_ROUNDS PORT=38200 PGPORT=55509 OUT=$OUT/purchase-latency \
    QUIET_MAX=$((QUIET_MAX < 20 ? QUIET_MAX : 20)) \
    "$BENCH/purchase-latency.sh" >"$OUT/logs/purchase-latency.log" 2>&1 \
    || { log "purchase-latency.sh failed:"; tail -5 "$OUT/logs/purchase-latency.log" >&2; }
fi
if [ "$SQLITE_TRIM" = 1 ]; then
  log "SQLite's trim at size (bench/sqlite-trim.sh)"
  ROWS=$((LARGE_ROWS / 10)) BACKLOG=$((LARGE_ROWS / 100)) SERVER=$SERVER OUT=$OUT/sqlite-trim \
    "$BENCH/sqlite-trim.sh" >"$OUT/logs/sqlite-trim.log" 2>&1 \
    || { log "sqlite-trim.sh failed:"; tail -5 "$OUT/logs/sqlite-trim.log" >&2; }
fi

if [ "$CEILING" = 1 ]; then
  log "replays against the bare-handler ceiling (bench/ab.sh, A = bench/ceiling)"
  if [ -z "${CEILING_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p idemkey-ceiling)
    CEILING_BIN=$CARGO_TARGET_DIR/release/idemkey-ceiling
  fi
  for logging in default warn; do
    # shellcheck disable=SC2046 # no word at all for the default logging
    env $([ $logging = warn ] && echo RUST_LOG=warn) A="$CEILING_BIN" B="$SERVER" \
      KINDS=replay STORES=postgres CONNS=64 ROUNDS=$SUB_ROUNDS DUR=$SUB_DUR PGPORT=55499 PORT=38195 \
      OUT=$OUT/ceiling-$logging QUIET_MAX=$((QUIET_MAX < 20 ? QUIET_MAX : 20)) \
      "$BENCH/ab.sh" >"$OUT/logs/ceiling-$logging.log" 2>&1 \
      || { log "ab.sh against the ceiling ($logging logging) failed:"; tail -5 "$OUT/logs/ceiling-$logging.log" >&2; }
  done
fi

# ---- 9. report ---------------------------------------------------------------------------------------
"$PY" "$BENCH/report.py" "$OUT" >"$OUT/summary.md"
if [ -s "$OUT/layer-peer/summary.md" ]; then
  { echo; echo "## Layer and in_transaction vs axum-idempotent (bench/layer-peer.sh, new key per request)"
    echo; cat "$OUT/layer-peer/summary.md"; } >>"$OUT/summary.md"
fi
for part in large-table/large-table.md partition-guard/partition-guard.md sqlite-trim/sqlite-trim.md payments/payments.md \
  purchase-latency/purchase-latency.md \
  ceiling-default/ab.md ceiling-warn/ab.md; do
  if [ -s "$OUT/$part" ]; then { echo; sed 's/^# /## /' "$OUT/$part"; } >>"$OUT/summary.md"; fi
done
for pace in outbox-pace outbox-pace-split; do
  if [ -s "$OUT/$pace.txt" ]; then
    { echo; echo "## The outbox's pace (bench/outbox-pace.sh$([ $pace = outbox-pace-split ] && echo ' SPLIT=1: the provider on a core of its own'), one RESULT line per figure)"
      echo; echo '```'; grep '^RESULT' "$OUT/$pace.txt"; echo '```'; } >>"$OUT/summary.md"
  fi
done
log "done: $OUT"
cat "$OUT/summary.md"

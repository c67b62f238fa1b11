#!/usr/bin/env bash
# bench/ab.sh: A/B of two PREBUILT idemkey-server binaries on the order service's hot paths, in
# alternating runs (docs/performance.md: "a change is judged by an A/B of alternating runs").
#
#   A=/path/old/idemkey-server B=/path/new/idemkey-server bench/ab.sh
#   QUICK=1 A=... B=... bench/ab.sh          # ROUNDS=2 DUR=4 WARM=1 QUIET_MAX=6, to try it
#   A=X B=X bench/ab.sh                      # the same binary twice: the ratios show the noise
#   A=<idemkey-ceiling> B=... KINDS=replay STORES=postgres CONNS=64 bench/ab.sh
#                                            # replays against the bare-handler ceiling (bench/ceiling)
#   PERF=B A=... B=... bench/ab.sh           # and B's profile (perf, flat) during each measured run
#
# Cells: STORES x KINDS (postgres, sqlite) x (new: a fresh key per request, bench/wrk/orders-new.lua;
# replay: one completed key replayed, orders-replay.lua; purchase: POST /purchases with a fresh key,
# answered 202 at once, both binaries must know it); one server process; wrk -t2, CONNS
# connections, closed loop, DUR s after a WARM s warm-up of the same workload. ROUNDS rounds; in each
# round every cell runs A then B (odd rounds) or B then A (even rounds), so drift cancels.
#
# Every run starts from the same state, without SQL that names the server's tables (B may migrate
# differently): each binary migrates its OWN template database (idemkey_a_tpl / idemkey_b_tpl) and
# SQLite file with its own `migrate`, and makes its account and token with its own
# `account create bench` (as bench/run.sh does); before every run the run's database is dropped and
# cloned from that template (CREATE DATABASE ... TEMPLATE; the SQLite file is copied), the server
# started (`serve`), warmed up, PostgreSQL CHECKPOINTed, the box waited on to be quiet (lib.sh), then
# measured; the server is stopped after every run. One throwaway PostgreSQL 15 cluster (idemkey-pg,
# lib.sh's start_own_cluster: initdb defaults, fsync on) serves every PostgreSQL run.
#
# Output: OUT/ab.md (the command, per cell the req/s of each round for A and B, B/A per round, the
# median and min B/A; also printed), OUT/runs.tsv (one line per run), OUT/logs/ (wrk output).
# Knobs: A, B (required), ROUNDS (5), DUR (10), WARM (2), CONNS (16), STORES ("postgres sqlite"),
# KINDS ("new replay"), QUICK (0), QUIET_MAX (20 s per run, then flagged NOISY), QUIET_PCT (15),
# NICE (0; -20 = cluster, servers and wrk at high CPU priority), PERF (none; A, B or AB: that side's
# server sampled by `perf record -F 997` through each measured run, its top symbols in
# OUT/logs/<run>.perf.txt and summed over the rounds in OUT/perf-<side>.txt; PERF_RECORD, PERF_REPORT
# and PERF_LINES replace perf's options and the report's length, e.g. for call graphs), PGPORT (55459), PORT (38150),
# OUT (bench/results/ab-<UTC stamp>/). Work files live in a mktemp dir, removed at exit with the
# cluster and the servers.
set -euo pipefail
T_START=$(date +%s)
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)

# The command line as given (knobs set by the caller, then the script and its arguments).
CMDLINE=
for v in A B QUICK ROUNDS DUR WARM CONNS STORES KINDS QUIET_MAX QUIET_PCT NICE PERF PGPORT PORT OUT; do
  [ -n "${!v+x}" ] && CMDLINE+="$v=$(printf %q "${!v}") "
done
CMDLINE+=$(printf '%q ' "$0" "$@"); CMDLINE=${CMDLINE% }

: "${A:?set A=/path/to/idemkey-server (the old binary)}" "${B:?set B=/path/to/idemkey-server (the new binary)}"
for bin in "$A" "$B"; do [ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }; done
A=$(readlink -f "$A"); B=$(readlink -f "$B")

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then ROUNDS=${ROUNDS:-2}; DUR=${DUR:-4}; WARM=${WARM:-1}; QUIET_MAX=${QUIET_MAX:-6}
else ROUNDS=${ROUNDS:-5}; DUR=${DUR:-10}; WARM=${WARM:-2}; QUIET_MAX=${QUIET_MAX:-20}; fi
export QUIET_MAX
CONNS=${CONNS:-16}
PERF=${PERF:-}
case $PERF in ''|A|B|AB) ;; *) echo "PERF is A, B or AB" >&2; exit 2;; esac
if [ -n "$PERF" ] && ! command -v perf >/dev/null; then apt-get update -qq; apt-get install -y -qq linux-perf; fi
STORES=${STORES:-"postgres sqlite"}
KINDS=${KINDS:-"new replay"}
PGPORT=${PGPORT:-55459}             # not run.sh's 55449, so both can run on the box
PORT=${PORT:-38150}                 # not run.sh's 38100
for s in $STORES; do case $s in postgres|sqlite) ;; *) echo "unknown store: $s" >&2; exit 2;; esac; done
for k in $KINDS; do case $k in new|replay|purchase) ;; *) echo "unknown kind: $k" >&2; exit 2;; esac; done

# Our own work dir (cluster, SQLite files, server logs), never a caller's W: it is deleted at exit.
W=$(mktemp -d /tmp/idemkey-ab.XXXXXX); chmod 1777 "$W"   # the postgres OS user writes its socket here
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"

trap own_cleanup EXIT
trap 'exit 130' INT TERM

refuse_busy_ports "$PGPORT" "$PORT"
command -v wrk >/dev/null || { apt-get update -qq; apt-get install -y -qq wrk; }
command -v sqlite3 >/dev/null || { apt-get update -qq; apt-get install -y -qq sqlite3; }

OUT=${OUT:-$BENCH/results/ab-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT/logs"
LOGS=$OUT/logs

# ---- one cluster, and each binary's own template database, SQLite file, account and token -------
log "fresh PostgreSQL cluster on 127.0.0.1:$PGPORT (idemkey-pg, initdb defaults, fsync on) in $W/pg"
start_own_cluster "$LOGS/start-pg.log"
pg_url() { echo "postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/$1"; }
side_bin() { if [ "$1" = A ]; then echo "$A"; else echo "$B"; fi; }
low() { tr '[:upper:]' '[:lower:]' <<<"$1"; }
declare -A TOKEN_OF
for side in A B; do
  s=$(low $side); bin=$(side_bin $side)
  for store in $STORES; do
    if [ "$store" = postgres ]; then
      PSQL postgres -c "CREATE DATABASE idemkey_${s}_tpl"; url=$(pg_url "idemkey_${s}_tpl")
    else
      url=sqlite://$W/$s-tpl.sqlite
    fi
    "$bin" migrate --database-url "$url" >>"$LOGS/setup-$s.log" 2>&1 \
      || { echo "$side: migrate on $store failed:" >&2; tail -5 "$LOGS/setup-$s.log" >&2; exit 1; }
    tok=$("$bin" account create bench --database-url "$url" 2>>"$LOGS/setup-$s.log" | tail -1)
    [ -n "$tok" ] || { echo "$side: account create on $store gave no token" >&2; tail -5 "$LOGS/setup-$s.log" >&2; exit 1; }
    TOKEN_OF[$side-$store]=$tok
    # fold the template's WAL into its file (no table named), so every copy starts the same
    if [ "$store" = sqlite ]; then sqlite3 "$W/$s-tpl.sqlite" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null; fi
  done
done

# reset_store SIDE STORE: the run's database, fresh from the side's template.
reset_store() {
  local s; s=$(low "$1")
  if [ "$2" = postgres ]; then
    PSQL postgres -c 'SET client_min_messages = warning' -c "DROP DATABASE IF EXISTS idemkey_$s WITH (FORCE)" -c "CREATE DATABASE idemkey_$s TEMPLATE idemkey_${s}_tpl"
  else
    rm -f "$W/$s.sqlite" "$W/$s.sqlite-wal" "$W/$s.sqlite-shm"
    cp "$W/$s-tpl.sqlite" "$W/$s.sqlite"
    if [ -e "$W/$s-tpl.sqlite-wal" ]; then cp "$W/$s-tpl.sqlite-wal" "$W/$s.sqlite-wal"; fi
  fi
}
store_url() { local s; s=$(low "$1"); if [ "$2" = postgres ]; then pg_url "idemkey_$s"; else echo "sqlite://$W/$s.sqlite"; fi; }

post_once() {  # post_once TOKEN KEY -> HTTP status of one POST /orders
  curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/orders" -H 'Content-Type: application/json' \
    -H "Authorization: Bearer $1" -H "Idempotency-Key: \"$2\"" --data '{"sku":"LIBRO-TS","quantity":2}'
}
run_wrk() {  # run_wrk SECONDS SCRIPT TOKEN [KEY] [PATH] -> wrk output (with its RESULT line) on stdout
  KEY=${4:-} ORDERS_PATH=${5:-} API='' TOKEN=$3 PORTS=$PORT WRK_DIR=$BENCH/wrk \
    RUN_NICE wrk -t2 -c"$CONNS" -d"$1s" --latency -s "$BENCH/wrk/$2" "http://127.0.0.1:$PORT"
}

RUNS=$OUT/runs.tsv
printf 'round\tstore\tkind\tside\tbinary\trequests\tduration_s\trps\tp50_ms\tp99_ms\tok\tbad_status\tsock_err\tserver_cpu_s_per_1k\tquiet\tbusy_pct\tforeign_cpu_s\tsteal_pct\tstart_utc\n' >"$RUNS"

# run_one ROUND STORE KIND SIDE: one measured run from a fresh database and a fresh server.
run_one() {
  local r=$1 store=$2 kind=$3 side=$4 bin tok key='' script=orders-new.lua q=quiet name pids t0 t1 mon res
  local path='' extra=()
  # purchase: POST /purchases with a fresh key, answered 202 at once (the first transaction: claim,
  # journal row, the reserve step, the next step's message); no worker runs here.
  [ "$kind" = purchase ] && { path=/purchases; extra=(--purchase-wait 0s); }
  bin=$(side_bin "$side"); tok=${TOKEN_OF[$side-$store]}; name="r$r-$store-$kind-$side"
  stop_all_procs
  reset_store "$side" "$store"
  HEALTH_PATH=healthz start_proc "$side" "$PORT" "$bin" serve --database-url "$(store_url "$side" "$store")" \
    --bind "127.0.0.1:$PORT" "${extra[@]}" || { cp "$W/srv-$side.log" "$LOGS/$name.server.log" 2>/dev/null; log "$side did not start"; exit 1; }
  if [ "$kind" = replay ]; then
    key=$(cat /proc/sys/kernel/random/uuid); script=orders-replay.lua
    [ "$(post_once "$tok" "$key")" = 201 ] || { log "$side: could not create the replay key ($name)"; exit 1; }
  fi
  run_wrk "$WARM" "$script" "$tok" "$key" "$path" >"$W/warm.out" 2>&1 || true
  PSQL postgres -c CHECKPOINT
  wait_quiet || q=NOISY
  pids=$(proc_pids); t0=$(cpu_ticks "$pids")
  mon_start "$W/mon" "$pids"
  local start perf_pid=''; start=$(date -u +%FT%TZ)
  if [[ "$PERF" == *"$side"* ]]; then
    # shellcheck disable=SC2086 # PERF_RECORD is a list of perf's options
    perf record -q ${PERF_RECORD:--F 997} -o "$W/perf.data" -p "$(cat "$W/srv-$side.pid")" >/dev/null 2>&1 & perf_pid=$!
  fi
  run_wrk "$DUR" "$script" "$tok" "$key" "$path" >"$LOGS/$name.wrk" 2>&1 || true
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true
    # shellcheck disable=SC2086 # PERF_REPORT is a list of perf's options
    perf report -i "$W/perf.data" ${PERF_REPORT:---no-children --sort dso,symbol --percent-limit 0.5} --stdio 2>/dev/null \
      | grep -v '^#' | grep -v '^$' | head -${PERF_LINES:-60} >"$LOGS/$name.perf.txt" || true
  fi
  mon=$(mon_stop "$W/mon"); MON_PID=
  t1=$(cpu_ticks "$pids")
  # the server's warnings and errors, but the startup one every run has (no payment provider here)
  grep -E ' (WARN|ERROR) ' "$W/srv-$side.log" | grep -v -e '--payments-url' | head -20 >"$LOGS/$name.server-warn" || true
  [ -s "$LOGS/$name.server-warn" ] || rm -f "$LOGS/$name.server-warn"
  stop_proc "$side"
  res=$(grep '^RESULT' "$LOGS/$name.wrk" || echo 'RESULT requests=0')
  local req ok bad se
  req=$(num requests "$res")
  case $kind in new) ok=$(num s201 "$res");; purchase) ok=$(num s2xx "$res");; *) ok=$(num replayed "$res");; esac
  bad=$((req - ok))
  se=$(( $(num err_connect "$res") + $(num err_read "$res") + $(num err_write "$res") + $(num err_timeout "$res") ))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$store" "$kind" "$side" \
    "$bin" "$req" "$(field duration_s "$res")" "$(field rps "$res")" "$(field p50_ms "$res")" "$(field p99_ms "$res")" \
    "$ok" "$bad" "$se" \
    "$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="$req" 'BEGIN{ if (n > 0) printf "%.3f", 1000 * t / hz / n; else print "NA" }')" \
    "$q" "$(field busy_pct "$mon")" "$(field foreign_cpu_s "$mon")" "$(field steal_pct "$mon")" "$start" | tee -a "$RUNS" >&2
}

# ---- the rounds -----------------------------------------------------------------------------------
log "A=$A"; log "B=$B"
log "$ROUNDS rounds x cells {$STORES} x {$KINDS}, c$CONNS, ${DUR}s (+${WARM}s warm-up), NICE=$NICE, QUIET_MAX=$QUIET_MAX"
printf 'round\tstore\tkind\tside\tbinary\trequests\tduration_s\trps\tp50_ms\tp99_ms\tok\tbad_status\tsock_err\tserver_cpu_s_per_1k\tquiet\tbusy_pct\tforeign_cpu_s\tsteal_pct\tstart_utc\n' >&2
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for store in $STORES; do for kind in $KINDS; do for side in $order; do
    run_one "$r" "$store" "$kind" "$side"
  done; done; done
done
stop_all_procs
stop_own_cluster
T_END=$(date +%s)

# ---- report -----------------------------------------------------------------------------------------
{
  echo "# A/B of two idemkey-server binaries (bench/ab.sh)"
  echo
  echo "Command (in \`$PWD\`):"
  echo
  echo '```'
  echo "$CMDLINE"
  echo '```'
  echo
  for side in A B; do
    bin=$(side_bin $side)
    echo "- $side: \`$bin\` (sha256 $(sha256sum "$bin" | cut -c1-16), $(stat -c %s "$bin") bytes)"
  done
  echo "- $(date -u -d "@$T_START" +%FT%TZ) to $(date -u -d "@$T_END" +%FT%TZ), $((T_END - T_START)) s in all;" \
    "git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo NA) (the harness)"
  echo "- $ROUNDS rounds, order A B in odd rounds and B A in even ones; per run: fresh database from the" \
    "binary's own template, fresh server (1 process, defaults), ${WARM} s warm-up, CHECKPOINT, wait for a quiet box" \
    "(< ${QUIET_PCT} % busy, at most ${QUIET_MAX} s), wrk -t2 -c$CONNS closed loop ${DUR} s"
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), PostgreSQL" \
    "$("$PGBIN/postgres" --version | awk '{print $3}') initdb defaults (fsync on, synchronous_commit on)," \
    "SQLite synchronous as the server sets it; NICE=$NICE"
  echo
  "$PY" - "$RUNS" <<'PYEOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
cells = []
for r in rows:
    if (r['store'], r['kind']) not in cells:
        cells.append((r['store'], r['kind']))
label = {'postgres': 'PostgreSQL', 'sqlite': 'SQLite', 'new': 'new keys', 'replay': 'replays', 'purchase': 'purchases (202)'}
def f(x):
    try: return float(x)
    except (TypeError, ValueError): return None
def mark(r):
    m = ''
    if r['quiet'] != 'quiet': m += '*'
    if int(r['bad_status'] or 0) or int(r['sock_err'] or 0): m += '!'
    return m
print('| cell | A req/s per round | B req/s per round | B/A per round | median B/A | min B/A |')
print('|---|---|---|---|---:|---:|')
notes = set()
for store, kind in cells:
    rounds = sorted({int(r['round']) for r in rows if (r['store'], r['kind']) == (store, kind)})
    a_s, b_s, q_s = [], [], []
    for n in rounds:
        get = lambda side: next((r for r in rows if (r['store'], r['kind'], r['side'], int(r['round'])) == (store, kind, side, n)), None)
        a, b = get('A'), get('B')
        ra, rb = f(a and a['rps']), f(b and b['rps'])
        ma, mb = (mark(a) if a else ''), (mark(b) if b else '')
        notes.update(ma + mb)
        a_s.append('NA' if ra is None else f'{ra:,.0f}{ma}')
        b_s.append('NA' if rb is None else f'{rb:,.0f}{mb}')
        q_s.append(rb / ra if ra and rb is not None else None)
    ok = [q for q in q_s if q is not None]
    med = f'**{statistics.median(ok):.2f}**' if ok else 'NA'
    mn = f'{min(ok):.2f}' if ok else 'NA'
    print(f"| {label[store]}, {label[kind]} | {' · '.join(a_s)} | {' · '.join(b_s)} | "
          f"{' · '.join('NA' if q is None else f'{q:.2f}' for q in q_s)} | {med} | {mn} |")
print()
if '*' in notes: print('`*` the box was still busy when the run started (NOISY in runs.tsv). ', end='')
if '!' in notes: print('`!` some answers were not the expected 201 (new) / replayed 201 (replay), or wrk saw socket errors.', end='')
if notes: print()
steal = [f(r['steal_pct']) for r in rows if f(r['steal_pct']) is not None]
foreign = [f(r['foreign_cpu_s']) for r in rows if f(r['foreign_cpu_s']) is not None]
cpu = {}
for r in rows:
    v = f(r['server_cpu_s_per_1k'])
    if v is not None: cpu.setdefault((r['store'], r['kind'], r['side']), []).append(v)
print()
print('Server CPU s per 1k requests (median of rounds), A -> B: ' + '; '.join(
    f"{label[s]} {label[k]} {statistics.median(cpu.get((s, k, 'A'), [0])):.3f} -> {statistics.median(cpu.get((s, k, 'B'), [0])):.3f}"
    for s, k in cells) + '.')
print(f"Runs: {len(rows)}, NOISY: {sum(r['quiet'] != 'quiet' for r in rows)}, steal max {max(steal, default=0):.1f} %, "
      f"foreign CPU s per run max {max(foreign, default=0):.1f} (runs.tsv has every run).")
PYEOF
} >"$OUT/ab.md"
# PERF: each side's profile, the rounds' samples summed per symbol (share of the side's samples).
for side in A B; do
  [[ "$PERF" == *"$side"* ]] || continue
  cat "$LOGS"/r*-"$side".perf.txt 2>/dev/null | "$PY" -c '
import sys, collections
share = collections.Counter(); runs = set()
for line in sys.stdin:
    parts = line.split(None, 2)
    if len(parts) == 3 and parts[0].endswith("%"):
        share[parts[1] + " " + parts[2].strip()] += float(parts[0][:-1])
total = sum(share.values()) or 1
for sym, v in share.most_common(40):
    print(f"{100 * v / total:6.2f} %  {sym}")
' >"$OUT/perf-$side.txt"
  { echo; echo "Profile of $side (perf record -F 997, flat, the rounds summed; top 40 symbols, share of the samples shown): OUT/perf-$side.txt"; } >>"$OUT/ab.md"
done
log "done in $((T_END - T_START)) s: $OUT/ab.md"
cat "$OUT/ab.md"

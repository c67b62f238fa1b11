#!/usr/bin/env bash
# What idempotency costs per request, one echo handler served bare, behind
# idemkey's tower Layer (SQLite, PostgreSQL, Redis), through idemkey's in-transaction API (SQLite,
# PostgreSQL), and behind axum-idempotent (the axum middleware a Rust user would pick instead, set
# up as its README shows, on ruts' in-process moka store and on its PostgreSQL store).
# The servers are the two bench binaries of bench/peer/ (own lock files, outside the workspace and
# CI), built here in release. wrk -t2 -cCONNS, POST /echo, a fresh key per request
# (bench/wrk/layer-echo.lua), all cells in alternating rounds (the order rotates every round).
# Then three probes per idempotent cell: two concurrent requests with one key (the handler sleeps
# 300 ms); a SIGKILL + restart of the server between a request and its retry; the same key again
# with another body.
#   bench/layer-peer.sh [ROUNDS=3] [SECONDS=5]
# Env: CONNS (16), WARM (1 s unmeasured warm-up per run), CELLS (all; a space list of cell names),
# W (work dir), OUT (where results.txt, probes.txt and summary.md go; default W), PGBIN,
# QUIET_MAX (30: seconds to wait for a quiet box before each run, else the run is flagged NOISY),
# PORT_BASE (29600; redis on 29391-29392), NICE (0; -20 runs the servers, stores and wrk at high CPU priority, as bench/run.sh's NICE),
# BASE_BIN (an earlier build of bench/peer/idemkey: adds the cell layer-postgres-base, that build's
# Layer on a database of its own, for a before/after ratio in the same rounds).
# PostgreSQL: one throwaway cluster (idemkey-pg, fsync on). Redis: redis-server without
# persistence and with appendfsync always. Starts and stops only its own processes, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${1:-3} SECS=${2:-5}
CONNS=${CONNS:-16} WARM=${WARM:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}
T=$CARGO_TARGET_DIR/release
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
W=${W:-/tmp/idemkey-layer-peer}
OUT=${OUT:-$W}
export WRK_DIR=$ROOT/bench/wrk
QUIET_MAX=${QUIET_MAX:-30}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"    # log, RUN_NICE, wait_quiet, cpu_ticks (W is already set)

command -v wrk >/dev/null || { apt-get update -qq; apt-get install -y -qq wrk; }
command -v redis-server >/dev/null || { apt-get update -qq; apt-get install -y -qq redis-server; }
log "build the bench servers and idemkey-pg (release, nice 10)"
# The idemkey bench's lock follows the workspace's dependencies (server/Cargo.toml), so it is not
# --locked: a new server dependency is added to it here (commit the change). The peer's is pinned.
(cd bench/peer/idemkey && nice -n 10 cargo build -q --release)
(cd bench/peer/axum-idempotent && nice -n 10 cargo build -q --release --locked)
nice -n 10 cargo build -q --release -p idemkey-testkit --bin idemkey-pg
OURS=$T/peer-bench-idemkey THEIRS=$T/peer-bench-axum-idempotent PG=$T/idemkey-pg

rm -rf "$W"; mkdir -p "$W" "$OUT"
: >"$OUT/results.txt"; : >"$OUT/probes.txt"
pids=()
spawn() { # LOG CMD...: CMD in the background (at NICE if set; nice execs it, so $! is its PID)
  local out=$1; shift
  if [ "$NICE" != 0 ]; then nice -n "$NICE" "$@" >>"$out" 2>&1 & else "$@" >>"$out" 2>&1 & fi
  SPAWNED=$!; pids+=("$SPAWNED")
}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$PG" stop "$W/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

redis_at() { # PORT ARGS...: a redis-server of this script's own
  local port=$1; shift
  spawn "$W/redis-$port.log" redis-server --port "$port" --bind 127.0.0.1 --dir "$W" \
    --dbfilename "r$port.rdb" --appendfilename "r$port.aof" --save "" "$@"
  for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis on $port did not start" >&2; return 1
}
redis_at 29391 --appendonly no
redis_at 29392 --appendonly yes --appendfsync always
PG_URL=$(RUN_NICE "$PG" start "$W/pg" --db ours | sed -n 's/^DATABASE_URL=//p')
PG_MASTER=$(head -1 "$W/pg/data/postmaster.pid" 2>/dev/null || head -1 "$W"/pg/*/postmaster.pid)
PG_BASE=${PG_URL%/*}
"$PGBIN/psql" -X -q "$PG_BASE/postgres" -c 'CREATE DATABASE theirs' -c 'CREATE DATABASE base'

# name | binary | --mode | --store
declare -A SPEC=(
  [bare]="$OURS|bare|"
  [bare-peer-build]="$THEIRS|bare|"
  [layer-sqlite]="$OURS|layer|sqlite://$W/layer.db"
  [layer-postgres]="$OURS|layer|$PG_BASE/ours"
  [layer-redis]="$OURS|layer|redis://127.0.0.1:29391"
  [layer-redis-aof-always]="$OURS|layer|redis://127.0.0.1:29392"
  [in-transaction-sqlite]="$OURS|in-transaction|sqlite://$W/intx.db"
  [in-transaction-postgres]="$OURS|in-transaction|$PG_BASE/ours"
  [axum-idempotent-moka]="$THEIRS|peer|moka"
  [axum-idempotent-postgres]="$THEIRS|peer|$PG_BASE/theirs"
  [layer-postgres-base]="${BASE_BIN:-}|layer|$PG_BASE/base"
)
ORDER=(${CELLS:-bare layer-sqlite layer-postgres layer-redis layer-redis-aof-always in-transaction-sqlite
  in-transaction-postgres bare-peer-build axum-idempotent-moka axum-idempotent-postgres})

port=${PORT_BASE:-29600}   # below the ephemeral range (32768+), where clients' ports would collide
SRV_PID='' SRV_PORT='' COOKIE=''
start_cell() { # NAME: start its server, wait for it, log in where it has sessions
  local bin mode store
  IFS='|' read -r bin mode store <<<"${SPEC[$1]}"
  port=$((port + 1)); SRV_PORT=$port
  spawn "$W/server-$1.log" "$bin" --mode "$mode" ${store:+--store "$store"} --bind "127.0.0.1:$port"
  SRV_PID=$SPAWNED
  for _ in $(seq 1 200); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.05; done
  # axum-idempotent caches only for a request with a session: create one, send its cookie.
  COOKIE=$(curl -s -D - -o /dev/null -X POST "http://127.0.0.1:$port/session" |
    sed -n 's/^set-cookie: \([^;]*\).*/\1/ip' | tr -d '\r')
}
stop_cell() { kill "$SRV_PID" 2>/dev/null || true; wait "$SRV_PID" 2>/dev/null || true; }
pg_ticks() { cpu_ticks "$(ps -o pid= --ppid "$PG_MASTER" | paste -sd, -)"; }   # backends + workers
pg_commits() { "$PGBIN/psql" -X -tA "$PG_BASE/postgres" -c \
  "SELECT (SELECT sum(xact_commit) FROM pg_stat_database)::bigint, (SELECT wal_sync FROM pg_stat_wal)"; }
counter() { curl -s "http://127.0.0.1:$SRV_PORT/counter" | tr -dc '0-9'; }

for round in $(seq 1 "$ROUNDS"); do
  for cell in "${ORDER[@]}"; do
    # PostgreSQL counts a backend's commits when it goes idle (at most once a second) or exits, so
    # they are read around the whole life of the server (warm-up included) after it stopped.
    read -r c0 s0 < <(pg_commits | tr '|' ' ')
    q=quiet; wait_quiet "$QUIET_MAX" || q=NOISY
    start_cell "$cell"; warm=0
    if [ "$WARM" -gt 0 ]; then
      warm=$(COOKIE=$COOKIE RUN_NICE wrk -t2 -c"$CONNS" -d"${WARM}s" -s bench/wrk/layer-echo.lua \
        "http://127.0.0.1:$SRV_PORT" | sed -n 's/^RESULT requests=\([0-9]*\).*/\1/p')
    fi
    runs0=$(counter); t0=$(cpu_ticks "$SRV_PID"); p0=$(pg_ticks)
    line=$(COOKIE=$COOKIE RUN_NICE wrk -t2 -c"$CONNS" -d"${SECS}s" -s bench/wrk/layer-echo.lua \
      "http://127.0.0.1:$SRV_PORT" | grep '^RESULT')
    t1=$(cpu_ticks "$SRV_PID"); p1=$(pg_ticks); runs1=$(counter)
    stop_cell; sleep 0.5
    read -r c1 s1 < <(pg_commits | tr '|' ' ')
    echo "round=$round cell=$cell $line handler_runs=$((runs1 - runs0)) server_ticks=$((t1 - t0))" \
      "pg_ticks=$((p1 - p0)) box=$q" \
      "warm_requests=${warm:-0} pg_commits=$((c1 - c0)) pg_wal_syncs=$((s1 - s0))" | tee -a "$OUT/results.txt" >&2
  done
  ORDER=("${ORDER[@]:1}" "${ORDER[0]}")   # rotate: no cell always runs first
done

# ---- probes ------------------------------------------------------------------------------------
post() { # HEADERS_FILE KEY [QUERY [BODY]]: one POST /echo, its status on stdout
  local body='{"amount":500}'
  [ -n "${4:-}" ] && body=$4
  curl -s -o /dev/null -D "$1" -w '%{http_code}' -X POST "http://127.0.0.1:$SRV_PORT/echo${3:-}" \
    ${COOKIE:+-H "Cookie: $COOKIE"} -H "Idempotency-Key: \"$2\"" -H 'Content-Type: application/json' \
    --data "$body"
}
replayed() { grep -qi '^\(idempotent\|idempotency\)-replayed: true' "$1" && echo yes || echo no; }
for cell in "${ORDER[@]}"; do
  [[ $cell == bare* ]] && continue
  start_cell "$cell"
  key=$(cat /proc/sys/kernel/random/uuid)
  before=$(counter)
  post "$W/c1.h" "$key" '?ms=300' >"$W/c1.s" & first=$!
  sleep 0.05
  post "$W/c2.h" "$key" '?ms=300' >"$W/c2.s"
  wait "$first" || true
  concurrent="first=$(cat "$W/c1.s")/replayed:$(replayed "$W/c1.h") second=$(cat "$W/c2.s")/replayed:$(replayed "$W/c2.h") handler_runs=$(($(counter) - before))"
  # crash between a request and its retry: SIGKILL, restart on the same store, retry
  key=$(cat /proc/sys/kernel/random/uuid)
  post "$W/r0.h" "$key" >/dev/null
  kill -KILL "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true
  saved=$COOKIE; start_cell "$cell"; COOKIE=$saved
  st=$(post "$W/r.h" "$key")
  crash="retry=$st/replayed:$(replayed "$W/r.h") handler_runs_after_restart=$(counter)"
  # the same key again with another body (a client bug, or a key reused for another operation)
  st=$(post "$W/m.h" "$key" '' '{"amount":900}')
  other="status=$st/replayed:$(replayed "$W/m.h") handler_runs_after_restart=$(counter)"
  stop_cell
  echo "cell=$cell concurrent: $concurrent; crash: $crash; other body: $other" | tee -a "$OUT/probes.txt" >&2
done

python3 - "$OUT/results.txt" "$OUT/probes.txt" "$(getconf CLK_TCK)" <<'PY' | tee "$OUT/summary.md"
import re, statistics, sys
runs, by_round = {}, {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    runs.setdefault(f["cell"], []).append(f)
    by_round.setdefault(f["round"], {})[f["cell"]] = float(f["rps"])
hz = float(sys.argv[3])
med = lambda fs, k: statistics.median(float(f[k]) for f in fs)

def ratio(a, b):
    """Median over rounds of a's req/s over b's in the same round (the box's load moves between
    rounds; cells of one round ran minutes apart at most)."""
    rs = [r[a] / r[b] for r in by_round.values() if a in r and b in r and r[b] > 0]
    return f"{statistics.median(rs):.2f}" if rs else ""

def bare_of(cell):
    return "bare-peer-build" if cell.startswith(("axum", "bare-peer")) and "bare-peer-build" in runs else "bare"

print("| cell | median req/s | vs bare | p50 ms | p99 ms | CPU ms/req: server | PostgreSQL | "
      "PG commits/req | non-201 | handler runs / 201 | noisy runs |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for cell, fs in runs.items():
    req = sum(int(f["requests"]) for f in fs)
    pg = "postgres" in cell and req
    cpu = sum(int(f["server_ticks"]) for f in fs) / hz * 1000 / req if req else 0
    pgcpu = f'{sum(int(f["pg_ticks"]) for f in fs) / hz * 1000 / req:.3f}' if pg else ""
    allreq = req + sum(int(f["warm_requests"]) for f in fs)
    commits = f'{sum(int(f["pg_commits"]) for f in fs) / allreq:.2f}' if pg else ""
    bad = sum(int(f["requests"]) - int(f["s201"]) for f in fs)
    s201 = sum(int(f["s201"]) for f in fs)
    ran = sum(int(f["handler_runs"]) for f in fs)
    noisy = sum(f["box"] != "quiet" for f in fs)
    print(f"| {cell} | {med(fs, 'rps'):,.0f} | {ratio(cell, bare_of(cell))} | {med(fs, 'p50_ms'):.2f} | "
          f"{med(fs, 'p99_ms'):.2f} | {cpu:.3f} | {pgcpu} | {commits} | {bad} | "
          f"{ran / s201 if s201 else float('nan'):.2f} | {noisy}/{len(fs)} |")
if "layer-postgres-base" in runs and "layer-postgres" in runs:
    print()
    print(f"layer-postgres over layer-postgres-base (BASE_BIN), req/s: {ratio('layer-postgres', 'layer-postgres-base')}")
pairs = [(a, b) for a in runs for b in ("axum-idempotent-postgres", "axum-idempotent-moka")
         if b in runs and not a.startswith(("axum", "bare"))]
if pairs:
    print()
    print("idemkey over axum-idempotent, req/s (median over rounds of the same round's ratio):")
    print()
    print("| idemkey cell | vs axum-idempotent-postgres | vs axum-idempotent-moka |")
    print("|---|---:|---:|")
    for a in dict.fromkeys(a for a, _ in pairs):
        print(f"| {a} | {ratio(a, 'axum-idempotent-postgres')} | {ratio(a, 'axum-idempotent-moka')} |")
print()
for line in open(sys.argv[2]):
    print("- " + line.strip())
PY
log "done: $OUT"

#!/usr/bin/env bash
# The Layer's overhead per request on each store: `idemkey-server fixture` (release build) behind
# wrk, POST /echo with a fresh key each time (claim + completion), on Redis (no persistence; AOF
# everysec; AOF always), PostgreSQL (fsync on) and SQLite, in alternating rounds. Prints one
# RESULT line per run and the medians as ratios to SQLite.
#   bench/layer-stores.sh [ROUNDS=3] [SECONDS=5]
# Env: BIN (idemkey-server), PGBIN, W (work dir). Starts and stops only its own processes, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} SECS=${2:-5}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/idemkey-server}
PG=${PG:-${CARGO_TARGET_DIR:-target}/debug/idemkey-pg}
W=${W:-/tmp/idemkey-layer-bench}
export WRK_DIR=$PWD/bench/wrk
rm -rf "$W"; mkdir -p "$W"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$PG" stop "$W/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

redis_at() { # PORT ARGS...: a redis-server of this script's own
  local port=$1; shift
  redis-server --port "$port" --bind 127.0.0.1 --dir "$W" --dbfilename "r$port.rdb" \
    --appendfilename "r$port.aof" --save "" "$@" >"$W/redis-$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis on $port did not start" >&2; return 1
}
redis_at 46379 --appendonly no
redis_at 46380 --appendonly yes --appendfsync everysec
redis_at 46381 --appendonly yes --appendfsync always
PG_URL=$("$PG" start "$W/pg" --db layer | sed -n 's/^DATABASE_URL=//p')

declare -A URL=(
  [redis]=redis://127.0.0.1:46379
  [redis-aof-everysec]=redis://127.0.0.1:46380
  [redis-aof-always]=redis://127.0.0.1:46381
  [postgres]=$PG_URL
  [sqlite]=sqlite://$W/layer.db
)
ORDER=(sqlite postgres redis redis-aof-everysec redis-aof-always)
port=46500
for round in $(seq 1 "$ROUNDS"); do
  for store in "${ORDER[@]}"; do
    port=$((port + 1))
    "$BIN" fixture --bind "127.0.0.1:$port" --database-url "${URL[$store]}" >"$W/fixture-$store.log" 2>&1 &
    fpid=$!
    for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/counter" && break; sleep 0.05; done
    line=$(wrk -t2 -c16 -d"${SECS}s" -s bench/wrk/layer-echo.lua "http://127.0.0.1:$port" | grep '^RESULT')
    kill "$fpid"; wait "$fpid" 2>/dev/null || true
    echo "round=$round store=$store $line" | tee -a "$W/results.txt"
  done
  # Alternate the order between rounds, so no store always runs first.
  ORDER=("${ORDER[@]:1}" "${ORDER[0]}")
done
python3 - "$W/results.txt" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    runs.setdefault(f["store"], []).append(f)
base = statistics.median(float(f["rps"]) for f in runs["sqlite"])
print(f"{'store':<20} {'median rps':>10} {'vs sqlite':>9} {'p50 ms':>7} {'p99 ms':>7} {'non-201':>7}")
for store, fs in runs.items():
    rps = statistics.median(float(f["rps"]) for f in fs)
    p50 = statistics.median(float(f["p50_ms"]) for f in fs)
    p99 = statistics.median(float(f["p99_ms"]) for f in fs)
    bad = sum(int(f["requests"]) - int(f["s201"]) for f in fs)
    print(f"{store:<20} {rps:>10.0f} {rps / base:>9.2f} {p50:>7.2f} {p99:>7.2f} {bad:>7}")
PY

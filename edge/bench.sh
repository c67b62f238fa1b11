#!/usr/bin/env bash
# Benchmark (not a test): the edge Worker's bundle size, and requests per
# second and latency (p50/p99) for rejected and forwarded requests through
# local workerd, against the origin alone. Loopback only, bounded runs.
#
#   edge/bench.sh [SECONDS_PER_RUN]      (default 8)
#
# Starts its own PostgreSQL (idemkey-pg, fsync ON), idemkey-server (release
# build) and edge/serve.sh on free ports, runs wrk (Debian's) with 1 thread
# and 8 connections per run, prints a table, and stops everything.
# Environment: CONNECTIONS (default 8), EDGE_PROFILE (see edge/build.sh).
set -euo pipefail

EDGE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$EDGE")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"
DURATION="${1:-8}"
CONNECTIONS="${CONNECTIONS:-8}"

command -v wrk >/dev/null || { echo "edge/bench.sh: wrk is required (apt-get install wrk)" >&2; exit 1; }

"$EDGE/build.sh"
(cd "$ROOT" && cargo build --release -p idemkey-server -p idemkey-testkit --bins)
SERVER="$CARGO_TARGET_DIR/release/idemkey-server"
PG="$CARGO_TARGET_DIR/release/idemkey-pg"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemkey-edge-bench.XXXXXX")
chmod 755 "$WORK" # idemkey-pg runs PostgreSQL as the `postgres` OS user
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    "$PG" stop "$WORK/pg" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

DB_URL=$("$PG" start "$WORK/pg" --db bench | sed -n 's/^DATABASE_URL=//p')
TOKEN=$("$SERVER" account create bench --database-url "$DB_URL" | tail -n 1)
ORIGIN_PORT=$(free_port)
EDGE_PORT=$(free_port)
ORIGIN="http://127.0.0.1:$ORIGIN_PORT"
EDGE_URL="http://127.0.0.1:$EDGE_PORT"

RUST_LOG=warn setsid "$SERVER" serve --database-url "$DB_URL" --bind "127.0.0.1:$ORIGIN_PORT" \
    >"$WORK/origin.log" 2>&1 &
PIDS+=($!)
EDGE_NO_BUILD=1 setsid "$EDGE/serve.sh" "$EDGE_PORT" "$ORIGIN" >"$WORK/edge.log" 2>&1 &
PIDS+=($!)

wait_up() {
    for _ in $(seq 1 200); do
        curl -fsS -o /dev/null "$1/healthz" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "edge/bench.sh: $1 did not come up" >&2
    cat "$WORK"/*.log >&2
    return 1
}
wait_up "$ORIGIN"
wait_up "$EDGE_URL"

# wrk scripts: one request shape each. `new` gives every request its own key
# (each one a new order: a database commit), `replay` reuses one key.
cat >"$WORK/common.lua" <<LUA
wrk.method = "POST"
wrk.path = "/orders"
wrk.headers["Authorization"] = "Bearer $TOKEN"
wrk.headers["Content-Type"] = "application/json"
LUA
cat "$WORK/common.lua" - >"$WORK/rejected.lua" <<'LUA'
wrk.headers["Idempotency-Key"] = '"bench-rejected"'
wrk.body = '{"sku":"LIBRO-TS","quantity":0}'
LUA
cat "$WORK/common.lua" - >"$WORK/replay.lua" <<'LUA'
wrk.headers["Idempotency-Key"] = '"bench-replay"'
wrk.body = '{"sku":"LIBRO-TS","quantity":2}'
LUA
cat "$WORK/common.lua" - >"$WORK/new.lua" <<'LUA'
local counter = 0
local prefix = salt -- set per run by run(): keys never repeat across runs
request = function()
  counter = counter + 1
  wrk.headers["Idempotency-Key"] = '"bench-' .. prefix .. '-' .. counter .. '"'
  return wrk.format(nil, nil, nil, '{"sku":"LIBRO-TS","quantity":2}')
end
LUA
cat >"$WORK/healthz.lua" <<'LUA'
wrk.method = "GET"
wrk.path = "/healthz"
LUA
cat >"$WORK/report.lua" <<'LUA'
done = function(summary, latency, requests)
  -- errors.status counts responses with status > 399.
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT %.0f %.2f %.2f %d %d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.requests, errors + summary.errors.status))
end
LUA

# Prime the replay key once on each side.
curl -fsS -o /dev/null -X POST "$ORIGIN/orders" -H "Authorization: Bearer $TOKEN" \
    -H 'Idempotency-Key: "bench-replay"' -H 'Content-Type: application/json' \
    --data '{"sku":"LIBRO-TS","quantity":2}'

RUNS=0
run() { # run LABEL URL SCRIPT
    local out
    # A file, not <(...): wrk reads the script once per thread.
    script() {
        RUNS=$((RUNS + 1))
        { echo "salt = \"$$-$RUNS\""; cat "$WORK/$1.lua" "$WORK/report.lua"; } >"$WORK/run.lua"
    }
    # Warm-up, not measured: the first requests compile the Worker's wasm
    # (and tier it up), which takes seconds on 2 busy cores.
    script "$3"
    wrk -t1 -c"$CONNECTIONS" -d2s --timeout 5s -s "$WORK/run.lua" "$2" >/dev/null
    script "$3"
    out=$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --timeout 5s -s "$WORK/run.lua" "$2" | sed -n 's/^RESULT //p')
    read -r rps p50 p99 total bad <<<"$out"
    # 4xx answers are expected for the rejected shape (400), so "bad"
    # counts only for the others.
    [[ $3 == rejected ]] && bad="(400s)"
    printf '%-34s %-7s %9s %9s %9s %9s %7s\n' "$1" "$([[ $2 == "$EDGE_URL" ]] && echo edge || echo origin)" "$rps" "$p50" "$p99" "$total" "$bad"
}

echo
echo "== bundle (edge/build/, profile $(cat "$EDGE/build/.profile" 2>/dev/null || echo '?')) =="
for f in index_bg.wasm index.js; do
    printf '%-14s raw %8d B   gzip -9 %8d B\n' "$f" "$(stat -c %s "$EDGE/build/$f")" "$(gzip -9 -c "$EDGE/build/$f" | wc -c)"
done
echo
echo "== load: wrk -t1 -c$CONNECTIONS -d${DURATION}s, loopback, 2 cores shared by wrk, workerd, origin and PostgreSQL (fsync on) =="
printf '%-34s %-7s %9s %9s %9s %9s %7s\n' "request" "via" "req/s" "p50 ms" "p99 ms" "requests" "non-2xx"
run "rejected (400 request-invalid)" "$ORIGIN" rejected
run "rejected (400 request-invalid)" "$EDGE_URL" rejected
run "forwarded: replay (201 replayed)" "$ORIGIN" replay
run "forwarded: replay (201 replayed)" "$EDGE_URL" replay
run "forwarded: new order (201)" "$ORIGIN" new
run "forwarded: new order (201)" "$EDGE_URL" new
run "pass-through: GET /healthz" "$ORIGIN" healthz
run "pass-through: GET /healthz" "$EDGE_URL" healthz

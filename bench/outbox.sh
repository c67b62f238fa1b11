#!/usr/bin/env bash
# Outbox delivery throughput: the charges of the orders made in a few seconds of wrk, delivered
# to the provider simulator by 1 and by 2 `idemkey-server worker` processes, on PostgreSQL (the
# order service's and the provider's databases on one throwaway cluster), release build,
# alternating rounds. Each round sends every message back to pending and empties the provider,
# so every round makes every charge for real. Prints one RESULT line per run and the medians.
#   bench/outbox.sh [ROUNDS=3] [ORDER_SECONDS=3]
# Env: BIN (idemkey-server, built with --features provider-sim), PG (idemkey-pg), W (work dir), BATCH (--outbox-batch, 16).
# Starts and stops only its own processes, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} ORDER_SECS=${2:-3}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/idemkey-server}
PG=${PG:-${CARGO_TARGET_DIR:-target}/debug/idemkey-pg}
W=${W:-/tmp/idemkey-outbox-bench}
BATCH=${BATCH:-16}
SECRET=outbox-bench-secret
rm -rf "$W"; mkdir -p "$W"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$PG" stop "$W/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

wait_http() { # URL
  for _ in $(seq 1 150); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "nothing answers at $1" >&2; return 1
}
SHOP=$("$PG" start "$W/pg" --db shop | sed -n 's/^DATABASE_URL=//p')
PROVIDER=$("$PG" start "$W/pg" --db provider | sed -n 's/^DATABASE_URL=//p')
psql_to() { psql "$1" -X -q -tA -v ON_ERROR_STOP=1 -c "$2"; }

TOKEN=$("$BIN" account create bench --database-url "$SHOP" 2>/dev/null | tail -1)
"$BIN" provider --bind 127.0.0.1:47001 --database-url "$PROVIDER" --token "$SECRET" \
  >"$W/provider.log" 2>&1 & pids+=($!)
"$BIN" serve --bind 127.0.0.1:47000 --database-url "$SHOP" --outbox-workers 0 \
  >"$W/serve.log" 2>&1 & pids+=($!)
wait_http http://127.0.0.1:47001/charges; wait_http http://127.0.0.1:47000/healthz
API= TOKEN=$TOKEN PORTS=47000 WRK_DIR=$PWD/bench/wrk \
  wrk -t2 -c16 -d"${ORDER_SECS}s" -s bench/wrk/orders-new.lua http://127.0.0.1:47000 >"$W/wrk.txt"
N=$(psql_to "$SHOP" "SELECT count(*) FROM outbox")
echo "== $N orders, each with a charge to deliver" >&2

round() { # WORKERS
  local k=$1 start end w
  psql_to "$SHOP" "UPDATE outbox SET status = 'pending', attempts = 0, result = NULL,
    downstream_key = NULL, settled_at = NULL, lease = NULL, lease_until = NULL,
    available_at = statement_timestamp()" >/dev/null
  psql_to "$PROVIDER" "TRUNCATE provider_charges, idempotency_records CASCADE" >/dev/null
  local wpids=()
  start=$(date +%s.%N)
  for w in $(seq 1 "$k"); do
    "$BIN" worker --database-url "$SHOP" --payments-url http://127.0.0.1:47001 \
      --payments-token "$SECRET" --outbox-batch "$BATCH" >"$W/worker-$k-$w.log" 2>&1 &
    wpids+=($!)
  done
  until [ "$(psql_to "$SHOP" "SELECT count(*) FROM outbox WHERE status = 'delivered'")" = "$N" ]; do
    sleep 0.05
  done
  end=$(date +%s.%N)
  for w in "${wpids[@]}"; do kill "$w"; wait "$w" 2>/dev/null || true; done
  local charges; charges=$(psql_to "$PROVIDER" "SELECT count(*) FROM provider_charges")
  [ "$charges" = "$N" ] || { echo "round with $k workers: $charges charges for $N orders" >&2; exit 1; }
  python3 -c "print(f'RESULT workers=$k messages=$N seconds={$end-$start:.2f} per_second={$N/($end-$start):.0f}')"
}
for r in $(seq 1 "$ROUNDS"); do
  round 1 | tee -a "$W/results"
  round 2 | tee -a "$W/results"
done
python3 - "$W/results" <<'PY'
import re, statistics, sys
rates = {}
for line in open(sys.argv[1]):
    m = re.search(r"workers=(\d+) .* per_second=(\d+)", line)
    if m: rates.setdefault(int(m[1]), []).append(int(m[2]))
for k, v in sorted(rates.items()):
    print(f"MEDIAN workers={k} per_second={statistics.median(v):.0f} runs={v}")
if 1 in rates and 2 in rates:
    print(f"RATIO 2/1 = {statistics.median(rates[2]) / statistics.median(rates[1]):.2f}")
PY

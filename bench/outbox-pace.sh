#!/usr/bin/env bash
# The outbox worker's pace against what surrounds it, on PostgreSQL (the order service's and the
# provider's databases on one throwaway cluster), release builds, one RESULT line per figure:
#   orders     new orders a second at c16 (wrk, orders-new.lua, no worker running); they are also
#              the messages the worker rounds deliver
#   sim        the provider simulator's own capacity: new charges a second at c16 (charges-new.lua)
#   worker     messages a second one `worker` process delivers, all of them from pending, to the
#              memory sink (`provider --memory`: the worker's own cost) and to the simulator
#   mixed      orders at c16 for MIX_SECONDS with one worker delivering to the simulator (or to
#              the memory sink: MIX_TARGETS), then the seconds from the load's stop until nothing
#              is pending (given up after DRAIN_MAX)
# Each worker figure is measured for BEFORE_BIN's worker and BIN's (the memory sink and the
# simulator are always BIN's: the baseline has no --memory).
# SPLIT=1 gives the provider a core of its own, as if it ran on another machine: the simulator,
# the memory sink and a second cluster holding the provider's database on CPU 1; the order
# service's cluster, its server, the worker and wrk on CPU 0. On one shared pair of cores the
# worker and the order database take their CPU from the simulator, so "worker rate / provider
# capacity" measures the box; split, it measures whether the worker keeps the provider busy.
#   bench/outbox-pace.sh [ORDER_SECONDS=8] [MIX_SECONDS=60]
# Env: BIN (idemkey-server, built with --features provider-sim), BEFORE_BIN (the baseline; empty: skip it), PG (idemkey-pg), W (work
# dir), NICE (e.g. -20: every process at that priority), DRAIN_MAX (s, 120), SKIP_MIX=1,
# MIX_TARGETS ("sim": the mixed runs' providers, any of "sink sim"),
# MESSAGES (15000: the worker rounds' messages, topped up from the orders'), AFTER_FLAGS (more
# flags for BIN's worker, e.g. "--outbox-batch 64 --outbox-concurrency 128"), SPLIT (0).
# Starts and stops only its own processes, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ORDER_SECS=${1:-8} MIX_SECS=${2:-60}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/idemkey-server}
BEFORE_BIN=${BEFORE_BIN-}
PG=${PG:-${CARGO_TARGET_DIR:-target}/debug/idemkey-pg}
W=${W:-/tmp/idemkey-outbox-pace}
NICE=${NICE:-0} DRAIN_MAX=${DRAIN_MAX:-120} MESSAGES=${MESSAGES:-15000}
SECRET=outbox-bench-secret
# A command run in the background through nice (which execs it), never through a shell function:
# $! must be the process's own PID.
PRIO=(); [ "$NICE" != 0 ] && PRIO=(nice -n "$NICE")
# ON_SHOP / ON_PROV: the order service's side and the provider's (each a core of its own with SPLIT=1).
ON_SHOP=("${PRIO[@]}") ON_PROV=("${PRIO[@]}") SPLIT=${SPLIT:-0}
if [ "$SPLIT" = 1 ]; then
  [ "$(nproc)" -ge 2 ] || { echo "SPLIT=1 needs two cores" >&2; exit 1; }
  ON_SHOP+=(taskset -c 0) ON_PROV+=(taskset -c 1)
fi
RUN() { "${ON_SHOP[@]}" "$@"; }
rm -rf "$W"; mkdir -p "$W"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$PG" stop "$W/pg" >/dev/null 2>&1 || true
  "$PG" stop "$W/pg-provider" >/dev/null 2>&1 || true
}
trap cleanup EXIT
log() { echo "== $(date -u +%H:%M:%S) $*" >&2; }
wait_http() { # URL
  for _ in $(seq 1 150); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "nothing answers at $1" >&2; return 1
}
now() { date +%s.%N; }
psql_to() { psql "$1" -X -q -tA -v ON_ERROR_STOP=1 -c "$2"; }
log "box: $(uptime) split=$SPLIT"

# The clusters' server processes inherit the CPU affinity of the command that starts them.
SHOP=$(RUN "$PG" start "$W/pg" --db shop | sed -n 's/^DATABASE_URL=//p')
PROV_PG=$W/pg; [ "$SPLIT" = 1 ] && PROV_PG=$W/pg-provider
PROVIDER=$("${ON_PROV[@]}" "$PG" start "$PROV_PG" --db provider | sed -n 's/^DATABASE_URL=//p')
TOKEN=$("$BIN" account create bench --database-url "$SHOP" 2>/dev/null | tail -1)
SIM=http://127.0.0.1:47001 SINK=http://127.0.0.1:47002
"${ON_PROV[@]}" "$BIN" provider --bind 127.0.0.1:47001 --database-url "$PROVIDER" --token "$SECRET" \
  >"$W/provider.log" 2>&1 & pids+=($!)
"${ON_SHOP[@]}" "$BIN" serve --bind 127.0.0.1:47000 --database-url "$SHOP" --outbox-workers 0 \
  >"$W/serve.log" 2>&1 & pids+=($!)
wait_http $SIM/charges; wait_http http://127.0.0.1:47000/healthz
sink_pid=
start_sink() { # a fresh memory sink (nothing remembered from the round before)
  [ -n "$sink_pid" ] && { kill "$sink_pid"; wait "$sink_pid" 2>/dev/null || true; }
  "${ON_PROV[@]}" "$BIN" provider --memory --bind 127.0.0.1:47002 --token "$SECRET" >"$W/sink.log" 2>&1 &
  sink_pid=$!; pids+=("$sink_pid"); wait_http $SINK/charges
}
orders() { # SECONDS OUT: wrk orders at c16
  API= TOKEN=$TOKEN PORTS=47000 WRK_DIR=$PWD/bench/wrk \
    RUN wrk -t2 -c16 -d"$1s" -s bench/wrk/orders-new.lua http://127.0.0.1:47000 >"$2"
  sed -n 's/^RESULT .*rps=\([0-9.]*\).*/\1/p' "$2"
}

# -- orders at c16 (and the messages of the worker rounds) ---------------------------------------
rate=$(orders "$ORDER_SECS" "$W/orders.txt")
echo "RESULT kind=orders store=postgres c=16 per_second=$rate"
# The worker rounds deliver MESSAGES charges whatever the order rate was: copies of an order's
# message, each with an order id and key of its own.
psql_to "$SHOP" "INSERT INTO outbox (scope, operation, key, effect, resource_id, payload)
  SELECT o.scope, o.operation, gen_random_uuid()::text, 'charge', r.id::text,
         json_build_object('order_id', r.id, 'amount_cents', 5980, 'currency', 'EUR')::text
  FROM (SELECT scope, operation FROM outbox LIMIT 1) o,
       (SELECT gen_random_uuid() AS id FROM generate_series(1,
          GREATEST(0, $MESSAGES - (SELECT count(*) FROM outbox)))) r" >/dev/null
N=$(psql_to "$SHOP" "SELECT count(*) FROM outbox")

# -- the simulator alone -------------------------------------------------------------------------
SECRET=$SECRET PORTS=47001 WRK_DIR=$PWD/bench/wrk \
  RUN wrk -t2 -c16 -d8s -s bench/wrk/charges-new.lua $SIM >"$W/sim.txt"
echo "RESULT kind=sim store=postgres c=16 per_second=$(sed -n 's/^RESULT .*rps=\([0-9.]*\).*/\1/p' "$W/sim.txt") $(grep -o 's201=[0-9]*' "$W/sim.txt")"
start_sink
SECRET=$SECRET PORTS=47002 WRK_DIR=$PWD/bench/wrk \
  RUN wrk -t2 -c16 -d5s -s bench/wrk/charges-new.lua $SINK >"$W/sink.txt"
echo "RESULT kind=sink c=16 per_second=$(sed -n 's/^RESULT .*rps=\([0-9.]*\).*/\1/p' "$W/sink.txt")"

# -- the worker alone, every message from pending ------------------------------------------------
round() { # LABEL BIN TARGET(sink|sim)
  local label=$1 bin=$2 target=$3 url start end wpid
  psql_to "$SHOP" "UPDATE outbox SET status = 'pending', attempts = 0, result = NULL,
    downstream_key = NULL, settled_at = NULL, lease = NULL, lease_until = NULL, last_error = NULL,
    available_at = statement_timestamp()" >/dev/null
  # Fresh statistics after rewriting every row, as autovacuum would give a long-running table.
  psql_to "$SHOP" "VACUUM ANALYZE outbox" >/dev/null
  if [ "$target" = sink ]; then start_sink; url=$SINK
  else psql_to "$PROVIDER" "TRUNCATE provider_charges, idempotency_records CASCADE" >/dev/null; url=$SIM; fi
  start=$(now)
  local flags=(); [ "$label" = after ] && read -ra flags <<<"${AFTER_FLAGS:-}"
  "${ON_SHOP[@]}" "$bin" worker --database-url "$SHOP" --payments-url "$url" --payments-token "$SECRET" \
    "${flags[@]}" >"$W/worker-$label-$target.log" 2>&1 &
  wpid=$!; pids+=("$wpid")
  # Polled slowly: each poll is a new connection (a backend forked) and a count, CPU taken from
  # the simulator on shared cores. The end is the last settlement's time, the same clock as `now`.
  until [ "$(psql_to "$SHOP" "SELECT count(*) FROM outbox WHERE status = 'delivered'")" = "$N" ]; do
    sleep 0.5
  done
  end=$(psql_to "$SHOP" "SELECT extract(epoch FROM max(settled_at)) FROM outbox")
  kill "$wpid"; wait "$wpid" 2>/dev/null || true
  if [ "$target" = sim ]; then
    local charges; charges=$(psql_to "$PROVIDER" "SELECT count(*) FROM provider_charges")
    [ "$charges" = "$N" ] || { echo "$label/$target: $charges charges for $N orders" >&2; exit 1; }
  fi
  python3 -c "print(f'RESULT kind=worker binary=$label target=$target messages=$N seconds={$end-$start:.2f} per_second={$N/($end-$start):.0f}')"
}
for target in sink sim; do
  [ -n "$BEFORE_BIN" ] && round before "$BEFORE_BIN" $target
  round after "$BIN" $target
done

# -- sustained: orders at c16 with a worker and the simulator, then the drain --------------------
mixed() { # LABEL BIN TARGET(sink|sim)
  local label=$1 bin=$2 target=$3 url wpid stop drained pending
  if [ "$target" = sink ]; then start_sink; url=$SINK
  else psql_to "$PROVIDER" "TRUNCATE provider_charges, idempotency_records CASCADE" >/dev/null; url=$SIM; fi
  psql_to "$SHOP" "DELETE FROM outbox" >/dev/null
  local flags=(); [ "$label" = after ] && read -ra flags <<<"${AFTER_FLAGS:-}"
  "${ON_SHOP[@]}" "$bin" worker --database-url "$SHOP" --payments-url "$url" --payments-token "$SECRET" \
    "${flags[@]}" >"$W/worker-mixed-$label-$target.log" 2>&1 &
  wpid=$!; pids+=("$wpid")
  rate=$(orders "$MIX_SECS" "$W/mixed-$label-$target.txt")
  stop=$(now)
  pending=$(psql_to "$SHOP" "SELECT count(*) FROM outbox WHERE status = 'pending'")
  local made; made=$(psql_to "$SHOP" "SELECT count(*) FROM outbox")
  drained=
  while :; do
    left=$(psql_to "$SHOP" "SELECT count(*) FROM outbox WHERE status = 'pending'")
    [ "$left" = 0 ] && { drained=$(python3 -c "print(f'{$(now)-$stop:.1f}')"); break; }
    python3 -c "import sys; sys.exit(0 if $(now)-$stop < $DRAIN_MAX else 1)" || break
    sleep 0.2
  done
  kill "$wpid"; wait "$wpid" 2>/dev/null || true
  if [ -n "$drained" ]; then
    echo "RESULT kind=mixed binary=$label target=$target seconds=$MIX_SECS orders_per_second=$rate messages=$made pending_at_stop=$pending drain_seconds=$drained"
  else
    echo "RESULT kind=mixed binary=$label target=$target seconds=$MIX_SECS orders_per_second=$rate messages=$made pending_at_stop=$pending drain_seconds=>$DRAIN_MAX still_pending=$left"
  fi
}
if [ "${SKIP_MIX:-0}" != 1 ]; then
  for target in ${MIX_TARGETS:-sim}; do
    mixed after "$BIN" "$target"
    [ -n "$BEFORE_BIN" ] && mixed before "$BEFORE_BIN" "$target"
  done
fi
log "box: $(uptime)"

# Sourced by bench/run.sh: helpers, no side effects on source.
# Servers are started and stopped by recorded PID only (never by name).

W=${W:-/tmp/idemkey-bench}                 # work dir: cluster, lab, sqlite files, server logs
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=${PGPORT:-55449}
PGPASS=solo-laboratorio                    # the article's lab password; the cluster trusts 127.0.0.1, so unused
# shellcheck disable=SC2034  # used by run.sh, which sources this file
LAB_URL="postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/idempotencia"
# shellcheck disable=SC2034
IDK_URL="postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/idemkey"
PY=${PY:-python3}
# NICE=-20 (root) runs the cluster, the servers, wrk and pgbench at high CPU priority, the peer
# harness's fallback for a box loaded by teammates' builds; 0 (default) = normal priority.
NICE=${NICE:-0}; export NICE
RUN_NICE() { if [ "$NICE" != 0 ]; then nice -n "$NICE" "$@"; else "$@"; fi; }
log() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

# psql over the cluster's unix socket (trust), database $1.
PSQL() { local db=$1; shift; "$PGBIN/psql" -h "$(pg_sock)" -p "$PGPORT" -U postgres -d "$db" -X -q -v ON_ERROR_STOP=1 "$@"; }

# ---- a script's own cluster: idemkey-pg (the testkit's throwaway cluster) in $W/pg ----------------
# The project's own tooling, nothing from outside the repository: `idemkey-pg` (crate
# idemkey-testkit, what the tests and scripts/pg.sh use) with fsync on and max_connections 100, so
# initdb's defaults (shared_buffers 128 MB, synchronous_commit on) apart from listen_addresses,
# port and socket directory. Trust authentication, locale C. Data $W/pg/data, socket $W/pg/sock,
# server log $W/pg/postgres.log. PG_TOOL: a prebuilt idemkey-pg (the test command's smokes give
# theirs); unset, it is built here (debug, from this checkout).
pg_sock() { printf '%s/pg/sock' "$W"; }
pg_log() { printf '%s/pg/postgres.log' "$W"; }
need_pg_tool() {
  if [ -z "${PG_TOOL:-}" ]; then
    (cd "$ROOT" && cargo build -q -p idemkey-testkit --bin idemkey-pg) || return 1
    PG_TOOL=${CARGO_TARGET_DIR:-$ROOT/target}/debug/idemkey-pg
  fi
}
# start_own_cluster LOG: a fresh cluster on 127.0.0.1:$PGPORT (what was in $W/pg is wiped), its
# output in LOG; PG_POSTMASTER (exported) is the postmaster's PID, for the CPU monitor.
start_own_cluster() {
  need_pg_tool || return 1
  stop_own_cluster; rm -rf -- "$W/pg"
  RUN_NICE "$PG_TOOL" start "$W/pg" --port "$PGPORT" --set max_connections=100 >"$1" 2>&1 \
    || { cat "$1" >&2; return 1; }
  PG_POSTMASTER=$(head -1 "$W/pg/data/postmaster.pid"); export PG_POSTMASTER
}
# stop_own_cluster: stop it (idemkey-pg stop: pg_ctl, fast), then its postmaster by PID if that
# could not.
stop_own_cluster() {
  [ -n "${PG_TOOL:-}" ] && "$PG_TOOL" stop "$W/pg" >/dev/null 2>&1
  if [ -s "$W/pg/data/postmaster.pid" ]; then
    local pm i; pm=$(head -1 "$W/pg/data/postmaster.pid")
    kill -TERM "$pm" 2>/dev/null; for i in $(seq 1 100); do kill -0 "$pm" 2>/dev/null || break; sleep 0.1; done
  fi
  return 0
}
# own_cleanup: the EXIT trap of a script whose W is its own mktemp dir (/tmp/idemkey-NAME.XXXXXX):
# stops its monitor, servers and cluster, removes W, and exits with the script's status; with
# KEEP=1 after a success, the cluster runs on and W stays, for a look at the tables.
own_cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  [ -n "${MON_PID:-}" ] && kill -TERM "$MON_PID" 2>/dev/null
  stop_all_procs
  if [ "${KEEP:-0}" = 1 ] && [ "$rc" = 0 ]; then
    log "KEEP=1: the cluster runs on; psql -h $(pg_sock) -p $PGPORT -U postgres; stop: $PG_TOOL stop $W/pg"
    exit 0
  fi
  stop_own_cluster
  case $W in /tmp/idemkey-*.*) rm -rf -- "$W" ;; esac
  exit "$rc"
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# refuse_busy_ports PORT...: exit 2 if one is taken (by another run, or a teammate's)
refuse_busy_ports() { local p; for p in "$@"; do
  port_busy "$p" && { echo "port $p is in use: set PGPORT / PORT" >&2; exit 2; }; done; return 0; }

# pgbench_trim_script RETENTION_MS BATCH: the library's PostgreSQL trim statement (what
# maintenance::trim_round sends; TRIM_SQL: a variant of it to measure instead) as a one-line
# pgbench script, its two parameters written in.
pgbench_trim_script() {
  grep -v '^--' "${TRIM_SQL:-$ROOT/idemkey/src/store/postgres/sql/trim.sql}" | sed -e "s/\\\$1/$1/g" -e "s/\\\$2/$2/g" | tr '\n' ' '
  echo ';'
}

# pgbench_order_vars: PGB_VARS, the -D values of bench/pgbench/gen.py's order scripts (the server's
# create_order.sql): the first token of database idemkey, one made-up order's body, headers and
# charge. Each script draws its own key and order id.
pgbench_order_vars() {
  local tokhex oid
  # shellcheck disable=SC2016  # $$hex$$ is SQL dollar quoting
  tokhex=$(PSQL idemkey -tAc 'SELECT encode(token_hash, $$hex$$) FROM api_tokens LIMIT 1')
  oid=$(cat /proc/sys/kernel/random/uuid)
  PGB_VARS=(-D "tok=\\x$tokhex" -D "fp=\\x$(printf x | sha256sum | cut -c1-64)" -D 'op=POST /orders:v1'
    -D "body={\"id\":\"$oid\",\"sku\":\"LIBRO-TS\",\"quantity\":2,\"created_at\":\"2026-12-02T18:00:00.000Z\"}"
    -D "hdrs=[[\"content-type\",\"application/json\"],[\"location\",\"/orders/$oid\"]]"
    -D created_at=2026-12-02T18:00:00Z -D replay_ms=86400000 -D status=201 -D sku=LIBRO-TS -D qty=2
    -D unit_cents=2990 -D currency=EUR -D amount=5980
    -D "charge={\"order_id\":\"$oid\",\"amount_cents\":5980,\"currency\":\"EUR\"}")
}

# ---- servers -----------------------------------------------------------------------------------
# start_proc NAME PORT CMD...: start CMD in the background, pid -> $W/srv-NAME.pid, wait for
# http://127.0.0.1:PORT/$HEALTH_PATH to answer (any HTTP status); returns 1 if it never does.
start_proc() {
  local name=$1 port=$2; shift 2
  # nice and env exec the command, so $! is the server's own PID (a function in the background would not be)
  if [ "$NICE" != 0 ]; then nice -n "$NICE" "$@" >"$W/srv-$name.log" 2>&1 & else "$@" >"$W/srv-$name.log" 2>&1 & fi
  echo $! >"$W/srv-$name.pid"
  local i
  for i in $(seq 1 150); do
    if curl -s -o /dev/null "http://127.0.0.1:$port/${HEALTH_PATH:-}"; then return 0; fi
    kill -0 "$(cat "$W/srv-$name.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name on :$port did not come up; log:" >&2; tail -5 "$W/srv-$name.log" >&2
  stop_proc "$name"; return 1
}
stop_proc() {
  local f="$W/srv-$1.pid" pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$1 (pid $pid) still runs 10 s after SIGTERM: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      # Its listening socket closes only once it has exited: the next server may want the port.
      for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  rm -f "$f"
}
stop_all_procs() { local f; for f in "$W"/srv-*.pid; do [ -e "$f" ] || continue; f=${f##*/srv-}; stop_proc "${f%.pid}"; done; }
proc_pids() { cat "$W"/srv-*.pid 2>/dev/null | paste -sd, -; }

# CPU ticks (utime+stime, all threads) of a comma list of PIDs; peak RSS (VmHWM, kB) sum and max.
cpu_ticks() { local p t=0 v; for p in ${1//,/ }; do
  v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0); t=$((t + v)); done; echo "$t"; }
hwm_kb() { local p s=0 m=0 v; for p in ${1//,/ }; do
  v=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0); v=${v:-0}
  s=$((s + v)); [ "$v" -gt "$m" ] && m=$v; done; echo "$s $m"; }
# shellcheck disable=SC2034
HZ=$(getconf CLK_TCK)

# ---- quiet box -------------------------------------------------------------------------------
# Teammates' builds share the 2 cores: wait until the box is < QUIET_PCT % busy over 2 s before a run
# (as the peer harness does); after QUIET_MAX s go on and flag the cell NOISY.
QUIET_PCT=${QUIET_PCT:-15}
busy_pct_2s() {
  local a b; read -ra a < <(head -1 /proc/stat); sleep 2; read -ra b < <(head -1 /proc/stat)
  local tot=0 i; for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
  local idle=$(( b[4] - a[4] + b[5] - a[5] )); echo $(( tot > 0 ? 100 * (tot - idle) / tot : 0 ))
}
wait_quiet() {
  local max=${1:-${QUIET_MAX:-120}} t=0 b
  [ "${QUIET_MAX:-}" = 0 ] && return 0   # QUIET_MAX=0: never wait (the test command's smoke)
  while :; do
    b=$(busy_pct_2s)
    [ "$b" -lt "$QUIET_PCT" ] && return 0
    t=$((t + 2)); [ $t -ge "$max" ] && { log "WARN: box still ${b}% busy after ${max}s"; return 1; }
    sleep 3; t=$((t + 3))
  done
}
mon_start() { rm -f "$1" "$1.ready"; MINE_PIDS=$2 /usr/bin/python3 "$BENCH/cpumon.py" "$1" & MON_PID=$!
  local i; for i in $(seq 1 100); do [ -e "$1.ready" ] && break; sleep 0.05; done; }
mon_stop() { kill -TERM "$MON_PID" 2>/dev/null || true
  local i; for i in $(seq 1 100); do kill -0 "$MON_PID" 2>/dev/null || break; sleep 0.05; done
  if [ -s "$1" ]; then cat "$1"; else echo "monitor=NA"; fi; }

# WAL flushes and commits, cluster-wide (pg_stat_wal, pg_stat_database).
wal_stats() { PSQL postgres -tAc "SELECT (SELECT wal_sync FROM pg_stat_wal) || ' ' ||
  (SELECT sum(xact_commit) FROM pg_stat_database)" 2>/dev/null || echo "0 0"; }

# Per-table and per-index reads in database idemkey (pg_stat_user_* and pg_statio_user_*), so a
# cell whose plans read whole tables or indexes shows it: scans and tuples per request do not
# show an index scan that walks every entry, its blocks per request do. pgstat_snap FILE, then
# pgstat_delta BEFORE REQUESTS > FILE.pgstat (one line per relation, per request).
pgstat_snap() { PSQL idemkey -tA -F' ' -c "SELECT 't', s.relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0),
  coalesce(idx_tup_fetch, 0), n_tup_ins, n_tup_upd, autovacuum_count, autoanalyze_count,
  heap_blks_hit + heap_blks_read FROM pg_stat_user_tables s JOIN pg_statio_user_tables b USING (relid)
  UNION ALL SELECT 'i', s.indexrelname, 0, 0, idx_scan, idx_tup_read, 0, 0, 0, 0, idx_blks_hit + idx_blks_read
  FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes b USING (indexrelid)" >"$1" 2>/dev/null || : >"$1"; }
pgstat_delta() {  # pgstat_delta BEFORE REQUESTS -> per-request deltas on stdout (BEFORE is removed)
  local after; after=$(mktemp); pgstat_snap "$after"
  "$PY" - "$1" "$after" "$2" <<'PYEOF'
import sys
def load(p):
    return {(f[0], f[1]): list(map(int, f[2:])) for f in (l.split() for l in open(p)) if len(f) == 11}
a, b, n = load(sys.argv[1]), load(sys.argv[2]), max(int(sys.argv[3] or 0), 1)
print('kind relation seq_scan seq_tup_read/req idx_scan/req idx_tup/req ins/req upd/req autovacuum autoanalyze '
      'blocks/req')
for k in sorted(b):
    d = [y - x for x, y in zip(a.get(k, [0] * 9), b[k])]
    if any(d):
        print(k[0], k[1], d[0], f'{d[1] / n:.2f}', f'{d[2] / n:.2f}', f'{d[3] / n:.2f}', f'{d[4] / n:.2f}',
              f'{d[5] / n:.2f}', d[6], d[7], f'{d[8] / n:.2f}')
PYEOF
  rm -f "$1" "$after"; }

field() { grep -o "\b$1=[^ ]*" <<<"$2" | head -1 | cut -d= -f2; }
num() { local v; v=$(field "$1" "$2"); echo "${v:-0}"; }

#!/usr/bin/env bash
# bench/partition-guard.sh: what a records table partitioned by time would cost a new key, with the
# guard kept exact across partitions, next to today's one table; and what dropping a partition
# costs next to trimming its rows one by one.
#
#   bench/partition-guard.sh            # 3 rounds of 10 s per cell, ~4 min
#
# PostgreSQL's unique constraints on a partitioned table must include the partition key, so
# (scope, operation, key) alone cannot be unique across time partitions: two claims of one key in
# two partitions would both insert. The exact guard measured here: the claim takes a
# transaction-level advisory lock on the key's hash, looks for the key in every partition the
# retention still covers, and inserts only if none holds it. It must be a function (PL/pgSQL), one
# round trip like today's claim: a single statement's snapshot is taken before its lock wait, so it
# would not see the row the lock's holder committed; each statement of a function takes a new one.
#
# One throwaway PostgreSQL 15 cluster (idemkey-pg, lib.sh's start_own_cluster: initdb defaults, fsync on);
# database `guard`, migrated by the server (`idemkey-server migrate`) for today's table. Next to it,
# for each P in PARTS, `parted_P`: the same columns, PARTITION BY RANGE (created_at), P daily
# partitions up to tomorrow, primary key (scope, operation, key, created_at) and the maintenance
# index on each; and `claim_P(...)`, the guarded claim above over a retention of P - 1 days.
# Cells (pgbench -M prepared -c CONNS -j 2, DUR s, a fresh random key per transaction, ROUNDS
# rounds in rotating order): `one` = the library's own claim statement
# (idemkey/src/store/postgres/sql/claim.sql, the Layer's claim) on today's table; `parted-P` =
# SELECT claim_P(...). Then the drop: DROP_ROWS rows put in the oldest partition of the largest P,
# CHECKPOINT, DETACH PARTITION ... CONCURRENTLY and DROP TABLE timed, next to the library's trim
# deleting as many rows from today's table (the same rows copied there as expired tombstones).
#
# Output: OUT/partition-guard.md (also printed), OUT/cells.tsv, OUT/logs/.
# Knobs: PARTS ("31 4 2": how many partitions a claim probes; daily ones here, as many as
# partitions of 1, 10 and 30 days need over the default 30 d tombstone retention),
# ROUNDS (3), DUR (10), CONNS (16), DROP_ROWS (1000000), SERVER (a prebuilt idemkey-server;
# else built here), NICE (0), QUIET_MAX (20), PGPORT (55479), OUT (bench/results/guard-<stamp>/).
set -euo pipefail
T_START=$(date +%s)
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)

CMDLINE=
for v in PARTS ROUNDS DUR CONNS DROP_ROWS SERVER NICE QUIET_MAX PGPORT OUT; do
  [ -n "${!v+x}" ] && CMDLINE+="$v=$(printf %q "${!v}") "
done
CMDLINE+=$(printf '%q ' "$0" "$@"); CMDLINE=${CMDLINE% }

PARTS=${PARTS:-"31 4 2"}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10}
CONNS=${CONNS:-16}
DROP_ROWS=${DROP_ROWS:-1000000}
QUIET_MAX=${QUIET_MAX:-20}; export QUIET_MAX
PGPORT=${PGPORT:-55479}

W=$(mktemp -d /tmp/idemkey-guard.XXXXXX); chmod 1777 "$W"
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"
trap own_cleanup EXIT
trap 'exit 130' INT TERM
refuse_busy_ports "$PGPORT"

OUT=${OUT:-$BENCH/results/guard-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT/logs"
LOGS=$OUT/logs
if [ -z "${SERVER:-}" ]; then
  log "build idemkey-server (release)"
  (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server)
  SERVER=${CARGO_TARGET_DIR:-$ROOT/target}/release/idemkey-server
fi

log "fresh PostgreSQL cluster on 127.0.0.1:$PGPORT (idemkey-pg, initdb defaults, fsync on) in $W/pg"
start_own_cluster "$LOGS/start-pg.log"
PSQL postgres -c "CREATE DATABASE guard"
"$SERVER" migrate --database-url "postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/guard" >"$LOGS/migrate.log" 2>&1

COLS="scope, operation, key, fingerprint, claim, status, created_at, lease_until, check_at"
for p in $PARTS; do
  PSQL guard <<SQL
CREATE TABLE parted_$p (LIKE idempotency_records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY RANGE (created_at);
ALTER TABLE parted_$p ADD PRIMARY KEY (scope, operation, key, created_at);
-- The record's rules, as today's table checks them (its trigger; LIKE copies no trigger).
CREATE TRIGGER parted_${p}_valid BEFORE INSERT OR UPDATE ON parted_$p
  FOR EACH ROW EXECUTE FUNCTION idempotency_records_valid();
CREATE INDEX ON parted_$p ((COALESCE(check_at, created_at)));
DO \$\$ BEGIN
  FOR d IN 0..$p - 1 LOOP
    EXECUTE format('CREATE TABLE parted_${p}_%s PARTITION OF parted_$p FOR VALUES FROM (%L) TO (%L)
                    WITH (fillfactor = 85)', d,
                   date_trunc('day', now()) - ($p - 2 - d) * interval '1 day',
                   date_trunc('day', now()) - ($p - 3 - d) * interval '1 day');
  END LOOP;
END \$\$;
CREATE FUNCTION claim_$p(p_scope text, p_operation text, p_key text, p_fingerprint bytea, p_claim uuid,
                         p_lease_ms int8, p_replay_ms int8) RETURNS int LANGUAGE plpgsql AS \$\$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_scope || '/' || p_operation || '/' || p_key, 0));
  PERFORM 1 FROM parted_$p
  WHERE scope = p_scope AND operation = p_operation AND key = p_key
    AND created_at >= date_trunc('day', statement_timestamp()) - ($p - 2) * interval '1 day';
  IF FOUND THEN RETURN NULL; END IF;
  INSERT INTO parted_$p ($COLS)
  VALUES (p_scope, p_operation, p_key, p_fingerprint, p_claim, 'in_flight', statement_timestamp(),
          statement_timestamp() + p_lease_ms * interval '1 millisecond',
          statement_timestamp() + p_replay_ms * interval '1 millisecond');
  RETURN 1;
END \$\$;
SQL
done

# pgbench scripts: a fresh key per transaction; the library's claim statement with its parameters
# written in, and the guarded claim with the same values.
VARS='\set k random(1, 1000000000000)'
ARGS_SCOPE="'bench'" ARGS_OP="'orders v1'" ARGS_KEY="'k' || :k"
ARGS_FP="decode(repeat('ab', 32), 'hex')" ARGS_CLAIM="gen_random_uuid()"
{ echo "$VARS"
  grep -v '^--' "$ROOT/idemkey/src/store/postgres/sql/claim.sql" | sed \
    -e "s#\\\$1#$ARGS_SCOPE#; s#\\\$2#$ARGS_OP#; s#\\\$3#$ARGS_KEY#; s#\\\$4#$ARGS_FP#; s#\\\$5#$ARGS_CLAIM#" \
    -e 's/\$6/30000/; s/\$7/86400000/' | tr '\n' ' '
  echo ';'
} >"$W/one.pgb"
grep -q '\$[0-9]' "$W/one.pgb" && { echo "a parameter of claim.sql was not written in: $(cat "$W/one.pgb")" >&2; exit 1; }
for p in $PARTS; do
  printf '%s\nSELECT claim_%s(%s, %s, %s, %s, %s, 30000, 86400000);\n' "$VARS" "$p" "$ARGS_SCOPE" "$ARGS_OP" \
    "$ARGS_KEY" "$ARGS_FP" "$ARGS_CLAIM" >"$W/parted-$p.pgb"
done
# the guard holds: a key claimed twice is stored once, in every variant
for p in $PARTS; do
  got=$(PSQL guard -tAc "SELECT coalesce(claim_$p('s', 'o', 'twice', $ARGS_FP, gen_random_uuid(), 1, 1), 0) +
                           coalesce(claim_$p('s', 'o', 'twice', $ARGS_FP, gen_random_uuid(), 1, 1), 0)")
  [ "$got" = 1 ] || { echo "claim_$p stored one key $got times" >&2; exit 1; }
done

CELLS=$OUT/cells.tsv
printf 'round\tcell\ttps\tlatency_ms\tquiet\n' >"$CELLS"
cells="one"; for p in $PARTS; do cells+=" parted-$p"; done
read -ra cell_list <<<"$cells"
n=${#cell_list[@]}
for r in $(seq 1 "$ROUNDS"); do
  for i in $(seq 0 $((n - 1))); do
    c=${cell_list[$(( (i + r - 1) % n ))]}
    PSQL guard -c CHECKPOINT
    q=quiet; wait_quiet || q=NOISY
    RUN_NICE "$PGBIN/pgbench" -h "$(pg_sock)" -p "$PGPORT" -U postgres -n -M prepared -c "$CONNS" -j 2 -T "$DUR" \
      -f "$W/$c.pgb" guard >"$LOGS/r$r-$c.pgbench" 2>&1
    tps=$(awk '/^tps = / {print $3}' "$LOGS/r$r-$c.pgbench")
    lat=$(awk '/^latency average/ {print $4}' "$LOGS/r$r-$c.pgbench")
    grep -q 'number of failed transactions: 0 ' "$LOGS/r$r-$c.pgbench" || { echo "failed transactions in $c" >&2; exit 1; }
    printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$c" "$tps" "$lat" "$q" | tee -a "$CELLS" >&2
  done
done

# ---- the drop against the trim: DROP_ROWS rows in the oldest partition of the largest P --------------
big=$(tr ' ' '\n' <<<"$PARTS" | sort -n | tail -1)
log "drop: $DROP_ROWS rows in parted_${big}_0, and as many expired tombstones in today's table"
PSQL guard -c "INSERT INTO parted_${big}_0 ($COLS)
  SELECT 'drop', 'o', 'k' || i, $ARGS_FP, gen_random_uuid(), 'in_flight',
         date_trunc('day', now()) - ($big - 2) * interval '1 day' + interval '1 hour', now(), now()
  FROM generate_series(1, $DROP_ROWS) i" \
  -c "INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim, status, created_at, replay_until, check_at)
  SELECT 'drop', 'o', 'k' || i, $ARGS_FP, gen_random_uuid(), 'tombstone', now() - interval '31 days',
         now() - interval '30 days', now() - interval '1 day'
  FROM generate_series(1, $DROP_ROWS) i" \
  -c "VACUUM ANALYZE" -c CHECKPOINT
t0=$(date +%s%N)
PSQL guard -c "ALTER TABLE parted_$big DETACH PARTITION parted_${big}_0 CONCURRENTLY"
t1=$(date +%s%N)
PSQL guard -c "DROP TABLE parted_${big}_0"
t2=$(date +%s%N)
DETACH_MS=$(( (t1 - t0) / 1000000 )) DROP_MS=$(( (t2 - t1) / 1000000 ))
pgbench_trim_script $((30 * 86400 * 1000)) 500 >"$W/trim.pgb"
t0=$(date +%s%N)
# one connection, as the server's task; as many batches as the rows need, and a few more
RUN_NICE "$PGBIN/pgbench" -h "$(pg_sock)" -p "$PGPORT" -U postgres -n -c 1 -t $((DROP_ROWS / 500 + 5)) -f "$W/trim.pgb" guard \
  >"$LOGS/trim.pgbench" 2>&1
t1=$(date +%s%N)
TRIM_MS=$(( (t1 - t0) / 1000000 ))
LEFT=$(PSQL guard -tAc "SELECT count(*) FROM idempotency_records WHERE scope = 'drop'")
T_END=$(date +%s)

{
  echo "# A guarded claim over time partitions against one table (bench/partition-guard.sh)"
  echo
  echo '```'
  echo "$CMDLINE"
  echo '```'
  echo
  echo "- $(date -u -d "@$T_START" +%FT%TZ) to $(date -u -d "@$T_END" +%FT%TZ); git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo NA);" \
    "$(nproc) cores, PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') initdb defaults (fsync on); pgbench -M prepared -c$CONNS -j2, ${DUR} s per cell, $ROUNDS rounds, order rotating; NICE=$NICE"
  echo
  "$PY" - "$CELLS" <<'PYEOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
cells = []
for r in rows:
    if r['cell'] not in cells: cells.append(r['cell'])
one = {r['round']: float(r['tps']) for r in rows if r['cell'] == 'one'}
print('| cell | claims/s per round | against `one` per round | median | latency ms (median) |')
print('|---|---|---|---:|---:|')
for c in cells:
    rs = [r for r in rows if r['cell'] == c]
    q = [float(r['tps']) / one[r['round']] for r in rs]
    name = "one table, the library's claim" if c == 'one' else c.split('-')[1] + ' daily partitions, guarded claim'
    per = ' · '.join('{:,.0f}{}'.format(float(r['tps']), '' if r['quiet'] == 'quiet' else '*') for r in rs)
    ratios = ' · '.join('{:.2f}'.format(x) for x in q)
    lat = statistics.median(float(r['latency_ms']) for r in rs)
    print('| {} | {} | {} | **{:.2f}** | {:.2f} |'.format(name, per, ratios, statistics.median(q), lat))
PYEOF
  echo
  echo "Dropping a day of $DROP_ROWS rows: DETACH PARTITION CONCURRENTLY $DETACH_MS ms, DROP TABLE $DROP_MS ms." \
    "Trimming as many expired tombstones from one table with the library's trim (batch 500, pgbench -c1): $TRIM_MS ms" \
    "($(awk -v n="$DROP_ROWS" -v l="$LEFT" -v ms="$TRIM_MS" 'BEGIN{ printf "%.0f", (n - l) / (ms / 1000) }') rows/s; $LEFT left)."
} >"$OUT/partition-guard.md"
log "done: $OUT/partition-guard.md"
cat "$OUT/partition-guard.md"

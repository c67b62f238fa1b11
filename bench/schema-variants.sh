#!/usr/bin/env bash
# bench/schema-variants.sh: what one part of the schema costs a statement, in PostgreSQL alone.
#
#   bench/schema-variants.sh order "base nopay pkid nochk"     # the order route's one statement
#   bench/schema-variants.sh layer "base checks none"          # the Layer's claim + completion
#   ROUNDS=2 DUR=3 bench/schema-variants.sh layer "base none"  # to try it
#
# One throwaway PostgreSQL 15 cluster (idemkey-pg, lib.sh's start_own_cluster: initdb defaults, fsync on),
# database `idemkey` migrated by the server (`idemkey-server migrate`). Workloads, each a pgbench
# script of the server's own statements (pgbench -M prepared -c CONNS -j 2, DUR s, a fresh random
# key per transaction):
#   order  create_order.sql, a new order with its charge (bench/pgbench/gen.py's new-1rt.sql); the
#          variant `nopay` sends it as the `without-payments` build does (the outbox insert turned
#          into a select of no message)
#   layer  claim.sql then complete.sql (16-byte body), the two autocommit statements of a key behind
#          the Layer, with the sessions' plan_cache_mode=force_generic_plan, as the pool sets it
# Variants (a `+` joins several): each is SQL put in place before its run and taken back after it,
# on a table just emptied (TRUNCATE, no ANALYZE: without the pool's enable_seqscan=off, a generic
# plan made while a table is analyzed empty scans it whole; docs/performance.md "Open questions").
#   base        the schema as migrated
#   nopay       (order) the statement without its message
#   small       (order) the message without its copies of operation and key
#   pkid, nopk  the outbox's primary key on id alone; none
#   nodue, lean the outbox without outbox_due; without outbox_dead and outbox_flow_step
#   nochk, onechk, obtrig  the outbox's CHECKs dropped; folded into one; moved into a trigger
#   checks      the records' rules as the seven CHECKs of before (their trigger dropped)
#   none, onecheck  the records without rules; with one CHECK of the seven conditions
# ROUNDS rounds, the variants in the given order each round. Output: OUT/variants.tsv (round,
# workload, variant, tps) and OUT/variants.md (per variant, tps per round and the ratio to the
# round's first variant, with its median).
# Knobs: ROUNDS (4), DUR (10), TXNS (unset; transactions per connection instead of DUR s: a check
# that every variant runs, not a measure), CONNS (16), BIN (release idemkey-server), PGPORT (55491), NICE (0),
# OUT (bench/results/schema-<workload>-<UTC stamp>/).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}
WORKLOAD=${1:?usage: bench/schema-variants.sh order|layer \"VARIANT...\"}
VARIANTS=${2:-base}
case $WORKLOAD in order | layer) ;; *) echo "workload: order or layer" >&2; exit 2 ;; esac
ROUNDS=${ROUNDS:-4} DUR=${DUR:-10} CONNS=${CONNS:-16} TXNS=${TXNS:-}
LENGTH=(-T "$DUR") LENGTH_TEXT="$DUR s"
if [ -n "$TXNS" ]; then LENGTH=(-t "$TXNS") LENGTH_TEXT="$TXNS transactions per connection"; fi
BIN=${BIN:-$CARGO_TARGET_DIR/release/idemkey-server}
PGPORT=${PGPORT:-55491}
OUT=${OUT:-$BENCH/results/schema-$WORKLOAD-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/idemkey-schema.XXXXXX); chmod 1777 "$W"   # the postgres OS user writes its socket here
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"
export PGPORT PGPASSWORD=$PGPASS
trap own_cleanup EXIT
trap 'exit 130' INT TERM
refuse_busy_ports "$PGPORT"
[ -x "$BIN" ] || (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server)

log "cluster on 127.0.0.1:$PGPORT in $W/pg (idemkey-pg)"
start_own_cluster "$W/start-pg.log"
PSQL postgres -c 'CREATE DATABASE idemkey'
URL="postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/idemkey"
"$BIN" migrate --database-url "$URL" >"$W/migrate.log" 2>&1
"$BIN" account create bench --database-url "$URL" >/dev/null 2>>"$W/migrate.log"
if [ "$WORKLOAD" = layer ]; then
  PSQL postgres -c 'ALTER SYSTEM SET plan_cache_mode = force_generic_plan' -c 'SELECT pg_reload_conf()' >/dev/null
fi

# ---- the scripts --------------------------------------------------------------------------------
mkdir -p "$W/pgb"
"$PY" "$BENCH/pgbench/gen.py" "$ROOT/server/src/db/postgres/sql" "$W/pgb"
"$PY" - "$W/pgb/new-1rt.sql" "$W/pgb" <<'PY'
import sys
src, out = sys.argv[1], sys.argv[2]
s = open(src).read()
a = s.index("INSERT INTO outbox")
b = s.index("RETURNING id", a) + len("RETURNING id")
open(f"{out}/nopay.sql", "w").write(s[:a] + "SELECT NULL::bigint AS id\n    FROM claim" + s[b:])
old = "SELECT claim.scope, :op::text, :k::text, 'charge'"
assert old in s, "create_order.sql's charge select changed: update this script"
open(f"{out}/small.sql", "w").write(s.replace(old, "SELECT claim.scope, ''::text, ''::text, 'charge'"))
PY
sql_of() { grep -v '^--' "$ROOT/idemkey/src/store/postgres/sql/$1.sql" | tr '\n' ' '; }
FP=$(printf x | sha256sum | cut -c1-64)
SCOPE=2f0c1b1e-8c55-4a53-9d7e-3c1a5f1e2d10 CLAIM=7b1e2f3a-0c4d-4e5f-8a9b-1c2d3e4f5a6b
{
  echo '\set k random(1, 9223372036854775806)'
  # claim.sql: $1 scope, $2 operation, $3 key, $4 fingerprint, $5 claim, $6 lease ms, $7 replay ms
  sql_of claim | sed -e "s/\\\$1/'$SCOPE'::text/; s/\\\$2/'POST \\/echo.v1'::text/; s/\\\$3/:k::text/" \
    -e "s/\\\$4/'\\\\x$FP'::bytea/; s/\\\$5/'$CLAIM'::uuid/; s/\\\$6/30000/; s/\\\$7/86400000/"
  echo ';'
  # complete.sql: $1-$3 the key, $4 claim, $5 replay ms, $6 status, $7 headers, $8 body, $9 resource
  sql_of complete | sed -e "s/\\\$1/'$SCOPE'::text/; s/\\\$2/'POST \\/echo.v1'::text/; s/\\\$3/:k::text/" \
    -e "s/\\\$4/'$CLAIM'::uuid/; s/\\\$5/86400000/; s/\\\$6/200/; s/\\\$7/'[]'::text/" \
    -e "s/\\\$8/'\\\\x00112233445566778899aabbccddeeff'::bytea/; s/\\\$9/NULL::text/"
  echo ';'
} | tr -s ' ' >"$W/pgb/layer.sql"
grep -q '\$[0-9]' "$W/pgb/layer.sql" && { echo "a parameter left in layer.sql" >&2; exit 1; }
pgbench_order_vars   # PGB_VARS (lib.sh)

# ---- the variants -------------------------------------------------------------------------------
constraints() {  # constraints TABLE add|drop|and: the table's CHECKs as ALTER TABLE clauses, or one condition
  local what="format('ADD CONSTRAINT %I %s', conname, pg_get_constraintdef(oid))" sep=', '
  [ "$2" = drop ] && what="format('DROP CONSTRAINT %I', conname)"
  [ "$2" = and ] && what="'(' || pg_get_expr(conbin, conrelid) || ')'" sep=' AND '
  PSQL idemkey -tAc "SELECT coalesce(string_agg($what, '$sep' ORDER BY conname), '') FROM pg_constraint
                     WHERE conrelid = '$1'::regclass AND contype = 'c'"
}
OB_ADD=$(constraints outbox add) OB_DROP=$(constraints outbox drop) OB_ONE=$(constraints outbox and)
# The records' seven CHECKs as the first migration made them, read from a copy of its table.
PSQL idemkey -c 'CREATE SCHEMA bench_v1' -c 'SET search_path = bench_v1' \
  -f "$ROOT/idemkey/src/store/postgres/migrations/records_0001.sql" >/dev/null
SEVEN=$(constraints bench_v1.idempotency_records add) RULES=$(constraints bench_v1.idempotency_records and)
PSQL idemkey -c 'DROP SCHEMA bench_v1 CASCADE' >/dev/null
[ "$(grep -o 'ADD CONSTRAINT' <<<"$SEVEN" | wc -l)" = 7 ] || { echo "records/1 has not seven CHECKs: $SEVEN" >&2; exit 1; }
NO_TRIGGER="DROP TRIGGER idempotency_records_valid ON idempotency_records"
TRIGGER="CREATE TRIGGER idempotency_records_valid BEFORE INSERT OR UPDATE ON idempotency_records
  FOR EACH ROW EXECUTE FUNCTION idempotency_records_valid()"
# outbox_0001.sql's three CHECKs, written again on NEW (a trigger's condition cannot be read back).
OB_TRIGGER="CREATE FUNCTION outbox_valid_bench() RETURNS trigger LANGUAGE plpgsql AS \$f\$ BEGIN
  IF NOT (NEW.effect ~ '^[a-z][a-z0-9-]{0,31}\$' AND NEW.status IN ('pending', 'delivered', 'failed', 'dead')
          AND (NEW.status = 'pending') = (NEW.settled_at IS NULL)) THEN
    RAISE check_violation USING MESSAGE = 'an outbox message breaks its invariants'; END IF;
  RETURN NEW; END \$f\$;
  CREATE TRIGGER outbox_valid_bench BEFORE INSERT OR UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_valid_bench()"
variant() {  # variant NAME apply|undo
  local apply=0; [ "$2" = apply ] && apply=1
  case $1 in
    base | nopay | small) ;;
    pkid) if ((apply)); then PSQL idemkey -c 'ALTER TABLE outbox DROP CONSTRAINT outbox_pkey, ADD PRIMARY KEY (id)'
          else PSQL idemkey -c 'ALTER TABLE outbox DROP CONSTRAINT outbox_pkey, ADD PRIMARY KEY (scope, id)'; fi ;;
    nopk) if ((apply)); then PSQL idemkey -c 'ALTER TABLE outbox DROP CONSTRAINT outbox_pkey'
          else PSQL idemkey -c 'ALTER TABLE outbox ADD PRIMARY KEY (scope, id)'; fi ;;
    nodue) if ((apply)); then PSQL idemkey -c 'DROP INDEX outbox_due'
           else PSQL idemkey -c "CREATE INDEX outbox_due ON outbox (available_at) WHERE status = 'pending'"; fi ;;
    lean) if ((apply)); then PSQL idemkey -c 'DROP INDEX outbox_dead' -c 'DROP INDEX outbox_flow_step'
          else PSQL idemkey -c "CREATE INDEX outbox_dead ON outbox (id) WHERE status = 'dead'" \
            -c "CREATE INDEX outbox_flow_step ON outbox (scope, resource_id) WHERE effect = 'flow-step'"; fi ;;
    nochk) if ((apply)); then PSQL idemkey -c "ALTER TABLE outbox $OB_DROP"
           else PSQL idemkey -c "ALTER TABLE outbox $OB_ADD"; fi ;;
    onechk) if ((apply)); then PSQL idemkey -c "ALTER TABLE outbox $OB_DROP, ADD CONSTRAINT outbox_bench_one CHECK ($OB_ONE)"
            else PSQL idemkey -c "ALTER TABLE outbox DROP CONSTRAINT outbox_bench_one, $OB_ADD"; fi ;;
    obtrig) if ((apply)); then PSQL idemkey -c "ALTER TABLE outbox $OB_DROP" -c "$OB_TRIGGER"
            else PSQL idemkey -c 'DROP TRIGGER outbox_valid_bench ON outbox' \
              -c 'DROP FUNCTION outbox_valid_bench()' -c "ALTER TABLE outbox $OB_ADD"; fi ;;
    checks) if ((apply)); then PSQL idemkey -c "$NO_TRIGGER" -c "ALTER TABLE idempotency_records $SEVEN"
            else PSQL idemkey -c "ALTER TABLE idempotency_records $(constraints idempotency_records drop)" \
              -c "$TRIGGER"; fi ;;
    none) if ((apply)); then PSQL idemkey -c "$NO_TRIGGER"; else PSQL idemkey -c "$TRIGGER"; fi ;;
    onecheck) if ((apply)); then PSQL idemkey -c "$NO_TRIGGER" \
                -c "ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_bench_one CHECK ($RULES)"
              else PSQL idemkey -c 'ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_bench_one' \
                -c "$TRIGGER"; fi ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
for v in $VARIANTS; do for part in ${v//+/ }; do variant "$part" apply >/dev/null; variant "$part" undo >/dev/null; done; done

# ---- the rounds ---------------------------------------------------------------------------------
TSV=$OUT/variants.tsv
printf 'round\tworkload\tvariant\ttps\n' >"$TSV"
for r in $(seq 1 "$ROUNDS"); do
  for v in $VARIANTS; do
    PSQL idemkey -c 'TRUNCATE orders, outbox, idempotency_records' >/dev/null
    for part in ${v//+/ }; do variant "$part" apply >/dev/null; done
    PSQL idemkey -c CHECKPOINT >/dev/null
    script=$W/pgb/layer.sql vars=()
    if [ "$WORKLOAD" = order ]; then
      script=$W/pgb/new-1rt.sql vars=("${PGB_VARS[@]}")
      [[ +$v+ == *+nopay+* ]] && script=$W/pgb/nopay.sql
      [[ +$v+ == *+small+* ]] && script=$W/pgb/small.sql
    fi
    txt=$W/$r-$v.txt
    RUN_NICE "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" -U postgres -n -M prepared -c "$CONNS" -j 2 \
      "${LENGTH[@]}" "${vars[@]}" -f "$script" idemkey >"$txt" 2>&1 || true
    tps=$(grep -oP 'tps = \K[0-9.]+' "$txt" || echo NA)
    [ "$tps" = NA ] && { echo "round $r $v failed:" >&2; tail -5 "$txt" >&2; }
    printf '%s\t%s\t%s\t%s\n' "$r" "$WORKLOAD" "$v" "$tps" | tee -a "$TSV" >&2
    for part in ${v//+/ }; do variant "$part" undo >/dev/null; done
  done
done
"$PY" - "$TSV" "$OUT/variants.md" "$WORKLOAD $LENGTH_TEXT x $ROUNDS rounds, c$CONNS, $(date -u +%FT%TZ), git $(git -C "$ROOT" rev-parse --short HEAD)" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
order = list(dict.fromkeys(r['variant'] for r in rows))
tps = {(r['round'], r['variant']): float(r['tps']) if r['tps'] != 'NA' else None for r in rows}
rounds = sorted({r['round'] for r in rows}, key=int)
first = order[0]
out = [f"pgbench, {sys.argv[3]}", "", f"| variant | tps per round | over {first} per round | median |", "|---|---|---|---:|"]
for v in order:
    ts = [tps.get((r, v)) for r in rounds]
    ratios = [t / tps[(r, first)] for r, t in zip(rounds, ts) if t and tps.get((r, first))]
    med = f"{statistics.median(ratios):.2f}" if ratios else "NA"
    out.append(f"| {v} | {' · '.join(f'{t:,.0f}' if t else 'NA' for t in ts)} | "
               f"{' · '.join(f'{x:.2f}' for x in ratios)} | {med} |")
open(sys.argv[2], 'w').write('\n'.join(out) + '\n')
print('\n'.join(out))
PY

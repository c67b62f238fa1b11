#!/usr/bin/env bash
# bench/payments.sh: what the outbox costs the order path, from this source tree alone.
#
#   bench/payments.sh                       # builds both binaries, checks them, 5 rounds, both stores
#   QUICK=1 bench/payments.sh               # 2 short rounds, to try it
#
# The order service is built twice from the same tree: as it is (B, "with payments"), and with the
# `without-payments` feature (A, the baseline: the same statements, the charge's outbox insert
# turned into a select of no message, so the two differ by the message's row and nothing else).
# Before any measurement each binary is checked on both stores (a throwaway PostgreSQL cluster and
# a SQLite file): one POST /orders must answer 201 and leave one order, with no outbox message for
# A and one for B; a baseline that still charged, or a "with" that did not, stops the run. Then
# bench/ab.sh measures new orders of A and B in alternating rounds on both stores (its ab.md is the
# result; B/A is "with / without payments").
#
# Knobs: SERVER (B prebuilt), BASELINE (A prebuilt: no builds at all), QUICK (0),
# ROUNDS (5; 2 with QUICK=1), STORES ("postgres sqlite"), NICE, OUT (bench/results/payments-<UTC
# stamp>/), PGPORT (55489, the check's cluster), PORT (38190, the check's server); ab.sh's own knobs
# (DUR, WARM, CONNS, QUIET_MAX) pass through. Builds go to CARGO_TARGET_DIR, and end with the
# normal build there.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}
QUICK=${QUICK:-0}
STORES=${STORES:-"postgres sqlite"}
OUT=${OUT:-$BENCH/results/payments-$(date -u +%Y%m%dT%H%M%SZ)}
PGPORT=${PGPORT:-55489}
PORT=${PORT:-38190}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)

W=$(mktemp -d /tmp/idemkey-payments.XXXXXX); chmod 1777 "$W"   # the postgres OS user writes its socket here
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"
trap own_cleanup EXIT
trap 'exit 130' INT TERM
refuse_busy_ports "$PGPORT" "$PORT"
command -v sqlite3 >/dev/null || { apt-get update -qq; apt-get install -y -qq sqlite3; }

# ---- the two binaries -----------------------------------------------------------------------------
# Both are measured as copies in OUT: the baseline's build overwrites the target dir's binary (the
# same crate, another feature), and the build after it puts the normal one back for whoever uses it.
if [ -n "${SERVER:-}" ]; then cp "$SERVER" "$OUT/idemkey-server"; fi
if [ -z "${BASELINE:-}" ]; then
  log "build the baseline (--features without-payments)"
  (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server --features without-payments)
  cp "$CARGO_TARGET_DIR/release/idemkey-server" "$OUT/idemkey-server-without-payments"
  BASELINE=$OUT/idemkey-server-without-payments
  log "build the server as it is"
  (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server)
fi
if [ -z "${SERVER:-}" ]; then
  (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server)
  cp "$CARGO_TARGET_DIR/release/idemkey-server" "$OUT/idemkey-server"
fi
SERVER=$OUT/idemkey-server
cmp -s "$BASELINE" "$SERVER" && { echo "the baseline and the server are the same file" >&2; exit 1; }

# ---- the check: one order each, its message only with payments ----------------------------------
log "check both binaries on {$STORES}: one order each, a charge only with payments"
if [[ " $STORES " == *" postgres "* ]]; then start_own_cluster "$OUT/logs/check-pg.log"; fi
CHECK=$OUT/check.tsv
printf 'binary\tstore\tstatus\torders\toutbox\texpected_outbox\n' >"$CHECK"
for side in without with; do
  bin=$BASELINE; want=0
  [ "$side" = with ] && { bin=$SERVER; want=1; }
  for store in $STORES; do
    if [ "$store" = postgres ]; then
      PSQL postgres -c "CREATE DATABASE check_$side"
      url="postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/check_$side"
      count() { PSQL "check_$side" -tAc "SELECT count(*) FROM $1"; }
    else
      url=sqlite://$W/check-$side.sqlite
      count() { sqlite3 -cmd '.timeout 5000' "$W/check-$side.sqlite" "SELECT count(*) FROM $1"; }
    fi
    "$bin" migrate --database-url "$url" >>"$OUT/logs/check-$side.log" 2>&1
    tok=$("$bin" account create bench --database-url "$url" 2>>"$OUT/logs/check-$side.log" | tail -1)
    HEALTH_PATH=healthz start_proc "check-$side" "$PORT" "$bin" serve --database-url "$url" --bind "127.0.0.1:$PORT"
    status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/orders" -H 'Content-Type: application/json' \
      -H "Authorization: Bearer $tok" -H "Idempotency-Key: \"$(cat /proc/sys/kernel/random/uuid)\"" \
      --data '{"sku":"LIBRO-TS","quantity":2}')
    stop_proc "check-$side"
    cat "$W/srv-check-$side.log" >>"$OUT/logs/check-$side.log"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$side" "$store" "$status" "$(count orders)" "$(count outbox)" "$want" | tee -a "$CHECK" >&2
  done
done
stop_own_cluster
"$PY" - "$CHECK" <<'PYEOF'
import csv, sys
bad = [r for r in csv.DictReader(open(sys.argv[1]), delimiter='\t')
       if (r['status'], r['orders'], r['outbox']) != ('201', '1', r['expected_outbox'])]
for r in bad:
    print(f"check failed: {r['binary']} payments on {r['store']}: HTTP {r['status']}, "
          f"{r['orders']} orders, {r['outbox']} outbox messages (expected 201, 1, {r['expected_outbox']})", file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF

# ---- the A/B ------------------------------------------------------------------------------------------
ROUNDS=${ROUNDS:-$([ "$QUICK" = 1 ] && echo 2 || echo 5)}
log "A = without payments ($BASELINE), B = with ($SERVER): $ROUNDS rounds, new orders, {$STORES}"
unset PGPORT PORT
A=$BASELINE B=$SERVER KINDS=new STORES=$STORES ROUNDS=$ROUNDS QUICK=$QUICK OUT=$OUT/ab \
  "$BENCH/ab.sh" >"$OUT/logs/ab.log" 2>&1 || { tail -20 "$OUT/logs/ab.log" >&2; exit 1; }
msgs() { awk -F'\t' -v b="$1" 'NR > 1 && $1 == b { n += $5 } END { print n + 0 }' "$CHECK"; }
{
  echo "# Orders with and without payments (bench/payments.sh)"
  echo
  echo "A is this tree built with \`--features without-payments\` (the charge's outbox insert turned into a"
  echo "select of no message), B the same tree as it is: B/A is new orders with payments / without."
  echo "Checked first on {$STORES}: one order per binary and store, with $(msgs with) outbox message(s) in all with"
  echo "payments and $(msgs without) without (check.tsv)."
  echo
  sed '1,2d' "$OUT/ab/ab.md"
} >"$OUT/payments.md"
log "done: $OUT/payments.md"
cat "$OUT/payments.md"

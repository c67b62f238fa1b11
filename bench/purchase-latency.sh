#!/usr/bin/env bash
# bench/purchase-latency.sh: a purchase's end-to-end latency against its floor, one client.
#
#   bench/purchase-latency.sh                  # builds the server (release, provider-sim), N=300, 3 rounds
#   QUICK=1 bench/purchase-latency.sh          # N=30, to try it
#   SERVER=path/to/idemkey-server bench/purchase-latency.sh   # a prebuilt binary (with provider-sim)
#
# Three processes of one binary, as scripts/run.sh starts the demo: the payment provider simulator
# (`idemkey-server provider`, SQLite, no added latency, no faults), the order service with the
# provider's URL and its in-process outbox worker (the demo's; `serve`'s default of one), and a
# second order service for the floor, on its own database, with no provider and no worker.
#
# The measured cell, one client (python3's http.client, a kept-alive connection per server),
# sequential, a fresh key each:
#   purchase: POST /purchases {"sku":"LIBRO-TS","quantity":1}, timed until the purchase is final as
#     a client sees it: the first answer when it is final (the server's --purchase-wait, 2 s by
#     default, is long enough for the three steps), otherwise GET /purchases/{id} every POLL_MS
#     until it holds the final answer. Completed = a final 201 with state "done".
#   floor: "an order plus a charge plus a confirmation sent directly": POST /orders (same sku and
#     quantity) to the floor's server, whose charge is NOT delivered (no provider, no worker:
#     delivering it too would charge twice and add background work the floor does not define;
#     the order's own statement, outbox row included, is what is timed), then POST /charges and
#     POST /confirmations straight to the simulator's HTTP API, each under its own key, with the
#     order's amount and currency and a confirmation text like the purchase's.
# Each sequence is timed with time.perf_counter_ns from its first send to its last answer. Rounds
# alternate the two cells (the first cell of a round alternates too) so drift cancels; a few
# unrecorded sequences of each warm the connections first, and each block starts with one more on
# fresh connections. At the end the simulator's charges and
# confirmations are counted: every sequence must have made one of each.
#
# Output (OUT): purchase-latency.md (p50, p90, p99, max of each cell, purchase/floor for p50 and
# p99; the goal is both within 1.5x; then where the time goes, medians of each leg read from the
# three processes' request logs), samples.tsv (every sample: round, cell, index, ms, outcome,
# first answer's status, polls), logs/. Exits 1 if a purchase did not complete, a floor step did
# not answer 201, or the simulator's counts differ.
#
# Knobs: SERVER (prebuilt idemkey-server with provider-sim; unset: built here), QUICK (0), N (300;
# 30 with QUICK=1), ROUNDS (3), WARMUP (5 per cell), STORE (sqlite | postgres: a throwaway cluster,
# lib.sh's start_own_cluster), PURCHASE_WAIT (unset: the server's default; 0s with POLL_MS=1 sees a
# purchase's end without the server's growing waits), POLL_MS (10), QUIET_MAX (120 s; 6 with QUICK=1),
# PORT (38200; +1 the floor's server, +2 the simulator), PGPORT (55509), NICE, KEEP, OUT
# (bench/results/purchase-latency-<UTC stamp>/). Builds go to CARGO_TARGET_DIR.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}
QUICK=${QUICK:-0}
N=${N:-$([ "$QUICK" = 1 ] && echo 30 || echo 300)}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-5}
STORE=${STORE:-sqlite}
POLL_MS=${POLL_MS:-10}
PORT=${PORT:-38200}
PGPORT=${PGPORT:-55509}
OUT=${OUT:-$BENCH/results/purchase-latency-$(date -u +%Y%m%dT%H%M%SZ)}
case $STORE in sqlite | postgres) ;; *) echo "STORE must be sqlite or postgres, not $STORE" >&2; exit 2 ;; esac
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)

W=$(mktemp -d /tmp/idemkey-purchase-latency.XXXXXX); chmod 1777 "$W"   # the postgres OS user writes its socket here
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"
trap own_cleanup EXIT
trap 'exit 130' INT TERM
[ "$QUICK" = 1 ] && QUIET_MAX=${QUIET_MAX:-6}
FLOOR_PORT=$((PORT + 1)); SIM_PORT=$((PORT + 2))
refuse_busy_ports "$PORT" "$FLOOR_PORT" "$SIM_PORT"
[ "$STORE" = postgres ] && refuse_busy_ports "$PGPORT"

if [ -z "${SERVER:-}" ]; then
  log "build idemkey-server (release, --features provider-sim)"
  (cd "$ROOT" && cargo build -q --release -p idemkey-server --bin idemkey-server --features provider-sim)
  SERVER=$CARGO_TARGET_DIR/release/idemkey-server
fi
BIN=$SERVER

# ---- the stores, the accounts ---------------------------------------------------------------------
if [ "$STORE" = postgres ]; then
  start_own_cluster "$OUT/logs/pg.log"
  PSQL postgres -c "CREATE DATABASE purchase" -c "CREATE DATABASE floor"
  db_url() { echo "postgresql://postgres:$PGPASS@127.0.0.1:$PGPORT/$1"; }
else
  db_url() { echo "sqlite://$W/$1.sqlite"; }
fi
for side in purchase floor; do
  "$BIN" migrate --database-url "$(db_url "$side")" >>"$OUT/logs/setup.log" 2>&1
  "$BIN" account create "bench-$side" --database-url "$(db_url "$side")" 2>>"$OUT/logs/setup.log" | tail -1 >"$W/token-$side"
done

# ---- the three processes ------------------------------------------------------------------------------
# The simulator's secret: made up here, passed in the environment (never on a command line).
SECRET=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
export IDEMKEY_PROVIDER_TOKENS=$SECRET IDEMKEY_PAYMENTS_TOKEN=$SECRET
SIM_URL=http://127.0.0.1:$SIM_PORT
log "simulator on $SIM_URL (no latency, no faults), servers on :$PORT (purchases) and :$FLOOR_PORT (floor), $STORE"
start_proc provider "$SIM_PORT" "$BIN" provider --bind "127.0.0.1:$SIM_PORT" --latency-ms 0 --fail-rate 0 --lose-rate 0 \
  --database-url "sqlite://$W/provider.sqlite"
wait_args=()
[ -n "${PURCHASE_WAIT:-}" ] && wait_args=(--purchase-wait "$PURCHASE_WAIT")
HEALTH_PATH=healthz start_proc purchase "$PORT" "$BIN" serve --database-url "$(db_url purchase)" \
  --bind "127.0.0.1:$PORT" --payments-url "$SIM_URL" "${wait_args[@]}"
HEALTH_PATH=healthz start_proc floor "$FLOOR_PORT" env -u IDEMKEY_PAYMENTS_TOKEN "$BIN" serve \
  --database-url "$(db_url floor)" --bind "127.0.0.1:$FLOOR_PORT" --outbox-workers 0

# ---- the client ------------------------------------------------------------------------------------------
# One wait for a quiet box (lib.sh's wait_quiet, QUIET_MAX s at most) before the rounds: a cell run on
# a busy box says so in the report.
QUIET=quiet; wait_quiet || QUIET=NOISY
[ "${QUIET_MAX:-}" = 0 ] && QUIET="not checked (QUIET_MAX=0)"
log "$ROUNDS rounds of $N purchases and $N floor sequences (warm-up $WARMUP each), box $QUIET at the start"
SAMPLES=$OUT/samples.tsv
"$PY" - "$PORT" "$FLOOR_PORT" "$SIM_PORT" "$(cat "$W/token-purchase")" "$(cat "$W/token-floor")" "$SECRET" \
  "$N" "$ROUNDS" "$WARMUP" "$POLL_MS" "$SAMPLES" <<'PYEOF'
import http.client, json, sys, time, uuid
(port, floor_port, sim_port, tok_p, tok_f, secret, n, rounds, warmup, poll_ms, samples) = sys.argv[1:]
n, rounds, warmup, poll_s = int(n), int(rounds), int(warmup), int(poll_ms) / 1000
conns = {k: http.client.HTTPConnection('127.0.0.1', int(p), timeout=30)
         for k, p in (('purchase', port), ('floor', floor_port), ('sim', sim_port))}
BODY = json.dumps({'sku': 'LIBRO-TS', 'quantity': 1})

def call(conn, method, path, token, body=None, key=None):
    headers = {'Authorization': f'Bearer {token}'}
    if body is not None:
        headers['Content-Type'] = 'application/json'
    if key is not None:
        headers['Idempotency-Key'] = f'"{key}"'
    c = conns[conn]
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    return r.status, r.getheader('Location'), data

def purchase():
    """(ns, outcome, first status, polls): POST, then polls until final."""
    t0 = time.perf_counter_ns()
    status, location, data = call('purchase', 'POST', '/purchases', tok_p, BODY, uuid.uuid4())
    first, polls = status, 0
    if status == 202:
        path = location or '/purchases/' + json.loads(data)['id']
        while True:
            time.sleep(poll_s)
            polls += 1
            s, _, d = call('purchase', 'GET', path, tok_p)
            doc = json.loads(d)
            if s != 200 or 'result_status' in doc:
                status, data = (doc.get('result_status', s), json.dumps(doc.get('result')).encode())
                break
    t1 = time.perf_counter_ns()
    try:
        done = status == 201 and json.loads(data).get('state') == 'done'
    except ValueError:
        done = False
    return t1 - t0, 'completed' if done else f'failed:{status}', first, polls

def floor():
    """(ns, outcome, order status, 0): the order, then the charge and the confirmation sent directly."""
    t0 = time.perf_counter_ns()
    s1, _, data = call('floor', 'POST', '/orders', tok_f, BODY, uuid.uuid4())
    order = json.loads(data) if s1 == 201 else {}
    oid = order.get('id', str(uuid.uuid4()))
    charge = json.dumps({'order_id': oid, 'amount_cents': order.get('amount_cents', 2990),
                         'currency': order.get('currency', 'EUR')})
    s2, _, _ = call('sim', 'POST', '/charges', secret, charge, uuid.uuid4())
    confirmation = json.dumps({'order_id': oid, 'recipient': 'account-floor@example.invalid',
                               'text': f'Purchase {oid}: 1 x LIBRO-TS is paid.'})
    s3, _, _ = call('sim', 'POST', '/confirmations', secret, confirmation, uuid.uuid4())
    t1 = time.perf_counter_ns()
    ok = (s1, s2, s3) == (201, 201, 201)
    return t1 - t0, 'ok' if ok else f'failed:{s1}/{s2}/{s3}', s1, 0

cells = {'purchase': purchase, 'floor': floor}
for _ in range(warmup):
    for f in cells.values():
        f()
with open(samples, 'w') as out:
    out.write('round\tcell\ti\tms\toutcome\tfirst_status\tpolls\n')
    for r in range(1, rounds + 1):
        order = ('purchase', 'floor') if r % 2 else ('floor', 'purchase')
        for cell in order:
            # A server closes a connection idle for seconds (the other cell's block): reconnect and
            # send one unrecorded sequence of this cell first, so no sample pays a connect.
            for c in conns.values():
                c.close()
            cells[cell]()
            for i in range(n):
                ns, outcome, first, polls = cells[cell]()
                out.write(f'{r}\t{cell}\t{i}\t{ns / 1e6:.3f}\t{outcome}\t{first}\t{polls}\n')
            out.flush()
            print(f'round {r} {cell}: {n} done', file=sys.stderr)
PYEOF

# ---- the simulator's counts, the report -----------------------------------------------------------------
count_effect() {
  curl -s -H "Authorization: Bearer $SECRET" "$SIM_URL/$1" | "$PY" -c "import json,sys; print(len(json.load(sys.stdin)['$1']))"
}
CHARGES=$(count_effect charges); CONFIRMATIONS=$(count_effect confirmations)
EXPECTED=$(( 2 * (N * ROUNDS + WARMUP + ROUNDS) ))   # each cell's block starts with one unrecorded sequence
log "simulator: $CHARGES charges, $CONFIRMATIONS confirmations (expected $EXPECTED each)"
for p in provider purchase floor; do cp "$W/srv-$p.log" "$OUT/logs/$p.log"; done
"$PY" - "$SAMPLES" "$OUT/purchase-latency.md" "$STORE" "$N" "$ROUNDS" "${PURCHASE_WAIT:-server default}" "$POLL_MS" \
  "$CHARGES" "$CONFIRMATIONS" "$EXPECTED" "$QUIET" "$(uptime | sed 's/.*load average: //')" "$OUT/logs" <<'PYEOF'
import csv, math, re, statistics, sys
from datetime import datetime
samples, md, store, n, rounds, wait, poll_ms, charges, confirmations, expected, quiet, load, logs = sys.argv[1:]
rows = list(csv.DictReader(open(samples), delimiter='\t'))
def pct(xs, p):  # nearest rank
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]
stats, bad = {}, []
for cell, good in (('purchase', 'completed'), ('floor', 'ok')):
    ms = [float(r['ms']) for r in rows if r['cell'] == cell]
    stats[cell] = {p: pct(ms, p) for p in (50, 90, 99, 100)}
    stats[cell]['n'] = len(ms)
    stats[cell]['good'] = sum(r['outcome'] == good for r in rows if r['cell'] == cell)
    if stats[cell]['good'] != len(ms):
        bad.append(f'{cell}: {len(ms) - stats[cell]["good"]} of {len(ms)} not {good}')
p = [r for r in rows if r['cell'] == 'purchase']
first_final = sum(r['first_status'] != '202' for r in p)
polls = sum(int(r['polls']) for r in p)
if int(charges) != int(expected) or int(confirmations) != int(expected):
    bad.append(f'simulator: {charges} charges, {confirmations} confirmations, expected {expected} each')
# Where the time goes: the request logs' lines (end time, latency_ms), the simulator's calls matched
# to the POST /purchases they fall inside, and to the floor's order they follow.
def events(path, routes):
    out = []
    try:
        lines = open(path)
    except OSError:
        return out
    for line in lines:
        m = re.match(r'(\S+)Z .*method=\w+ route="([^"]+)" status=\d+ latency_ms=([0-9.]+)', line)
        if m and m.group(2) in routes:
            end = datetime.fromisoformat(m.group(1)).timestamp() * 1000
            out.append((end - float(m.group(3)), end, m.group(2)))
    return sorted(out)
calls = events(f'{logs}/provider.log', {'/charges', '/confirmations'})
parts = {k: [] for k in ('first transaction, worker woken, claim: until the charge arrives', 'charge at the simulator',
                         'charge recorded, next claim: until the confirmation arrives', 'confirmation at the simulator',
                         'confirmation recorded, the end seen: until the answer', 'POST /purchases in all')}
fl = {k: [] for k in ('POST /orders at the server', 'until the charge arrives', 'charge at the simulator',
                      'until the confirmation arrives', 'confirmation at the simulator', '')}
for s0, e0, _ in events(f'{logs}/purchase.log', {'/purchases'}):
    c = [x for x in calls if s0 <= x[0] <= e0]
    if len(c) == 2 and c[0][2] == '/charges':
        (cs, ce, _), (fs, fe, _) = c
        for k, x in zip(parts, (cs - s0, ce - cs, fs - ce, fe - fs, e0 - fe, e0 - s0)):
            parts[k].append(x)
for s0, e0, _ in events(f'{logs}/floor.log', {'/orders'}):
    c = [x for x in calls if e0 <= x[0] <= e0 + 1000][:2]
    if len(c) == 2 and c[0][2] == '/charges':
        (cs, ce, _), (fs, fe, _) = c
        for k, x in zip(fl, (e0 - s0, cs - e0, ce - cs, fs - ce, fe - fs, fe - s0)):
            fl[k].append(x)
if fl['']:
    fl['order sent to confirmation answered'] = fl.pop('')
if not parts['POST /purchases in all'] or not fl.get('order sent to confirmation answered'):
    parts = {}
r50 = stats['purchase'][50] / stats['floor'][50]
r99 = stats['purchase'][99] / stats['floor'][99]
verdict = lambda r: 'met' if r <= 1.5 else 'NOT met'
with open(md, 'w') as f:
    f.write('# A purchase end to end against its floor (bench/purchase-latency.sh)\n\n')
    f.write(f'One client, sequential, a fresh key each; {store}; {rounds} alternating rounds of {n} of each; '
            f'the simulator with no latency and no faults; --purchase-wait {wait}, polls every {poll_ms} ms. '
            'Purchase: POST /purchases until final as the client sees it. Floor: POST /orders (its charge not '
            'delivered), then POST /charges and POST /confirmations sent directly to the simulator. '
            f'Box {quiet} before the rounds (wait_quiet); load average after them {load}.\n\n')
    f.write('| cell | samples | final | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|---:|\n')
    for cell, good in (('purchase', 'completed'), ('floor', 'ok')):
        s = stats[cell]
        f.write(f'| {cell} | {s["n"]} | {s["good"]} {good} | {s[50]:.2f} | {s[90]:.2f} | {s[99]:.2f} | {s[100]:.2f} |\n')
    f.write(f'\npurchase/floor: p50 **{r50:.2f}x** (goal ≤ 1.5x: {verdict(r50)}), '
            f'p99 **{r99:.2f}x** (goal ≤ 1.5x: {verdict(r99)}).\n\n')
    f.write(f'Purchases final in their first answer: {first_final} of {len(p)} ({polls} polls in all). '
            f'Simulator: {charges} charges and {confirmations} confirmations (expected {expected} each, warm-up '
            'included). Every sample: samples.tsv.\n')
    if parts:
        f.write('\nWhere the time goes, from the three processes\' request logs (each request\'s end and '
                '`latency_ms`; medians over the sequences whose calls were matched, warm-up included; a '
                'purchase\'s calls are the two inside its POST, which this reads only when the POST answered '
                'final):\n\n| purchase | p50 ms | floor | p50 ms |\n|---|---:|---|---:|\n')
        for (a, xs), (b, ys) in zip(parts.items(), fl.items()):
            f.write(f'| {a} | {statistics.median(xs):.2f} | {b} | {statistics.median(ys):.2f} |\n')
    if bad:
        f.write('\nFAILED: ' + '; '.join(bad) + '\n')
for b in bad:
    print('purchase-latency: FAILED: ' + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
log "done: $OUT/purchase-latency.md"
cat "$OUT/purchase-latency.md"

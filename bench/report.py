#!/usr/bin/env python3
"""bench/report.py OUT_DIR: the TSVs of one bench/run.sh run -> markdown on stdout + OUT_DIR/chart.png.

Reads http.tsv, bursts.tsv, pgbench.tsv, roundtrips.txt, criterion.txt, wasm.tsv, machine.txt,
settings.txt, unavailable.tsv (any may be missing). Absolute numbers are this machine's; ratios are
what compares.
"""
import csv
import os
import re
import sys

OUT = sys.argv[1]
NODE, IDK, SQL = 'node', 'idemkey-pg', 'idemkey-sqlite'
LABEL = {NODE: 'Node lab (article, pool 5)', IDK: 'idemkey-server, PostgreSQL',
         SQL: 'idemkey-server, SQLite'}


def read_tsv(name):
    path = os.path.join(OUT, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f, delimiter='\t'))


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, nd=0):
    if v is None:
        return 'NA'
    return f'{v:,.{nd}f}'


def ratio(a, b, nd=2):
    if a is None or b in (None, 0):
        return 'NA'
    return f'{a / b:.{nd}f}×'


def verdict(ok):
    return 'NA' if ok is None else ('yes' if ok else '**no**')


http = read_tsv('http.tsv')
http_lg = [r for r in read_tsv('http-loadgen.tsv') if r['variant'] == 'default']
pgb = read_tsv('pgbench.tsv')
bursts = read_tsv('bursts.tsv')
wasm = read_tsv('wasm.tsv')
main = [r for r in http if r['variant'] == 'default']
extras = [r for r in http if r['variant'] not in ('default', 'nocache')]
nocache = [r for r in http if r['variant'] == 'nocache']


def cell(system, procs, kind, conns, rows=main):
    for r in rows:
        if (r['system'], r['procs'], r['kind'], r['conns']) == (system, str(procs), kind, str(conns)):
            return r
    return None


def ceiling(script, clients, variant='default'):
    for r in pgb:
        if (r['variant'], r['script'], r['clients']) == (variant, script, str(clients)):
            return num(r['tps'])
    return None


def p(*lines):
    for ln in lines:
        print(ln)


def text(name):
    path = os.path.join(OUT, name)
    return open(path).read().strip() if os.path.exists(path) else ''


p('# idemkey benchmark run', '',
  f'Results folder: `{os.path.relpath(OUT)}`. All absolute numbers are **this machine\'s** (2 shared '
  'cores: wrk, the server and PostgreSQL compete for them); ratios from this one run are what compares.', '')
p('## Machine and cluster', '', '```', text('machine.txt'), '', text('settings.txt'), '```', '')

# ---- HTTP ----------------------------------------------------------------------------------------
p('## HTTP (wrk -t2, closed loop)', '',
  '| system | procs | workload | conns | req/s | p50 ms | p99 ms | server CPU-s / 1k req | peak RSS MB (sum) '
  '| non-201 | orders rows | WAL flushes/s | box busy % | CPU-s server / pg / wrk | foreign CPU-s | quiet |',
  '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|')
for r in main:
    dur = num(r['dur_s']) or 1
    non201 = sum(int(num(r[k]) or 0) for k in ('s2xx_other', 's409', 's422', 's503', 'sother', 'sock_err'))
    wal = num(r['wal_syncs'])
    p(f"| {LABEL.get(r['system'], r['system'])} | {r['procs']} | {r['kind']} | {r['conns']} | "
      f"{fmt(num(r['rps']))} | {fmt(num(r['p50_ms']), 1)} | {fmt(num(r['p99_ms']), 1)} | "
      f"{fmt(num(r['server_cpu_s_per_1k']), 3)} | {fmt(num(r['rss_mb_sum']), 1)} | {non201} | {r['orders_rows']} | "
      f"{fmt(wal / dur if wal is not None else None)} | {r['busy_pct']} | "
      f"{r['server_cpu_s']} / {r['pg_cpu_s']} / {r['load_cpu_s']} | {r['foreign_cpu_s']} | {r['quiet']} |")
unavail = text('unavailable.tsv')
if unavail:
    p('', 'Not measured: ' + '; '.join(
        f'{LABEL.get(ln.split(chr(9))[0], ln.split(chr(9))[0])} ({ln.split(chr(9))[-1]})'
        for ln in unavail.splitlines()))
p('')

# ---- two generators -------------------------------------------------------------------------------
if http_lg:
    p('## Two generators side by side', '',
      'Every cell above measured again right after, by `bench/loadgen` (each request timed from its own '
      'send to its own answer, every latency kept: exact percentiles, nothing added). wrk corrects its '
      'histogram for coordinated omission: for every answer slower than the mean interval it inserts '
      'synthetic samples below it, so one stalled connection becomes hundreds of samples. A closed loop '
      'of N connections must show a mean latency of N / rate (Little\'s law): the generator whose mean '
      'does not is the one whose histogram is not what its requests saw.', '',
      '| system | procs | workload | conns | req/s wrk / loadgen | p50 ms wrk / loadgen | p99 ms wrk / loadgen '
      '| p99.9 ms wrk / loadgen | max ms wrk / loadgen | mean ms wrk / loadgen / Little | quiet |',
      '|---|---:|---|---:|---|---|---|---|---|---|---|')
    for r in main:
        g = cell(r['system'], r['procs'], r['kind'], r['conns'], http_lg)
        if not g:
            continue

        def pair(k, nd=1):
            return f"{fmt(num(r.get(k)), nd)} / {fmt(num(g.get(k)), nd)}"
        p(f"| {LABEL.get(r['system'], r['system'])} | {r['procs']} | {r['kind']} | {r['conns']} | "
          f"{pair('rps', 0)} | {pair('p50_ms', 2)} | {pair('p99_ms')} | {pair('p999_ms')} | {pair('max_ms', 0)} | "
          f"{fmt(num(r.get('mean_ms')), 2)} / {fmt(num(g.get('mean_ms')), 2)} / {fmt(num(g.get('little_ms')), 2)} | "
          f"{r['quiet']}, {g['quiet']} |")
    p('', '| target (loadgen) | measured | met? |', '|---|---|---|')
    for sysname in (IDK, NODE):
        for kind in ('new', 'replay'):
            for c in sorted({r['conns'] for r in http_lg}, key=int):
                two, one = cell(sysname, 2, kind, c, http_lg), cell(sysname, 1, kind, c, http_lg)
                if two and one and num(one['p99_ms']):
                    v = num(two['p99_ms']) / num(one['p99_ms'])
                    p(f"| {LABEL[sysname]}: 2-process p99 ≤ 3× the 1-process p99 ({kind}, c{c}) | "
                      f"{fmt(num(two['p99_ms']), 2)} ms vs {fmt(num(one['p99_ms']), 2)} ms = {v:.2f}× | "
                      f"{verdict(v <= 3)} |")
    p('')

# ---- ratios --------------------------------------------------------------------------------------
p('## Ratios', '',
  'idemkey / Node lab at the same processes and connections (req/s: higher is better; p99, CPU and RSS: '
  'lower is better). Ceiling = pgbench on the same cluster and schema at the same client count '
  '(new keys: the server\'s own 1-round-trip statement `new-1rt`; replays: the replay SELECT alone).', '',
  '| system | procs | workload | conns | req/s vs Node | p99 vs Node | CPU/req vs Node | RSS vs Node | req/s vs ceiling |',
  '|---|---:|---|---:|---:|---:|---:|---:|---:|')
for sysname in (IDK, SQL):
    for r in [x for x in main if x['system'] == sysname]:
        n = cell(NODE, r['procs'], r['kind'], r['conns']) or cell(NODE, 1, r['kind'], r['conns'])
        ceil = ceiling('new-1rt' if r['kind'] == 'new' else 'replay-select', r['conns'])
        g = (lambda k: num(n[k])) if n else (lambda k: None)
        p(f"| {LABEL[sysname]} | {r['procs']} | {r['kind']} | {r['conns']} | {ratio(num(r['rps']), g('rps'))} | "
          f"{ratio(num(r['p99_ms']), g('p99_ms'))} | {ratio(num(r['server_cpu_s_per_1k']), g('server_cpu_s_per_1k'))} | "
          f"{ratio(num(r['rss_mb_sum']), g('rss_mb_sum'), 3)} | {ratio(num(r['rps']), ceil)} |")
p('')

# ---- targets -------------------------------------------------------------------------------------
p('## Targets against the ceiling and the Node lab (this run)', '', '| target | measured | met? |', '|---|---|---|')


def best(kind, conns):
    rs = [x for x in main if x['system'] == IDK and x['kind'] == kind and x['conns'] == str(conns)]
    return max(rs, key=lambda x: num(x['rps']) or 0) if rs else None


for kind, script, share, conns in (('new', 'new-1rt', 0.70, 16), ('replay', 'replay-select', 0.50, 16)):
    b, ceil = best(kind, conns), ceiling(script, conns)
    if b and ceil:
        v = num(b['rps']) / ceil
        p(f"| {kind} keys ≥ {share:.0%} of pgbench `{script}` (c{conns}) | {fmt(num(b['rps']))} req/s "
          f"({b['procs']} proc) / {fmt(ceil)} TPS = {v:.0%} | {verdict(v >= share)} |")
    else:
        p(f'| {kind} ≥ {share:.0%} of `{script}` | NA | NA |')
for kind in ('new', 'replay'):
    for procs in (1, 2):
        a, n = cell(IDK, procs, kind, 64), cell(NODE, procs, kind, 64)
        if a and n:
            v = num(a['p99_ms']) / num(n['p99_ms'])
            p(f"| p99 at c64 ≤ Node p99 / 3 ({kind}, {procs} proc) | {fmt(num(a['p99_ms']), 1)} ms vs "
              f"{fmt(num(n['p99_ms']), 1)} ms = 1/{1 / v:.1f} | {verdict(v <= 1 / 3)} |")
for procs in (1, 2):
    a = [num(x['rss_mb_sum']) for x in main if x['system'] == IDK and x['procs'] == str(procs)]
    n = [num(x['rss_mb_sum']) for x in main if x['system'] == NODE and x['procs'] == str(procs)]
    if a and n and all(a) and all(n):
        v = max(a) / max(n)
        p(f"| peak RSS ≤ Node's / 3 ({procs} proc, max over cells) | {max(a):.1f} MB vs {max(n):.1f} MB = 1/{1 / v:.1f} "
          f"| {verdict(v <= 1 / 3)} |")
p('')

# ---- replay-cache and per-process new-key targets ------------------------------------------------


def share_row(what, row, ceil, goal, pct):
    """One target row: `row`'s req/s as a share of the pgbench ceiling `ceil` against `goal`."""
    if row and ceil:
        v = num(row['rps']) / ceil
        shown = f'{v:.0%}' if pct else f'{v:.2f}×'
        p(f"| {what} | {fmt(num(row['rps']))} req/s / {fmt(ceil)} TPS = {shown} | {verdict(v >= goal)} |")


p('## Targets for the replay cache and new keys per process (this run)', '', '| target | measured | met? |', '|---|---|---|')
sel, new1 = ceiling('replay-select', 16), ceiling('new-1rt', 16)
for procs in (1, 2):
    share_row(f'replays with the cache ≥ 1.0× pgbench `replay-select` (c16, {procs} proc)',
              cell(IDK, procs, 'replay', 16), sel, 1.0, False)
off = [r for r in nocache if r['system'] == IDK]
share_row('replays with the cache off ≥ 50 % of `replay-select` (c16, 1 proc)', off[0] if off else None,
          sel, 0.5, True)
for procs in (1, 2):
    share_row(f'new keys ≥ 70 % of `new-1rt` (c16, {procs} proc)', cell(IDK, procs, 'new', 16), new1, 0.70, True)
p('')

# ---- extras --------------------------------------------------------------------------------------
if extras:
    base = cell(IDK, 1, 'new', 64)
    p('## Extras: idemkey-server variants (1 process, new keys, c64)', '',
      '| variant | req/s | vs default | p99 ms | server CPU-s / 1k req | WAL flushes/s | commits per flush | box busy % | quiet |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---|')
    for r in ([base] if base else []) + extras:
        dur = num(r['dur_s']) or 1
        w, c = num(r['wal_syncs']), num(r['commits'])
        p(f"| {r['variant']} | {fmt(num(r['rps']))} | {ratio(num(r['rps']), num(base['rps']) if base else None)} | "
          f"{fmt(num(r['p99_ms']), 1)} | {fmt(num(r['server_cpu_s_per_1k']), 3)} | {fmt(w / dur if w else None)} | "
          f"{fmt(c / w if w else None, 1)} | {r['busy_pct']} | {r['quiet']} |")
    p('')

# ---- replay cache off ----------------------------------------------------------------------------
if nocache:
    p('## Replay cache on and off (1 process, one replayed key, c16)', '',
      '`nocache`: the same server with `IDEMKEY_REPLAY_CACHE_MIB=0`, every replay read from the '
      'database in its one round trip.', '',
      '| system | req/s cache on | req/s cache off | on / off | p99 ms on | p99 ms off | quiet |',
      '|---|---:|---:|---:|---:|---:|---|')
    for r in nocache:
        on = cell(r['system'], 1, 'replay', 16)
        p(f"| {r['system']} | {fmt(num(on['rps'])) if on else 'NA'} | {fmt(num(r['rps']))} | "
          f"{ratio(num(on['rps']) if on else None, num(r['rps']))} | "
          f"{fmt(num(on['p99_ms']), 1) if on else 'NA'} | {fmt(num(r['p99_ms']), 1)} | {r['quiet']} |")
    p('')

# ---- pgbench -------------------------------------------------------------------------------------
if pgb:
    p('## pgbench on the same cluster and schema (-M prepared, -j 2, TCP)', '',
      '`new-txn`: BEGIN, claim (in_flight), insert order, complete record, COMMIT (5 round trips); '
      '`new-1rt`: the server\'s `create_order.sql` with a fresh key (1 round trip); `replay-select`: the '
      'server\'s `lookup.sql` by primary key; `replay-1rt`: `create_order.sql` on a completed key (what the '
      'server sends for a replay).', '',
      '| commit | script | round trips | clients | TPS | avg latency ms | failed | WAL flushes/s | commits per flush '
      '| box busy % | pg CPU-s | pgbench CPU-s | foreign CPU-s | quiet |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|')
    for r in pgb:
        dur = num(r['dur_s']) or 1
        w, c = num(r['wal_syncs']), num(r['commits'])
        p(f"| {r['variant']} | {r['script']} | {r['round_trips']} | {r['clients']} | {fmt(num(r['tps']))} | "
          f"{r['lat_avg_ms']} | {r['failed']} | {fmt(w / dur if w else None)} | {fmt(c / w if w and w >= 10 else None, 1)} | "
          f"{r['busy_pct']} | {r['pg_cpu_s']} | {r['load_cpu_s']} | {r['foreign_cpu_s']} | {r['quiet']} |")
    p('')

# ---- bursts --------------------------------------------------------------------------------------
if bursts:
    p('## Same-key bursts (N clients at once, one fresh key, alternating over the processes)', '',
      '| system | procs | run | n | statuses | distinct order ids | orders created | replayed | wall ms | p50 ms | p99 ms | exactly one order |',
      '|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|')
    for r in bursts:
        p(f"| {LABEL.get(r['system'], r['system'])} | {r['procs']} | {r['run']} | {r['n']} | `{r['counts']}` | "
          f"{r['distinct_ids']} | {r['orders_created']} | {r['replayed']} | {r['wall_ms']} | {r['p50_ms']} | "
          f"{r['p99_ms']} | {r['exactly_one']} |")
    p('')

rt = text('roundtrips.txt')
if rt:
    p('## SQL round trips per request (idemkey-server, log_min_duration_statement=0)', '', '```', rt, '```', '',
      'The article\'s Node lab (peer harness, log_statement=all): 7 round trips per new order, 6 per replay.', '')

# ---- micro ---------------------------------------------------------------------------------------
crit = text('criterion.txt')
if crit:
    rows, name = [], None
    for ln in crit.splitlines():
        m = re.match(r'^(\S.*?)\s+time:\s+\[(\S+ \S+) (\S+ \S+) (\S+ \S+)\]', ln)
        if m:
            rows.append((m.group(1).strip(), m.group(3)))
            continue
        m = re.match(r'^\s+time:\s+\[(\S+ \S+) (\S+ \S+) (\S+ \S+)\]', ln)
        if m and name:
            rows.append((name, m.group(2)))
            continue
        m2 = re.match(r'^(\S+)\s*$', ln)
        if m2 and not ln.startswith(('Benchmarking', 'Found', 'Gnuplot', 'Warning')):
            name = m2.group(1)
    if rows:
        p('## Core microbenchmarks (criterion, median estimate; this machine, shared cores)', '',
          '| benchmark | time |', '|---|---:|')
        for n_, t in rows:
            p(f'| {n_} | {t} |')
        p('')
if wasm:
    p('## Browser package size', '', '| file | raw bytes | gzip -9 bytes |', '|---|---:|---:|')
    for r in wasm:
        p(f"| {r['file']} | {fmt(num(r['raw_bytes']))} | {fmt(num(r['gzip9_bytes']))} |")
    p('')
else:
    p('## Browser package size', '', 'No `wasm/pkg*/` in this checkout at run time (build the package first).', '')

# ---- chart ---------------------------------------------------------------------------------------
try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
except ImportError:
    p('(matplotlib missing: no chart)')
    sys.exit(0)
groups = [(k, c) for k in ('new', 'replay') for c in ('16', '64')]
series = []
for sysname in (NODE, IDK, SQL):
    for procs in ('1', '2'):
        if any(r['system'] == sysname and r['procs'] == procs for r in main):
            series.append((sysname, procs))
if series:
    colors = {NODE: ['#d98c3f', '#a65e1a'], IDK: ['#4a7fc1', '#1f4e8c'], SQL: ['#5aa469', '#2e7040']}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    width = 0.8 / len(series)
    for ax, metric, title in ((axes[0], 'rps', 'Throughput (req/s, log scale, higher is better)'),
                              (axes[1], 'p99_ms', 'p99 latency (ms, log scale, lower is better)')):
        for i, (sysname, procs) in enumerate(series):
            vals = []
            for k, c in groups:
                r = cell(sysname, procs, k, c)
                vals.append(num(r[metric]) if r else 0)
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
            bars = ax.bar(xs, vals, width, label=f'{LABEL[sysname]}, {procs} proc',
                          color=colors[sysname][int(procs) - 1])
            for b, v in zip(bars, vals):
                if v:
                    ax.annotate(f'{v:,.0f}', (b.get_x() + b.get_width() / 2, v), ha='center', va='bottom',
                                fontsize=6, rotation=90, xytext=(0, 2), textcoords='offset points')
        if metric == 'rps':
            for gi, (k, c) in enumerate(groups):
                ceil = ceiling('new-1rt' if k == 'new' else 'replay-select', c)
                if ceil:
                    ax.hlines(ceil, gi - 0.45, gi + 0.45, colors='black', linestyles='dashed',
                              label='pgbench ceiling (same clients)' if gi == 0 else None)
        ax.set_yscale('log')
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 2.5)   # room for the value labels
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f'{k} key\nc{c}' if k == 'new' else f'replay\nc{c}' for k, c in groups])
        ax.set_title(title, fontsize=10)
        ax.grid(axis='y', alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc='lower center', ncol=3, frameon=False)
    fig.suptitle('idemkey vs the article\'s Node lab, same PostgreSQL 15 cluster (fsync on), wrk -t2; '
                 'this machine: 2 shared cores', fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(os.path.join(OUT, 'chart.png'), dpi=110)
    p('![throughput and p99 per system](chart.png)', '')

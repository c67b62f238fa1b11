#!/usr/bin/env python3
"""CPU accounting for one measured run on a shared box (after the peer harness's cpumon.py).

Usage: cpumon.py OUTFILE  (samples /proc every 0.5 s until SIGTERM, then writes one line)
Classes: server = PIDs in env MINE_PIDS (the HTTP servers); pg = our bench cluster (env
PG_POSTMASTER and its children; without it, every process of the postgres OS user); load = wrk and
pgbench; foreign = everything else (teammates' builds). Output, CPU-seconds per class:
  busy_pct=.. server_cpu_s=.. pg_cpu_s=.. load_cpu_s=.. foreign_cpu_s=.. steal_pct=..
"""
import os
import pwd
import signal
import sys
import time

HZ = os.sysconf('SC_CLK_TCK')
PG_UID = pwd.getpwnam(os.environ.get('PGUSER_OS', 'postgres')).pw_uid
POSTMASTER = int(os.environ.get('PG_POSTMASTER', '0') or 0)
MINE = {int(p) for p in os.environ.get('MINE_PIDS', '').split(',') if p.strip()}
LOAD = {'wrk', 'pgbench'}
SELF = os.getpid()


def cpu_total():
    with open('/proc/stat') as f:
        v = list(map(int, f.readline().split()[1:9]))
    return sum(v), v[3] + v[4], v[7]


def procs():
    d = {}
    for p in os.listdir('/proc'):
        if not p.isdigit():
            continue
        try:
            with open(f'/proc/{p}/stat') as f:
                s = f.read()
            rp = s.rfind(')')
            comm = s[s.find('(') + 1:rp]
            fl = s[rp + 2:].split()
            d[int(p)] = (int(fl[11]) + int(fl[12]), comm, os.stat(f'/proc/{p}').st_uid, int(fl[1]))
        except (OSError, ValueError, IndexError):
            pass
    return d


stop = False


def handler(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, handler)
signal.signal(signal.SIGINT, handler)
t0, i0, s0 = cpu_total()
prev = procs()
open(sys.argv[1] + '.ready', 'w').close()
acc = {'server': 0, 'pg': 0, 'load': 0, 'foreign': 0}
while not stop:
    time.sleep(0.5)
    cur = procs()
    for pid, (ticks, comm, uid, ppid) in cur.items():
        base = prev.get(pid)
        if pid == SELF or base is None:
            continue
        dt = ticks - base[0]
        if dt <= 0:
            continue
        if pid in MINE:
            acc['server'] += dt
        elif POSTMASTER and POSTMASTER in (pid, ppid) or not POSTMASTER and uid == PG_UID:
            acc['pg'] += dt
        elif comm in LOAD:
            acc['load'] += dt
        else:
            acc['foreign'] += dt
    prev = cur
t1, i1, s1 = cpu_total()
tot = max(1, t1 - t0)
with open(sys.argv[1], 'w') as f:
    f.write(f"busy_pct={100.0 * ((t1 - t0) - (i1 - i0)) / tot:.0f} "
            + ' '.join(f"{k}_cpu_s={v / HZ:.1f}" for k, v in acc.items())
            + f" steal_pct={100.0 * (s1 - s0) / tot:.1f}\n")
os.unlink(sys.argv[1] + '.ready')

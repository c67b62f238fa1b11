"""What one outbox insert costs SQLite, part by part.

    python3 outbox-insert.py none base nocheck noin nolen nopair noidx noflow bindtime

Each variant inserts 20,000 charge messages into a fresh file (WAL, synchronous=OFF), 8 to a
transaction, each in its own savepoint as the server's group commit runs them, and prints
microseconds per message (three trials). "none" runs the savepoints alone; "base" is the outbox
of outbox_0001.sql (+ the flow-step index of outbox_0002.sql); the others drop one part: every
CHECK (nocheck), the status IN list (noin), length(effect) (nolen), the status/settled_at pair
(nopair), the pending index (noidx), the flow-step index (noflow), or read the clock in the client
(bindtime). Python's sqlite3 (3.40 here), so each figure carries the module's own call cost.
"""
import json, os, sqlite3, sys, time, uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..', '..', '..')
base_schema = open(os.path.join(ROOT, 'idemkey/src/store/sqlite/migrations/outbox_0001.sql')).read()
idx2="CREATE INDEX outbox_flow_step ON outbox (scope, resource_id) WHERE effect = 'flow-step';"
now="CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"
jnow="CAST((julianday('now') - 2440587.5)*86400000 AS INTEGER)"
def schema(v):
    s=base_schema.replace("CREATE INDEX outbox_resource ON outbox (scope, resource_id, effect);","")+idx2
    if 'nocheck' in v:
        s=s.replace("CHECK (length(effect) BETWEEN 1 AND 32)","").replace("\n                   CHECK (status IN ('pending', 'delivered', 'failed', 'dead'))","").replace(",\n    CHECK ((status = 'pending') = (settled_at IS NULL))","")
    if 'nolen' in v: s=s.replace("CHECK (length(effect) BETWEEN 1 AND 32)","")
    if 'noin' in v: s=s.replace("\n                   CHECK (status IN ('pending', 'delivered', 'failed', 'dead'))","")
    if 'nopair' in v: s=s.replace(",\n    CHECK ((status = 'pending') = (settled_at IS NULL))","")
    if 'noidx' in v:
        s=s.replace("CREATE INDEX outbox_due ON outbox (available_at) WHERE status = 'pending';","")
    if 'noflow' in v: s=s.replace(idx2,"")
    return s
def ins(v):
    t = "?7" if 'bindtime' in v else jnow
    return f"INSERT INTO outbox (scope, operation, key, effect, resource_id, payload, available_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, {t}, {t})"
N=20000
rows=[(str(uuid.uuid4()),'orders.create/v1',str(uuid.uuid4()),'charge',str(uuid.uuid4()),json.dumps({"order_id":str(uuid.uuid4()),"amount_cents":5980,"currency":"EUR"}), 1765000000000+i) for i in range(N)]
def run(v):
    p='/tmp/outbox-insert.sqlite'
    for e in ('','-wal','-shm'):
        try: os.remove(p+e)
        except FileNotFoundError: pass
    c=sqlite3.connect(p, isolation_level=None)
    c.execute('PRAGMA journal_mode=WAL'); c.execute('PRAGMA synchronous=OFF'); c.execute('PRAGMA temp_store=MEMORY')
    c.executescript(schema(v))
    sql=ins(v); r=rows if 'bindtime' in v else [x[:6] for x in rows]
    t=time.perf_counter(); i=0
    while i<N:
        c.execute('BEGIN IMMEDIATE')
        for j in range(8):
            c.execute('SAVEPOINT s')
            if v!='none': c.execute(sql, r[i])
            c.execute('RELEASE s')
            i+=1
        c.execute('COMMIT')
    dt=time.perf_counter()-t; c.close()
    return dt/N*1e6
vs=sys.argv[1:]
for trial in range(3):
    print("  ".join(f"{v}={run(v):.2f}" for v in vs))

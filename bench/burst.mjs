// Same-key burst (after the peer harness's burst.mjs): N concurrent POSTs with ONE fresh key,
// alternating over PORTS (Node 20 global fetch: undici opens as many connections as
// requests in flight).
// Env: N (200), PORTS ("38100,38101"), KEY (default: fresh randomUUID()), TOKEN (bearer token),
//      API=lab for the article's Node lab (POST /pedidos, {"sku","cantidad"}, no auth).
// Prints one JSON line: key, n, status counts, distinct ids among 2xx bodies, replayed count,
// wall time, latency p50/p99/max.
import { randomUUID } from 'node:crypto';

const N = Number(process.env.N ?? 200);
const PORTS = (process.env.PORTS ?? '38100,38101').split(',').map(Number);
const key = process.env.KEY ?? randomUUID();
const lab = process.env.API === 'lab';
const path = lab ? '/pedidos' : '/orders';
const body = JSON.stringify(lab ? { sku: 'LIBRO-TS', cantidad: 2 } : { sku: 'LIBRO-TS', quantity: 2 });
const headers = { 'Content-Type': 'application/json', 'Idempotency-Key': JSON.stringify(key) };
if (!lab) headers.Authorization = `Bearer ${process.env.TOKEN}`;

const t0 = performance.now();
const res = await Promise.all(Array.from({ length: N }, async (_, i) => {
  const port = PORTS[i % PORTS.length];
  const t = performance.now();
  try {
    const r = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers, body });
    return { status: String(r.status), body: await r.text(), replayed: r.headers.get('idempotent-replayed') === 'true',
      ms: performance.now() - t };
  } catch (e) {
    return { status: 'ERR_' + (e?.cause?.code ?? e?.name ?? 'fetch'), body: '', ms: performance.now() - t };
  }
}));
const wall = performance.now() - t0;
const counts = {};
for (const r of res) counts[r.status] = (counts[r.status] ?? 0) + 1;
const ids = [...new Set(res.filter((r) => r.status.startsWith('2')).map((r) => JSON.parse(r.body).id))];
const lat = res.map((r) => r.ms).sort((a, b) => a - b);
const pct = (p) => lat[Math.min(lat.length - 1, Math.ceil((p / 100) * lat.length) - 1)];
console.log(JSON.stringify({
  key, n: N, counts, distinct_ids: ids.length, ids, replayed: res.filter((r) => r.replayed).length,
  wall_ms: +wall.toFixed(1), p50_ms: +pct(50).toFixed(1), p99_ms: +pct(99).toFixed(1), max_ms: +lat.at(-1).toFixed(1),
}));

// The edge Worker under workerd, in front of a real origin (idemkey-server on
// a throwaway PostgreSQL). Run with `node --test edge/test/` after
// `edge/build.sh` and a build of idemkey-server, idemkey-pg and the
// `selftest` example (scripts/test.d/60-edge.sh does all of it).

import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';

import { startStack, send, bin, ROOT, EDGE_DIR, freePort, start, stop, waitFor } from './harness.mjs';

let stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack?.close();
});

const VALID = '{"sku":"LIBRO-TS","quantity":2}';
const key = () => `"${randomUUID()}"`;
const auth = () => ['Authorization', `Bearer ${stack.token}`];
const json = ['Content-Type', 'application/json'];

/** What reached the origin through the edge since `mark`. */
function sinceMark(mark) {
  return stack.seen.slice(mark);
}

/** The parts of a response that must be identical at the edge and the origin. */
function contract(res) {
  return {
    status: res.status,
    contentType: res.headers['content-type'],
    cacheControl: res.headers['cache-control'],
    retryAfter: res.headers['retry-after'],
    body: res.body,
  };
}

describe('bad requests are answered at the edge, as the origin answers them', () => {
  // The bad-input matrix of issue 3. Each case is a request (minus the
  // parts the helper fills in) and the problem code both must answer.
  const long = 'k'.repeat(256);
  const cases = [
    { name: 'missing key', code: 'idempotency-key-missing', headers: () => [auth(), json] },
    { name: 'malformed key (unterminated string)', code: 'idempotency-key-invalid', headers: () => [auth(), ['Idempotency-Key', '"abc'], json] },
    { name: 'malformed key (space in a bare value)', code: 'idempotency-key-invalid', headers: () => [auth(), ['Idempotency-Key', 'a b'], json] },
    { name: 'empty key', code: 'idempotency-key-invalid', headers: () => [auth(), ['Idempotency-Key', '""'], json] },
    { name: 'key too long', code: 'idempotency-key-invalid', headers: () => [auth(), ['Idempotency-Key', `"${long}"`], json] },
    { name: 'key repeated', code: 'idempotency-key-invalid', headers: () => [auth(), ['Idempotency-Key', key()], ['Idempotency-Key', key()], json] },
    { name: 'key repeated, same value', code: 'idempotency-key-invalid', headers: () => { const k = key(); return [auth(), ['Idempotency-Key', k], ['Idempotency-Key', k], json]; } },
    { name: 'no Authorization', code: 'unauthorized', headers: () => [['Idempotency-Key', key()], json] },
    { name: 'Authorization not a bearer token', code: 'unauthorized', headers: () => [['Authorization', 'Basic dXNlcjpwYXNz'], ['Idempotency-Key', key()], json] },
    { name: 'bearer token with a space', code: 'unauthorized', headers: () => [['Authorization', 'Bearer a b'], ['Idempotency-Key', key()], json] },
    { name: 'Authorization repeated', code: 'unauthorized', headers: () => [auth(), auth(), ['Idempotency-Key', key()], json] },
    { name: 'wrong content type', code: 'unsupported-media-type', headers: () => [auth(), ['Idempotency-Key', key()], ['Content-Type', 'text/plain']] },
    { name: 'no content type', code: 'unsupported-media-type', headers: () => [auth(), ['Idempotency-Key', key()]] },
    { name: 'JSON in latin1', code: 'unsupported-media-type', headers: () => [auth(), ['Idempotency-Key', key()], ['Content-Type', 'application/json; charset=latin1']] },
    { name: 'declared body over 8 KiB', code: 'payload-too-large', headers: () => [auth(), ['Idempotency-Key', key()], json], body: ' '.repeat(8193) },
    { name: 'chunked body over 8 KiB', code: 'payload-too-large', headers: () => [auth(), ['Idempotency-Key', key()], json], body: `{"sku":"A","quantity":1,"pad":"${'x'.repeat(9000)}"}`, chunked: true },
    { name: 'bad JSON', code: 'request-invalid', headers: () => [auth(), ['Idempotency-Key', key()], json], body: '{"sku":' },
    { name: 'empty body', code: 'request-invalid', headers: () => [auth(), ['Idempotency-Key', key()], json], body: '' },
    { name: 'not an object', code: 'request-invalid', headers: () => [auth(), ['Idempotency-Key', key()], json], body: '[1,2]' },
    { name: 'extra member', code: 'request-invalid', headers: () => [auth(), ['Idempotency-Key', key()], json], body: '{"sku":"A","quantity":1,"note":"x"}' },
    { name: 'invalid members', code: 'request-invalid', headers: () => [auth(), ['Idempotency-Key', key()], json], body: '{"sku":"libro","quantity":0}' },
    { name: 'quantity as a float', code: 'request-invalid', headers: () => [auth(), ['Idempotency-Key', key()], json], body: '{"sku":"A","quantity":2.0}' },
    { name: 'two faults: no key and wrong type (key first)', code: 'idempotency-key-missing', headers: () => [auth(), ['Content-Type', 'text/plain']] },
    { name: 'two faults: wrong type and bad body (type first)', code: 'unsupported-media-type', headers: () => [auth(), ['Idempotency-Key', key()], ['Content-Type', 'text/plain']], body: '{' },
    { name: 'three faults: no token, bad key, oversize (token first)', code: 'unauthorized', headers: () => [['Idempotency-Key', 'a b'], json], body: ' '.repeat(9000) },
  ];

  for (const c of cases) {
    test(c.name, async () => {
      const request = { headers: c.headers(), body: c.body ?? VALID, chunked: c.chunked ?? false };
      const mark = stack.seen.length;
      const atEdge = await send(stack.edge, request);
      assert.deepEqual(sinceMark(mark), [], 'the origin received nothing');
      const direct = await send(stack.origin, request);
      assert.equal(JSON.parse(atEdge.body).code, c.code, atEdge.body);
      assert.deepEqual(contract(atEdge), contract(direct));
      assert.equal(atEdge.headers['content-type'], 'application/problem+json');
      assert.equal(atEdge.headers['cache-control'], 'no-store');
    });
  }
});

describe('good requests go to the origin unchanged', () => {
  test('a valid order through the edge is created once; its retry replays', async () => {
    const k = key();
    const request = { headers: [auth(), ['Idempotency-Key', k], json, ['X-Trace', 'edge-test']], body: VALID };
    const mark = stack.seen.length;
    const first = await send(stack.edge, request);
    assert.equal(first.status, 201, first.body);
    assert.match(first.headers.location, /^\/orders\/[0-9a-f-]{36}$/);
    assert.equal(first.headers['idempotent-replayed'], undefined);
    const retry = await send(stack.edge, request);
    assert.equal(retry.status, 201);
    assert.equal(retry.body, first.body);
    assert.equal(retry.headers.location, first.headers.location);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    // The origin saw both, each with the same bytes the client sent.
    const seen = sinceMark(mark);
    assert.equal(seen.length, 2);
    for (const s of seen) {
      assert.equal(s.method, 'POST');
      assert.equal(s.url, '/orders');
      assert.equal(s.body.toString(), VALID);
      const h = headerMap(s.rawHeaders);
      assert.deepEqual(h['idempotency-key'], [k]);
      assert.deepEqual(h.authorization, [`Bearer ${stack.token}`]);
      assert.deepEqual(h['content-type'], ['application/json']);
      assert.deepEqual(h['x-trace'], ['edge-test']);
      assert.deepEqual(h['content-length'], [String(VALID.length)]);
    }
    // The same key sent straight to the origin finds the same order.
    const direct = await send(stack.origin, request);
    assert.equal(direct.body, first.body);
    assert.equal(direct.headers['idempotent-replayed'], 'true');
    // The order exists once and is readable through the edge.
    const id = first.headers.location.split('/').pop();
    const read = await send(stack.edge, { method: 'GET', path: `/orders/${id}?x=1&y=%20`, headers: [auth()] });
    assert.equal(read.status, 200, read.body);
    assert.equal(JSON.parse(read.body).id, id);
    assert.equal(stack.seen.at(-1).url, `/orders/${id}?x=1&y=%20`, 'query forwarded');
  });

  test('same key, other payload: the origin answers 422 through the edge', async () => {
    const k = key();
    const ok = await send(stack.edge, { headers: [auth(), ['Idempotency-Key', k], json], body: VALID });
    assert.equal(ok.status, 201);
    const other = { headers: [auth(), ['Idempotency-Key', k], json], body: '{"sku":"LIBRO-TS","quantity":3}' };
    const atEdge = await send(stack.edge, other);
    const direct = await send(stack.origin, other);
    assert.equal(atEdge.status, 422);
    assert.deepEqual(contract(atEdge), contract(direct));
  });

  test('a well-formed but unknown token is the origin\'s to refuse', async () => {
    const request = { headers: [['Authorization', 'Bearer not-a-real-token'], ['Idempotency-Key', key()], json], body: VALID };
    const mark = stack.seen.length;
    const atEdge = await send(stack.edge, request);
    assert.equal(sinceMark(mark).length, 1, 'forwarded');
    const direct = await send(stack.origin, request);
    assert.equal(atEdge.status, 401);
    assert.deepEqual(contract(atEdge), contract(direct));
  });

  test('a chunked valid order is forwarded with the same bytes', async () => {
    const mark = stack.seen.length;
    const res = await send(stack.edge, { headers: [auth(), ['Idempotency-Key', key()], json], body: VALID, chunked: true });
    assert.equal(res.status, 201, res.body);
    const seen = sinceMark(mark);
    assert.equal(seen.length, 1);
    assert.equal(seen[0].body.toString(), VALID);
  });

  for (const [method, p] of [
    ['GET', '/healthz'],
    ['GET', '/nowhere'],
    ['PUT', '/orders'],
    ['GET', '/orders'],
    ['GET', '/__edge/nothing'],
    ['DELETE', '/orders/00000000-0000-4000-8000-000000000000'],
  ]) {
    test(`${method} ${p} passes through`, async () => {
      const request = { method, path: p, headers: [auth()], body: method === 'GET' ? undefined : 'x' };
      const mark = stack.seen.length;
      const atEdge = await send(stack.edge, request);
      const seen = sinceMark(mark);
      assert.equal(seen.length, 1);
      assert.equal(seen[0].method, method);
      assert.equal(seen[0].url, p);
      const direct = await send(stack.origin, request);
      assert.deepEqual(contract(atEdge), contract(direct));
    });
  }
});

test('the shared vectors through the Worker build of the core give the native answers', async () => {
  const load = (name) => JSON.parse(readFileSync(path.join(ROOT, 'core/vectors', name), 'utf8'));
  const keys = load('keys.json').cases;
  const fingerprints = load('fingerprints.json').cases;
  const orders = load('orders.json').cases;
  const downstream = load('downstream_keys.json').cases;
  const steps = load('step_keys.json').cases;
  const minimums = load('minimums.json').files;
  for (const [name, cases] of [['keys.json', keys], ['fingerprints.json', fingerprints], ['orders.json', orders], ['downstream_keys.json', downstream], ['step_keys.json', steps]]) {
    assert.ok(cases.length >= minimums[name].cases, `${name}: ${cases.length} cases, fewer than the minimum ${minimums[name].cases}`);
  }
  const batch = JSON.stringify({
    keys: keys.map(({ profile, lines }) => ({ profile, lines })),
    fingerprints: fingerprints.map(({ operation, payload }) => ({ operation, payload })),
    orders: orders.map(({ body }) => ({ body })),
    downstream_keys: downstream.map(({ scope, operation, key_header, profile, effect }) => ({ scope, operation, key_header, profile, effect })),
    step_keys: steps.map(({ scope, operation, key, instance, step, action }) => ({ scope, operation, key, instance, step, action })),
  });
  const res = await send(stack.edge, { path: '/__edge/selftest', headers: [json], body: batch });
  assert.equal(res.status, 200, res.body);
  const worker = JSON.parse(res.body);
  const native = JSON.parse(execFileSync(bin('selftest', 'examples'), { input: batch, encoding: 'utf8' }));
  assert.equal(worker.keys.length, keys.length);
  assert.equal(worker.fingerprints.length, fingerprints.length);
  assert.equal(worker.orders.length, orders.length);
  assert.equal(worker.downstream_keys.length, downstream.length);
  assert.equal(worker.step_keys.length, steps.length);
  assert.deepEqual(worker, native);
  // And both agree with what the vectors say (the core's own tests check the
  // same natively).
  keys.forEach((c, i) => assert.deepEqual(worker.keys[i], 'ok' in c ? { ok: c.ok } : { error: c.error }, c.name));
  orders.forEach((c, i) => assert.deepEqual(worker.orders[i], 'ok' in c ? { ok: c.ok } : { problem: c.problem }, c.name));
  downstream.forEach((c, i) => assert.deepEqual(worker.downstream_keys[i], { uuid: c.uuid }, c.name));
  steps.forEach((c, i) => assert.deepEqual(worker.step_keys[i], { uuid: c.uuid }, c.name));
});

test('the HTTP fingerprint vectors through the Worker build of the core give the vectors\' hex', async () => {
  // The Worker has no use for Fingerprint::of_http itself (it guards POST
  // /orders and forwards the rest); the self-test route runs the core as built
  // into the Worker on these vectors all the same. Bodies travel as hex.
  const doc = JSON.parse(readFileSync(path.join(ROOT, 'core/vectors/http_fingerprints.json'), 'utf8'));
  const cases = doc.cases;
  const least = JSON.parse(readFileSync(path.join(ROOT, 'core/vectors/minimums.json'), 'utf8')).files['http_fingerprints.json'].cases;
  assert.ok(cases.length >= least, `${cases.length} cases, fewer than the minimum ${least}`);
  assert.equal(cases.length, doc.count);
  const batch = JSON.stringify({
    http_fingerprints: cases.map((c) => ({
      operation: c.operation,
      method: c.method,
      path: c.path,
      content_type: c.content_type,
      body_hex: c.body_hex ?? Buffer.from(c.body, 'utf8').toString('hex'),
    })),
  });
  const res = await send(stack.edge, { path: '/__edge/selftest', headers: [json], body: batch });
  assert.equal(res.status, 200, res.body);
  const worker = JSON.parse(res.body);
  const native = JSON.parse(execFileSync(bin('selftest', 'examples'), { input: batch, encoding: 'utf8' }));
  assert.deepEqual(worker, native);
  assert.equal(worker.http_fingerprints.length, doc.count);
  cases.forEach((c, i) => assert.deepEqual(worker.http_fingerprints[i], { hex: c.hex }, c.name));
});

test('an unreachable origin is the core\'s 503 (retry with the same key); bad requests are still answered', async () => {
  const [edgePort, deadPort] = [await freePort(), await freePort()];
  const edge = start(path.join(EDGE_DIR, 'serve.sh'), [String(edgePort), `http://127.0.0.1:${deadPort}`], { EDGE_NO_BUILD: '1' });
  try {
    const url = `http://127.0.0.1:${edgePort}`;
    await waitFor(url, 'edge/serve.sh', edge, 60_000, 503);
    const res = await send(url, { headers: [auth(), ['Idempotency-Key', key()], json], body: VALID });
    assert.equal(res.status, 503);
    assert.equal(JSON.parse(res.body).code, 'service-unavailable');
    assert.equal(res.headers['retry-after'], '1');
    assert.equal(res.headers['content-type'], 'application/problem+json');
    const bad = await send(url, { headers: [auth(), json], body: VALID });
    assert.equal(JSON.parse(bad.body).code, 'idempotency-key-missing');
  } finally {
    await stop(edge);
  }
});

function headerMap(raw) {
  const out = {};
  for (let i = 0; i < raw.length; i += 2) (out[raw[i].toLowerCase()] ??= []).push(raw[i + 1]);
  return out;
}

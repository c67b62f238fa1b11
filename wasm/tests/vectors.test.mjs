// The shared vectors through the Node build (wasm/pkg-node).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { runVectors, checkNewKeys } from "./vectors-lib.mjs";

const require = createRequire(import.meta.url);
const wasm = require("../pkg-node/idemkey_wasm.js");
const load = (name) =>
  JSON.parse(readFileSync(new URL(`../../core/vectors/${name}.json`, import.meta.url), "utf8"));
const vectors = {
  keys: load("keys"),
  fingerprints: load("fingerprints"),
  retry: load("retry"),
  unknown: load("unknown"),
  orders: load("orders"),
  downstream_keys: load("downstream_keys"),
  step_keys: load("step_keys"),
};

assert.equal(typeof wasm.parseKeyLines, "function", "the Node build has every feature");
assert.equal(typeof wasm.downstreamKey, "function", "the Node build has every feature");
assert.equal(typeof wasm.stepDownstreamKey, "function", "the Node build has every feature");
const results = runVectors(wasm, vectors);
for (const r of results) {
  test(`${r.suite}: ${r.name}`, () => {
    if (r.error) assert.fail(r.error);
  });
}

test("every vector case ran, and no file holds fewer than its minimum", () => {
  const minimums = load("minimums").files;
  for (const [suite, doc] of Object.entries(vectors)) {
    const ran = results.filter((r) => r.suite === suite).length;
    assert.equal(ran, doc.cases.length, `${suite}: cases run`);
    const least = minimums[`${suite}.json`].cases;
    assert.ok(ran >= least, `${suite}: ${ran} cases, fewer than the minimum ${least}`);
  }
  assert.equal(results.length, Object.values(vectors).reduce((n, d) => n + d.cases.length, 0));
});

test("newKey gives distinct quoted UUIDv4 keys that parse back", () => {
  assert.equal(checkNewKeys(wasm, 2000), 2000);
});

test("errors carry the core's codes", () => {
  assert.throws(() => wasm.downstreamKey("a", "POST /orders:v1", "not-a-uuid", "uuid", "charge"), { code: "idempotency-key-invalid", reason: "not-uuid" });
  assert.throws(() => wasm.downstreamKey("a", "POST /orders", '"k"', "strict", "charge"), { code: "invalid-argument" });
  assert.throws(() => wasm.stepDownstreamKey("a", "POST /x:v1", "k", "flow", "charge", "undo"), { code: "invalid-argument" });
  assert.throws(() => wasm.stepDownstreamKey("a", "POST /x:v1", "k", "flow", "charge", "Run"), { code: "invalid-argument" });
  assert.throws(() => wasm.parseKey("", "strict"), { code: "idempotency-key-invalid", reason: "empty" });
  assert.throws(() => wasm.parseKeyLines([], "lenient"), { code: "idempotency-key-missing", reason: "missing" });
  assert.throws(() => wasm.parseKey('"a"', "loose"), { code: "invalid-argument" });
  assert.throws(() => wasm.fingerprint("POST /orders", "{}"), { code: "invalid-argument" });
  assert.throws(() => wasm.fingerprint("POST /orders:v1", "{"), { code: "invalid-argument" });
  assert.throws(() => wasm.retryStep(1, { status: 70000 }, 0.5), { code: "invalid-argument" });
  assert.throws(() => wasm.retryStep(1, "503", 0.5), { code: "invalid-argument" });
});

test("an HTTP-date Retry-After is measured from Date.now()", () => {
  // The wait is the date minus Date.now() as read during the call: exactly
  // between the two readings around it, however long the call took.
  const before = Date.now();
  const at = new Date(before + 120_000).toUTCString();
  const step = wasm.retryStep(1, { status: 503, retryAfter: at }, 0);
  const after = Date.now();
  assert.equal(step.action, "wait");
  const date = Date.parse(at);
  assert.ok(
    step.delayMs >= date - after && step.delayMs <= date - before,
    `delay ${step.delayMs}, expected within [${date - after}, ${date - before}]`,
  );
});

test("a custom policy is honoured", () => {
  const policy = { baseMs: 1000, capMs: 1000, maxAttempts: 2 };
  assert.deepEqual(wasm.retryStep(1, { networkError: true }, 0.5, policy), { action: "wait", delayMs: 500 });
  assert.deepEqual(wasm.retryStep(2, { networkError: true }, 0.5, policy), { action: "reconcile" });
});

test("afterUnknown checks its arguments", () => {
  assert.throws(() => wasm.afterUnknown(1, -1, 0, 1000, 0.5), { code: "invalid-argument" });
  assert.throws(() => wasm.afterUnknown(1, 0, 1.5, 1000, 0.5), { code: "invalid-argument" });
  assert.throws(() => wasm.afterUnknown(1, 0, 0, Number.NaN, 0.5), { code: "invalid-argument" });
});

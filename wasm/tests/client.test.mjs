// IdempotentClient in headless Chromium with a scripted fetch: what it
// stores, when it reconciles, and when it deletes an operation.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { launch, serveStatic } from "./browser.mjs";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));

test("IdempotentClient: reconcile after the budget or a 410, keep the operation until a final answer", async () => {
  const server = await serveStatic({ "/pkg/": here("../pkg/") });
  const browser = await launch();
  try {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/`);
    const r = await page.evaluate(async () => {
      const { IdempotentClient } = await import("/pkg/idempotent-client.js");
      const json = (status, body, headers = {}) =>
        new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
      /** A client whose fetch answers from `script(url, init, calls)`. */
      async function scripted(dbName, script, extra = {}) {
        const calls = [];
        const client = await IdempotentClient.create({
          dbName,
          policy: { baseMs: 1, capMs: 1, maxAttempts: 3 },
          reconcileDelayMs: 1,
          fetch: async (url, init = {}) => {
            calls.push({ url, method: init.method ?? "GET", key: init.headers?.["Idempotency-Key"], body: init.body });
            return script(url, init, calls);
          },
          ...extra,
        });
        return { client, calls };
      }
      const body = { sku: "LIBRO-TS", quantity: 2 };
      const out = {};

      // Every send fails: three attempts with one key, then the lookup.
      {
        let storedBeforeFirstSend = null;
        const { client, calls } = await scripted("t1", async (url) => {
          if (url.startsWith("/operations/")) return json(200, { state: "completed", order: "/orders/o-1" });
          if (storedBeforeFirstSend === null) storedBeforeFirstSend = (await client.pending()).length;
          throw new TypeError("Failed to fetch");
        });
        const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
        out.budget = {
          result,
          storedBeforeFirstSend,
          sends: calls.filter((c) => c.method === "POST").map((c) => c.key),
          lookups: calls.filter((c) => c.url.startsWith("/operations/")).map((c) => c.url),
          left: (await client.pending()).length,
        };
      }

      // 410: reconcile at once; a lookup that says in_progress is not final.
      {
        let lookups = 0;
        const { client, calls } = await scripted("t2", async (url) => {
          if (url.startsWith("/operations/")) {
            lookups += 1;
            return json(200, lookups === 1 ? { state: "in_progress" } : { state: "expired", order: "/orders/o-2" });
          }
          return json(410, { code: "idempotency-key-expired", status: 410 });
        });
        const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
        out.expired = { result, lookups, posts: calls.filter((c) => c.method === "POST").length, left: (await client.pending()).length };
      }

      // 503 with Retry-After, then a replayed 201.
      {
        const { client, calls } = await scripted("t3", async (_url, _init, calls) =>
          calls.length === 1
            ? json(503, { code: "service-unavailable" }, { "Retry-After": "0" })
            : json(201, { id: "o-3" }, { "Idempotent-Replayed": "true", Location: "/orders/o-3" }),
        );
        const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
        out.replay = { result, keys: calls.map((c) => c.key), left: (await client.pending()).length };
      }

      // An operation of another scope is neither listed nor sent.
      {
        const a = await scripted("t4", () => new Promise(() => {}), { scope: "account-a" });
        a.client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
        await new Promise((r) => setTimeout(r, 50));
        const b = await scripted("t4", () => json(201, {}), { scope: "account-b" });
        out.scope = { a: (await a.client.pending()).length, b: (await b.client.pending()).length, resumed: await b.client.resumePending(), bCalls: b.calls.length };
      }
      return out;
    });

    const b = r.budget;
    assert.equal(b.storedBeforeFirstSend, 1, "stored before the first send");
    assert.equal(b.sends.length, 3);
    assert.equal(new Set(b.sends).size, 1, "one key for every attempt");
    assert.match(b.sends[0], /^"[0-9a-f-]{36}"$/);
    assert.deepEqual(b.lookups, [`/operations/${JSON.parse(b.sends[0])}`]);
    assert.equal(b.result.state, "reconciled");
    assert.equal(b.result.lookup.order, "/orders/o-1");
    assert.equal(b.left, 0, "a final answer deletes the operation");

    assert.equal(r.expired.result.state, "reconciled");
    assert.equal(r.expired.result.lookup.state, "expired");
    assert.equal(r.expired.lookups, 2, "in_progress is not final: looked up again");
    assert.equal(r.expired.left, 0);

    assert.equal(r.replay.result.state, "done");
    assert.equal(r.replay.result.replayed, true);
    assert.equal(r.replay.keys.length, 2);
    assert.equal(r.replay.keys[0], r.replay.keys[1]);
    assert.equal(r.replay.left, 0);

    assert.deepEqual(r.scope.resumed, []);
    assert.equal(r.scope.a, 1);
    assert.equal(r.scope.b, 0);
    assert.equal(r.scope.bCalls, 0);
  } finally {
    await browser.close();
    await server.close();
  }
});

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

test("IdempotentClient: unknown resends the same key inside the window, needs a decision past it; the scope is read per request", async () => {
  const server = await serveStatic({ "/pkg/": here("../pkg/") });
  const browser = await launch();
  try {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/`);
    const r = await page.evaluate(async () => {
      const { IdempotentClient } = await import("/pkg/idempotent-client.js");
      const json = (status, body, headers = {}) =>
        new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
      const body = { sku: "LIBRO-TS", quantity: 2 };
      const out = {};
      const isLookup = (url) => url.startsWith("/operations/");

      // Inside the window: unknown is not final. The same key is sent again
      // and the late commit's replay ends it.
      {
        const calls = [];
        let lookups = 0;
        const client = await IdempotentClient.create({
          dbName: "u1",
          policy: { baseMs: 1, capMs: 1, maxAttempts: 2 },
          replayWindowMs: 60_000,
          fetch: async (url, init = {}) => {
            calls.push({ url, key: init.headers?.["Idempotency-Key"] });
            if (isLookup(url)) {
              lookups += 1;
              return json(200, { state: "unknown" });
            }
            if (lookups < 2) throw new TypeError("Failed to fetch");
            return json(201, { id: "o-late" }, { "Idempotent-Replayed": "true" });
          },
        });
        const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
        out.inside = { result, lookups, keys: [...new Set(calls.filter((c) => !isLookup(c.url)).map((c) => c.key))], sends: calls.filter((c) => !isLookup(c.url)).length, left: (await client.pending()).length };
      }

      // Past the window (10 ms here): handed to the application with the
      // facts, kept, never sent again on its own; discard deletes it.
      {
        let posts = 0;
        const client = await IdempotentClient.create({
          dbName: "u2",
          policy: { baseMs: 1, capMs: 1, maxAttempts: 1 },
          replayWindowMs: 10,
          fetch: async (url) => {
            if (isLookup(url)) return json(200, { state: "unknown" });
            posts += 1;
            await new Promise((res) => setTimeout(res, 20));
            throw new TypeError("Failed to fetch");
          },
        });
        const events = [];
        client.subscribe((e) => events.push(e.type));
        const before = Date.now();
        const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
        const kept = await client.pending();
        const again = await client.resumePending();
        const postsAfterResume = posts;
        const eventsBefore = [...events];
        // The application checked and resends: the same key, a new first send.
        const resent = await client.resend(result.id);
        const postsAfterResend = posts;
        const discarded = await client.discard(result.id);
        out.past = { result, before, events: eventsBefore, kept: kept.length, again, postsAfterResume, resent, postsAfterResend, discarded, left: (await client.pending()).length };
      }

      // The scope is evaluated with the headers for every request: after a
      // switch, the operation is held (not sent with B's token), and sent
      // with A's once A is back.
      {
        const calls = [];
        let account = "A";
        let first = true;
        const client = await IdempotentClient.create({
          dbName: "u3",
          policy: { baseMs: 30, capMs: 30, maxAttempts: 8 },
          random: () => 0.99,
          scope: () => account,
          headers: () => ({ Authorization: `Bearer token-${account}` }),
          fetch: async (url, init = {}) => {
            calls.push({ url, key: init.headers?.["Idempotency-Key"], auth: init.headers?.Authorization });
            if (first) {
              first = false;
              account = "B"; // B signs in while A's first attempt is in flight
              throw new TypeError("Failed to fetch");
            }
            return json(201, { id: "o-a" });
          },
        });
        const held = [];
        client.subscribe((e) => e.type === "held" && held.push(e.op.id));
        const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
        await new Promise((res) => setTimeout(res, 100));
        const callsWhileB = calls.length;
        const pendingForB = (await client.pending()).length;
        account = "A";
        const resumed = await client.accountChanged();
        out.scope = { result, held, callsWhileB, pendingForB, resumed, calls };
      }
      return out;
    });

    const inside = r.inside;
    assert.equal(inside.result.state, "done", JSON.stringify(inside));
    assert.equal(inside.result.body.id, "o-late");
    assert.equal(inside.lookups, 2, "unknown twice, resent each time");
    assert.equal(inside.keys.length, 1, "one key for every send");
    assert.equal(inside.sends, 4, "2 attempts, resend after the first unknown, resend after the second");
    assert.equal(inside.left, 0);

    const past = r.past;
    assert.equal(past.result.state, "needs-decision", JSON.stringify(past));
    assert.equal(past.result.attempts, 1);
    assert.ok(past.result.firstSentAt >= past.before, "the first send time is among the facts");
    assert.match(past.result.key, /^"[0-9a-f-]{36}"$/);
    assert.equal(past.result.lookup.state, "unknown");
    assert.ok(past.events.includes("decision"));
    assert.ok(!past.events.includes("final"), "not a final answer");
    assert.equal(past.kept, 1, "kept until the application decides");
    assert.deepEqual(past.again.map((x) => x.state), ["needs-decision"], "resuming does not send it");
    assert.equal(past.postsAfterResume, 1);
    assert.equal(past.resent.state, "needs-decision", "resent once, unknown again past the (10 ms) window");
    assert.equal(past.resent.key, past.result.key, "with the same key");
    assert.equal(past.resent.attempts, 1, "a fresh budget");
    assert.ok(past.resent.firstSentAt > past.result.firstSentAt, "a new first send time");
    assert.equal(past.postsAfterResend, 2);
    assert.equal(past.discarded.state, "discarded");
    assert.equal(past.left, 0);

    const s = r.scope;
    assert.deepEqual(s.result, { state: "other-scope", id: s.held[0] }, JSON.stringify(s));
    assert.equal(s.callsWhileB, 1, "nothing sent while B is signed in");
    assert.equal(s.pendingForB, 0, "B does not see A's operation");
    assert.equal(s.resumed.length, 1);
    assert.equal(s.resumed[0].state, "done");
    assert.equal(s.calls.length, 2);
    assert.equal(s.calls[0].key, s.calls[1].key);
    assert.deepEqual(s.calls.map((c) => c.auth), ["Bearer token-A", "Bearer token-A"], "never B's token with A's key");
  } finally {
    await browser.close();
    await server.close();
  }
});

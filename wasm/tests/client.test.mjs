// IdempotentClient in headless Chromium with a scripted fetch: what it
// stores, when it reconciles, and when it deletes an operation.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { launch, serveStatic } from "./browser.mjs";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));

/** Runs `fn` in a fresh Chromium page that can import the package from /pkg/; returns its result. */
async function inPage(fn) {
  const server = await serveStatic({ "/pkg/": here("../pkg/") });
  const browser = await launch();
  try {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/`);
    return await page.evaluate(fn);
  } finally {
    await browser.close();
    await server.close();
  }
}

test("IdempotentClient: reconcile after the budget or a 410, keep the operation until a final answer", async () => {
  const r = await inPage(async () => {
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
        replayWindowMs: 86_400_000,
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
});

test("IdempotentClient: unknown resends the same key inside the window, needs a decision past it; the scope is read per request", async () => {
  const r = await inPage(async () => {
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
        replayWindowMs: 60_000,
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
});

test("IdempotentClient: after an attempt that may have been applied, 401 holds the key until sign-in and 404 is looked up; first-attempt 4xx still stop", async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const json = (status, body, headers = {}) =>
      new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
    const problem = (status, code) =>
      new Response(JSON.stringify({ status, code, title: code }), { status, headers: { "content-type": "application/problem+json" } });
    const isLookup = (url) => url.startsWith("/operations/");
    const body = { sku: "LIBRO-TS", quantity: 2 };
    const out = {};
    /** A client whose fetch answers from `script(url, init, calls)`; the scope is the account, the token changes. */
    async function scripted(dbName, script, extra = {}) {
      const calls = [];
      const session = { token: "token-1" };
      const client = await IdempotentClient.create({
        dbName,
        policy: { baseMs: 1, capMs: 1, maxAttempts: 8 },
        reconcileDelayMs: 1,
        replayWindowMs: 86_400_000,
        scope: () => "account-42",
        headers: () => ({ Authorization: `Bearer ${session.token}` }),
        fetch: async (url, init = {}) => {
          calls.push({ url, method: init.method ?? "GET", key: init.headers?.["Idempotency-Key"], auth: init.headers?.Authorization });
          return script(url, init, calls);
        },
        ...extra,
      });
      return { client, calls, session };
    }

    // Attempt 1 commits and its answer is lost; the token expires; attempt
    // 2 gets 401. Held with its key, not deleted, not sent while held;
    // after sign-in (a new token, the same account) the same key replays.
    {
      let signedIn = false;
      const { client, calls, session } = await scripted("a1", async (url, init, calls) => {
        if (calls.length === 1) throw new TypeError("Failed to fetch");
        if (!signedIn) return problem(401, "unauthorized");
        return json(201, { id: "o-1" }, { "Idempotent-Replayed": "true" });
      });
      const held = [];
      client.subscribe((e) => e.type === "held" && held.push(e.reason));
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      const kept = await client.pending();
      const resumed = await client.resumePending();
      const callsWhileHeld = calls.length;
      session.token = "token-2";
      signedIn = true;
      const after = await client.accountChanged();
      out.auth = { result, held, kept, resumed, callsWhileHeld, after, calls, left: (await client.pending()).length };
    }

    // A network error, then 404 (a proxy, a deploy): looked up, and the
    // lookup's completed order ends it.
    {
      const { client, calls } = await scripted("a2", async (url, init, calls) => {
        if (isLookup(url)) return json(200, { state: "completed", order: "/orders/o-2" });
        if (calls.length === 1) throw new TypeError("Failed to fetch");
        return problem(404, "not-found");
      });
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      out.notFound = { result, calls, left: (await client.pending()).length };
    }

    // A 503, then 422 idempotency-key-reused: the key has a record; looked up.
    {
      const { client, calls } = await scripted("a3", async (url, init, calls) => {
        if (isLookup(url)) return json(200, { state: "completed", order: "/orders/o-3" });
        if (calls.length === 1) return json(503, { code: "service-unavailable" }, { "Retry-After": "0" });
        return problem(422, "idempotency-key-reused");
      });
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      out.reused = { result, lookups: calls.filter((c) => isLookup(c.url)).length, left: (await client.pending()).length };
    }

    // Nothing was ever possibly sent: a 404 or 400 on the first attempt stops as before.
    for (const [name, status, code] of [["first404", 404, "not-found"], ["first400", 400, "request-invalid"]]) {
      const { client, calls } = await scripted(`a4-${status}`, async () => problem(status, code));
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      out[name] = { result, calls: calls.length, left: (await client.pending()).length };
    }

    // A 429 (refused before anything ran), then 404: still nothing applied, stop.
    {
      const { client, calls } = await scripted("a5", async (url, init, calls) =>
        calls.length === 1 ? json(429, {}, { "Retry-After": "0" }) : problem(404, "not-found"),
      );
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      out.refusedThen404 = { result, calls: calls.length };
    }

    // A 401 on the lookup holds too; after sign-in the lookup is asked again.
    {
      let signedIn = false;
      const { client, calls, session } = await scripted("a6", async (url, init, calls) => {
        if (isLookup(url)) return signedIn ? json(200, { state: "completed", order: "/orders/o-6" }) : problem(401, "unauthorized");
        // A resend (which must not happen) would create an order.
        return calls.length === 1 ? json(410, { code: "idempotency-key-expired" }) : json(201, { id: "o-6-second" });
      });
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      session.token = "token-2";
      signedIn = true;
      const after = await client.accountChanged();
      out.lookup401 = { result, after, posts: calls.filter((c) => !isLookup(c.url)).length, left: (await client.pending()).length };
    }

    // While an attempt is in flight, the stored operation counts it and
    // says it may have been applied: a reload then looks a 404 up.
    {
      const first = await scripted("a7", () => new Promise(() => {}));
      first.client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      await new Promise((res) => setTimeout(res, 50));
      const stored = (await first.client.pending())[0];
      out.inFlight = { attempts: stored.attempts, maybeApplied: stored.maybeApplied, sending: stored.last?.sending };
    }
    // An operation an older client stored (no maybeApplied) after an
    // attempt whose outcome it never recorded (the tab closed mid-flight).
    {
      const { client } = await scripted("a8", async (url) =>
        isLookup(url) ? json(200, { state: "completed", order: "/orders/o-8" }) : problem(404, "not-found"),
      );
      const id = crypto.randomUUID();
      const now = Date.now();
      const tx = client.db.transaction("operations", "readwrite");
      tx.objectStore("operations").put({
        id, key: `"${id}"`, operation: "POST /orders:v1", method: "POST", url: "/orders", body: JSON.stringify(body),
        fingerprint: "0".repeat(64), scope: "account-42", attempts: 1, createdAt: now, firstSentAt: now,
        nextAttemptAt: 0, phase: "send", decision: null, last: { sending: true, at: now },
      });
      await new Promise((res) => (tx.oncomplete = res));
      out.legacy = await client.run(id);
    }
    return out;
  });

  const a = r.auth;
  assert.equal(a.result.state, "needs-auth", JSON.stringify(a));
  assert.equal(a.result.status, 401);
  assert.equal(a.result.maybeApplied, true);
  assert.ok(a.held.length >= 1 && a.held.every((reason) => reason === "auth"), JSON.stringify(a.held));
  assert.equal(a.kept.length, 1, "the key is kept");
  assert.equal(a.kept[0].key, a.result.key);
  assert.deepEqual(a.resumed.map((x) => x.state), ["needs-auth"], "resuming does not send a held operation");
  assert.equal(a.callsWhileHeld, 2, "nothing sent while held");
  assert.deepEqual(a.after.map((x) => x.state), ["done"], "resumed after sign-in");
  assert.equal(a.after[0].key, a.result.key);
  assert.equal(a.calls.length, 3);
  assert.deepEqual(new Set(a.calls.map((c) => c.key)).size, 1, "one key before and after sign-in");
  assert.equal(a.calls[2].auth, "Bearer token-2", "sent with the new token");
  assert.equal(a.left, 0);

  assert.equal(r.notFound.result.state, "reconciled", JSON.stringify(r.notFound));
  assert.equal(r.notFound.result.lookup.order, "/orders/o-2");
  assert.deepEqual(r.notFound.calls.map((c) => c.method), ["POST", "POST", "GET"], "the 404 is looked up, not ended");
  assert.equal(r.notFound.left, 0);

  assert.equal(r.reused.result.state, "reconciled", JSON.stringify(r.reused));
  assert.equal(r.reused.lookups, 1);
  assert.equal(r.reused.left, 0);

  for (const [name, status] of [["first404", 404], ["first400", 400]]) {
    assert.equal(r[name].result.state, "stopped", JSON.stringify(r[name]));
    assert.equal(r[name].result.status, status);
    assert.equal(r[name].calls, 1, "no lookup when nothing was ever possibly sent");
    assert.equal(r[name].left, 0);
  }
  assert.equal(r.refusedThen404.result.state, "stopped", JSON.stringify(r.refusedThen404));
  assert.equal(r.refusedThen404.calls, 2);

  assert.equal(r.lookup401.result.state, "needs-auth", JSON.stringify(r.lookup401));
  assert.deepEqual(r.lookup401.after.map((x) => x.state), ["reconciled"]);
  assert.equal(r.lookup401.posts, 1, "the lookup is asked again, nothing resent");
  assert.equal(r.lookup401.left, 0);

  assert.deepEqual(r.inFlight, { attempts: 1, maybeApplied: true, sending: true });
  assert.equal(r.legacy.state, "reconciled", JSON.stringify(r.legacy));
  assert.equal(r.legacy.lookup.order, "/orders/o-8");
});

test("IdempotentClient: the replay window comes from the server's contract (x-idempotency); past it nothing is resent without a lookup", async () => {
  const r = await inPage(async () => {
    const { IdempotentClient, publishedReplayWindowMs } = await import("/pkg/index.js");
    const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
    const isLookup = (url) => url.startsWith("/operations/");
    const body = { sku: "LIBRO-TS", quantity: 2 };
    // The server's contract: the window under x-idempotency; a decoy at the top.
    const contract = (seconds) => ({ retention: { replayWindowSeconds: 86_400 }, "x-idempotency": { retention: { replayWindowSeconds: seconds } } });
    const out = {};
    out.read = await publishedReplayWindowMs({ baseUrl: "https://api.example", fetch: async (url) => (url === "https://api.example/openapi.json" ? json(200, contract(3600)) : json(404, {})) });
    out.missing = await publishedReplayWindowMs({ fetch: async () => json(200, { retention: { replayWindowSeconds: 86_400 } }) });
    out.unreachable = await publishedReplayWindowMs({ fetch: async () => { throw new TypeError("Failed to fetch"); } });

    // A 1 s window from the contract: the first attempt's answer is lost,
    // the next send would come 1.5 s later, past the window: looked up
    // instead, and `unknown` goes to the application.
    {
      const calls = [];
      const client = await IdempotentClient.create({
        dbName: "w1",
        policy: { baseMs: 1500, capMs: 1500, maxAttempts: 8 },
        random: () => 0.999999,
        fetch: async (url, init = {}) => {
          calls.push({ url, method: init.method ?? "GET" });
          if (url === "/openapi.json") return json(200, contract(1));
          if (isLookup(url)) return json(200, { state: "unknown" });
          // Only the first answer is lost: a resend would create an order.
          if (calls.filter((c) => c.method === "POST").length === 1) throw new TypeError("Failed to fetch");
          return json(201, { id: "o-second" });
        },
      });
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      out.past = { result, calls };
    }

    // The contract cannot be read: nothing is resent on a guess.
    {
      let lookups = 0;
      const calls = [];
      const client = await IdempotentClient.create({
        dbName: "w2",
        policy: { baseMs: 1, capMs: 1, maxAttempts: 8 },
        reconcileDelayMs: 1,
        fetch: async (url, init = {}) => {
          calls.push({ url, method: init.method ?? "GET" });
          if (url === "/openapi.json") throw new TypeError("Failed to fetch");
          if (isLookup(url)) {
            lookups += 1;
            return json(200, lookups < 3 ? { state: "unknown" } : { state: "completed", order: "/orders/o-w2" });
          }
          throw new TypeError("Failed to fetch");
        },
      });
      const result = await client.submit({ url: "/orders", body, operation: "POST /orders:v1" });
      out.unreadable = { result, posts: calls.filter((c) => c.method === "POST").length, lookups };
    }
    return out;
  });

  assert.equal(r.read, 3_600_000, "x-idempotency.retention.replayWindowSeconds, from baseUrl");
  assert.equal(r.missing, null, "the top-level member is not the contract's");
  assert.equal(r.unreachable, null);

  assert.equal(r.past.result.state, "needs-decision", JSON.stringify(r.past));
  assert.equal(r.past.result.lookup.state, "unknown");
  assert.deepEqual(
    r.past.calls.map((c) => c.method + " " + (c.url.startsWith("/operations/") ? "/operations/{key}" : c.url)),
    ["POST /orders", "GET /openapi.json", "GET /operations/{key}"],
    "past the window: no resend, a lookup",
  );

  assert.equal(r.unreadable.result.state, "reconciled", JSON.stringify(r.unreadable));
  assert.equal(r.unreadable.posts, 1, "no resend while the window is unknown");
  assert.equal(r.unreadable.lookups, 3);
});

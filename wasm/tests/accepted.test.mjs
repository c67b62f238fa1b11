// IdempotentClient in headless Chromium with a scripted fetch:
// operations the server accepts (202) and runs for long, a purchase's final
// answers, two contexts (a service worker and a page) on one database,
// polling, listeners that throw, and a replay window that changes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { launch, serveStatic } from "./browser.mjs";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));

/** Runs `fn` in a fresh Chromium page that can import the package from /pkg/; returns its result and the page's errors. */
async function inPage(fn) {
  const server = await serveStatic({ "/pkg/": here("../pkg/") });
  const browser = await launch();
  try {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/`);
    await page.evaluate(() => {
      // What the page shared with every test: a JSON answer, a problem, a scripted client.
      window.t = {
        json: (status, body, headers = {}) =>
          new Response(body === null ? null : JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } }),
        problem: (status, code, headers = {}) =>
          new Response(JSON.stringify({ type: `/problems/${code}`, title: code, status, code }), {
            status,
            headers: { "content-type": "application/problem+json", ...headers },
          }),
        /** A fetch that never answers, unless its signal aborts it (as a real fetch does). */
        hang: (init) =>
          new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal.reason ?? new DOMException("aborted", "AbortError")))),
        sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
        body: { sku: "LIBRO-TS", quantity: 1 },
      };
    });
    return await page.evaluate(fn);
  } finally {
    await browser.close();
    await server.close();
  }
}

test("a purchase accepted with 202 by a service worker's client stays stored; the page lists it, polls it to its end and keeps it until acknowledged", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const { purchaseOperation } = await import("/pkg/idemkey_wasm.js");
    const { json } = window.t;
    const running = { state: "running", step: "charge", steps: [{ name: "reserve", state: "done" }, { name: "charge", state: "running" }, { name: "confirm", state: "pending" }] };
    let polls = 0;
    const calls = [];
    const fetch = async (url, init = {}) => {
      calls.push({ url, method: init.method ?? "GET" });
      if (init.method === "POST") return json(202, { ...running, id: "p-1" }, { Location: "/purchases/p-1" });
      if (url === "/purchases/p-1") {
        polls += 1;
        return polls < 3 ? json(200, running) : json(200, { state: "done", steps: [], result_status: 201, result: { id: "p-1", charge_id: "ch-1" } });
      }
      return json(404, {});
    };
    const common = { dbName: "accepted-1", replayWindowMs: 86_400_000, scope: "account-7", fetch };
    await IdempotentClient.create(common); // loads the module
    const operation = purchaseOperation();
    // The worker's client: keeps what it gets, polls nothing.
    const worker = await IdempotentClient.create({ ...common, pollAccepted: false });
    const sent = await worker.submit({ url: "/purchases", body: window.t.body, operation });
    const workerPending = (await worker.pending()).length;
    const workerAccepted = (await worker.accepted()).map((op) => ({ phase: op.phase, location: op.accepted.location, ended: op.accepted.ended }));
    const pollsByWorker = polls;
    // The page opens later: it never saw the 202.
    const page = await IdempotentClient.create({ ...common, pollMinMs: 5, pollCapMs: 20 });
    const events = [];
    page.subscribe((e) => events.push(e.type));
    const listed = (await page.accepted()).length;
    const resumed = await page.resumePending();
    const kept = await page.accepted();
    const pollsAtEnd = polls;
    const again = await page.resumePending();
    await window.t.sleep(100);
    const pollsLater = polls;
    const acknowledged = await page.acknowledge(sent.id);
    return {
      operation,
      sent,
      workerPending,
      workerAccepted,
      pollsByWorker,
      listed,
      resumed,
      kept: kept.map((op) => ({ ended: op.accepted.ended, result: op.accepted.result })),
      pollsAtEnd,
      again,
      pollsLater,
      acknowledged,
      events,
      left: (await page.accepted()).length + (await page.pending()).length,
    };
  });
  assert.equal(r.operation, "POST /purchases:v1", "the purchase operation comes from the wasm");
  assert.equal(r.sent.state, "accepted", JSON.stringify(r.sent));
  assert.equal(r.sent.location, "/purchases/p-1");
  assert.equal(r.workerPending, 0, "nothing left to send");
  assert.deepEqual(r.workerAccepted, [{ phase: "accepted", location: "/purchases/p-1", ended: false }], "the 202 does not delete the operation");
  assert.equal(r.pollsByWorker, 0, "a worker with pollAccepted: false does not poll");
  assert.equal(r.listed, 1, "the page lists the purchase the worker sent");
  assert.equal(r.resumed.length, 1);
  assert.equal(r.resumed[0].state, "ended", JSON.stringify(r.resumed));
  assert.equal(r.resumed[0].status, 201);
  assert.deepEqual(r.resumed[0].body, { id: "p-1", charge_id: "ch-1" });
  assert.deepEqual(r.kept, [{ ended: true, result: { status: 201, body: { id: "p-1", charge_id: "ch-1" } } }], "kept, ended, until acknowledged");
  assert.equal(r.pollsAtEnd, 3);
  assert.deepEqual(r.again, [], "an ended operation is not polled again");
  assert.equal(r.pollsLater, 3);
  assert.ok(r.events.includes("ended"), JSON.stringify(r.events));
  assert.ok(r.events.includes("acknowledged"));
  assert.equal(r.acknowledged, true);
  assert.equal(r.left, 0, "acknowledged: deleted");
});

test("a purchase whose answers were lost and that a lookup finds is followed to its end, looked up as a purchase", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const { json } = window.t;
    const calls = [];
    let polls = 0;
    const client = await IdempotentClient.create({
      dbName: "accepted-2",
      replayWindowMs: 86_400_000,
      policy: { baseMs: 1, capMs: 1, maxAttempts: 2 },
      reconcileDelayMs: 1,
      pollMinMs: 5,
      pollCapMs: 10,
      fetch: async (url, init = {}) => {
        calls.push({ url, method: init.method ?? "GET" });
        if (init.method === "POST") throw new TypeError("Failed to fetch");
        if (url.startsWith("/operations/")) return json(200, { state: "completed", purchase: "/purchases/p-2" });
        polls += 1;
        return json(200, { state: "failed", steps: [], result_status: 402, result: { code: "payment-declined" } });
      },
    });
    const { lookupPath, purchaseOperation } = await import("/pkg/idemkey_wasm.js");
    const first = await client.submit({ url: "/purchases", body: window.t.body, operation: purchaseOperation() });
    // The poll runs on its own after the answer.
    for (let i = 0; i < 100 && (await client.accepted())[0]?.accepted.ended !== true; i++) await window.t.sleep(10);
    const kept = await client.accepted();
    return {
      first,
      lookups: calls.filter((c) => c.url.startsWith("/operations/")).map((c) => c.url),
      expected: lookupPath(purchaseOperation(), first.id),
      posts: calls.filter((c) => c.method === "POST").length,
      polls,
      kept: kept.map((op) => op.accepted.result),
    };
  });
  assert.equal(r.first.state, "accepted", JSON.stringify(r.first));
  assert.equal(r.first.location, "/purchases/p-2");
  assert.equal(r.posts, 2);
  assert.deepEqual(r.lookups, [r.expected], "the default lookup path is the core's, per operation");
  assert.match(r.expected, /\?operation=purchases$/);
  assert.ok(r.polls >= 1);
  assert.deepEqual(r.kept, [{ status: 402, body: { code: "payment-declined" } }], "the end of a purchase found by a lookup is kept");
});

test("409 operation-failed after a lost answer is final: no resend, no lookup; kept with its Location until its end is shown", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const { json, problem } = window.t;
    const calls = [];
    const failed = { state: "failed", steps: [{ name: "confirm", state: "failed" }], result_status: 409, result: { code: "operation-failed", failed_step: "confirm" } };
    const client = await IdempotentClient.create({
      dbName: "failed-1",
      replayWindowMs: 86_400_000,
      policy: { baseMs: 1, capMs: 1, maxAttempts: 8 },
      reconcileDelayMs: 1,
      pollMinMs: 5,
      fetch: async (url, init = {}) => {
        calls.push({ url, method: init.method ?? "GET" });
        if (url.startsWith("/operations/")) return json(200, { state: "completed", purchase: "/purchases/p-3" });
        if (url === "/purchases/p-3") return json(200, failed);
        if (calls.length === 1) throw new TypeError("Failed to fetch");
        return problem(409, "operation-failed", { Location: "/purchases/p-3" });
      },
    });
    const result = await client.submit({ url: "/purchases", body: window.t.body, operation: "POST /purchases:v1" });
    for (let i = 0; i < 100 && !(await client.accepted())[0]?.accepted.ended; i++) await window.t.sleep(10);
    const kept = await client.accepted();
    return { result, calls, kept: kept.map((op) => ({ location: op.accepted.location, ended: op.accepted.ended, result: op.accepted.result, steps: op.accepted.doc?.steps?.length })) };
  });
  assert.equal(r.result.state, "stopped", JSON.stringify(r.result));
  assert.equal(r.result.problem.code, "operation-failed");
  assert.deepEqual(r.calls.map((c) => `${c.method} ${c.url}`), ["POST /purchases", "POST /purchases", "GET /purchases/p-3"], "two sends, no lookup, one poll for its steps");
  assert.deepEqual(r.kept, [{ location: "/purchases/p-3", ended: true, result: { status: 409, body: { code: "operation-failed", failed_step: "confirm" } }, steps: 1 }], "the end is kept for the page that shows it");
});

test("a late 401 to a service worker's stale token does not undo the page's sign-in (two clients, one database)", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const { json, problem } = window.t;
    const calls = [];
    let release;
    const gate = new Promise((resolve) => (release = resolve));
    let pageToken = "old";
    const fetch = (who) => async (url, init = {}) => {
      const auth = init.headers?.Authorization;
      calls.push({ who, auth, method: init.method ?? "GET" });
      if (who === "worker") await gate; // the worker's attempt is in flight while the page signs in
      if (auth === "Bearer new") return json(201, { id: "o-1" }, { Location: "/orders/o-1" });
      return problem(401, "unauthorized");
    };
    const common = { dbName: "auth-2", replayWindowMs: 86_400_000, scope: "account-7", policy: { baseMs: 1, capMs: 1, maxAttempts: 8 } };
    const page = await IdempotentClient.create({ ...common, headers: () => ({ Authorization: `Bearer ${pageToken}` }), fetch: fetch("page") });
    const worker = await IdempotentClient.create({ ...common, headers: () => ({ Authorization: "Bearer old" }), fetch: fetch("worker") });
    // The worker (Background Sync) sends an order with the token it saved
    // (the page's old one); its attempt is in flight...
    const workerRun = worker.submit({ url: "/orders", body: window.t.body, operation: "POST /orders:v1" });
    await window.t.sleep(50);
    const [{ id }] = await page.pending();
    // ...while the page signs in and resumes: its run waits for the worker's lock.
    pageToken = "new";
    const pageRun = page.accountChanged();
    await window.t.sleep(50);
    release(); // the worker's late 401
    const [workerResult, pageResults] = await Promise.all([workerRun, pageRun]);
    const later = await worker.run(id);
    return { workerResult, pageResults, later, calls, left: (await page.pending()).length };
  });
  assert.equal(r.workerResult.state, "needs-auth", JSON.stringify(r.workerResult));
  assert.deepEqual(r.pageResults.map((x) => x.state), ["done"], JSON.stringify(r.pageResults));
  assert.deepEqual(r.calls.map((c) => `${c.who} ${c.auth}`), ["worker Bearer old", "page Bearer new"], "sent once with each token");
  assert.equal(r.later.state, "finished-elsewhere");
  assert.equal(r.left, 0);
});

test("polls back off to a cap, time out, run independently, stop at the end, show a dead step as stuck, and handle 429 and 401", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const { json, problem, hang } = window.t;
    const steps = (charge) => [{ name: "reserve", state: "done" }, { name: "charge", state: charge }];
    const times = { a: [], b: [] };
    let token = "t1";
    const script = [
      () => json(200, { state: "running", steps: steps("running") }),
      () => json(200, { state: "running", steps: steps("running") }),
      () => json(200, { state: "running", steps: steps("running") }),
      () => json(200, { state: "running", steps: steps("running") }),
      () => problem(429, "too-many", { "Retry-After": "1" }),
      () => json(200, { state: "running", steps: steps("dead") }),
      () => problem(401, "unauthorized"),
      () => json(200, { state: "done", steps: steps("done"), result_status: 201, result: { id: "p-b" } }),
    ];
    let n = 0;
    const client = await IdempotentClient.create({
      dbName: "poll-1",
      replayWindowMs: 86_400_000,
      pollMinMs: 20,
      pollCapMs: 80,
      pollTimeoutMs: 50,
      headers: () => ({ Authorization: `Bearer ${token}` }),
      fetch: async (url, init = {}) => {
        if (init.method === "POST") {
          const id = JSON.parse(init.body).sku === "A" ? "a" : "b";
          return json(202, { state: "running", steps: steps("running") }, { Location: `/purchases/${id}` });
        }
        if (url === "/purchases/a") {
          times.a.push(performance.now());
          return hang(init); // a poll that never answers
        }
        times.b.push(performance.now());
        return script[Math.min(n++, script.length - 1)]();
      },
    });
    const stuck = [];
    const held = [];
    client.subscribe((e) => {
      if (e.op.accepted?.stuck) stuck.push(e.op.accepted.stuck.step);
      if (e.type === "held") held.push(e.reason);
    });
    await client.submit({ url: "/purchases", body: { sku: "A", quantity: 1 }, operation: "POST /purchases:v1" });
    await client.submit({ url: "/purchases", body: { sku: "B", quantity: 1 }, operation: "POST /purchases:v1" });
    for (let i = 0; i < 300 && held.length === 0; i++) await window.t.sleep(10);
    const pollsWhileHeld = times.b.length;
    await window.t.sleep(150);
    const pollsAfterHeld = times.b.length;
    token = "t2";
    await client.accountChanged();
    for (let i = 0; i < 300 && !(await client.accepted()).some((op) => op.accepted.location === "/purchases/b" && op.accepted.ended); i++) await window.t.sleep(10);
    const bEnded = times.b.length;
    await window.t.sleep(200);
    const gaps = times.b.slice(1).map((t, i) => Math.round(t - times.b[i]));
    return { gaps, stuck: [...new Set(stuck)], held, pollsWhileHeld, pollsAfterHeld, bEnded, bLater: times.b.length, aPolls: times.a.length };
  });
  const g = r.gaps;
  assert.ok(g.length >= 7, JSON.stringify(r));
  // Unchanged documents: 40, 80, 80 (doubling from 20 ms, capped at 80).
  assert.ok(g[0] >= 35 && g[1] >= 75 && g[2] >= 75 && g[3] >= 75, `backoff to the cap: ${g}`);
  assert.ok(g[3] < 400, `capped: ${g}`);
  assert.ok(g[4] >= 990, `429 Retry-After 1 s is honoured: ${g}`);
  assert.deepEqual(r.stuck, ["charge"], "a dead step is shown as stuck");
  assert.deepEqual(r.held, ["auth"], "401 holds the poll until sign-in");
  assert.equal(r.pollsAfterHeld, r.pollsWhileHeld, "not polled while held");
  assert.equal(r.bLater, r.bEnded, "an ended operation is no longer polled");
  assert.ok(r.aPolls >= 3, `a hung poll times out and is retried (${r.aPolls}), without stalling the other`);
});

test("a listener that throws never breaks a send", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const reported = [];
    window.addEventListener("error", (e) => {
      reported.push(e.message);
      e.preventDefault();
    });
    const client = await IdempotentClient.create({
      dbName: "listener-1",
      replayWindowMs: 86_400_000,
      fetch: async () => window.t.json(201, { id: "o-1" }),
    });
    client.subscribe(() => {
      throw new Error("QuotaExceededError: localStorage is full");
    });
    const result = await client.submit({ url: "/orders", body: window.t.body, operation: "POST /orders:v1" }).catch((e) => ({ state: "threw", message: e.message }));
    return { result, reported, left: (await client.pending()).length };
  });
  assert.equal(r.result.state, "done", JSON.stringify(r.result));
  assert.equal(r.left, 0, "not left 'sending'");
  assert.ok(r.reported.some((m) => /localStorage is full/.test(m)), "the error is reported");
});

test("the replay window is read again after its bound, outside the lock and with a timeout; an attempt in flight at its end counts as past it", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const { json, hang } = window.t;
    const out = {};
    // The server's window changes (a day, then 0 s) while the operation waits.
    {
      const calls = [];
      let windowSeconds = 86_400;
      let lockedDuringContract = false;
      const client = await IdempotentClient.create({
        dbName: "window-1",
        contractMaxAgeMs: 100,
        reconcileDelayMs: 1,
        policy: { baseMs: 400, capMs: 400, maxAttempts: 8 },
        random: () => 0.5,
        fetch: async (url, init = {}) => {
          calls.push({ url, method: init.method ?? "GET" });
          if (url === "/openapi.json") {
            const q = await navigator.locks.query();
            if (q.held.some((l) => l.name.startsWith("idemkey-op:"))) lockedDuringContract = true;
            return json(200, { "x-idempotency": { retention: { replayWindowSeconds: windowSeconds } } });
          }
          if (url.startsWith("/operations/")) return json(200, { state: "completed", order: "/orders/o-1" });
          // The server's window changes (to 0 s) after the second send.
          if (calls.filter((c) => c.method === "POST").length === 2) windowSeconds = 0;
          throw new TypeError("Failed to fetch");
        },
      });
      const result = await client.submit({ url: "/orders", body: window.t.body, operation: "POST /orders:v1" });
      out.bound = {
        result,
        contractReads: calls.filter((c) => c.url === "/openapi.json").length,
        posts: calls.filter((c) => c.method === "POST").length,
        lockedDuringContract,
      };
    }
    // Inside the window by the clock, but not once the attempt's timeout is counted.
    {
      const calls = [];
      const client = await IdempotentClient.create({
        dbName: "window-2",
        replayWindowMs: 1000,
        attemptTimeoutMs: 800,
        reconcileDelayMs: 1,
        policy: { baseMs: 600, capMs: 600, maxAttempts: 8 },
        random: () => 0.5,
        fetch: async (url, init = {}) => {
          calls.push({ url, method: init.method ?? "GET" });
          if (url.startsWith("/operations/")) return json(200, { state: "completed", order: "/orders/o-2" });
          throw new TypeError("Failed to fetch");
        },
      });
      const result = await client.submit({ url: "/orders", body: window.t.body, operation: "POST /orders:v1" });
      out.margin = { result, posts: calls.filter((c) => c.method === "POST").length };
    }
    // A contract that never answers: read with a timeout, then looked up rather than resent.
    {
      const calls = [];
      const client = await IdempotentClient.create({
        dbName: "window-3",
        attemptTimeoutMs: 100,
        reconcileDelayMs: 1,
        policy: { baseMs: 1, capMs: 1, maxAttempts: 8 },
        fetch: async (url, init = {}) => {
          calls.push({ url, method: init.method ?? "GET" });
          if (url === "/openapi.json") return hang(init);
          if (url.startsWith("/operations/")) return json(200, { state: "completed", order: "/orders/o-3" });
          throw new TypeError("Failed to fetch");
        },
      });
      const started = performance.now();
      const result = await client.submit({ url: "/orders", body: window.t.body, operation: "POST /orders:v1" });
      out.hung = { result, ms: performance.now() - started, posts: calls.filter((c) => c.method === "POST").length };
    }
    return out;
  });
  assert.equal(r.bound.result.state, "reconciled", JSON.stringify(r.bound));
  assert.equal(r.bound.posts, 2, "not resent past the server's new window");
  assert.equal(r.bound.contractReads, 2, "read again after its bound");
  assert.equal(r.bound.lockedDuringContract, false, "the contract is read outside the operation's lock");
  assert.equal(r.margin.result.state, "reconciled", JSON.stringify(r.margin));
  assert.equal(r.margin.posts, 1, "an attempt that could land past the window is looked up instead");
  assert.equal(r.hung.result.state, "reconciled", JSON.stringify(r.hung));
  assert.equal(r.hung.posts, 1);
  assert.ok(r.hung.ms < 5000, `the contract's read timed out (${r.hung.ms} ms)`);
});

test("the replay window is read again on resume after a pause (resume, pageshow, visibilitychange), before the next attempt", { timeout: 120_000 }, async () => {
  const r = await inPage(async () => {
    const { IdempotentClient } = await import("/pkg/idempotent-client.js");
    const { json } = window.t;
    const out = {};
    // The page is paused while the operation waits to be resent; meanwhile
    // the server's window shrinks from a day to 0 s. The contract's bound
    // (10 minutes by default) has not passed: only the pause says to read it.
    const pauses = {
      resume: () => document.dispatchEvent(new Event("resume")),
      pageshow: () => window.dispatchEvent(new PageTransitionEvent("pageshow", { persisted: true })),
      visibilitychange: () => document.dispatchEvent(new Event("visibilitychange")),
    };
    for (const [name, pauseEnds] of Object.entries(pauses)) {
      const calls = [];
      let windowSeconds = 86_400;
      const client = await IdempotentClient.create({
        dbName: `pause-${name}`,
        reconcileDelayMs: 1,
        policy: { baseMs: 600, capMs: 600, maxAttempts: 8 },
        random: () => 0.5,
        fetch: async (url, init = {}) => {
          calls.push({ url, method: init.method ?? "GET" });
          if (url === "/openapi.json") return json(200, { "x-idempotency": { retention: { replayWindowSeconds: windowSeconds } } });
          if (url.startsWith("/operations/")) return json(200, { state: "completed", order: `/orders/o-${name}` });
          // Both sends' answers are lost (the contract is read after the
          // first: a day). After the second the page pauses, and comes back
          // while the resend waits, after the server changed its window.
          if (calls.filter((c) => c.method === "POST").length === 2) {
            windowSeconds = 0;
            setTimeout(pauseEnds, 100);
          }
          throw new TypeError("Failed to fetch");
        },
      });
      const result = await client.submit({ url: "/orders", body: window.t.body, operation: "POST /orders:v1" });
      out[name] = {
        state: result.state,
        contractReads: calls.filter((c) => c.url === "/openapi.json").length,
        posts: calls.filter((c) => c.method === "POST").length,
      };
    }
    return out;
  });
  for (const name of ["resume", "pageshow", "visibilitychange"]) {
    assert.deepEqual(r[name], { state: "reconciled", contractReads: 2, posts: 2 }, `${name}: the contract is read again and nothing is resent past the new window`);
  }
});

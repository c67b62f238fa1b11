// IdempotentClient in the demo shop, in Debian's headless Chromium, against
// a real `idemkey-server serve --demo` (SQLite): account switches, a late
// commit after an `unknown` lookup, offline work, and two tabs of two
// accounts. Each test starts its own server, so the demo accounts ("demo",
// "demo-b") start with no orders.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, request as httpRequest } from "node:http";
import { launch } from "./browser.mjs";
import { startServer } from "./server.mjs";

/** A slow, deterministic policy: every wait is 0.9 * 6000 = 5400 ms. */
const SLOW = "baseMs=6000&capMs=6000&random=0.9";

async function openShop(context, url, signedInAs, beforeLoad = () => {}) {
  const page = await context.newPage();
  beforeLoad(page);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.errors = errors;
  await page.goto(url);
  await page.locator("#account", { hasText: `Signed in as ${signedInAs}` }).waitFor();
  return page;
}

/** Every request the page sends: method, path, Idempotency-Key, Authorization. */
function recordRequests(page) {
  const seen = [];
  page.on("request", (req) => {
    const url = new URL(req.url());
    const headers = req.headers();
    seen.push({ at: Date.now(), method: req.method(), path: url.pathname, key: headers["idempotency-key"], auth: headers.authorization });
  });
  return seen;
}

const orderPosts = (requests) => requests.filter((r) => r.method === "POST" && r.path === "/orders");

async function armLoseNextResponse(page) {
  await page.locator("#lose").check();
  await page.locator("#log li", { hasText: "armed" }).waitFor();
}

async function buy(page, sku, quantity) {
  await page.selectOption("#sku", sku);
  await page.fill("#quantity", String(quantity));
  await page.click("#buy");
}

const rowOf = (page, key, state) => page.locator(`#ops tr[data-key="${key}"]${state ? `[data-state="${state}"]` : ""}`);

test("account switch mid-retry: A's operation is never sent with B's token, B gets no order, A's finishes once on switching back", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    const page = await openShop(browser.context, `${server.base}/?${SLOW}`, "demo");
    const tokens = server.demoTokens();
    assert.ok(tokens.demo && tokens["demo-b"], "the server printed both demo tokens");
    assert.deepEqual(await page.evaluate(() => window.idemkeyDemo.accounts()), ["demo", "demo-b"], "GET /demo/tokens gave both accounts");
    const requests = recordRequests(page);

    // A's first attempt commits, its response is lost: A waits 5.4 s to retry.
    await armLoseNextResponse(page);
    await buy(page, "LIBRO-TS", 2);
    const waiting = page.locator("#ops tr[data-state='waiting']");
    await waiting.waitFor({ timeout: 10000 });
    const key = await waiting.getAttribute("data-key");
    assert.equal(server.ordersOf("demo").length, 1, "the first attempt committed");

    // B signs in in the same tab, without a reload, while A's retry waits.
    await page.selectOption("#switch-account", "demo-b");
    await page.locator("#account", { hasText: "Signed in as demo-b" }).waitFor();
    await rowOf(page, key, "held").waitFor({ timeout: 5000 });
    await page.locator("#log li", { hasText: "held: it belongs to another account" }).waitFor({ timeout: 5000 });
    // Longer than the 5.4 s wait: the retry would have gone out by now.
    const switchedAt = Date.now();
    await page.waitForTimeout(7000);
    const whileB = requests.filter((r) => r.at >= switchedAt && (r.key === `"${key}"` || r.path.includes(key)));
    assert.deepEqual(whileB, [], "nothing about A's operation is sent while B is signed in");
    assert.equal(server.ordersOf("demo-b").length, 0, "B's account has no order");

    // A signs in again: the operation resumes and replays A's one order.
    await page.selectOption("#switch-account", "demo");
    const done = rowOf(page, key, "done");
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.innerText(), /201 \(replayed\)/);

    const withKey = requests.filter((r) => r.key === `"${key}"` || r.path.includes(key));
    assert.ok(orderPosts(withKey).length >= 2, `sent again after switching back: ${orderPosts(withKey).length} sends`);
    for (const r of withKey) {
      assert.equal(r.auth, `Bearer ${tokens.demo}`, `${r.method} ${r.path} carries A's token`);
    }
    assert.equal(requests.filter((r) => r.auth === `Bearer ${tokens["demo-b"]}` && r.key).length, 0, "no keyed request with B's token");
    const orders = server.ordersOf("demo");
    assert.equal(orders.length, 1, "A's operation happened exactly once");
    assert.equal(await done.getAttribute("data-order"), orders[0][0], "the client ends with that order");
    assert.equal(server.ordersOf("demo-b").length, 0, "B's account still has no order");
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

/**
 * A reverse proxy in front of the server that holds back the next POST
 * /orders: it is forwarded only once a lookup of its key has answered
 * `unknown`, long after the client gave up on it. Later sends of the same key
 * wait until the held one has committed, so the order of events is fixed:
 * attempt, client timeout, lookup `unknown`, late commit, resend.
 */
async function startHoldingProxy(target) {
  const events = [];
  let held = null;
  const forward = (req, body) =>
    new Promise((resolve, reject) => {
      const headers = { ...req.headers };
      delete headers.host;
      delete headers.connection;
      const out = httpRequest(new URL(req.url, target), { method: req.method, headers }, (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      });
      out.on("error", reject);
      out.end(body);
    });
  const answer = (res, r) => {
    if (res.destroyed) return;
    const headers = { ...r.headers, connection: "close" };
    delete headers["transfer-encoding"];
    res.writeHead(r.status, headers).end(r.body);
  };
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    const path = new URL(req.url, target).pathname;
    const key = req.headers["idempotency-key"];
    try {
      if (req.method === "POST" && path === "/orders") {
        if (held === null) {
          let release;
          held = { key, released: new Promise((r) => (release = r)), release, committed: null };
          events.push({ what: "held", key });
          res.on("close", () => events.push({ what: "client gave up", key }));
          held.committed = held.released.then(async () => {
            events.push({ what: "late request forwarded", key });
            const r = await forward(req, body);
            events.push({ what: "late request answered", key, status: r.status, body: JSON.parse(r.body) });
            return r;
          });
          answer(res, await held.committed);
          return;
        }
        if (key === held.key) await held.committed;
        const r = await forward(req, body);
        events.push({ what: "resend answered", key, status: r.status, replayed: r.headers["idempotent-replayed"] === "true", body: JSON.parse(r.body) });
        answer(res, r);
        return;
      }
      const r = await forward(req, body);
      if (held && path === `/operations/${JSON.parse(held.key)}`) {
        const state = JSON.parse(r.body).state;
        events.push({ what: "lookup", state });
        answer(res, r);
        if (state === "unknown") held.release();
        return;
      }
      answer(res, r);
    } catch (e) {
      if (!res.destroyed) res.writeHead(502).end(String(e));
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, events, close: () => new Promise((r) => server.close(r)) };
}

test("late commit: the held-back attempt commits after the lookup said unknown; one order, and the client ends done with it", async () => {
  const server = await startServer();
  const proxy = await startHoldingProxy(server.base);
  const browser = await launch();
  try {
    const token = server.account("late-commit");
    // One attempt, then the lookup; a 1.5 s client timeout; 200 ms backoffs.
    const page = await openShop(browser.context, `${proxy.url}/?maxAttempts=1&attemptTimeoutMs=1500&baseMs=400&capMs=400&random=0.5#token=${token}`, "account");
    const requests = recordRequests(page);
    await buy(page, "TAZA-01", 4);
    const done = page.locator("#ops tr[data-state='done']");
    await done.waitFor({ timeout: 20000 });
    const key = await done.getAttribute("data-key");

    const what = proxy.events.map((e) => e.what);
    assert.deepEqual(
      what.filter((w) => w !== "client gave up").slice(0, 4),
      ["held", "lookup", "late request forwarded", "late request answered"],
      `events: ${JSON.stringify(proxy.events)}`,
    );
    assert.ok(what.indexOf("client gave up") < what.indexOf("late request forwarded"), "the client timed out before the late commit");
    assert.equal(proxy.events.find((e) => e.what === "lookup").state, "unknown");
    const late = proxy.events.find((e) => e.what === "late request answered");
    assert.equal(late.status, 201, "the delayed request committed");
    const resend = proxy.events.find((e) => e.what === "resend answered");
    assert.ok(resend, "the client resent after the unknown lookup");
    assert.equal(resend.status, 201);
    assert.equal(resend.replayed, true, "the resend replayed the late commit");
    assert.equal(resend.body.id, late.body.id);

    assert.deepEqual(new Set(orderPosts(requests).map((r) => r.key)), new Set([`"${key}"`]), "one key for every send");
    const orders = server.ordersOf("late-commit");
    assert.deepEqual(orders.map((o) => o[0]), [late.body.id], "exactly one order: the late one");
    assert.match(await done.innerText(), /201 \(replayed\)/);
    assert.equal(await done.getAttribute("data-order"), late.body.id, "the client ends done with that order");
    await page.locator("#log li", { hasText: "lookup: unknown (not committed yet)" }).waitFor();
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
    await proxy.close();
    server.stop();
  }
});

test("offline then online: Buy while offline waits without attempts; back online, one order", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    const token = server.account("offline");
    const page = await openShop(browser.context, `${server.base}/#token=${token}`, "account");
    const requests = recordRequests(page);
    await browser.context.setOffline(true);
    assert.equal(await page.evaluate(() => navigator.onLine), false);
    await buy(page, "CAMISETA-M", 1);
    const offline = page.locator("#ops tr[data-state='offline']");
    await offline.waitFor({ timeout: 5000 });
    const key = await offline.getAttribute("data-key");
    await page.waitForTimeout(1500);
    assert.deepEqual(orderPosts(requests), [], "nothing sent while offline");
    const stored = await page.evaluate(() => window.idemkeyDemo.client.pending());
    assert.equal(stored.length, 1, "the operation is stored");
    assert.equal(stored[0].attempts, 0, "no attempt counted while offline");
    assert.equal(stored[0].firstSentAt, null);
    assert.equal(server.ordersOf("offline").length, 0);

    await browser.context.setOffline(false);
    const done = rowOf(page, key, "done");
    await done.waitFor({ timeout: 10000 });
    assert.match(await done.innerText(), /done: 201/);
    assert.doesNotMatch(await done.innerText(), /replayed/);
    assert.equal(await done.locator("td").nth(2).innerText(), "1", "one attempt in all");
    assert.deepEqual(orderPosts(requests).map((r) => r.key), [`"${key}"`]);
    assert.equal(server.ordersOf("offline").length, 1);
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

test("two tabs, two accounts: B's tab never receives A's body over BroadcastChannel; A's other tab follows by id and state", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    // Every BroadcastChannel message each page receives, as sent.
    await browser.context.addInitScript(() => {
      window.__received = [];
      const Native = window.BroadcastChannel;
      window.BroadcastChannel = class extends Native {
        constructor(name) {
          super(name);
          this.addEventListener("message", (e) => window.__received.push(JSON.stringify(e.data)));
        }
      };
    });
    const a = await openShop(browser.context, `${server.base}/?${SLOW}`, "demo");
    const b = await openShop(browser.context, `${server.base}/?account=demo-b`, "demo-b");
    const a2 = await openShop(browser.context, `${server.base}/`, "demo");
    const tokens = server.demoTokens();

    await armLoseNextResponse(a);
    await buy(a, "CAMISETA-M", 7);
    const done = a.locator("#ops tr[data-state='done']");
    await done.waitFor({ timeout: 20000 });
    const key = await done.getAttribute("data-key");
    // A's other tab learnt the operation and its end from the channel alone.
    await rowOf(a2, key, "done").waitFor({ timeout: 5000 });
    await b.waitForTimeout(500);

    const inB = await b.evaluate(() => window.__received);
    const inA2 = await a2.evaluate(() => window.__received);
    assert.ok(inB.filter((m) => m.includes(key)).length >= 3, `B's tab was on the channel: ${inB.length} messages`);
    for (const [tab, messages] of [["B", inB], ["A2", inA2]]) {
      for (const m of messages) {
        for (const secret of ["CAMISETA-M", "quantity", '"body"', tokens.demo, tokens["demo-b"], "Bearer"]) {
          assert.ok(!m.includes(secret), `${tab} received ${secret}: ${m}`);
        }
      }
    }
    assert.equal(await rowOf(b, key).count(), 0, "B's tab ignores A's operation");
    assert.equal(await b.locator("#ops tr[data-key]").count(), 0);
    assert.equal(server.ordersOf("demo").length, 1);
    assert.equal(server.ordersOf("demo-b").length, 0);
    for (const page of [a, b, a2]) assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

test("background sync: Buy while offline, close the tab, back online: the service worker sends it with its account's token; one order", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    const token = server.account("background");
    const page = await openShop(browser.context, `${server.base}/#token=${token}`, "account");
    assert.equal(await page.evaluate(() => window.idemkeyDemo.worker), true, "the service worker is active");
    await browser.context.setOffline(true);
    await buy(page, "LIBRO-TS", 5);
    const offline = page.locator("#ops tr[data-state='offline']");
    await offline.waitFor({ timeout: 5000 });
    const key = await offline.getAttribute("data-key");
    const tags = await page.evaluate(async () => (await navigator.serviceWorker.getRegistration()).sync.getTags());
    assert.deepEqual(tags, ["idemkey"], "a sync is registered for when the network is back");

    // Every tab of the shop goes away while the browser is still offline.
    await page.close();
    assert.deepEqual(browser.context.pages().filter((p) => p.url().startsWith(server.base)), [], "no tab of the shop is open");
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(server.ordersOf("background").length, 0, "nothing sent while offline");

    await browser.context.setOffline(false);
    const deadline = Date.now() + 20000;
    while (server.ordersOf("background").length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(server.ordersOf("background").map((o) => [o[1], o[2]]), [["LIBRO-TS", 5]], "the worker created the one order");

    // A new tab finds nothing left to send, and the order.
    const again = await openShop(browser.context, `${server.base}/`, "account");
    await again.locator("#order-count", { hasText: /^1$/ }).waitFor({ timeout: 10000 });
    assert.deepEqual(await again.evaluate(() => window.idemkeyDemo.client.pending()), [], "the worker finished and deleted the operation");
    assert.equal(await rowOf(again, key).count(), 0);
    await again.waitForTimeout(500);
    assert.equal(server.ordersOf("background").length, 1);
    assert.deepEqual(again.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

/**
 * The operations in this origin's IndexedDB ("idemkey"), read from a page
 * that does not run the shop (so no client of its own acts on them).
 */
async function storedOperations(context, base) {
  const page = await context.newPage();
  try {
    await page.goto(`${base}/style.css`);
    return await page.evaluate(
      () =>
        new Promise((resolve, reject) => {
          const req = indexedDB.open("idemkey", 1);
          req.onupgradeneeded = () => req.result.createObjectStore("operations", { keyPath: "id" });
          req.onsuccess = () => {
            const get = req.result.transaction("operations").objectStore("operations").getAll();
            get.onsuccess = () => {
              req.result.close();
              resolve(get.result);
            };
            get.onerror = () => reject(get.error);
          };
          req.onerror = () => reject(req.error);
        }),
    );
  } finally {
    await page.close();
  }
}

/** Polls `read()` until `done(value)`, for at most `ms`; returns the last value. */
async function until(read, done, ms) {
  const deadline = Date.now() + ms;
  let value = await read();
  while (!done(value) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    value = await read();
  }
  return value;
}

/** Makes the page's first POST /orders fail with no response (it never reaches the server). */
async function loseFirstOrderRequest(page) {
  let lost = false;
  await page.route(
    (url) => url.pathname === "/orders",
    (route) => {
      if (!lost && route.request().method() === "POST") {
        lost = true;
        return route.abort("connectionreset");
      }
      return route.continue();
    },
  );
}

test("background sync after a server restart: the worker's stale token gets 401, the operation is held with its key, and the next sign-in sends it once", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    const page = await openShop(browser.context, `${server.base}/`, "demo");
    assert.equal(await page.evaluate(() => window.idemkeyDemo.worker), true, "the service worker is active");
    await browser.context.setOffline(true);
    await buy(page, "LIBRO-TS", 3);
    const offline = page.locator("#ops tr[data-state='offline']");
    await offline.waitFor({ timeout: 5000 });
    const key = await offline.getAttribute("data-key");
    await page.close();

    // Demo mode issues new tokens at each start: the ones the worker saved are revoked.
    const before = server.demoTokens().demo;
    await server.restart();
    assert.notEqual(server.demoTokens().demo, before);
    await browser.context.setOffline(false);

    // The worker's sync sends it with the stale token: 401 holds it (kept, same key).
    const held = await until(
      () => storedOperations(browser.context, server.base),
      (ops) => ops.length !== 1 || Boolean(ops[0].authHold),
      20000,
    );
    assert.equal(held.length, 1, `kept, not deleted: ${JSON.stringify(held)}`);
    assert.equal(held[0].id, key);
    assert.equal(held[0].authHold?.status, 401, JSON.stringify(held[0]));
    const demoIds = server.sql("SELECT id FROM accounts WHERE name = ?", "demo").map((row) => row[0]);
    assert.deepEqual([held[0].scope], demoIds, "scoped by the account's id, not by its token or name");
    assert.equal(server.ordersOf("demo").length, 0);

    // The page signs in with this start's token: the same key, one order.
    let requests = [];
    const again = await openShop(browser.context, `${server.base}/`, "demo", (p) => (requests = recordRequests(p)));
    const done = rowOf(again, key, "done");
    await done.waitFor({ timeout: 15000 });
    assert.deepEqual(orderPosts(requests).map((r) => r.key), [`"${key}"`]);
    assert.deepEqual(orderPosts(requests).map((r) => r.auth), [`Bearer ${server.demoTokens().demo}`]);
    assert.deepEqual(server.ordersOf("demo").map((o) => [o[1], o[2]]), [["LIBRO-TS", 3]]);
    assert.deepEqual(await again.evaluate(() => window.idemkeyDemo.client.pending()), []);
    assert.deepEqual(again.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

test("a 2 s replay window (--replay-ttl 2s): the page takes it from the contract; past it an unknown lookup needs a decision and nothing is resent", async () => {
  const server = await startServer({ extra: ["--replay-ttl", "2s", "--tombstone-ttl", "1h"] });
  const browser = await launch();
  try {
    const contract = await (await fetch(`${server.base}/openapi.json`)).json();
    assert.equal(contract["x-idempotency"].retention.replayWindowSeconds, 2);
    // Every wait is 5400 ms, well past the 2 s window.
    const page = await openShop(browser.context, `${server.base}/?${SLOW}`, "demo");
    const requests = recordRequests(page);
    await loseFirstOrderRequest(page);
    await buy(page, "CAMISETA-M", 2);
    // It ends either way: needs-decision (nothing resent), or done (resent past the window).
    const ended = page.locator("#ops tr[data-state='needs-decision'], #ops tr[data-state='done']");
    await ended.waitFor({ timeout: 20000 });
    assert.equal(await ended.getAttribute("data-state"), "needs-decision", await ended.innerText());
    const key = await ended.getAttribute("data-key");
    await page.locator("#log li", { hasText: "unknown past the replay window" }).waitFor({ timeout: 5000 });
    assert.equal(orderPosts(requests).length, 1, "only the lost first attempt: no resend past the window");
    assert.ok(requests.some((r) => r.path === `/operations/${key}`), "looked up instead");
    assert.equal(server.ordersOf("demo").length, 0);
    assert.equal((await page.evaluate(() => window.idemkeyDemo.client.pending())).length, 1, "kept for the decision");
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

test("a 2 s replay window: the service worker takes it from the contract too; an operation resumed past it is looked up, not resent", async () => {
  const server = await startServer({ extra: ["--replay-ttl", "2s", "--tombstone-ttl", "1h"] });
  const browser = await launch();
  try {
    const page = await openShop(browser.context, `${server.base}/?${SLOW}`, "demo");
    assert.equal(await page.evaluate(() => window.idemkeyDemo.worker), true, "the service worker is active");
    await loseFirstOrderRequest(page);
    await buy(page, "LIBRO-TS", 4);
    // The first attempt's answer is lost; the network goes before the resend.
    await page.locator("#log li", { hasText: "attempt 1: network error" }).waitFor({ timeout: 5000 });
    await browser.context.setOffline(true);
    const offline = page.locator("#ops tr[data-state='offline']");
    await offline.waitFor({ timeout: 15000 });
    const key = await offline.getAttribute("data-key");
    await page.close();
    await browser.context.setOffline(false);

    const ops = await until(
      () => storedOperations(browser.context, server.base),
      (list) => list.length !== 1 || Boolean(list[0].decision),
      20000,
    );
    assert.equal(ops.length, 1, `kept for a decision: ${JSON.stringify(ops)}`);
    assert.equal(ops[0].id, key);
    assert.equal(ops[0].decision?.reason, "unknown-past-window", JSON.stringify(ops[0]));
    assert.equal(ops[0].attempts, 1, "the worker sent nothing");
    assert.equal(server.ordersOf("demo").length, 0);
  } finally {
    await browser.close();
    server.stop();
  }
});

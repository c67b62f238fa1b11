// The demo shop in headless Chromium against a real `idemkey-server serve
// --demo` (SQLite) and, for purchases, a real payment provider process
// a purchase the service worker sent while every tab was closed
// is listed and shown to its end; an account opened with `#token=` and no
// name is scoped by its id (GET /account): its pending work goes with its
// own tokens only; without IndexedDB the
// page says why nothing can be bought, and sends nothing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { launch } from "./browser.mjs";
import { listeningOn, serverBin, startServer } from "./server.mjs";

async function openShop(context, url, signedIn = "Signed in") {
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.errors = errors;
  await page.goto(url);
  await page.locator("#account", { hasText: signedIn }).waitFor();
  return page;
}

/** Every request the page sends: method, path, Authorization. */
function recordRequests(page) {
  const seen = [];
  page.on("request", (req) => {
    const url = new URL(req.url());
    seen.push({ method: req.method(), path: url.pathname, auth: req.headers().authorization });
  });
  return seen;
}

async function until(read, done, ms) {
  const deadline = Date.now() + ms;
  let value = await read();
  while (!done(value) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    value = await read();
  }
  return value;
}

/** A payment provider process (`idemkey-server provider`) with this run's secret. */
async function startProvider(secret) {
  const dir = mkdtempSync(join(tmpdir(), "idemkey-provider-52-"));
  const child = spawn(serverBin, ["provider", "--bind", "127.0.0.1:0", "--database-url", `sqlite://${join(dir, "provider.db")}`], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NO_COLOR: "1", RUST_LOG: "info", IDEMKEY_PROVIDER_TOKENS: secret },
  });
  const base = await listeningOn(child, "provider");
  return {
    base,
    async charges() {
      const response = await fetch(`${base}/charges`, { headers: { Authorization: `Bearer ${secret}` } });
      return (await response.json()).charges;
    },
    stop() {
      child.kill("SIGTERM");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test("a purchase the service worker sent after every tab closed is kept for the page: a new tab lists it and shows its end", async () => {
  const secret = randomBytes(24).toString("hex");
  const provider = await startProvider(secret);
  const server = await startServer({ extra: ["--payments-url", provider.base, "--payments-token", secret] });
  const browser = await launch();
  try {
    const token = server.account("worker-purchase");
    const page = await openShop(browser.context, `${server.base}/#token=${token}`);
    assert.equal(await page.evaluate(() => window.idemkeyDemo.worker), true, "the service worker is active");
    await browser.context.setOffline(true);
    await page.selectOption("#purchase-sku", "LIBRO-TS");
    await page.fill("#purchase-quantity", "1");
    await page.click("#purchase-buy");
    await page.locator("#ops tr[data-state='offline']").waitFor({ timeout: 5000 });
    await page.close();

    // Back online with no tab open: the worker sends the purchase, and the
    // server runs it (the provider charges it).
    await browser.context.setOffline(false);
    const charges = await until(() => provider.charges(), (c) => c.length > 0, 30000);
    assert.equal(charges.length, 1, "the worker's purchase was charged once");

    // A new tab never saw the answer: the client kept the purchase for it.
    const again = await openShop(browser.context, `${server.base}/`);
    const item = again.locator("#purchases > li[data-purchase-id]");
    await item.first().waitFor({ timeout: 10000 });
    assert.equal(await item.count(), 1, "the purchase is listed");
    await again.locator('#purchases > li[data-result-status="201"][data-outcome="paid"]').waitFor({ timeout: 30000 });
    // Its end was shown: kept by the page, acknowledged to the client.
    const left = await until(() => again.evaluate(() => window.idemkeyDemo.client.accepted()), (ops) => ops.length === 0, 5000);
    assert.deepEqual(left, [], "acknowledged once shown");
    await again.reload();
    await again.locator('#purchases > li[data-result-status="201"]').waitFor({ timeout: 10000 });
    assert.equal((await provider.charges()).length, 1, "one charge in all");
    assert.deepEqual(again.errors, []);
  } finally {
    await browser.close();
    server.stop();
    provider.stop();
  }
});

test("a step shows uncertain from the state document's maybe_sent only, never from its attempt count", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    const token = server.account("uncertain");
    // The server's documents for one purchase, scripted: the charge step
    // retried twice without being sent (no maybe_sent), then after a lost
    // answer (maybe_sent, first attempt).
    const id = "5b1c7f3e-8a2d-4c6b-9e1f-0a3b5c7d9e11";
    let charge = { name: "charge", state: "running", attempts: 3 };
    const doc = (status) => ({
      type: "https://idemkey.dev/problems/operation-in-progress",
      title: "Operation in progress",
      status,
      detail: "The operation was accepted and is running.",
      code: "operation-in-progress",
      operation: "purchase",
      id,
      state: "running",
      step: "charge",
      steps: [{ name: "reserve", state: "done", attempts: 1 }, charge, { name: "confirm", state: "pending" }],
    });
    await browser.context.route(
      (url) => url.pathname === "/purchases" || url.pathname === `/purchases/${id}`,
      (route) => {
        const status = route.request().method() === "POST" ? 202 : 200;
        return route.fulfill({ status, headers: { "content-type": "application/json", location: `/purchases/${id}` }, body: JSON.stringify(doc(status)) });
      },
    );
    const page = await openShop(browser.context, `${server.base}/#token=${token}`);
    await page.selectOption("#purchase-sku", "LIBRO-TS");
    await page.fill("#purchase-quantity", "1");
    await page.click("#purchase-buy");
    const step = (attrs) => page.locator(`#purchase-${id} li[data-step="charge"]${attrs}`);
    await step('[data-attempts="3"]').waitFor({ timeout: 10000 });
    assert.equal(await step("").getAttribute("data-uncertain"), null, "a later attempt is not a sign that one was sent");
    assert.match(await step("").innerText(), /running/);
    charge = { name: "charge", state: "running", attempts: 1, maybe_sent: true };
    await step('[data-attempts="1"][data-uncertain="true"]').waitFor({ timeout: 15000 });
    assert.match(await step("").innerText(), /uncertain/);
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

test("#token= with no name: the scope is the account's id, so X's pending order is never sent with Y's token and is sent with X's other token", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    const x = server.account("fragment-x");
    const y = server.account("fragment-y");
    // A second token of X's account: the same account, another token.
    const x2 = execFileSync(serverBin, ["token", "create", "fragment-x", "--database-url", server.dbUrl], { encoding: "utf8" }).trim().split("\n").pop();
    const idOf = (name) => server.sql("SELECT id FROM accounts WHERE name = ?", name)[0][0];
    // X's first attempt never reaches the server (the connection drops);
    // its retry waits 5.4 s, and X's tab closes meanwhile.
    const first = await browser.context.newPage();
    await first.route(
      (url) => url.pathname === "/orders",
      (route) => (route.request().method() === "POST" ? route.abort("connectionreset") : route.continue()),
    );
    await first.goto(`${server.base}/?baseMs=6000&capMs=6000&random=0.9#token=${x}`);
    await first.locator("#account", { hasText: "Signed in" }).waitFor();
    assert.equal(await first.evaluate(() => window.idemkeyDemo.scope()), idOf("fragment-x"), "X's scope is its account's id");
    await first.selectOption("#sku", "LIBRO-TS");
    await first.fill("#quantity", "2");
    await first.click("#buy");
    await first.locator("#ops tr[data-state='waiting']").waitFor({ timeout: 5000 });
    await first.close();

    // Y opens the shop with its own token, also with no name.
    const second = await openShop(browser.context, `${server.base}/#token=${y}`);
    assert.equal(await second.evaluate(() => window.idemkeyDemo.scope()), idOf("fragment-y"), "Y's scope is its account's id");
    const requests = recordRequests(second);
    await second.waitForTimeout(7000);
    assert.deepEqual(server.ordersOf("fragment-y"), [], "Y got no order");
    assert.deepEqual(requests.filter((r) => r.method === "POST" && r.path === "/orders"), [], "nothing sent with Y's token");
    assert.deepEqual(server.ordersOf("fragment-x"), [], "held for X");
    await second.close();

    // X's account again, with its other token: the same scope (its id, not
    // the token), so its order is sent with that token, once.
    const third = await openShop(browser.context, `${server.base}/#token=${x2}`);
    assert.equal(await third.evaluate(() => window.idemkeyDemo.scope()), idOf("fragment-x"));
    const orders = await until(() => server.ordersOf("fragment-x"), (o) => o.length > 0, 15000);
    assert.deepEqual(orders.map((o) => [o[1], o[2]]), [["LIBRO-TS", 2]]);
    assert.deepEqual(server.ordersOf("fragment-y"), []);
    assert.deepEqual(third.errors, []);
  } finally {
    await browser.close();
    server.stop();
  }
});

test("without IndexedDB the page says why nothing can be bought, and sends nothing", async () => {
  const server = await startServer();
  const browser = await launch();
  try {
    const page = await browser.context.newPage();
    await page.addInitScript(() => {
      Object.defineProperty(window, "indexedDB", { value: undefined, configurable: true });
    });
    const requests = recordRequests(page);
    await page.goto(`${server.base}/`);
    const note = page.locator("#no-store");
    await note.waitFor({ timeout: 10000 });
    assert.match(await note.innerText(), /Nothing can be bought in this browser/);
    assert.equal(await page.locator("#buy").isDisabled(), true);
    assert.equal(await page.locator("#purchase-buy").isDisabled(), true);
    await page.locator("#buy").click({ force: true });
    await page.locator("#purchase-buy").click({ force: true });
    await page.waitForTimeout(1000);
    assert.deepEqual(
      requests.filter((r) => r.method === "POST"),
      [],
      "no POST at all",
    );
    assert.deepEqual(server.ordersOf("demo"), []);
  } finally {
    await browser.close();
    server.stop();
  }
});

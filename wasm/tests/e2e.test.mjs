// End to end: js-demo in Debian's headless Chromium against a real
// `idemkey-server serve --demo` on SQLite, 127.0.0.1 and a free port.
//
// IDEMKEY_SERVER_BIN names the server binary (default: the debug build in
// CARGO_TARGET_DIR or target/). IDEMKEY_ARTIFACTS is where screenshots go
// (default ~/.cache/idemkey/artifacts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { launch } from "./browser.mjs";
import { startServer } from "./server.mjs";

const artifacts = process.env.IDEMKEY_ARTIFACTS ?? join(homedir(), ".cache", "idemkey", "artifacts");

/** A slow, deterministic policy: every wait is 0.9 * 6000 = 5400 ms. */
const SLOW = "?baseMs=6000&capMs=6000&random=0.9";

let server;
let base;

before(async () => {
  server = await startServer();
  base = server.base;
});

after(() => server?.stop());

/** A fresh account for one test; its token. */
const account = (name) => server.account(name);

/** Orders of the account called `name`, straight from the database. */
const ordersInDb = (name) => server.ordersOf(name);

async function openShop(context, token, query = "") {
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.errors = errors;
  await page.goto(`${base}/${query}#token=${token}`);
  await page.locator("#account", { hasText: "Signed in" }).waitFor();
  return page;
}

/** POST /orders requests a page sends, with their keys. */
function recordOrderPosts(page) {
  const posts = [];
  page.on("request", (req) => {
    if (req.method() === "POST" && new URL(req.url()).pathname === "/orders") posts.push(req.headers()["idempotency-key"]);
  });
  return posts;
}

async function armLoseNextResponse(page) {
  await page.locator("#lose").check();
  await page.locator("#log li", { hasText: "armed" }).waitFor();
}

async function buy(page, sku, quantity) {
  await page.selectOption("#sku", sku);
  await page.fill("#quantity", String(quantity));
  await page.click("#buy");
}

const row = (page, state) => page.locator(`#ops tr[data-state="${state}"]`);

async function screenshot(page, name) {
  mkdirSync(artifacts, { recursive: true });
  const path = join(artifacts, name);
  await page.screenshot({ path, fullPage: true });
  console.log(`# screenshot: ${path}`);
  return path;
}

test("a lost response is retried with the same key: one order on the page and in the database", async () => {
  const token = account("e2e-lost");
  const browser = await launch();
  try {
    const page = await openShop(browser.context, token);
    const posts = recordOrderPosts(page);
    await armLoseNextResponse(page);
    await buy(page, "LIBRO-TS", 2);
    const done = row(page, "done");
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.innerText(), /201 \(replayed\)/);
    const key = await done.getAttribute("data-key");
    assert.ok(posts.length >= 2, `retried: ${posts.length} sends`);
    assert.deepEqual(new Set(posts), new Set([`"${key}"`]), "every send used the same key");
    assert.equal(ordersInDb("e2e-lost").length, 1);
    await page.locator("#order-count", { hasText: /^1$/ }).waitFor();
    assert.equal(await page.locator("#orders li").count(), 1);
    await page.locator("#log li", { hasText: "network error" }).first().waitFor();
    assert.deepEqual(page.errors, []);
    await screenshot(page, "demo-lost-response.png");
  } finally {
    await browser.close();
  }
});

test("a reload in the middle of the retries resumes with the same key: one order", async () => {
  const token = account("e2e-reload");
  const browser = await launch();
  try {
    const page = await openShop(browser.context, token, SLOW);
    await armLoseNextResponse(page);
    await buy(page, "TAZA-01", 3);
    const waiting = row(page, "waiting");
    await waiting.waitFor({ timeout: 10000 });
    const key = await waiting.getAttribute("data-key");
    assert.equal(ordersInDb("e2e-reload").length, 1, "the first attempt committed");
    const posts = recordOrderPosts(page);
    await page.reload();
    const done = page.locator(`#ops tr[data-key="${key}"][data-state="done"]`);
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.innerText(), /201 \(replayed\)/);
    assert.deepEqual(posts, [`"${key}"`], "after the reload: one send, with the stored key");
    assert.equal(ordersInDb("e2e-reload").length, 1);
    await page.locator("#order-count", { hasText: /^1$/ }).waitFor();
  } finally {
    await browser.close();
  }
});

test("two tabs with the same pending operation: only the lock holder sends", async () => {
  const token = account("e2e-tabs");
  const browser = await launch();
  try {
    const first = await openShop(browser.context, token, SLOW);
    await armLoseNextResponse(first);
    await buy(first, "CAMISETA-M", 1);
    await row(first, "waiting").waitFor({ timeout: 10000 });
    const key = await row(first, "waiting").getAttribute("data-key");

    // The second tab finds the operation in IndexedDB, but not its lock.
    const second = await openShop(browser.context, token, SLOW);
    const secondPosts = recordOrderPosts(second);
    await second.locator(`#ops tr[data-key="${key}"][data-state="busy"]`).waitFor({ timeout: 10000 });
    await second.waitForTimeout(1000);
    assert.deepEqual(secondPosts, [], "the second tab does not send while the first holds the lock");

    // The first tab goes away mid-wait: the second takes the lock over and finishes.
    await first.close();
    const done = second.locator(`#ops tr[data-key="${key}"][data-state="done"]`);
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.innerText(), /201 \(replayed\)/);
    assert.deepEqual(secondPosts, [`"${key}"`]);
    assert.equal(ordersInDb("e2e-tabs").length, 1);
  } finally {
    await browser.close();
  }
});

test("another quantity under the same pending key: 422, nothing is created, and the key is looked up to the order its lost answer created", async () => {
  const token = account("e2e-reuse");
  const browser = await launch();
  try {
    const page = await openShop(browser.context, token, SLOW);
    await armLoseNextResponse(page);
    await buy(page, "LIBRO-TS", 2);
    await row(page, "waiting").waitFor({ timeout: 10000 });
    assert.equal(ordersInDb("e2e-reuse").length, 1, "the lost response's order");
    const [[orderId]] = ordersInDb("e2e-reuse");
    await page.click("#ops tr[data-state='waiting'] button.force");
    // The 422 proves the key has a record: after the lost answer it may be
    // this operation's order, so the client looks it up instead of ending it.
    await page.locator("#log li", { hasText: "HTTP 422 → reconcile" }).waitFor({ timeout: 10000 });
    const reconciled = row(page, "reconciled");
    await reconciled.waitFor({ timeout: 10000 });
    assert.match(await reconciled.innerText(), /reconciled: completed/);
    assert.equal(await reconciled.getAttribute("data-order"), orderId, "the order the lost answer created");
    assert.deepEqual(
      ordersInDb("e2e-reuse").map(([, sku, quantity]) => [sku, quantity]),
      [["LIBRO-TS", 2]],
      "nothing created: the original order is untouched",
    );
    await page.locator("#order-count", { hasText: /^1$/ }).waitFor();
    assert.equal((await page.evaluate(() => window.idemkeyDemo.client.pending())).length, 0, "a final answer deletes the operation");
    await screenshot(page, "demo.png");
  } finally {
    await browser.close();
  }
});

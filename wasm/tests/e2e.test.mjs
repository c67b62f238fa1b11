// End to end: js-demo in Debian's headless Chromium against a real
// `idemkey-server serve --demo` on SQLite, 127.0.0.1 and a free port.
//
// IDEMKEY_SERVER_BIN names the server binary (default: the debug build in
// CARGO_TARGET_DIR or target/). IDEMKEY_ARTIFACTS is where screenshots go
// (default ~/.cache/idemkey/artifacts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { launch } from "./browser.mjs";

const root = fileURLToPath(new URL("../../", import.meta.url));
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, "target");
const serverBin = process.env.IDEMKEY_SERVER_BIN ?? join(targetDir, "debug", "idemkey-server");
const artifacts = process.env.IDEMKEY_ARTIFACTS ?? join(homedir(), ".cache", "idemkey", "artifacts");

/** A slow, deterministic policy: every wait is 0.9 * 6000 = 5400 ms. */
const SLOW = "?baseMs=6000&capMs=6000&random=0.9";

let dir;
let dbPath;
let dbUrl;
let server;
let base;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "idemkey-e2e-"));
  dbPath = join(dir, "demo.db");
  dbUrl = `sqlite://${dbPath}`;
  server = spawn(serverBin, ["serve", "--demo", "--demo-dir", join(root, "js-demo"), "--database-url", dbUrl, "--bind", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NO_COLOR: "1", RUST_LOG: "info" },
  });
  base = await new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${seen}`)), 30000);
    const read = (chunk) => {
      seen += chunk;
      const m = seen.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    server.stdout.on("data", read);
    server.stderr.on("data", read);
    server.on("exit", (code) => reject(new Error(`server exited with ${code}:\n${seen}`)));
  });
});

after(() => {
  server?.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A fresh account for one test; its token is the last line of stdout. */
function account(name) {
  const out = execFileSync(serverBin, ["account", "create", name, "--database-url", dbUrl], { encoding: "utf8" });
  return out.trim().split("\n").pop();
}

function sql(query, ...args) {
  const script = "import sqlite3,sys,json; c=sqlite3.connect(sys.argv[1]); print(json.dumps(c.execute(sys.argv[2], sys.argv[3:]).fetchall()))";
  return JSON.parse(execFileSync("python3", ["-c", script, dbPath, query, ...args], { encoding: "utf8" }));
}

/** Orders of the account called `name`, straight from the database. */
function ordersInDb(name) {
  return sql("SELECT o.id, o.sku, o.quantity FROM orders o JOIN accounts a ON a.id = o.account_id WHERE a.name = ?", name);
}

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

test("another quantity under the same pending key: the 422 problem is shown, nothing is created", async () => {
  const token = account("e2e-reuse");
  const browser = await launch();
  try {
    const page = await openShop(browser.context, token, SLOW);
    await armLoseNextResponse(page);
    await buy(page, "LIBRO-TS", 2);
    await row(page, "waiting").waitFor({ timeout: 10000 });
    assert.equal(ordersInDb("e2e-reuse").length, 1, "the lost response's order");
    await page.click("#ops tr[data-state='waiting'] button.force");
    const stopped = row(page, "stopped");
    await stopped.waitFor({ timeout: 10000 });
    const text = await stopped.innerText();
    assert.match(text, /422 idempotency-key-reused/);
    assert.match(text, /reused with another payload/);
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

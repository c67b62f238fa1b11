// Issue 12, item 9: the demo's payment story in Debian's headless Chromium
// against a real `idemkey-server serve --demo` on SQLite that delivers each
// order's charge to a real `idemkey-server provider` (SQLite too, a secret of
// this run, --latency-ms so a pending payment stays on the page long enough
// to be seen). Also the purchases of three steps (reserve, charge,
// confirm) on the same page, each step moving, a confirmation's answer lost
// on purpose, a declined card undone, no stock. Run by
// scripts/test.d/55-demo-payments.sh; reuses the browser and server helpers
// of wasm/tests/.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { launch } from "../../wasm/tests/browser.mjs";
import { listeningOn, serverBin, startServer } from "../../wasm/tests/server.mjs";

const artifacts = process.env.IDEMKEY_ARTIFACTS ?? join(homedir(), ".cache", "idemkey", "artifacts");
const SECRET = randomBytes(24).toString("hex");
/** Every provider answer this late: the page shows a payment pending before it is charged. */
const LATENCY_MS = 1500;
const SETTLE_MS = 30000;

/** A real provider process on 127.0.0.1 and a free port. */
async function startProvider() {
  const dir = mkdtempSync(join(tmpdir(), "idemkey-provider-e2e-"));
  const child = spawn(
    process.env.IDEMKEY_PROVIDER_BIN ?? serverBin,
    ["provider", "--bind", "127.0.0.1:0", "--database-url", `sqlite://${join(dir, "provider.db")}`, "--latency-ms", String(LATENCY_MS)],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1", RUST_LOG: "info", IDEMKEY_PROVIDER_TOKENS: SECRET } },
  );
  const base = await listeningOn(child, "provider");
  return {
    base,
    /** The provider's charges of this run's secret, oldest first. */
    async charges() {
      const response = await fetch(`${base}/charges`, { headers: { Authorization: `Bearer ${SECRET}` } });
      assert.equal(response.status, 200);
      return (await response.json()).charges;
    },
    /** The provider's confirmations (its mail sink) of this run's secret, oldest first. */
    async confirmations() {
      const response = await fetch(`${base}/confirmations`, { headers: { Authorization: `Bearer ${SECRET}` } });
      assert.equal(response.status, 200);
      return (await response.json()).confirmations;
    },
    stop() {
      child.kill("SIGTERM");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

let provider;
let server;

before(async () => {
  provider = await startProvider();
  server = await startServer({ extra: ["--payments-url", provider.base, "--payments-token", SECRET] });
});

after(() => {
  server?.stop();
  provider?.stop();
});

async function openShop(context, token) {
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.errors = errors;
  await page.goto(`${server.base}/#token=${token}`);
  await page.locator("#account", { hasText: "Signed in" }).waitFor();
  return page;
}

/** Buys and returns the new order's id (from the operations table). */
async function buy(page, sku, quantity, reference = "") {
  const before = await page.locator("#ops tr[data-order]").count();
  await page.selectOption("#sku", sku);
  await page.fill("#quantity", String(quantity));
  await page.fill("#reference", reference);
  await page.click("#buy");
  await page.waitForFunction((n) => document.querySelectorAll("#ops tr[data-order]").length > n, before, { timeout: SETTLE_MS });
  // Newest first.
  return page.locator("#ops tr[data-order]").first().getAttribute("data-order");
}

/** Buys in three steps (POST /purchases) and returns the purchase's id (from the purchases panel). */
async function buyPurchase(page, sku, quantity) {
  const before = await page.locator("#purchases > li").count();
  await page.selectOption("#purchase-sku", sku);
  await page.fill("#purchase-quantity", String(quantity));
  await page.click("#purchase-buy");
  await page.waitForFunction((n) => document.querySelectorAll("#purchases > li").length > n, before, { timeout: SETTLE_MS });
  // Newest first.
  return page.locator("#purchases > li").first().getAttribute("data-purchase-id");
}

/** The purchase's item in the purchases panel, and one of its steps. */
const purchaseItem = (page, id) => page.locator(`#purchases > li[data-purchase-id="${id}"]`);
const stepOf = (page, id, name, extra = "") => page.locator(`#purchases > li[data-purchase-id="${id}"] ol.steps > li[data-step="${name}"]${extra}`);

/** The log's lines, oldest first. */
async function logLines(page) {
  return (await page.locator("#log li").allInnerTexts()).reverse();
}

/** Sets a product's stock in the server's database (committed), all of it in its first stripe. */
function setStock(sku, stock) {
  const script = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=10); c.execute('UPDATE product_stock SET stock = CASE WHEN stripe = 0 THEN ? ELSE 0 END WHERE sku = ?', (int(sys.argv[2]), sys.argv[3])); c.commit()";
  execFileSync("python3", ["-c", script, server.dbUrl.slice("sqlite://".length), String(stock), sku]);
}

/** The order's line in the orders panel. */
const orderLine = (page, id) => page.locator(`#orders li[data-order-id="${id}"]`);

async function screenshot(page, name) {
  mkdirSync(artifacts, { recursive: true });
  const path = join(artifacts, name);
  await page.screenshot({ path, fullPage: true });
  console.log(`# screenshot: ${path}`);
}

test("an order's payment goes from pending to charged in the page, with its amount and reference", async () => {
  const browser = await launch();
  try {
    const page = await openShop(browser.context, server.account("pay-charged"));
    const id = await buy(page, "LIBRO-TS", 2, "PO-1001");
    const line = orderLine(page, id);
    await page.locator(`#orders li[data-order-id="${id}"][data-payment="pending"]`).waitFor({ timeout: SETTLE_MS });
    assert.match(await line.innerText(), /59\.80 EUR/);
    assert.match(await line.innerText(), /ref PO-1001/);
    assert.match(await line.innerText(), /payment pending/);
    await page.locator(`#orders li[data-order-id="${id}"][data-payment="charged"]`).waitFor({ timeout: SETTLE_MS });
    const charges = (await provider.charges()).filter((c) => c.order_id === id);
    assert.equal(charges.length, 1);
    assert.equal(charges[0].amount_cents, 5980);
    assert.equal(await line.locator(".charge-id").innerText(), charges[0].id);
    assert.equal(await line.getAttribute("data-attempts"), "1");
    await page.locator("#log li", { hasText: `charged ${charges[0].id}` }).waitFor();
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
  }
});

test("the provider's answer lost on purpose: the order still ends charged, with exactly one charge", async () => {
  const browser = await launch();
  try {
    const page = await openShop(browser.context, server.account("pay-lost"));
    await page.click("#lose-charge");
    await page.locator("#log li", { hasText: "armed: the payment provider" }).waitFor();
    assert.ok(await page.locator("#lose-charge-state").isVisible());
    const id = await buy(page, "TAZA-01", 1);
    const charged = page.locator(`#orders li[data-order-id="${id}"][data-payment="charged"]`);
    await charged.waitFor({ timeout: SETTLE_MS });
    // The first delivery's answer was lost after the charge committed; a
    // later attempt found it (lookup by key, or the key's replay).
    assert.ok(Number(await charged.getAttribute("data-attempts")) >= 2, "the lost answer cost an attempt");
    const charges = (await provider.charges()).filter((c) => c.order_id === id);
    assert.equal(charges.length, 1, "exactly one charge at the provider");
    assert.equal(charges[0].amount_cents, 990);
    assert.equal(await charged.locator(".charge-id").innerText(), charges[0].id);
    assert.ok(!(await page.locator("#lose-charge-state").isVisible()), "the switch shows disarmed once charged");
    assert.deepEqual(page.errors, []);
    await screenshot(page, "demo-payment-reconciled.png");
  } finally {
    await browser.close();
  }
});

test("a DECLINE-TEST order ends failed with the provider's reason, and no charge", async () => {
  const browser = await launch();
  try {
    const page = await openShop(browser.context, server.account("pay-declined"));
    const id = await buy(page, "DECLINE-TEST", 1);
    const failed = page.locator(`#orders li[data-order-id="${id}"][data-payment="failed"]`);
    await failed.waitFor({ timeout: SETTLE_MS });
    assert.match(await failed.innerText(), /4\.02 EUR/);
    assert.match(await failed.locator(".reason").innerText(), /payment-declined/);
    assert.deepEqual((await provider.charges()).filter((c) => c.order_id === id), []);
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
  }
});

test("a purchase reference used again gets 409 order-reference-exists, shown with a link to the order", async () => {
  const browser = await launch();
  try {
    const page = await openShop(browser.context, server.account("pay-reference"));
    const first = await buy(page, "CAFE-1KG", 1, "PO-7");
    await page.selectOption("#sku", "TAZA-02");
    await page.fill("#reference", "PO-7");
    await page.click("#buy");
    const link = page.locator("#ops a.existing-order");
    await link.waitFor({ timeout: SETTLE_MS });
    assert.equal(await link.getAttribute("href"), `#order-${first}`);
    assert.equal(server.ordersOf("pay-reference").length, 1, "nothing created");
    await link.click();
    assert.equal(new URL(page.url()).hash, `#order-${first}`);
    assert.deepEqual(page.errors, []);
    await screenshot(page, "demo-reference-exists.png");
  } finally {
    await browser.close();
  }
});

test("a purchase's steps move on the page; the confirmation's answer lost on purpose: confirm goes uncertain, then done, with one confirmation", async () => {
  const browser = await launch();
  try {
    const page = await openShop(browser.context, server.account("buy-confirm-lost"));
    await page.click("#lose-step-confirm");
    await page.locator("#log li", { hasText: "armed: the provider's mail sink" }).waitFor();
    assert.ok(await page.locator("#lose-step-confirm-state").isVisible());
    assert.ok(!(await page.locator("#lose-step-charge-state").isVisible()), "one switch at a time");
    const id = await buyPurchase(page, "TAZA-01", 1);
    // The client's part ended with the 202 (in progress), and the page polls.
    await page.locator(`#ops tr[data-purchase="${id}"]`, { hasText: "accepted: 202, in progress" }).waitFor({ timeout: SETTLE_MS });
    await stepOf(page, id, "reserve", '[data-state="done"]').waitFor({ timeout: SETTLE_MS });
    // The confirmation committed at the provider and its answer was lost:
    // the next attempt looks it up by the step's key.
    const uncertain = stepOf(page, id, "confirm", '[data-state="running"][data-uncertain="true"]');
    await uncertain.waitFor({ timeout: SETTLE_MS });
    assert.match(await uncertain.innerText(), /uncertain/);
    assert.match(await uncertain.innerText(), /looked up by the step's key/);
    assert.equal(await stepOf(page, id, "charge").getAttribute("data-state"), "done");
    await screenshot(page, "demo-purchase-uncertain.png");

    const paid = purchaseItem(page, id).and(page.locator('[data-state="done"][data-result-status="201"]'));
    await paid.waitFor({ timeout: SETTLE_MS });
    const confirm = stepOf(page, id, "confirm", '[data-state="done"]');
    assert.ok(Number(await confirm.getAttribute("data-attempts")) >= 2, "the lost answer cost an attempt");
    assert.equal(await confirm.getAttribute("data-uncertain"), null);
    const confirmations = (await provider.confirmations()).filter((c) => c.order_id === id);
    assert.equal(confirmations.length, 1, "exactly one confirmation at the provider");
    assert.equal(await paid.locator(".confirmation-id").innerText(), confirmations[0].id);
    const charges = (await provider.charges()).filter((c) => c.order_id === id);
    assert.equal(charges.length, 1);
    assert.equal(await paid.locator(".charge-id").innerText(), charges[0].id);
    assert.match(await paid.locator(".purchase-result").innerText(), /paid \(201\): 9\.90 EUR/);
    assert.ok(!(await page.locator("#lose-step-confirm-state").isVisible()), "the switch shows disarmed once confirmed");

    // The log shows the confirm step moving, in order.
    const lines = (await logLines(page)).filter((l) => l.includes(`purchase ${id.slice(0, 8)}`) && l.includes(": confirm "));
    const order = ["confirm uncertain (attempt 2)", "confirm done (attempt"].map((text) => lines.findIndex((l) => l.includes(text)));
    assert.ok(order.every((i) => i >= 0) && order[0] < order[1], lines.join("\n"));
    assert.deepEqual(page.errors, []);
    await screenshot(page, "demo-purchase-confirmed.png");
  } finally {
    await browser.close();
  }
});

test("a DECLINE-TEST purchase ends declined (402) with its reservation released: reserve compensated, no charge", async () => {
  const browser = await launch();
  try {
    const page = await openShop(browser.context, server.account("buy-declined"));
    const id = await buyPurchase(page, "DECLINE-TEST", 1);
    const declined = purchaseItem(page, id).and(page.locator('[data-state="failed"][data-result-status="402"]'));
    await declined.waitFor({ timeout: SETTLE_MS });
    assert.equal(await declined.getAttribute("data-outcome"), "declined");
    assert.equal(await stepOf(page, id, "reserve").getAttribute("data-state"), "compensated");
    assert.match(await stepOf(page, id, "reserve").innerText(), /reservation was released/);
    assert.equal(await stepOf(page, id, "charge").getAttribute("data-state"), "failed");
    assert.equal(await stepOf(page, id, "confirm").getAttribute("data-state"), "pending");
    assert.match(await declined.locator(".purchase-result").innerText(), /declined \(402 payment-declined/);
    assert.deepEqual(server.sql("SELECT state FROM reservations WHERE id = ?", id), [["released"]]);
    assert.deepEqual((await provider.charges()).filter((c) => c.order_id === id), []);
    assert.deepEqual((await provider.confirmations()).filter((c) => c.order_id === id), []);
    // The operations table links the key's row to the purchase.
    assert.equal(await page.locator(`#ops tr[data-purchase="${id}"] a`).getAttribute("href"), `#purchase-${id}`);
    assert.deepEqual(page.errors, []);
    await screenshot(page, "demo-purchase-declined.png");
  } finally {
    await browser.close();
  }
});

test("a purchase without stock ends at once with 409 out-of-stock: nothing reserved or charged", async () => {
  const browser = await launch();
  setStock("LAMPARA-9", 0);
  try {
    const page = await openShop(browser.context, server.account("buy-no-stock"));
    const id = await buyPurchase(page, "LAMPARA-9", 1);
    const none = purchaseItem(page, id).and(page.locator('[data-state="failed"][data-result-status="409"]'));
    await none.waitFor({ timeout: SETTLE_MS });
    assert.equal(await none.getAttribute("data-outcome"), "out-of-stock");
    assert.equal(await stepOf(page, id, "reserve").getAttribute("data-state"), "failed");
    assert.equal(await stepOf(page, id, "charge").getAttribute("data-state"), "pending");
    assert.match(await none.locator(".purchase-result").innerText(), /out of stock \(409 out-of-stock\)/);
    await page.locator(`#ops tr[data-purchase="${id}"]`, { hasText: "stopped: 409 out-of-stock" }).waitFor();
    assert.deepEqual(server.sql("SELECT count(*) FROM reservations WHERE id = ?", id), [[0]]);
    assert.deepEqual((await provider.charges()).filter((c) => c.order_id === id), []);
    assert.deepEqual(page.errors, []);
  } finally {
    setStock("LAMPARA-9", 1000000);
    await browser.close();
  }
});

test("a reload shows this browser's purchases again, with their steps", async () => {
  const browser = await launch();
  try {
    const page = await openShop(browser.context, server.account("buy-reload"));
    const id = await buyPurchase(page, "CAFE-1KG", 1);
    await purchaseItem(page, id).and(page.locator('[data-state="done"]')).waitFor({ timeout: SETTLE_MS });
    await page.reload();
    await page.locator("#account", { hasText: "Signed in" }).waitFor();
    const again = purchaseItem(page, id).and(page.locator('[data-state="done"][data-result-status="201"]'));
    await again.waitFor({ timeout: SETTLE_MS });
    assert.equal(await again.locator("ol.steps > li[data-state=done]").count(), 3);
    assert.deepEqual(page.errors, []);
  } finally {
    await browser.close();
  }
});

test("the provider switches answer only the demo's own page", async () => {
  for (const path of ["/demo/lose-next-charge-response", "/demo/lose-next-step-response?step=confirm"]) {
    const refused = await fetch(`${server.base}${path}`, {
      method: "POST",
      headers: { "Sec-Fetch-Site": "cross-site" },
    });
    assert.equal(refused.status, 403);
    assert.equal((await refused.json()).code, "cross-site-request");
  }
});

test("without a payment provider the switch answers 404 and the page says so", async () => {
  const alone = await startServer();
  const browser = await launch();
  try {
    const response = await fetch(`${alone.base}/demo/lose-next-charge-response`, { method: "POST" });
    assert.equal(response.status, 404);
    const page = await browser.context.newPage();
    await page.goto(`${alone.base}/#token=${alone.account("pay-none")}`);
    await page.locator("#account", { hasText: "Signed in" }).waitFor();
    await page.click("#lose-charge");
    await page.locator("#log li", { hasText: "no payment provider to switch" }).waitFor();
    assert.ok(!(await page.locator("#lose-charge-state").isVisible()));
    const step = await fetch(`${alone.base}/demo/lose-next-step-response?step=confirm`, { method: "POST" });
    assert.equal(step.status, 404);
    await page.click("#lose-step-confirm");
    await page.waitForFunction(() => [...document.querySelectorAll("#log li")].filter((li) => li.textContent.includes("no payment provider to switch")).length >= 2);
    assert.ok(!(await page.locator("#lose-step-confirm-state").isVisible()));
  } finally {
    await browser.close();
    alone.stop();
  }
});

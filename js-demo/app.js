// The demo shop: buys through IdempotentClient and shows what happens.
//
// Demo knobs in the query string (for people and for the browser tests):
//   ?baseMs=4000&capMs=4000&maxAttempts=8  the retry policy
//   &random=0.9                            a fixed jitter draw instead of Math.random
import { IdempotentClient } from "./pkg/idempotent-client.js";
import init, { defaultRetryPolicy, orderOperation, validateOrder } from "./pkg/idemkey_wasm.js";

const TOKEN_KEY = "idemkey-demo-token";
const HISTORY_KEY = "idemkey-demo-keys";
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

/**
 * The demo account's token: a #token= fragment, else this browser's copy,
 * else GET /demo/token (demo mode only). A stored token wins over the
 * server's, so operations stored for one account are never resumed with
 * another's.
 */
async function demoToken() {
  const fragment = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fragment) {
    localStorage.setItem(TOKEN_KEY, fragment);
    history.replaceState(null, "", location.pathname + location.search);
    return fragment;
  }
  const stored = localStorage.getItem(TOKEN_KEY);
  if (stored) return stored;
  try {
    const response = await fetch("/demo/token", { cache: "no-store" });
    if (response.ok) {
      const config = await response.json();
      if (config.token) {
        localStorage.setItem(TOKEN_KEY, config.token);
        return config.token;
      }
    }
  } catch {
    // no demo mode: the page asks for a #token= fragment
  }
  return null;
}

/** A short SHA-256 of the token: the client's scope, without storing the token again. */
async function scopeOf(token) {
  if (!token) return "";
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(token));
  return [...new Uint8Array(digest).slice(0, 8)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function policyFromParams(base) {
  const policy = { ...base };
  for (const name of ["baseMs", "capMs", "maxAttempts"]) {
    if (params.has(name)) policy[name] = Number(params.get(name));
  }
  return policy;
}

await init();
const token = await demoToken();
const auth = () => (token ? { Authorization: `Bearer ${token}` } : {});
const fixedRandom = params.has("random") ? Number(params.get("random")) : null;
const client = await IdempotentClient.create({
  scope: await scopeOf(token),
  headers: auth,
  policy: policyFromParams(defaultRetryPolicy()),
  random: fixedRandom === null ? Math.random : () => fixedRandom,
});
$("account").textContent = token
  ? "Signed in to the demo account (token kept in this browser)."
  : "No demo token: start the server with --demo, or open this page with #token=YOUR_TOKEN.";

/** What the operations table shows, by key value. */
const rows = new Map();
let countdown = null;

function remember(id) {
  const keys = JSON.parse(localStorage.getItem(HISTORY_KEY) ?? "[]");
  if (!keys.includes(id)) {
    keys.push(id);
    localStorage.setItem(HISTORY_KEY, JSON.stringify(keys.slice(-50)));
  }
}

function view(op) {
  const row = rows.get(op.id) ?? { id: op.id, key: op.key, createdAt: op.createdAt };
  let body = {};
  try {
    body = JSON.parse(op.body);
  } catch {
    body = {};
  }
  Object.assign(row, { sku: body.sku, quantity: body.quantity, attempts: op.attempts, nextAttemptAt: op.nextAttemptAt, final: false });
  if (op.last?.sending) row.state = "sending";
  else if (op.last?.action === "wait") row.state = "waiting";
  else if (op.last?.action === "reconcile") row.state = "reconciling";
  else row.state = row.state ?? "stored";
  rows.set(op.id, row);
  remember(op.id);
  return row;
}

function log(text) {
  const li = document.createElement("li");
  li.textContent = `${new Date().toLocaleTimeString()}  ${text}`;
  $("log").prepend(li);
}

function describe(outcome) {
  if (outcome.networkError) return "network error (no response)";
  return `HTTP ${outcome.status}${outcome.retryAfter ? `, Retry-After ${outcome.retryAfter}` : ""}`;
}

client.subscribe((event) => {
  const { op } = event;
  const row = view(op);
  if (event.type === "busy") {
    row.state = "busy";
  } else if (event.type === "attempt") {
    const step = event.step;
    const next = step.action === "wait" ? `wait ${step.delayMs} ms, then resend with the same key` : step.action;
    log(`${short(op.id)} attempt ${op.attempts}: ${describe(event.outcome)} → ${next}${event.remote ? " (other tab)" : ""}`);
    if (event.outcome.networkError || event.outcome.status) $("lose").checked = false;
  } else if (event.type === "final") {
    finalize(row, event.result);
  }
  render();
});

function finalize(row, result) {
  row.final = true;
  row.state = result.state;
  if (result.state === "done") {
    row.status = result.status;
    row.replayed = result.replayed;
    row.order = result.body?.id;
  } else if (result.state === "stopped") {
    row.status = result.status;
    row.problem = result.problem;
  } else if (result.state === "reconciled") {
    row.lookup = result.lookup;
    row.order = result.lookup.order?.split("/").pop();
  }
  refreshOrders();
}

/** HTML-escapes text from the server or from storage. */
function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function short(id) {
  return id.length > 13 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

function stateText(row) {
  switch (row.state) {
    case "waiting": {
      const left = Math.max(0, row.nextAttemptAt - Date.now());
      return `waiting ${(left / 1000).toFixed(1)} s (next wait)`;
    }
    case "sending":
      return "sending…";
    case "busy":
      return "sending in another tab";
    case "reconciling":
      return "looking the operation up";
    case "done":
      return `done: ${row.status}${row.replayed ? " (replayed)" : ""}`;
    case "stopped":
      return `stopped: ${row.status}${row.problem ? ` ${row.problem.code}` : ""}`;
    case "reconciled":
      return `reconciled: ${row.lookup?.state}`;
    case "finished-elsewhere":
      return "finished in another tab";
    default:
      return row.state;
  }
}

function render() {
  const tbody = $("ops");
  tbody.replaceChildren();
  const list = [...rows.values()].sort((a, b) => b.createdAt - a.createdAt);
  if (list.length === 0) {
    tbody.innerHTML = '<tr class="empty"><td colspan="6">No operations yet.</td></tr>';
  }
  for (const row of list) {
    const tr = document.createElement("tr");
    tr.dataset.key = row.id;
    tr.dataset.state = row.state;
    const cells = [
      [`<span class="key" title="${esc(row.key)}">${esc(short(row.id))}</span>`],
      [`${esc(row.sku ?? "?")} × ${esc(row.quantity ?? "?")}`],
      [esc(row.attempts ?? 0)],
      [`<span class="state-${esc(row.state)}">${esc(stateText(row))}</span>`],
      [row.order ? `order <code>${esc(short(row.order))}</code>` : row.problem ? `<span class="problem">${esc(row.problem.title)}: ${esc(row.problem.detail)}</span>` : ""],
    ];
    for (const [html] of cells) {
      const td = document.createElement("td");
      td.innerHTML = html;
      tr.append(td);
    }
    const actions = document.createElement("td");
    if (!row.final && row.state !== "busy") {
      const force = document.createElement("button");
      force.className = "secondary force";
      force.type = "button";
      force.textContent = "Resend with quantity +1 (same key)";
      force.title = "What a buggy client does: another payload under the same key. The server answers 422.";
      force.onclick = () => client.forceBody(row.id, { sku: row.sku, quantity: Math.min(20, (row.quantity ?? 1) + 1) });
      actions.append(force);
    }
    tr.append(actions);
    tbody.append(tr);
  }
  const waiting = list.some((r) => r.state === "waiting");
  if (waiting && !countdown) countdown = setInterval(render, 200);
  if (!waiting && countdown) {
    clearInterval(countdown);
    countdown = null;
  }
}

/** How many orders the panel asks GET /orders for (the server caps `limit` at 100). */
const ORDER_LIST_LIMIT = 100;

/**
 * The account's orders: GET /orders (newest first, `{"orders":[{id, sku, quantity, created_at}]}`)
 * when it answers 200, else the orders of this browser's keys (an older server without the list).
 */
async function refreshOrders() {
  let orders = null;
  let source = `GET /orders: the demo account's newest orders (up to ${ORDER_LIST_LIMIT})`;
  try {
    const response = await fetch(`/orders?limit=${ORDER_LIST_LIMIT}`, { headers: auth(), cache: "no-store" });
    if (response.status === 200) {
      const body = await response.json();
      orders = Array.isArray(body) ? body : body.orders;
    }
  } catch {
    orders = null;
  }
  if (!Array.isArray(orders)) {
    source = "the orders that this browser's keys created (looked up with GET /operations/{key})";
    orders = [];
    const keys = JSON.parse(localStorage.getItem(HISTORY_KEY) ?? "[]");
    for (const key of keys) {
      try {
        const lookup = await (await fetch(`/operations/${encodeURIComponent(key)}`, { headers: auth(), cache: "no-store" })).json();
        if (!lookup.order) continue;
        const order = await (await fetch(lookup.order, { headers: auth(), cache: "no-store" })).json();
        orders.push({ ...order, key });
      } catch {
        // a key the server never saw, or the server is away
      }
    }
  }
  $("orders-source").textContent = `From ${source}.`;
  $("order-count").textContent = String(orders.length);
  const ul = $("orders");
  ul.replaceChildren();
  for (const order of orders) {
    const li = document.createElement("li");
    li.dataset.orderId = order.id;
    li.innerHTML = `<code>${esc(order.id)}</code> ${esc(order.sku)} × ${esc(order.quantity)}`;
    ul.append(li);
  }
}

$("lose").addEventListener("change", async (event) => {
  if (!event.target.checked) return;
  const response = await fetch("/demo/lose-next-response", { method: "POST", cache: "no-store" });
  if (!response.ok) {
    event.target.checked = false;
    log("the server has no lose-the-next-response switch (start it with --demo)");
  } else {
    log("armed: the next order commits, then its response is lost");
  }
});

$("buy-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const body = JSON.stringify({ sku: $("sku").value, quantity: Number($("quantity").value) });
  try {
    // The core's contract, checked before a key is spent on a bad order.
    validateOrder(body);
  } catch (err) {
    $("form-error").hidden = false;
    $("form-error").textContent = err.problem?.errors?.map((e) => `${e.pointer} ${e.detail}`).join("; ") ?? err.message;
    return;
  }
  $("form-error").hidden = true;
  client.submit({ url: "/orders", body, operation: orderOperation() }).catch((err) => log(`error: ${err.message}`));
});

// Pending operations from an earlier visit (or another tab) are resumed.
for (const op of await client.pending()) view(op);
render();
refreshOrders();
client.resumePending().catch((err) => log(`error: ${err.message}`));
setInterval(refreshOrders, 3000);
window.idemkeyDemo = { client, rows };

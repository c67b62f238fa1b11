// The demo shop: buys through IdempotentClient and shows what happens.
//
// Demo knobs in the query string (for people and for the browser tests):
//   ?baseMs=4000&capMs=4000&maxAttempts=8  the retry policy
//   &random=0.9                            a fixed jitter draw instead of Math.random
//   &attemptTimeoutMs=15000                the client's per-attempt timeout
//   &replayWindowMs=86400000               instead of the window the server publishes
//                                          (x-idempotency.retention.replayWindowSeconds
//                                          of /openapi.json, which the client reads itself)
//   &account=demo-b                        the account this tab starts with
//
// sw.js (a service worker) finishes operations left waiting for the network
// after the tab is closed (Background Sync).
//
// The orders panel shows each order's amount, purchase reference and
// payment (pending, then charged or failed, delivered by the server's outbox
// worker to the payment provider), polling GET /orders every second while a
// payment is pending.
//
// The purchases panel buys in three steps under one key (POST /purchases,
// through the same IdempotentClient: the key is stored before the first
// send and resent on every retry; a 202 is the purchase accepted, in
// progress). The client keeps every purchase the server named (its 202,
// a lookup that found it, a final answer with its Location), in this tab,
// another one or the service worker, and polls it (backing off to a cap,
// one context at a time) until it ends; the page shows each step (reserve,
// charge, confirm) moving and the final answer (201 paid, 402 declined
// with the reservation released, 409 out of stock or failed), then keeps
// the ended purchase in localStorage, per account, and acknowledges it to
// the client. A step out of attempts (`dead`) is shown as stuck.
import { IdempotentClient } from "./pkg/idempotent-client.js";
import init, { defaultRetryPolicy, orderOperation, purchaseOperation, validateOrder } from "./pkg/idemkey_wasm.js";
import { SYNC_TAG, saveAccounts } from "./worker-accounts.js";

const ACCOUNTS_KEY = "idemkey-demo-accounts";
/** Where the stored accounts came from: "fragment" (kept) or "server" (asked again at each load; also a copy stored before this key existed). */
const ACCOUNTS_SOURCE_KEY = "idemkey-demo-accounts-source";
const CURRENT_KEY = "idemkey-demo-account";
const HISTORY_KEY = "idemkey-demo-keys";
const PURCHASES_KEY = "idemkey-demo-purchases";
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

/** The server's demo accounts, [{name, token}] (GET /demo/tokens), or null. */
async function serverAccounts() {
  try {
    const response = await fetch("/demo/tokens", { cache: "no-store" });
    if (!response.ok) return null;
    const accounts = (await response.json())?.accounts;
    return Array.isArray(accounts) ? accounts : null;
  } catch {
    return null;
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The id of the account `token` authenticates (GET /account): the scope of
 * the account's stored keys, the same for every token of the account and
 * across demo mode's new tokens at each start. null when the server
 * refuses the token; throws when the server cannot be reached.
 */
async function accountId(token) {
  const response = await fetch("/account", {
    headers: { Authorization: `Bearer ${token}` },
    cache: "no-store",
    signal: AbortSignal.timeout(10000),
  });
  if (response.status === 401) return null;
  if (!response.ok) throw new Error(`GET /account answered ${response.status}`);
  const id = (await response.json())?.id;
  if (typeof id !== "string" || !UUID.test(id)) throw new Error("GET /account named no account");
  return id.toLowerCase();
}

/** Accounts whose scope is an account's id (a copy stored before then has names). */
function scoped(accounts) {
  return accounts.filter((a) => typeof a.scope === "string" && UUID.test(a.scope));
}

/**
 * The account a `#token=` belongs to: its scope is the account's id from
 * the server (GET /account), never a name from the fragment or a literal,
 * so two tokens of two accounts never share their pending operations and
 * two tokens of one account do. Its name (display only) is the demo
 * account's when the server names the token, else the fragment's. Offline,
 * this browser's copy of the same token serves; a token the server
 * refuses, or that cannot be placed, gives no account (nothing is sent).
 */
async function fragmentAccount(token, label, stored) {
  let scope;
  try {
    scope = await accountId(token);
  } catch {
    scope = stored.find((a) => a.token === token)?.scope ?? null;
  }
  if (!scope) return null;
  const known = (await serverAccounts())?.find((a) => a.token === token);
  return { name: known?.name ?? label ?? "account", token, scope };
}

/**
 * The demo accounts, [{name, token, scope}]: a #token= fragment (one
 * account, kept in this browser and used on later loads too), else GET
 * /demo/tokens (demo mode only; GET /demo/token on an older server), else
 * this browser's copy of them. The server's list is asked for at every
 * load: demo mode replaces its tokens at each start, so a copy from an
 * earlier start gets 401; the copy serves only when the server cannot be
 * reached. Every scope is the account's id (GET /account).
 */
async function demoAccounts() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const stored = JSON.parse(localStorage.getItem(ACCOUNTS_KEY) ?? "null");
  const copy = Array.isArray(stored) ? scoped(stored) : [];
  if (fragment.get("token")) {
    const account = await fragmentAccount(fragment.get("token"), fragment.get("name") ?? undefined, copy);
    const accounts = account ? [account] : [];
    localStorage.setItem(ACCOUNTS_KEY, JSON.stringify(accounts));
    localStorage.setItem(ACCOUNTS_SOURCE_KEY, "fragment");
    history.replaceState(null, "", location.pathname + location.search);
    return accounts;
  }
  // A fragment's account is kept for later loads; a copy stored before the
  // scope was the account's id is asked again.
  if (copy.length > 0 && copy.length === stored.length && localStorage.getItem(ACCOUNTS_SOURCE_KEY) === "fragment") return copy;
  for (const [path, read] of [
    ["/demo/tokens", (body) => body.accounts],
    ["/demo/token", (body) => (body.token ? [{ name: "demo", token: body.token }] : null)],
  ]) {
    try {
      const response = await fetch(path, { cache: "no-store" });
      if (!response.ok) continue;
      const listed = read(await response.json());
      if (!Array.isArray(listed)) continue;
      const accounts = [];
      for (const a of listed) {
        const scope = await accountId(a.token);
        if (scope) accounts.push({ name: a.name, token: a.token, scope });
      }
      if (accounts.length > 0) {
        localStorage.setItem(ACCOUNTS_KEY, JSON.stringify(accounts));
        localStorage.setItem(ACCOUNTS_SOURCE_KEY, "server");
        return accounts;
      }
    } catch {
      // offline, or no demo mode: this browser's copy, else a #token= fragment
    }
  }
  return copy;
}

function policyFromParams(base) {
  const policy = { ...base };
  for (const name of ["baseMs", "capMs", "maxAttempts"]) {
    if (params.has(name)) policy[name] = Number(params.get(name));
  }
  return policy;
}

await init();
const PURCHASE_OPERATION = purchaseOperation();
const accounts = await demoAccounts();
// The client's scope is the account's id (GET /account, for a demo
// account's token and a #token= alike), never a name or a literal. Demo
// mode replaces the tokens at every start (and real tokens expire and
// rotate): the id stays, so the account's pending operations follow it.
// The service worker finishes offline work after the tab is closed
// (Background Sync), with the credentials of each operation's own account.
const worker = navigator.serviceWorker
  ? saveAccounts(accounts)
      .then(() => navigator.serviceWorker.register("sw.js", { type: "module" }))
      .then(() => navigator.serviceWorker.ready)
      .then(() => true)
      .catch(() => false)
  : Promise.resolve(false);
if (params.has("account")) sessionStorage.setItem(CURRENT_KEY, params.get("account"));
/** The account signed in in this tab (per tab: sessionStorage). */
let current = accounts.find((a) => a.name === sessionStorage.getItem(CURRENT_KEY)) ?? accounts[0] ?? null;
const auth = () => (current ? { Authorization: `Bearer ${current.token}` } : {});
const fixedRandom = params.has("random") ? Number(params.get("random")) : null;
/**
 * 409 `order-reference-exists` answers, by the Idempotency-Key they answered:
 * final (nothing was stored), shown on the operation's row with a link to
 * the order that has the reference.
 */
const referenceConflicts = new Map();
/** fetch, noting the reference conflicts that POST /orders answers. */
async function noteConflicts(input, init) {
  const response = await fetch(input, init);
  if (init?.method === "POST" && response.status === 409) {
    try {
      const problem = await response.clone().json();
      const key = new Headers(init.headers).get("Idempotency-Key");
      if (problem?.code === "order-reference-exists" && key) referenceConflicts.set(key, problem);
    } catch {
      // not a problem document: the client's retry table decides
    }
  }
  return response;
}
/**
 * Without IndexedDB (a private window that refuses it, a policy) no key can
 * be stored before a send: nothing is sent, and the page says why.
 */
function noStore(err) {
  const note = $("no-store");
  note.hidden = false;
  note.textContent =
    "Nothing can be bought in this browser: it does not let this page store data (IndexedDB), and a purchase is only sent once its Idempotency-Key is stored, so a retry can never charge twice. Allow site data for this page, or leave private browsing, then reload.";
  for (const id of ["buy", "purchase-buy"]) $(id).disabled = true;
  log(`no IndexedDB: nothing is sent (${err.message})`);
}
let client;
try {
  client = await IdempotentClient.create({
    fetch: noteConflicts,
    // Evaluated with `headers` before every request: an operation is only
    // ever sent with the token of the account that created it.
    scope: () => current?.scope ?? "",
    headers: auth,
    policy: policyFromParams(defaultRetryPolicy()),
    random: fixedRandom === null ? Math.random : () => fixedRandom,
    attemptTimeoutMs: params.has("attemptTimeoutMs") ? Number(params.get("attemptTimeoutMs")) : undefined,
    // Unset: the client reads the server's own window from its contract.
    replayWindowMs: params.has("replayWindowMs") ? Number(params.get("replayWindowMs")) : undefined,
    backgroundSync: SYNC_TAG,
    // The lookup path is the core's, per operation (a purchase's key is
    // looked up as a purchase); polls back off from 500 ms to 30 s.
  });
} catch (err) {
  showAccount();
  noStore(err);
  window.idemkeyDemo = { client: null, noStore: true };
  // The rest of the page needs the store: stop here.
  await new Promise(() => {});
}

function showAccount() {
  $("account").textContent = current
    ? `Signed in as ${current.name} (demo token kept in this browser).`
    : "No demo token: start the server with --demo, or open this page with #token=YOUR_TOKEN.";
  const select = $("switch-account");
  select.replaceChildren(
    ...accounts.map((a) => {
      const option = document.createElement("option");
      option.value = a.name;
      option.textContent = a.name;
      option.selected = a === current;
      return option;
    }),
  );
  $("switch").hidden = accounts.length < 2;
}
showAccount();

/** What the operations table shows, by key value. */
const rows = new Map();
let countdown = null;
/**
 * Which of the provider's switches this page armed last: "charge" (the
 * provider's charges: an order's or a purchase's), "confirm" (its
 * confirmations) or null. The provider keeps one switch: arming one
 * replaces the other.
 */
let armed = null;

function remember(id) {
  const keys = JSON.parse(localStorage.getItem(HISTORY_KEY) ?? "[]");
  if (!keys.includes(id)) {
    keys.push(id);
    localStorage.setItem(HISTORY_KEY, JSON.stringify(keys.slice(-50)));
  }
}

/** The row of `op`; `op` may be another tab's summary (no body). */
function view(op) {
  const row = rows.get(op.id) ?? { id: op.id, key: op.key ?? `"${op.id}"`, createdAt: op.createdAt, scope: op.scope };
  if (typeof op.body === "string") {
    try {
      const body = JSON.parse(op.body);
      Object.assign(row, { sku: body.sku, quantity: body.quantity, reference: body.reference });
    } catch {
      // a body that is not JSON: shown as "?"
    }
  }
  row.kind = op.operation === PURCHASE_OPERATION ? "purchase" : "order";
  const wasFinal = row.final === true;
  Object.assign(row, { attempts: op.attempts, nextAttemptAt: op.nextAttemptAt, final: false });
  if (op.phase === "accepted") {
    // Kept by the client until its end is shown. The row keeps the answer
    // its send got (202 accepted, or a final 201/402/409); a row rebuilt
    // from the store takes it from there.
    row.final = true;
    if (!wasFinal || !row.state) {
      const answered = op.accepted?.answered;
      row.status = answered?.status ?? op.accepted?.status ?? 202;
      row.state = answered && answered.status >= 300 ? "stopped" : "done";
      if (row.state === "stopped" && answered.body?.code) row.problem = answered.body;
    }
  } else if (op.decision) row.state = "needs-decision";
  else if (op.authHold) row.state = "needs-auth";
  else if (op.last?.sending) row.state = "sending";
  else if (op.last?.action === "wait" || op.last?.action === "resend") row.state = "waiting";
  else if (op.phase === "lookup" || op.last?.action === "reconcile") row.state = "reconciling";
  else if (!row.state || row.state === "offline") row.state = op.attempts > 0 ? "waiting" : "stored";
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
  const other = event.remote ? " (other tab)" : "";
  switch (event.type) {
    case "busy":
      row.state = "busy";
      break;
    case "held":
      if (event.reason === "auth") {
        row.state = "needs-auth";
        log(`${short(op.id)} held: the server refused the credentials (${op.authHold?.status}); kept with its key until the account signs in again`);
      } else {
        log(`${short(op.id)} held: it belongs to another account, never sent with this one's token`);
      }
      break;
    case "offline":
      row.state = "offline";
      log(`${short(op.id)} offline: waiting for the network (no attempt counted)`);
      break;
    case "attempt": {
      const step = event.step;
      const next = step.action === "wait" ? `wait ${step.delayMs} ms, then resend with the same key` : step.action;
      log(`${short(op.id)} attempt ${op.attempts}: ${describe(event.outcome)} → ${next}${other}`);
      if (event.outcome.networkError || event.outcome.status) $("lose").checked = false;
      const conflict = event.outcome.status === 409 && referenceConflicts.get(row.key);
      if (conflict && row.problem?.code !== conflict.code) {
        row.problem = conflict;
        log(`${short(op.id)} 409 order-reference-exists: order ${short(conflict.order ?? "?")} already has this reference; nothing was created`);
      }
      break;
    }
    case "update":
      if (op.last?.action === "resend" && op.last.lookup?.state === "unknown") {
        log(`${short(op.id)} lookup: unknown (not committed yet) → resend the same key in ${op.last.delayMs} ms${other}`);
      }
      break;
    case "decision":
      row.state = "needs-decision";
      row.result = event.result;
      log(`${short(op.id)} lookup: unknown past the replay window → needs a decision${other}`);
      break;
    case "final":
      finalize(row, event.result);
      break;
    case "accepted":
      row.final = true;
      row.state = "done";
      row.status = event.result?.status ?? 202;
      row.replayed = event.result?.replayed ?? false;
      if (event.op.accepted?.location) {
        const found = event.op.accepted.lookup ? " (found by a lookup after lost answers)" : "";
        log(`purchase ${short(event.op.accepted.location.split("/").pop())}: accepted, in progress${found}${other}; the client polls it until it ends`);
      }
      break;
  }
  if (event.type !== "acknowledged" && (event.op.phase === "accepted" || event.type === "ended")) notePurchaseOp(event.op);
  render();
});

function finalize(row, result) {
  row.final = true;
  row.state = result.state;
  if (row.kind === "purchase") {
    finalizePurchase(row, result);
    return;
  }
  if (result.state === "done") {
    row.status = result.status;
    row.replayed = result.replayed;
    row.order = result.body?.id ?? result.location?.split("/").pop();
  } else if (result.state === "stopped") {
    row.status = result.status;
    row.problem = result.problem;
  } else if (result.state === "reconciled") {
    row.lookup = result.lookup;
    row.order = result.lookup.order?.split("/").pop();
  }
  refreshOrders();
}

/**
 * A purchase's POST ended for the client with a final answer: 201 (it ended
 * within the server's wait, or a replay), or a final refusal (402
 * payment-declined, 409 out-of-stock or operation-failed). With the
 * purchase's Location the client keeps it until its end is shown
 * (notePurchaseOp); the row names it.
 */
function finalizePurchase(row, result) {
  if (result.state === "done" || result.state === "stopped") row.status = result.status;
  if (result.state === "done") row.replayed = result.replayed;
  if (result.state === "stopped") row.problem = result.problem;
  if (result.state === "reconciled") row.lookup = result.lookup;
  const at = result.location ?? result.lookup?.purchase ?? null;
  const id = (result.state === "done" && typeof result.body?.id === "string" ? result.body.id : null) ?? at?.split("/").pop();
  if (!id) return;
  row.purchase = id;
  if (result.state === "done" || result.state === "stopped") {
    log(`purchase ${short(id)}: answered ${result.status} at once${result.problem ? ` ${result.problem.code}` : ""}`);
  }
}

/**
 * A purchase the client keeps (`accepted()`, or an event's operation):
 * shown with its last state document; once ended, kept in this browser
 * (localStorage) and acknowledged to the client, which then forgets it.
 */
function notePurchaseOp(op) {
  const a = op.accepted;
  if (!a?.location) return;
  const id = a.location.split("/").pop();
  let body = {};
  try {
    body = typeof op.body === "string" ? JSON.parse(op.body) : {};
  } catch {
    // shown as "?"
  }
  const row = rows.get(op.id);
  if (row) row.purchase = id;
  const purchase = trackPurchase({ id, key: op.key ?? `"${op.id}"`, scope: op.scope, sku: body.sku ?? row?.sku, quantity: body.quantity ?? row?.quantity, createdAt: op.createdAt });
  purchase.opId = op.id;
  if (a.doc && typeof a.doc === "object") showPurchaseDocument(purchase, a.doc);
  const stuck = a.stuck?.step ?? null;
  if (stuck && purchase.stuck !== stuck) {
    log(`purchase ${short(id)}: step ${stuck} is stuck (out of attempts): an operator retries it; nothing is lost, do not buy again`);
  }
  purchase.stuck = stuck;
  if (a.ended && !purchase.ended) {
    purchase.ended = true;
    purchase.gone = a.gone === true;
    purchase.result = a.result;
    if (purchase.gone) log(`purchase ${short(id)}: not on this server any more (404)`);
    else log(`purchase ${short(id)}: ended ${a.result?.status} (${purchaseOutcome(purchase).state})`);
  }
  if (a.ended && purchase.scope === (current?.scope ?? "")) {
    // Shown and kept here: the client may forget it.
    savePurchases();
    client.acknowledge(op.id).catch(() => {});
  }
  renderPurchases();
}

/** HTML-escapes text from the server or from storage. */
function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function short(id) {
  return id.length > 13 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

/** "59.80 EUR" from cents and a currency. */
function money(cents, currency) {
  return `${(cents / 100).toFixed(2)} ${currency}`;
}

/** A problem for the operations table; a reference conflict links to the order that has the reference. */
function problemHtml(problem) {
  if (problem.code === "order-reference-exists" && problem.order) {
    return `<span class="problem">409 ${esc(problem.code)}: this reference is order <a class="existing-order" href="#order-${esc(problem.order)}">${esc(short(problem.order))}</a>; nothing was created</span>`;
  }
  return `<span class="problem">${esc(problem.title)}${problem.detail ? `: ${esc(problem.detail)}` : ""}</span>`;
}

/** A pending row of another account than this tab's: held, and shown without its contents. */
function heldHere(row) {
  return !row.final && row.scope !== (current?.scope ?? "");
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
    case "held":
      return "held: belongs to another account (not sent)";
    case "offline":
      return "offline: waiting for the network";
    case "reconciling":
      return "looking the operation up";
    case "needs-decision":
      return "unknown past the replay window: needs a decision";
    case "needs-auth":
      return "held: sign in again (kept with its key)";
    case "done":
      if (row.kind === "purchase" && row.status === 202) return `accepted: 202, in progress${row.replayed ? " (replayed)" : ""}`;
      return `done: ${row.status}${row.replayed ? " (replayed)" : ""}`;
    case "stopped":
      return `stopped: ${row.status}${row.problem ? ` ${row.problem.code}` : ""}`;
    case "reconciled":
      return `reconciled: ${row.lookup?.state}`;
    case "discarded":
      return "discarded";
    case "finished-elsewhere":
      return "finished in another tab";
    case "ended":
      return "ended: see the purchase";
    default:
      return row.state;
  }
}

function button(text, title, onclick) {
  const b = document.createElement("button");
  b.className = "secondary";
  b.type = "button";
  b.textContent = text;
  b.title = title;
  b.onclick = onclick;
  return b;
}

function render() {
  const tbody = $("ops");
  tbody.replaceChildren();
  const list = [...rows.values()].sort((a, b) => b.createdAt - a.createdAt);
  if (list.length === 0) {
    tbody.innerHTML = '<tr class="empty"><td colspan="6">No operations yet.</td></tr>';
  }
  for (const row of list) {
    const held = heldHere(row);
    const state = held ? "held" : row.state;
    const tr = document.createElement("tr");
    tr.dataset.key = row.id;
    tr.dataset.state = state;
    if (row.order) tr.dataset.order = row.order;
    if (row.purchase) tr.dataset.purchase = row.purchase;
    const cells = [
      `<span class="key" title="${esc(row.key)}">${esc(short(row.id))}</span>`,
      held
        ? "(another account's)"
        : `${esc(row.sku ?? "?")} × ${esc(row.quantity ?? "?")}${row.reference ? ` ref <code>${esc(row.reference)}</code>` : ""}`,
      esc(row.attempts ?? 0),
      `<span class="state-${esc(state)}">${esc(stateText({ ...row, state }))}</span>`,
      row.purchase
        ? `purchase <a href="#purchase-${esc(row.purchase)}"><code>${esc(short(row.purchase))}</code></a>${row.problem ? ` ${problemHtml(row.problem)}` : ""}`
        : row.order
          ? `order <code>${esc(short(row.order))}</code>`
          : row.problem
            ? problemHtml(row.problem)
            : "",
    ];
    for (const html of cells) {
      const td = document.createElement("td");
      td.innerHTML = html;
      tr.append(td);
    }
    const actions = document.createElement("td");
    if (!held && row.state === "needs-auth") {
      actions.append(button("Discard", "Forget the operation; its key is never sent again.", () => client.discard(row.id)));
    } else if (!held && row.state === "needs-decision") {
      actions.append(
        button("Resend (same key)", "Only if you checked that it did not happen: sends it again with its key.", () => client.resend(row.id)),
        button("Discard", "Forget the operation; its key is never sent again.", () => client.discard(row.id)),
      );
    } else if (!held && !row.final && row.state !== "busy") {
      const force = button(
        "Resend with quantity +1 (same key)",
        "What a buggy client does: another payload under the same key. The server answers 422 and creates nothing; after a lost answer the client then looks the key up.",
        () =>
          client.forceBody(row.id, {
            sku: row.sku,
            quantity: Math.min(20, (row.quantity ?? 1) + 1),
            ...(row.reference ? { reference: row.reference } : {}),
          }),
      );
      force.classList.add("force");
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
/** How often the panel asks again while a payment is pending, and otherwise. */
const PAYMENT_POLL_MS = 1000;
const IDLE_POLL_MS = 3000;

/** Each order's payment as last shown ("status attempts"), to log its changes. */
const paymentsSeen = new Map();

/** The payment part of an order's line. */
function paymentHtml(payment) {
  if (!payment) return "";
  const tries = `${payment.attempts} attempt${payment.attempts === 1 ? "" : "s"}`;
  switch (payment.status) {
    case "charged":
      return `<span class="pay-charged">charged</span> <code class="charge-id">${esc(payment.charge_id)}</code> (${tries})`;
    case "failed":
      return `<span class="pay-failed">payment failed</span>: <span class="reason">${esc(payment.reason)}</span> (${tries})`;
    default:
      return `<span class="pay-pending">payment pending</span> (${tries} so far)`;
  }
}

/** Logs an order's payment when it changed since the last refresh. */
function notePayment(order) {
  const payment = order.payment;
  if (!payment) return;
  const seen = `${payment.status} ${payment.attempts}`;
  const before = paymentsSeen.get(order.id);
  paymentsSeen.set(order.id, seen);
  if (before === undefined || before === seen) return;
  const id = short(order.id);
  if (payment.status === "charged") {
    log(`order ${id}: charged ${payment.charge_id} after ${payment.attempts} attempt(s)${payment.attempts > 1 ? " (a lost or failed answer was retried with the same provider key, or looked up by it)" : ""}`);
    showArmed(armed === "charge" ? null : armed);
  } else if (payment.status === "failed") {
    log(`order ${id}: payment failed after ${payment.attempts} attempt(s): ${payment.reason}`);
  } else {
    log(`order ${id}: payment still pending after ${payment.attempts} attempt(s)`);
  }
}

/**
 * The signed-in account's orders: GET /orders (newest first, `{"orders":[{id, sku, quantity, reference?,
 * amount_cents, currency, created_at, payment}]}`) when it answers 200, else the orders of this browser's
 * keys (an older server without the list). Returns whether a payment is pending.
 */
async function loadOrders() {
  let orders = null;
  let source = `GET /orders: ${current?.name ?? "the account"}'s newest orders (up to ${ORDER_LIST_LIMIT})`;
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
    li.id = `order-${order.id}`;
    li.dataset.orderId = order.id;
    if (order.payment) {
      li.dataset.payment = order.payment.status;
      li.dataset.attempts = String(order.payment.attempts);
    }
    const amount = Number.isInteger(order.amount_cents) && order.currency ? ` <span class="amount">${esc(money(order.amount_cents, order.currency))}</span>` : "";
    const reference = order.reference ? ` ref <code class="reference">${esc(order.reference)}</code>` : "";
    const payment = order.payment ? ` · ${paymentHtml(order.payment)}` : "";
    li.innerHTML = `<code>${esc(order.id)}</code> ${esc(order.sku)} × ${esc(order.quantity)}${amount}${reference}${payment}`;
    ul.append(li);
    notePayment(order);
  }
  return orders.some((order) => order.payment?.status === "pending");
}

let refreshing = false;
let refreshAgain = false;
let refreshTimer = null;

/** Refreshes the orders panel now (once at a time), then every second while a payment is pending. */
async function refreshOrders() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  let pending = false;
  try {
    pending = await loadOrders();
  } catch {
    // the next refresh tries again
  } finally {
    refreshing = false;
  }
  clearTimeout(refreshTimer);
  if (refreshAgain) {
    refreshAgain = false;
    refreshOrders();
    return;
  }
  refreshTimer = setTimeout(refreshOrders, pending ? PAYMENT_POLL_MS : IDLE_POLL_MS);
}

/** How many purchases this browser remembers (all accounts together). */
const PURCHASE_LIMIT = 30;

/**
 * The purchases shown, by id: `{id, key, scope, sku, quantity, createdAt}`,
 * plus `doc` (the last state document), `ended`, `result` (the final
 * answer: status and body), `gone` (404), `stuck` (a dead step's name) and
 * `seen` (each step's last shown text, to log its changes). The client
 * keeps (and polls) those that have not ended; the ended ones are kept
 * here, in localStorage, with their last document and final answer.
 */
const purchases = new Map();

/** The stored (ended) purchases. */
function storedPurchases() {
  try {
    const list = JSON.parse(localStorage.getItem(PURCHASES_KEY) ?? "[]");
    return Array.isArray(list) ? list.filter((p) => p && typeof p.id === "string") : [];
  } catch {
    return [];
  }
}

/** Adds this tab's ended purchases to the stored ones (another tab may have added its own). */
function savePurchases() {
  const byId = new Map(storedPurchases().map((p) => [p.id, p]));
  for (const p of purchases.values()) {
    if (!p.ended) continue;
    const { id, key, scope, sku, quantity, createdAt, doc, result, gone } = p;
    byId.set(id, { id, key, scope, sku, quantity, createdAt, doc, result, gone });
  }
  const list = [...byId.values()].sort((a, b) => a.createdAt - b.createdAt).slice(-PURCHASE_LIMIT);
  try {
    localStorage.setItem(PURCHASES_KEY, JSON.stringify(list));
  } catch (err) {
    // Full: shown this time only (the client has already kept it until now).
    log(`could not keep the purchases in this browser: ${err.message}`);
  }
}

/** Ended purchases stored by earlier visits (or other tabs), shown as they ended. */
function restorePurchases() {
  for (const p of storedPurchases()) {
    if (purchases.has(p.id)) continue;
    const ended = p.result !== undefined || p.gone === true;
    purchases.set(p.id, { ...p, doc: p.doc ?? null, ended, restored: true, stuck: null, seen: new Map() });
  }
}

/** Shows purchase `p` (its fields; what it shows is filled in by the caller). */
function trackPurchase(p) {
  let purchase = purchases.get(p.id);
  if (!purchase) {
    purchase = { ...p, createdAt: p.createdAt ?? Date.now(), doc: null, ended: false, result: null, restored: false, stuck: null, seen: new Map() };
    purchases.set(p.id, purchase);
  }
  return purchase;
}

/** The signed-in account's purchases, newest first. */
function currentPurchases() {
  const scope = current?.scope ?? "";
  return [...purchases.values()].filter((p) => p.scope === scope).sort((a, b) => b.createdAt - a.createdAt);
}

/**
 * A step that is running again after an attempt that may have reached the
 * provider (the state document's `maybe_sent`): the worker's next attempt
 * looks the effect up by the step's key before it sends anything again.
 */
function uncertain(step) {
  // The server's stored flag only, never guessed from the attempt count:
  // only the server knows whether an attempt may have been sent.
  return step.state === "running" && step.maybe_sent === true;
}

/** What a step's state means, for people. */
function stepDetail(step) {
  const tries = step.attempts ? `${step.attempts} attempt${step.attempts === 1 ? "" : "s"}` : "";
  if (uncertain(step)) return `attempt ${step.attempts}: an earlier attempt may have reached the provider, so it is looked up by the step's key before any resend`;
  switch (step.state) {
    case "pending":
      return "waiting for the step before it";
    case "running":
      return tries ? `attempt ${step.attempts}` : "starting";
    case "done":
      return tries;
    case "failed":
      return `refused for good${tries ? `, ${tries}` : ""}`;
    case "compensating":
      return "being undone";
    case "compensated":
      return step.name === "reserve" ? "undone: the reservation was released" : "undone";
    case "dead":
      return "out of attempts: an operator retries it (outbox retry)";
    default:
      return tries;
  }
}

/** The final answer of an ended purchase, for people. */
function purchaseOutcome(purchase) {
  const status = purchase.result?.status ?? purchase.doc?.result_status;
  const result = (purchase.result ? purchase.result.body : purchase.doc?.result) ?? {};
  if (status === 201) {
    const amount = Number.isInteger(result.amount_cents) && result.currency ? `${money(result.amount_cents, result.currency)}, ` : "";
    return {
      state: "paid",
      html: `<span class="pay-charged">paid</span> (201): ${esc(amount)}charge <code class="charge-id">${esc(result.charge_id ?? "?")}</code>, confirmation <code class="confirmation-id">${esc(result.confirmation_id ?? "?")}</code>`,
    };
  }
  if (status === 402) {
    return {
      state: "declined",
      html: `<span class="pay-failed">declined</span> (402 <span class="reason" title="${esc(result.detail ?? "")}">${esc(result.code ?? "payment-declined")}</span>): the reservation was released, nothing was charged`,
    };
  }
  if (status === 409 && result.code === "out-of-stock") {
    return { state: "out-of-stock", html: `<span class="pay-failed">out of stock</span> (409 <span class="reason">out-of-stock</span>): nothing was reserved or charged` };
  }
  if (status === 409 && result.code === "operation-failed") {
    return {
      state: "failed",
      html: `<span class="pay-failed">failed</span> (409 <span class="reason" title="${esc(result.detail ?? "")}">operation-failed</span>${result.failed_step ? ` at ${esc(result.failed_step)}` : ""}): the steps before it were undone`,
    };
  }
  return { state: "ended", html: `<span class="problem">ended: ${esc(status)}${result.code ? ` ${esc(result.code)}` : ""}</span>` };
}

/** What the purchase is doing now, for its heading. */
function purchaseProgress(doc) {
  if (!doc) return "waiting for its first poll";
  if (doc.state === "compensating") return `undoing its steps (${doc.step ?? "…"})`;
  if (doc.state === "running") return `running: ${doc.step ?? "…"}`;
  return doc.state;
}

/** Takes a state document (the 202's, or a poll's) and logs what changed. */
function showPurchaseDocument(purchase, doc) {
  const quiet = purchase.restored && purchase.doc === null;
  purchase.doc = doc;
  for (const step of Array.isArray(doc.steps) ? doc.steps : []) {
    const label = uncertain(step) ? "uncertain" : step.state;
    const text = `${label}${step.attempts ? ` (attempt ${step.attempts})` : ""}`;
    const before = purchase.seen.get(step.name);
    purchase.seen.set(step.name, text);
    if (before === text || quiet || (before === undefined && step.state === "pending")) continue;
    log(`purchase ${short(purchase.id)}: ${step.name} ${text}${uncertain(step) ? ": looked up by the step's key before any resend" : ""}`);
    if (step.state === "done" && armed === step.name) showArmed(null);
  }
}

/** The purchases panel: each purchase with its three steps and its final answer. */
function renderPurchases() {
  const list = currentPurchases();
  $("purchase-count").textContent = String(list.length);
  $("purchases-empty").hidden = list.length > 0;
  const ul = $("purchases");
  ul.replaceChildren();
  for (const purchase of list) {
    const doc = purchase.doc;
    const li = document.createElement("li");
    li.id = `purchase-${purchase.id}`;
    li.dataset.purchaseId = purchase.id;
    li.dataset.state = purchase.gone ? "gone" : (doc?.state ?? (purchase.ended ? "ended" : "waiting"));
    const status = purchase.result?.status ?? doc?.result_status;
    const outcome = purchase.ended && !purchase.gone && status !== undefined && status !== null ? purchaseOutcome(purchase) : null;
    if (outcome) {
      li.dataset.resultStatus = String(status);
      li.dataset.outcome = outcome.state;
    }
    if (purchase.stuck && !purchase.ended) li.dataset.stuck = purchase.stuck;
    const progress = purchase.gone
      ? "not on this server any more"
      : outcome
        ? "ended"
        : purchase.stuck
          ? `stuck at ${purchase.stuck}`
          : purchaseProgress(doc);
    const head = document.createElement("div");
    head.className = "purchase-head";
    head.innerHTML = `<code>${esc(purchase.id)}</code> ${esc(purchase.sku ?? "?")} × ${esc(purchase.quantity ?? "?")} · <span class="purchase-state state-${esc(li.dataset.state)}">${esc(progress)}</span> <span class="muted">key <span class="key" title="${esc(purchase.key ?? "")}">${esc(short(String(purchase.key ?? "").replaceAll('"', "")))}</span></span>`;
    li.append(head);
    if (doc && Array.isArray(doc.steps)) {
      const steps = document.createElement("ol");
      steps.className = "steps";
      steps.setAttribute("aria-label", "Steps");
      for (const step of doc.steps) {
        const item = document.createElement("li");
        const label = uncertain(step) ? "uncertain" : step.state;
        item.dataset.step = step.name;
        item.dataset.state = step.state;
        if (step.attempts !== undefined) item.dataset.attempts = String(step.attempts);
        if (uncertain(step)) item.dataset.uncertain = "true";
        const detail = stepDetail(step);
        item.innerHTML = `<span class="step"><span class="step-name">${esc(step.name)}</span> <span class="step-state step-${esc(label)}">${esc(label)}</span>${detail ? ` <small>${esc(detail)}</small>` : ""}</span>`;
        steps.append(item);
      }
      li.append(steps);
    }
    if (purchase.stuck && !purchase.ended) {
      const note = document.createElement("p");
      note.className = "purchase-stuck";
      note.textContent = `The ${purchase.stuck} step ran out of attempts and waits for an operator, who retries it (outbox retry). Nothing is lost and it is not charged twice: do not buy again. This page shows its end when it comes.`;
      li.append(note);
    }
    if (outcome) {
      const result = document.createElement("p");
      result.className = "purchase-result";
      result.innerHTML = outcome.html;
      li.append(result);
    }
    ul.append(li);
  }
}

$("switch-account").addEventListener("change", async (event) => {
  const next = accounts.find((a) => a.name === event.target.value);
  if (!next || next === current) return;
  current = next;
  sessionStorage.setItem(CURRENT_KEY, current.name);
  showAccount();
  log(`switched to ${current.name}: its operations resume, the others are held`);
  // Rows of the account signed in again show their stored state.
  for (const op of await client.pending()) view(op);
  for (const op of await client.accepted()) notePurchaseOp(view(op) && op);
  render();
  refreshOrders();
  renderPurchases();
  client.accountChanged().catch((err) => log(`error: ${err.message}`));
});

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

/** Shows which provider switch is armed (one at a time, as at the provider). */
function showArmed(step) {
  armed = step;
  $("lose-charge-state").hidden = step !== "charge";
  $("lose-step-charge-state").hidden = step !== "charge";
  $("lose-step-confirm-state").hidden = step !== "confirm";
}

const NO_PROVIDER = "no payment provider to switch (start the demo with ./scripts/run.sh, or serve --demo --payments-url)";

$("lose-charge").addEventListener("click", async () => {
  let response = null;
  try {
    response = await fetch("/demo/lose-next-charge-response", { method: "POST", cache: "no-store" });
  } catch {
    // the server is away
  }
  if (response?.ok) {
    showArmed("charge");
    log("armed: the payment provider charges the next order, then loses its answer; the delivery worker looks the charge up by its key");
  } else {
    log(NO_PROVIDER);
  }
});

/** What arming each purchase step's switch does, for the log. */
const ARMED_TEXT = {
  charge: "armed: the payment provider makes the next charge (a purchase's or an order's), then loses its answer; the step's next attempt looks the charge up by the step's key",
  confirm: "armed: the provider's mail sink sends the next confirmation, then loses its answer; the confirm step's next attempt looks the confirmation up by the step's key",
};

for (const step of ["charge", "confirm"]) {
  $(`lose-step-${step}`).addEventListener("click", async () => {
    let response = null;
    try {
      response = await fetch(`/demo/lose-next-step-response?step=${step}`, { method: "POST", cache: "no-store" });
    } catch {
      // the server is away
    }
    if (response?.ok) {
      showArmed(step);
      log(ARMED_TEXT[step]);
    } else {
      log(NO_PROVIDER);
    }
  });
}

$("buy-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const reference = $("reference").value.trim();
  const body = JSON.stringify({ sku: $("sku").value, quantity: Number($("quantity").value), ...(reference ? { reference } : {}) });
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

$("purchase-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const body = JSON.stringify({ sku: $("purchase-sku").value, quantity: Number($("purchase-quantity").value) });
  try {
    // The same contract as an order's body, checked before a key is spent.
    validateOrder(body);
  } catch (err) {
    $("purchase-error").hidden = false;
    $("purchase-error").textContent = err.problem?.errors?.map((e) => `${e.pointer} ${e.detail}`).join("; ") ?? err.message;
    return;
  }
  $("purchase-error").hidden = true;
  // One key for the whole purchase, stored before the first send and
  // resent on every retry; a 202 ends the client's part (in progress).
  client.submit({ url: "/purchases", body, operation: PURCHASE_OPERATION }).catch((err) => log(`error: ${err.message}`));
});

// Pending operations from an earlier visit (or another tab) are resumed;
// the client resumes them again on `online`. The page has just read this
// start's tokens: for the client that is a sign-in, so operations a 401 held
// (the service worker's token from before a server restart, say) are sent
// again with their own keys.
// Purchases: those that ended and were shown before (this browser's copy),
// and every one the client still keeps: accepted in this tab, another one,
// or by the service worker, found by a lookup, or ended and not yet shown.
// The client polls the unfinished ones (accountChanged resumes them).
for (const op of await client.pending()) view(op);
restorePurchases();
for (const op of await client.accepted()) notePurchaseOp(view(op) && op);
render();
refreshOrders();
renderPurchases();
client.accountChanged().catch((err) => log(`error: ${err.message}`));
window.idemkeyDemo = { client, rows, purchases, worker, accounts: () => accounts.map((a) => a.name), current: () => current?.name, scope: () => current?.scope };

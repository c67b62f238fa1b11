// IdempotentClient: one logical operation = one Idempotency-Key, kept in
// IndexedDB before the first send, resent with the same key as the core's
// retry policy says, reconciled through the server's lookup when retrying
// must end, and deleted only on a final answer. A Web Lock per operation
// keeps two tabs from sending the same operation at once.
//
// An operation belongs to the account (scope) that created it. The scope is
// evaluated with the credentials for every request, so an operation is never
// sent with another account's token: it is held (`other-scope`) until its
// account is signed in again. A 401/403 holds it too (`needs-auth`), with
// its key, until `accountChanged()` says the account signed in again. Once an
// attempt may have been applied (no answer, 5xx, ...), a later 404, 400, 422
// ... is looked up instead of ending the operation, and it is never resent
// past the server's replay window (read from the server's contract) without
// a lookup first. `unknown` from the lookup never ends an operation inside
// the replay window; the core (`afterUnknown`) says when it must be handed
// to the application instead. Offline, nothing is sent and no attempt is
// counted; `online` resumes, and Background Sync (the `backgroundSync`
// option and a service worker that calls resumePending) can finish the work
// after the tab is closed.
//
//
// An operation the server accepted (202) and runs on its own (a purchase)
// is not deleted by the answer: it stays in the store, with its Location
// and its last state document, polled (backoff to a cap, a timeout per
// poll, one Web Lock per operation so one context polls it) until it ends,
// and kept until the application acknowledges its end. So a purchase that a
// service worker sent, or that was found by a lookup, is still there for
// the page to show.
//
// Every rule (key format, fingerprint, retry steps, what `unknown` means,
// where a key is looked up) comes from idemkey-core through the wasm
// module; this file only moves data between fetch, IndexedDB, Web Locks,
// BroadcastChannel and the caller.

import init, {
  afterUnknown,
  attemptMayHaveApplied,
  fingerprint,
  lookupPath,
  newKey,
  parseKey,
  purchaseOperation,
  retryStep,
} from "./idemkey_wasm.js";

const STORE = "operations";
/** What `#drive` answers when the replay window must be read first: `run()` reads it outside the lock, then drives again. */
const WINDOW_STALE = Symbol("window-stale");
const LOCK_PREFIX = "idemkey-op:";
/** Where the server's contract says how long it replays: `x-idempotency.retention.replayWindowSeconds` of GET /openapi.json. */
const CONTRACT_PATH = "/openapi.json";

/**
 * The server's replay window in ms, read from its published contract
 * (`x-idempotency.retention.replayWindowSeconds` of `GET {baseUrl}/openapi.json`,
 * times 1000); null when it cannot be read (no answer within `timeoutMs`,
 * no such member).
 * @param {{baseUrl?: string, fetch?: typeof fetch, timeoutMs?: number}} [options]
 * @returns {Promise<number | null>}
 */
export async function publishedReplayWindowMs({ baseUrl = "", fetch: get = globalThis.fetch.bind(globalThis), timeoutMs = 10000 } = {}) {
  try {
    const response = await get(baseUrl + CONTRACT_PATH, { cache: "no-store", signal: AbortSignal.timeout(timeoutMs) });
    if (!response.ok) return null;
    const seconds = (await response.json())?.["x-idempotency"]?.retention?.replayWindowSeconds;
    return Number.isSafeInteger(seconds) && seconds >= 0 ? seconds * 1000 : null;
  } catch {
    return null;
  }
}

/** @typedef {import("./idempotent-client.d.ts").StoredOperation} StoredOperation */
/** @typedef {import("./idempotent-client.d.ts").OperationResult} OperationResult */
/** @typedef {import("./idempotent-client.d.ts").ClientOptions} ClientOptions */

/** Resolves after `ms`, or as soon as `wakers.get(id)()` is called. */
function sleep(ms, wakers, id) {
  return new Promise((resolve) => {
    const timer = setTimeout(done, Math.max(0, ms));
    function done() {
      clearTimeout(timer);
      if (wakers.get(id) === done) wakers.delete(id);
      resolve();
    }
    wakers.set(id, done);
  });
}

/** Promise wrapper for one IndexedDB request. */
function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function openDb(name) {
  if (typeof indexedDB === "undefined" || indexedDB === null) {
    // Without a store no key can be kept before a send: nothing is sent.
    const error = new Error("IndexedDB is not available: no operation can be stored before it is sent, so none is sent");
    error.code = "no-indexeddb";
    throw error;
  }
  const req = indexedDB.open(name, 1);
  req.onupgradeneeded = () => {
    req.result.createObjectStore(STORE, { keyPath: "id" });
  };
  return request(req);
}

function offline() {
  return typeof navigator !== "undefined" && navigator.onLine === false;
}

/**
 * What other tabs may learn about an operation: ids, counters and states.
 * Never the body, the headers or a token.
 */
function summary(op) {
  return {
    id: op.id,
    scope: op.scope,
    operation: op.operation,
    attempts: op.attempts,
    createdAt: op.createdAt,
    firstSentAt: op.firstSentAt ?? null,
    nextAttemptAt: op.nextAttemptAt,
    phase: op.phase,
    decision: op.decision ?? null,
    maybeApplied: op.maybeApplied ?? null,
    authHold: op.authHold ? { status: op.authHold.status, at: op.authHold.at, code: op.authHold.code } : null,
    accepted: op.accepted ? acceptedSummary(op.accepted) : null,
    last: op.last,
  };
}

/** An accepted operation's progress without its state document. */
function acceptedSummary(accepted) {
  const { doc: _doc, ...rest } = accepted;
  return rest;
}

/** Calls `listener`; an error it throws is reported, never thrown into the send loop. */
function deliver(listener, event) {
  try {
    listener(event);
  } catch (error) {
    if (typeof globalThis.reportError === "function") globalThis.reportError(error);
    else console.error(error);
  }
}

/** SHA-256 of the credentials, hex: which credentials a 401/403 refused, without keeping them. */
async function credentialsDigest(headers) {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) return null;
  const entries = Object.entries(headers ?? {})
    .map(([name, value]) => [name.toLowerCase(), String(value)])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const digest = await subtle.digest("SHA-256", new TextEncoder().encode(JSON.stringify(entries)));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Whether a poll's state document says the operation ended (its final answer is in it). */
function ended(doc) {
  return !!doc && typeof doc === "object" && (doc.result_status !== undefined || doc.state === "done" || doc.state === "failed");
}

/** The name of a step whose attempts ran out (`dead`: it waits for an operator), if any. */
function deadStep(doc) {
  const steps = doc && Array.isArray(doc.steps) ? doc.steps : [];
  return steps.find((step) => step?.state === "dead")?.name ?? null;
}

/** A result without the response body (for other tabs). */
function resultSummary(result) {
  if (!result) return undefined;
  const { body: _body, problem, ...rest } = result;
  return problem ? { ...rest, problem: { code: problem.code, status: problem.status, title: problem.title } } : rest;
}

export class IdempotentClient {
  /**
   * Loads the wasm module and opens the operation store.
   * @param {ClientOptions} [options]
   * @returns {Promise<IdempotentClient>}
   */
  static async create(options = {}) {
    await init(options.wasmUrl ? { module_or_path: options.wasmUrl } : undefined);
    const db = await openDb(options.dbName ?? "idemkey");
    return new IdempotentClient(db, options);
  }

  /** Use {@link IdempotentClient.create}. */
  constructor(db, options) {
    this.db = db;
    this.baseUrl = options.baseUrl ?? "";
    const scope = options.scope ?? "";
    /** @type {() => string | Promise<string>} */
    this.scope = typeof scope === "function" ? scope : () => scope;
    this.headers = options.headers ?? (() => ({}));
    this.policy = options.policy;
    this.random = options.random ?? Math.random;
    this.attemptTimeoutMs = options.attemptTimeoutMs ?? 15000;
    this.reconcileDelayMs = options.reconcileDelayMs ?? 5000;
    /** A number given by the app (kept), else read from the server's contract and read again after `contractMaxAgeMs` or a pause. */
    this.replayWindowMs = options.replayWindowMs ?? null;
    this.windowFixed = options.replayWindowMs !== undefined && options.replayWindowMs !== null;
    this.contractMaxAgeMs = options.contractMaxAgeMs ?? 10 * 60 * 1000;
    /** When the window was last read from the contract (0: never, or stale). */
    this.windowReadAt = 0;
    /** The contract read in flight, shared by every caller. */
    this.windowRead = null;
    this.backgroundSync = options.backgroundSync ?? null;
    this.lookupPath = options.lookupPath ?? ((keyValue, operation) => lookupPath(operation, keyValue));
    this.pollAccepted = options.pollAccepted ?? true;
    this.pollMinMs = options.pollMinMs ?? 500;
    this.pollCapMs = options.pollCapMs ?? 30000;
    this.pollTimeoutMs = options.pollTimeoutMs ?? 10000;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    /** Sleeping operations, by id: calling one wakes it. */
    this.wakers = new Map();
    /** Operations this tab drives or waits to drive (their lock), by id. */
    this.active = new Set();
    /** Operations waiting for the network. */
    this.onlineWaiters = new Set();
    this.listeners = new Set();
    this.channel =
      typeof BroadcastChannel === "function" ? new BroadcastChannel(`idemkey:${options.dbName ?? "idemkey"}`) : null;
    if (this.channel) {
      // Other tabs' progress, so every tab of the same account shows the
      // same operations. Tabs of another account ignore it.
      this.channel.onmessage = (event) => {
        this.#remote(event.data).catch(() => {});
      };
    }
    if (typeof globalThis.addEventListener === "function") {
      globalThis.addEventListener("online", () => this.#online());
      // Back from a pause (a hidden or frozen page, a sleeping laptop): the
      // server's window may have changed meanwhile.
      // `resume` (a frozen page thawed) and `visibilitychange` are fired at
      // the document, `pageshow` (back from the back/forward cache) at the
      // window.
      globalThis.addEventListener("pageshow", () => this.#contractStale());
      globalThis.document?.addEventListener?.("resume", () => this.#contractStale());
      globalThis.document?.addEventListener?.("visibilitychange", () => {
        if (globalThis.document.visibilityState === "visible") this.#contractStale();
      });
    }
  }

  #contractStale() {
    this.windowReadAt = 0;
  }

  /**
   * Listens to progress: `update`, `attempt`, `final`, `busy` (another tab
   * sends it), `held` (it belongs to another account, or its credentials
   * were refused: `reason`), `offline` (waiting for the network),
   * `decision` (unknown past the replay window), `accepted` (the server
   * took it and runs it: kept and polled), `ended` (an accepted operation's
   * end, kept until `acknowledge(id)`) and `acknowledged`. A listener that
   * throws is reported (`reportError`) and never stops a send.
   * Returns an unsubscribe function.
   * @param {(event: import("./idempotent-client.d.ts").ClientEvent) => void} listener
   */
  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Local listeners get the whole event; other tabs a summary, tagged with the operation's scope. */
  #emit(event, broadcast = true) {
    for (const listener of [...this.listeners]) deliver(listener, { ...event, remote: false });
    if (broadcast && this.channel) {
      this.channel.postMessage({
        v: 1,
        type: event.type,
        scope: event.op.scope,
        id: event.op.id,
        op: summary(event.op),
        outcome: event.outcome,
        step: event.step,
        result: resultSummary(event.result),
      });
    }
  }

  async #remote(message) {
    if (!message || message.v !== 1 || typeof message.id !== "string") return;
    if (message.scope !== (await this.currentScope())) return;
    // Details (the body) come from this origin's own store, not the message.
    const op = (await this.#get(message.id)) ?? message.op;
    const event = { type: message.type, op, remote: true };
    for (const name of ["outcome", "step", "result"]) {
      if (message[name] !== undefined) event[name] = message[name];
    }
    for (const listener of [...this.listeners]) deliver(listener, event);
  }

  /** The scope of the account signed in now (the `scope` option, evaluated). */
  async currentScope() {
    return String((await this.scope()) ?? "");
  }

  /**
   * The scope and the headers of one signed-in account, taken together: if
   * the scope changed while the headers were being read, read again.
   */
  async #credentials() {
    for (;;) {
      const before = await this.currentScope();
      const headers = await this.headers();
      if ((await this.currentScope()) === before) return { scope: before, headers };
    }
  }

  /**
   * Starts one logical operation: a new key, stored with the request and the
   * current scope before the first send, then sent until a final answer.
   * @param {{method?: string, url: string, body: unknown, operation: string}} req
   * @returns {Promise<OperationResult>}
   */
  async submit({ method = "POST", url, body, operation }) {
    const text = typeof body === "string" ? body : JSON.stringify(body);
    const key = newKey();
    /** @type {StoredOperation} */
    const op = {
      id: parseKey(key, "strict"),
      key,
      operation,
      method,
      url,
      body: text,
      fingerprint: fingerprint(operation, text),
      scope: await this.currentScope(),
      attempts: 0,
      createdAt: Date.now(),
      firstSentAt: null,
      nextAttemptAt: 0,
      phase: "send",
      decision: null,
      last: null,
    };
    await this.#put(op);
    this.#emit({ type: "update", op });
    return this.run(op.id);
  }

  /**
   * The stored operations of the current scope still being sent or looked
   * up (not the accepted ones: see `accepted()`), oldest first.
   * @returns {Promise<StoredOperation[]>}
   */
  async pending() {
    return (await this.#ofScope()).filter((op) => op.phase !== "accepted");
  }

  /**
   * The operations of the current scope that the server accepted (202, or
   * a lookup that named a long operation) or that ended as a long
   * operation's final answer, oldest first: running ones (`accepted.ended`
   * false, polled) and ended ones (`accepted.ended` true), each kept until
   * `acknowledge(id)`. A page lists them on load: they include what a
   * service worker or another tab sent.
   * @returns {Promise<StoredOperation[]>}
   */
  async accepted() {
    return (await this.#ofScope()).filter((op) => op.phase === "accepted");
  }

  async #ofScope() {
    const scope = await this.currentScope();
    const tx = this.db.transaction(STORE, "readonly");
    const all = await request(tx.objectStore(STORE).getAll());
    return all.filter((op) => (op.scope ?? "") === scope).sort((a, b) => a.createdAt - b.createdAt);
  }

  /**
   * Resumes every stored operation of the current scope that this tab is not
   * already driving (call it on page load; the client calls it on `online`):
   * sends, lookups, and (with `pollAccepted`) the polls of accepted
   * operations that have not ended. Operations another tab is sending are
   * watched, and taken over if that tab goes away.
   * @returns {Promise<OperationResult[]>}
   */
  async resumePending() {
    const ops = (await this.#ofScope()).filter(
      (op) => !this.active.has(op.id) && !(op.phase === "accepted" && (op.accepted?.ended || !this.pollAccepted)),
    );
    return Promise.all(ops.map((op) => this.run(op.id)));
  }

  /**
   * Call it when the signed-in account or its credentials change (sign-in,
   * sign-out, switch, a new token): operations of the previous account stop
   * at once (`held`), and those of the current one resume, including those
   * a 401/403 held (`needs-auth`), with their own keys. Each hold is
   * released under its operation's lock, so it is ordered with any attempt
   * in flight; and a hold only stops the credentials it refused (a late 401
   * to another context's stale token never holds this one's).
   * @returns {Promise<OperationResult[]>}
   */
  async accountChanged() {
    for (const wake of [...this.wakers.values()]) wake();
    const scope = await this.currentScope();
    const tx = this.db.transaction(STORE, "readonly");
    const held = (await request(tx.objectStore(STORE).getAll())).filter((op) => (op.scope ?? "") === scope && op.authHold);
    await Promise.all(
      held.map((stale) =>
        navigator.locks.request(LOCK_PREFIX + stale.id, async () => {
          const op = await this.#get(stale.id);
          if (op?.authHold) {
            op.authHold = null;
            await this.#put(op);
          }
        }),
      ),
    );
    return this.resumePending();
  }

  /**
   * The application has shown the end of accepted operation `id` (or no
   * longer wants it): it is deleted from the store, in every tab.
   * @param {string} id
   * @returns {Promise<boolean>} whether it was still stored
   */
  async acknowledge(id) {
    return navigator.locks.request(LOCK_PREFIX + id, async () => {
      const op = await this.#get(id);
      if (!op || op.phase !== "accepted") return false;
      await this.#delete(id);
      this.#emit({ type: "acknowledged", op });
      return true;
    });
  }

  /**
   * Sends the stored operation `id` until a final answer, holding its Web
   * Lock. If another tab holds the lock, emits `busy`, waits for the lock and
   * then finishes what that tab left (if anything).
   * @param {string} id
   * @returns {Promise<OperationResult>}
   */
  async run(id) {
    this.active.add(id);
    let result;
    try {
      const name = LOCK_PREFIX + id;
      let stale = false;
      for (;;) {
        // The contract is read (when stale) before the lock, never under it.
        const stored = await this.#get(id);
        if (stale || (stored && (stored.maybeApplied || stored.phase === "lookup"))) await this.#replayWindow();
        result = await navigator.locks.request(name, { ifAvailable: true }, async (lock) => {
          if (lock === null) return null;
          return this.#drive(id);
        });
        if (result === null) {
          const op = await this.#get(id);
          if (op) this.#emit({ type: "busy", op }, false);
          // Another tab is sending it: wait our turn, then look again.
          result = await navigator.locks.request(name, async () => this.#drive(id));
        }
        if (result !== WINDOW_STALE) break;
        stale = true;
      }
    } finally {
      this.active.delete(id);
    }
    // Accepted: the caller has its answer now; the polls go on in their
    // own run (under the lock again, one context at a time).
    if (this.pollAccepted && (result.state === "accepted" || result.state === "done" || result.state === "stopped")) {
      const op = await this.#get(id);
      if (op?.phase === "accepted" && !op.accepted.ended) this.run(id).catch(() => {});
    }
    return result;
  }

  /**
   * For an operation that needs a decision (`needs-decision`): send it again
   * with the same key, as a new first send (a fresh budget and window). Only
   * for an application or user who checked that it did not happen.
   * @param {string} id
   * @returns {Promise<OperationResult>}
   */
  async resend(id) {
    const op = await this.#get(id);
    if (!op) return { state: "finished-elsewhere", id };
    Object.assign(op, { decision: null, attempts: 0, firstSentAt: null, nextAttemptAt: 0, phase: "send" });
    await this.#put(op);
    this.#emit({ type: "update", op });
    return this.run(id);
  }

  /**
   * For an operation that needs a decision: forget it (it is deleted; its
   * key is never sent again).
   * @param {string} id
   * @returns {Promise<OperationResult>}
   */
  async discard(id) {
    return navigator.locks.request(LOCK_PREFIX + id, async () => {
      const op = await this.#get(id);
      if (!op) return { state: "finished-elsewhere", id };
      return this.#finish(op, { state: "discarded", id, key: op.key });
    });
  }

  /**
   * For demonstrations and tests only: replaces a pending operation's body
   * while keeping its key, as a buggy client would, and sends it at once. The
   * server answers 422 `idempotency-key-reused` and creates nothing; if an
   * earlier attempt may have been applied, the client then looks the key up
   * (the 422 proves it has a record) rather than ending the operation.
   * @param {string} id
   * @param {unknown} body
   */
  async forceBody(id, body) {
    const op = await this.#get(id);
    if (!op) return false;
    op.body = typeof body === "string" ? body : JSON.stringify(body);
    op.nextAttemptAt = 0;
    await this.#put(op);
    this.#emit({ type: "update", op });
    this.wakers.get(id)?.();
    return true;
  }

  /** The send loop, under the operation's lock. */
  async #drive(id) {
    for (;;) {
      // Re-read on every turn: the stored record is the truth (and may be
      // gone if another tab finished it).
      const op = await this.#get(id);
      if (!op) return { state: "finished-elsewhere", id };
      if (op.decision) return this.#decisionResult(op);
      // The key belongs to the account it was first sent for: sent with
      // another account's credentials, it would create that account's order.
      if ((op.scope ?? "") !== (await this.currentScope())) return this.#hold(op);
      if (op.authHold) {
        // A hold stops the credentials that were refused; other ones (a
        // sign-in in another context) are tried.
        if (await this.#stillRefused(op.authHold)) return this.#authHeld(op);
        op.authHold = null;
        await this.#put(op);
      }
      if (op.phase === "accepted" && (op.accepted?.ended || !this.pollAccepted)) return this.#acceptedResult(op);
      const waitMs = op.nextAttemptAt - Date.now();
      if (waitMs > 0) {
        await sleep(waitMs, this.wakers, id);
        continue;
      }
      if (offline()) {
        // Nothing is sent and no attempt is counted until `online`. If the
        // tab is closed meanwhile, Background Sync wakes the app's service
        // worker when the network is back.
        this.#emit({ type: "offline", op }, false);
        this.#requestBackgroundSync();
        await new Promise((resolve) => this.onlineWaiters.add(resolve));
        continue;
      }
      if (op.phase === "accepted") {
        const result = await this.#poll(op);
        if (result) return result;
        continue;
      }
      if (op.phase === "lookup") {
        // A lookup's `unknown` is judged against a current window.
        if (!this.windowFixed && !this.#windowFresh()) return WINDOW_STALE;
        const result = await this.#reconcile(op);
        if (result) return result;
        continue;
      }
      // Whether an earlier attempt may have been applied. Operations stored
      // before the client kept it count as such once sent.
      const earlier = op.maybeApplied ?? op.attempts > 0;
      if (earlier && !this.windowFixed && !this.#windowFresh()) return WINDOW_STALE;
      if (earlier && !(await this.#insideWindow(op, Date.now()))) {
        // The record of a commit long ago may be gone: a resend could act
        // twice. Look it up first; `unknown` then needs a decision.
        op.phase = "lookup";
        await this.#put(op);
        continue;
      }

      // The attempt is counted (and the first send time kept) before it is
      // sent, so a reload mid-flight never resets the budget or the window,
      // and an attempt cut off by the reload counts as maybe applied.
      const before = { attempts: op.attempts, firstSentAt: op.firstSentAt, last: op.last, maybeApplied: op.maybeApplied };
      op.attempts += 1;
      op.firstSentAt ??= Date.now();
      op.maybeApplied = true;
      op.last = { sending: true, at: Date.now() };
      await this.#put(op);
      // The credentials are read after the last await before the send.
      const credentials = await this.#credentials();
      if (credentials.scope !== op.scope) {
        Object.assign(op, before);
        await this.#put(op);
        return this.#hold(op);
      }
      const sending = this.#send(op, credentials.headers);
      this.#emit({ type: "update", op });
      const { outcome, response, text } = await sending;
      const step = retryStep(op.attempts, outcome, this.random(), this.policy, earlier);
      op.maybeApplied = earlier || attemptMayHaveApplied(outcome);
      op.last = { ...outcome, at: Date.now(), action: step.action, delayMs: step.delayMs };
      this.#emit({ type: "attempt", op, outcome, step });

      switch (step.action) {
        case "wait":
          op.nextAttemptAt = Date.now() + step.delayMs;
          await this.#put(op);
          this.#emit({ type: "update", op });
          break;
        case "done": {
          const location = response.headers.get("Location");
          const replayed = response.headers.get("Idempotent-Replayed") === "true";
          if (response.status === 202) return this.#accept(op, { status: 202, location, replayed, body: safeJson(text) });
          return this.#finish(
            op,
            { state: "done", id, key: op.key, status: response.status, replayed, location, body: safeJson(text) },
            location,
          );
        }
        case "stop":
          return this.#finish(
            op,
            { state: "stopped", id, key: op.key, status: response ? response.status : 0, problem: problemOf(text) },
            response?.headers.get("Location") ?? null,
          );
        case "holdForAuth":
          return this.#holdForAuth(op, response.status, problemOf(text), credentials.headers);
        case "reconcile":
          op.phase = "lookup";
          await this.#put(op);
          this.#emit({ type: "update", op });
          break;
        default:
          throw new Error(`unknown retry step ${step.action}`);
      }
    }
  }

  /** The operation stays stored, unsent, until its account signs in again. */
  #hold(op) {
    this.#emit({ type: "held", op, reason: "other-scope" }, false);
    return { state: "other-scope", id: op.id };
  }

  /**
   * Its credentials were refused (401/403): kept with its key, unsent,
   * until `accountChanged()` (the account signed in again). Not deleted: an
   * earlier attempt may have committed, and a new key would act twice.
   */
  async #holdForAuth(op, status, problem, headers) {
    const refused = await credentialsDigest(headers);
    op.authHold = { status, at: Date.now(), ...(problem ? { code: problem.code } : {}), ...(refused ? { refused } : {}) };
    op.nextAttemptAt = 0;
    await this.#put(op);
    this.#emit({ type: "update", op });
    return this.#authHeld(op);
  }

  /**
   * Whether this context's credentials for the operation's account are the
   * ones the hold refused (or the hold did not record which: then until
   * `accountChanged()`).
   */
  async #stillRefused(hold) {
    if (!hold.refused) return true;
    const { headers } = await this.#credentials();
    return (await credentialsDigest(headers)) === hold.refused;
  }

  #authHeld(op) {
    this.#emit({ type: "held", op, reason: "auth" }, false);
    return { state: "needs-auth", id: op.id, key: op.key, status: op.authHold.status, maybeApplied: op.maybeApplied ?? op.attempts > 0 };
  }

  /**
   * Whether `now` is inside the server's replay window measured from the
   * operation's first send; false when the window cannot be read (the
   * caller then looks the operation up rather than resend it).
   */
  async #insideWindow(op, now) {
    if (op.firstSentAt === null || op.firstSentAt === undefined) return true;
    const windowMs = this.replayWindowMs;
    // An attempt sent now may still be in flight at the window's end: it
    // counts as past it.
    return windowMs !== null && now + this.attemptTimeoutMs - op.firstSentAt < windowMs;
  }

  /**
   * The replay window: the `replayWindowMs` option, else the server's
   * contract, read again once older than `contractMaxAgeMs` or after a
   * pause. `run()` reads it before taking an operation's lock, never under
   * it. The read has a timeout (`attemptTimeoutMs`); concurrent callers
   * share it. Unreadable, it is null (nothing is resent on a guess) and
   * read again after `reconcileDelayMs`.
   */
  async #replayWindow() {
    if (this.windowFixed || this.#windowFresh()) return this.replayWindowMs;
    this.windowRead ??= publishedReplayWindowMs({ baseUrl: this.baseUrl, fetch: this.fetch, timeoutMs: this.attemptTimeoutMs })
      .then((ms) => {
        this.replayWindowMs = ms;
        const now = Date.now();
        // Unreadable: tried again after reconcileDelayMs (at least a second).
        const retryMs = Math.max(this.reconcileDelayMs, 1000);
        this.windowReadAt = ms === null ? now - Math.max(0, this.contractMaxAgeMs - retryMs) : now;
        return ms;
      })
      .finally(() => {
        this.windowRead = null;
      });
    return this.windowRead;
  }

  #windowFresh() {
    return this.windowReadAt !== 0 && Date.now() - this.windowReadAt < this.contractMaxAgeMs;
  }

  #decisionResult(op) {
    return {
      state: "needs-decision",
      id: op.id,
      key: op.key,
      firstSentAt: op.firstSentAt ?? op.createdAt,
      attempts: op.attempts,
      lookup: op.decision.lookup,
    };
  }

  /** One attempt with the given headers: the outcome in the shape `retryStep` reads. */
  async #send(op, headers) {
    let response;
    try {
      response = await this.fetch(this.baseUrl + op.url, {
        method: op.method,
        headers: {
          ...headers,
          "Content-Type": "application/json",
          "Idempotency-Key": op.key,
        },
        body: op.body,
        cache: "no-store",
        signal: AbortSignal.timeout(this.attemptTimeoutMs),
      });
    } catch {
      // fetch rejects when the connection drops, is refused or times out:
      // the request may or may not have been executed.
      return { outcome: { networkError: true } };
    }
    let text;
    try {
      text = await response.text();
    } catch {
      return { outcome: { networkError: true } };
    }
    // The problem's code decides between "wait" and "stop" where the
    // status alone cannot (409 in progress against 409 reference exists or
    // out of stock).
    let code = null;
    if ((response.headers.get("Content-Type") ?? "").startsWith("application/problem+json")) {
      try {
        code = JSON.parse(text).code ?? null;
      } catch {
        code = null;
      }
    }
    return {
      outcome: { status: response.status, retryAfter: response.headers.get("Retry-After"), code },
      response,
      text,
    };
  }

  /**
   * Looks the operation up (with its own account's credentials).
   * `completed` and `expired` end it. `unknown` is not final: the core says
   * whether to resend the same key (inside the replay window) or to hand it
   * to the application. `in_progress`, or a failed lookup: send again later
   * with the same key, which replays or comes back here.
   * Returns a result when the operation ends (or is held), else null.
   */
  async #reconcile(op) {
    const credentials = await this.#credentials();
    if (credentials.scope !== op.scope) return this.#hold(op);
    let lookup;
    let refused = null;
    try {
      const response = await this.fetch(this.baseUrl + this.lookupPath(op.id, op.operation), {
        headers: credentials.headers,
        cache: "no-store",
        signal: AbortSignal.timeout(this.attemptTimeoutMs),
      });
      if (response.ok) lookup = await response.json();
      else if (response.status === 401 || response.status === 403) refused = response.status;
      else if (response.status === 404 || response.status === 400) lookup = undefined;
    } catch {
      lookup = undefined;
    }
    if (refused !== null) {
      // Looked up again with the same key after the account signs in.
      op.phase = "lookup";
      return this.#holdForAuth(op, refused, undefined, credentials.headers);
    }
    const now = Date.now();
    if (lookup && (lookup.state === "completed" || lookup.state === "expired")) {
      // A long operation named by the lookup (its poll URL) is followed
      // to its end, as if its 202 had arrived.
      if (typeof lookup.purchase === "string" && lookup.purchase) {
        return this.#accept(op, { status: null, location: lookup.purchase, replayed: false, body: null, lookup });
      }
      return this.#finish(op, { state: "reconciled", id: op.id, key: op.key, lookup });
    }
    op.phase = "send";
    const windowMs = lookup && lookup.state === "unknown" ? this.replayWindowMs : null;
    if (lookup && lookup.state === "unknown" && windowMs === null) {
      // The window is not known: never resend on a guess; ask again later.
      op.phase = "lookup";
      op.nextAttemptAt = now + this.reconcileDelayMs;
      op.last = { ...op.last, action: "reconcile", lookup };
    } else if (lookup && lookup.state === "unknown") {
      const firstSentAt = op.firstSentAt ?? op.createdAt;
      // The resend may still be in flight at the window's end: measured from then.
      const step = afterUnknown(op.attempts, firstSentAt, now + this.attemptTimeoutMs, windowMs, this.random(), this.policy);
      if (step.action === "needsDecision") {
        op.decision = { reason: "unknown-past-window", at: now, lookup };
        op.last = { ...op.last, action: "needs-decision", lookup };
        await this.#put(op);
        const result = this.#decisionResult(op);
        this.#emit({ type: "decision", op, result });
        return result;
      }
      op.nextAttemptAt = now + step.delayMs;
      op.last = { ...op.last, action: "resend", delayMs: step.delayMs, lookup };
    } else {
      op.nextAttemptAt = now + this.reconcileDelayMs;
      op.last = { ...op.last, action: "reconcile", lookup: lookup ?? null };
    }
    await this.#put(op);
    this.#emit({ type: "update", op });
    return null;
  }

  /** Registers the `backgroundSync` tag with this page's service worker, if there is one. */
  #requestBackgroundSync() {
    const container = globalThis.navigator?.serviceWorker;
    if (!this.backgroundSync || typeof container?.getRegistration !== "function") return;
    container
      .getRegistration()
      .then((registration) => registration?.sync?.register(this.backgroundSync))
      .catch(() => {});
  }

  #online() {
    const waiters = [...this.onlineWaiters];
    this.onlineWaiters.clear();
    for (const resolve of waiters) resolve();
    // Operations left by a tab that closed while offline.
    this.resumePending().catch(() => {});
  }

  /**
   * The end of a send. A long operation's final answer that names where it
   * is shown (a purchase's 201, 402 or 409 with its Location) is kept until
   * `acknowledge(id)`: the context that got it may not be the one that
   * shows it (a service worker). Its state document (the steps) is polled
   * once; the answer is its end. Anything else is deleted.
   */
  async #finish(op, result, location = null) {
    if (location && (op.accepted || op.operation === purchaseOperation())) {
      op.phase = "accepted";
      op.nextAttemptAt = 0;
      op.accepted = {
        status: result.status,
        acceptedAt: null,
        doc: null,
        polls: 0,
        quiet: 0,
        ...op.accepted,
        location,
        ended: false,
        stuck: null,
        answered: { status: result.status, body: result.body ?? result.problem ?? null },
        result: null,
      };
      await this.#put(op);
    } else {
      await this.#delete(op.id);
    }
    this.#emit({ type: "final", op, result });
    return result;
  }

  /**
   * The server took the operation and runs it (202, or a lookup that named
   * its poll URL): kept with its Location and state document, polled until
   * it ends, and kept after that until `acknowledge(id)`.
   */
  async #accept(op, { status, location, replayed, body, lookup }) {
    const now = Date.now();
    op.phase = "accepted";
    op.nextAttemptAt = now + this.pollMinMs;
    op.accepted = {
      status,
      location,
      acceptedAt: now,
      doc: body && typeof body === "object" ? body : null,
      polls: 0,
      quiet: 0,
      ended: false,
      stuck: null,
      result: null,
      ...(lookup ? { lookup } : {}),
    };
    await this.#put(op);
    const result = { ...this.#acceptedResult(op), replayed };
    this.#emit({ type: "accepted", op, result });
    return result;
  }

  /** What `run()` answers for an accepted operation: running, or ended (kept until acknowledged). */
  #acceptedResult(op) {
    const a = op.accepted;
    if (a.ended) return { state: "ended", id: op.id, key: op.key, location: a.location, status: a.result?.status ?? null, body: a.result?.body ?? null, doc: a.doc ?? null };
    return { state: "accepted", id: op.id, key: op.key, status: a.status, location: a.location, body: a.doc, stuck: a.stuck };
  }

  /**
   * One poll of an accepted operation, with its own account's credentials
   * and a timeout. The next one backs off (doubling from `pollMinMs` to
   * `pollCapMs`) while nothing changes, and never comes before a 429's or
   * 503's Retry-After; 401/403 hold it like a send. Returns a result when
   * it ended (or is held), else null.
   */
  async #poll(op) {
    const credentials = await this.#credentials();
    if (credentials.scope !== op.scope) return this.#hold(op);
    const a = op.accepted;
    let response = null;
    let text = null;
    try {
      response = await this.fetch(this.baseUrl + a.location, {
        headers: credentials.headers,
        cache: "no-store",
        signal: AbortSignal.timeout(this.pollTimeoutMs),
      });
      text = await response.text();
    } catch {
      response = null;
    }
    const now = Date.now();
    a.polls += 1;
    a.lastPoll = { at: now, status: response?.status ?? null };
    if (response && (response.status === 401 || response.status === 403)) {
      return this.#holdForAuth(op, response.status, problemOf(text), credentials.headers);
    }
    let changed = false;
    if (response?.status === 404) {
      // The server no longer knows it (another server, or purged): ended,
      // with its final answer when the send got one, else shown as gone.
      a.ended = true;
      a.endedAt = now;
      if (a.answered) {
        a.result = a.answered;
      } else {
        a.gone = true;
        a.result = { status: 404, body: problemOf(text) ?? null };
      }
    } else if (response?.status === 200) {
      const doc = safeJson(text);
      if (doc && typeof doc === "object") {
        changed = JSON.stringify(doc) !== JSON.stringify(a.doc);
        a.doc = doc;
        const dead = deadStep(doc);
        a.stuck = dead ? { step: dead, since: a.stuck?.since ?? now } : null;
        if (ended(doc)) {
          a.ended = true;
          a.endedAt = now;
          a.stuck = null;
          a.result = doc.result_status !== undefined ? { status: doc.result_status, body: doc.result ?? null } : (a.answered ?? { status: null, body: null });
        }
      }
    }
    if (a.ended) {
      op.nextAttemptAt = 0;
      await this.#put(op);
      const result = this.#acceptedResult(op);
      this.#emit({ type: "ended", op, result });
      return result;
    }
    a.quiet = changed ? 0 : (a.quiet ?? 0) + 1;
    let delayMs = Math.min(this.pollCapMs, this.pollMinMs * 2 ** Math.min(a.quiet, 30));
    const retryAfter = response?.headers.get("Retry-After");
    if (retryAfter && /^\d+$/.test(retryAfter.trim())) delayMs = Math.max(delayMs, Number(retryAfter.trim()) * 1000);
    op.nextAttemptAt = now + delayMs;
    await this.#put(op);
    this.#emit({ type: "update", op });
    return null;
  }

  async #get(id) {
    const tx = this.db.transaction(STORE, "readonly");
    return request(tx.objectStore(STORE).get(id));
  }

  /** Resolves once the write is durable (the transaction completed). */
  async #put(op) {
    const tx = this.db.transaction(STORE, "readwrite", { durability: "strict" });
    tx.objectStore(STORE).put(op);
    await done(tx);
  }

  async #delete(id) {
    const tx = this.db.transaction(STORE, "readwrite", { durability: "strict" });
    tx.objectStore(STORE).delete(id);
    await done(tx);
  }
}

/** Resolves once `tx` completed (its writes are durable). */
function done(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

/** An RFC 9457 problem document (a JSON object with a `code`), if `text` is one. */
function problemOf(text) {
  const value = safeJson(text ?? "");
  return value && typeof value === "object" && typeof value.code === "string" ? value : undefined;
}

function safeJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

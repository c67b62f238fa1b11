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
// Every rule (key format, fingerprint, retry steps, what `unknown` means)
// comes from idemkey-core through the wasm module; this file only moves data
// between fetch, IndexedDB, Web Locks, BroadcastChannel and the caller.

import init, { afterUnknown, attemptMayHaveApplied, fingerprint, newKey, parseKey, retryStep } from "./idemkey_wasm.js";

const STORE = "operations";
const LOCK_PREFIX = "idemkey-op:";
/** Where the server's contract says how long it replays: `x-idempotency.retention.replayWindowSeconds` of GET /openapi.json. */
const CONTRACT_PATH = "/openapi.json";

/**
 * The server's replay window in ms, read from its published contract
 * (`x-idempotency.retention.replayWindowSeconds` of `GET {baseUrl}/openapi.json`,
 * times 1000); null when it cannot be read (no answer, no such member).
 * @param {{baseUrl?: string, fetch?: typeof fetch}} [options]
 * @returns {Promise<number | null>}
 */
export async function publishedReplayWindowMs({ baseUrl = "", fetch: get = globalThis.fetch.bind(globalThis) } = {}) {
  try {
    const response = await get(baseUrl + CONTRACT_PATH, { cache: "no-store" });
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
    authHold: op.authHold ?? null,
    last: op.last,
  };
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
    /** A number given by the app, else read from the server's contract when first needed. */
    this.replayWindowMs = options.replayWindowMs ?? null;
    this.backgroundSync = options.backgroundSync ?? null;
    this.lookupPath =
      options.lookupPath ?? ((keyValue) => `/operations/${encodeURIComponent(keyValue)}`);
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
    }
  }

  /**
   * Listens to progress: `update`, `attempt`, `final`, `busy` (another tab
   * sends it), `held` (it belongs to another account, or its credentials
   * were refused: `reason`), `offline` (waiting for the network) and
   * `decision` (unknown past the replay window).
   * Returns an unsubscribe function.
   * @param {(event: import("./idempotent-client.d.ts").ClientEvent) => void} listener
   */
  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Local listeners get the whole event; other tabs a summary, tagged with the operation's scope. */
  #emit(event, broadcast = true) {
    for (const listener of this.listeners) listener({ ...event, remote: false });
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
    for (const listener of this.listeners) listener(event);
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
   * The stored (unfinished) operations of the current scope, oldest first.
   * @returns {Promise<StoredOperation[]>}
   */
  async pending() {
    const scope = await this.currentScope();
    const tx = this.db.transaction(STORE, "readonly");
    const all = await request(tx.objectStore(STORE).getAll());
    return all.filter((op) => (op.scope ?? "") === scope).sort((a, b) => a.createdAt - b.createdAt);
  }

  /**
   * Resumes every stored operation of the current scope that this tab is not
   * already driving (call it on page load; the client calls it on `online`).
   * Operations another tab is sending are watched, and taken over if that
   * tab goes away.
   * @returns {Promise<OperationResult[]>}
   */
  async resumePending() {
    const ops = await this.pending();
    return Promise.all(ops.filter((op) => !this.active.has(op.id)).map((op) => this.run(op.id)));
  }

  /**
   * Call it when the signed-in account or its credentials change (sign-in,
   * sign-out, switch, a new token): operations of the previous account stop
   * at once (`held`), and those of the current one resume, including those
   * a 401/403 held (`needs-auth`), with their own keys.
   * @returns {Promise<OperationResult[]>}
   */
  async accountChanged() {
    for (const wake of [...this.wakers.values()]) wake();
    const scope = await this.currentScope();
    const tx = this.db.transaction(STORE, "readwrite", { durability: "strict" });
    const store = tx.objectStore(STORE);
    for (const op of await request(store.getAll())) {
      if ((op.scope ?? "") === scope && op.authHold) {
        op.authHold = null;
        store.put(op);
      }
    }
    await done(tx);
    return this.resumePending();
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
    try {
      const name = LOCK_PREFIX + id;
      const first = await navigator.locks.request(name, { ifAvailable: true }, async (lock) => {
        if (lock === null) return null;
        return this.#drive(id);
      });
      if (first !== null) return first;
      const op = await this.#get(id);
      if (op) this.#emit({ type: "busy", op }, false);
      // Another tab is sending it: wait our turn, then look again.
      return await navigator.locks.request(name, async () => this.#drive(id));
    } finally {
      this.active.delete(id);
    }
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
      if (op.authHold) return this.#authHeld(op);
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
      if (op.phase === "lookup") {
        const result = await this.#reconcile(op);
        if (result) return result;
        continue;
      }
      // Whether an earlier attempt may have been applied. Operations stored
      // before the client kept it count as such once sent.
      const earlier = op.maybeApplied ?? op.attempts > 0;
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
        case "done":
          return this.#finish(op, {
            state: "done",
            id,
            key: op.key,
            status: response.status,
            replayed: response.headers.get("Idempotent-Replayed") === "true",
            location: response.headers.get("Location"),
            body: safeJson(text),
          });
        case "stop":
          return this.#finish(op, {
            state: "stopped",
            id,
            key: op.key,
            status: response ? response.status : 0,
            problem: problemOf(text),
          });
        case "holdForAuth":
          return this.#holdForAuth(op, response.status, problemOf(text));
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
  async #holdForAuth(op, status, problem) {
    op.authHold = { status, at: Date.now(), ...(problem ? { code: problem.code } : {}) };
    op.nextAttemptAt = 0;
    await this.#put(op);
    this.#emit({ type: "update", op });
    return this.#authHeld(op);
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
    const windowMs = await this.#replayWindow();
    return windowMs !== null && now - op.firstSentAt < windowMs;
  }

  /** The replay window: the `replayWindowMs` option, else the server's contract (kept once read). */
  async #replayWindow() {
    if (this.replayWindowMs === null) {
      this.replayWindowMs = await publishedReplayWindowMs({ baseUrl: this.baseUrl, fetch: this.fetch });
    }
    return this.replayWindowMs;
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
    } catch {
      lookup = undefined;
    }
    if (refused !== null) {
      // Looked up again with the same key after the account signs in.
      op.phase = "lookup";
      return this.#holdForAuth(op, refused, undefined);
    }
    const now = Date.now();
    if (lookup && (lookup.state === "completed" || lookup.state === "expired")) {
      return this.#finish(op, { state: "reconciled", id: op.id, key: op.key, lookup });
    }
    op.phase = "send";
    const windowMs = lookup && lookup.state === "unknown" ? await this.#replayWindow() : null;
    if (lookup && lookup.state === "unknown" && windowMs === null) {
      // The window is not known: never resend on a guess; ask again later.
      op.phase = "lookup";
      op.nextAttemptAt = now + this.reconcileDelayMs;
      op.last = { ...op.last, action: "reconcile", lookup };
    } else if (lookup && lookup.state === "unknown") {
      const firstSentAt = op.firstSentAt ?? op.createdAt;
      const step = afterUnknown(op.attempts, firstSentAt, now, windowMs, this.random(), this.policy);
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

  async #finish(op, result) {
    await this.#delete(op.id);
    this.#emit({ type: "final", op, result });
    return result;
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

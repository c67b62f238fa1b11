// IdempotentClient: one logical operation = one Idempotency-Key, kept in
// IndexedDB before the first send, resent with the same key as the core's
// retry policy says, reconciled through the server's lookup when retrying
// must end, and deleted only on a final answer. A Web Lock per operation
// keeps two tabs from sending the same operation at once.
//
// Every rule (key format, fingerprint, retry steps, problem documents) comes
// from idemkey-core through the wasm module; this file only moves data
// between fetch, IndexedDB, Web Locks and the caller.

import init, {
  fingerprint,
  newKey,
  parseKey,
  retryStep,
} from "./idemkey_wasm.js";

const STORE = "operations";
const LOCK_PREFIX = "idemkey-op:";

/** @typedef {import("./idempotent-client.d.ts").StoredOperation} StoredOperation */
/** @typedef {import("./idempotent-client.d.ts").OperationResult} OperationResult */
/** @typedef {import("./idempotent-client.d.ts").ClientOptions} ClientOptions */

/** Resolves after `ms`, or as soon as `wake()` is called. */
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
    this.scope = options.scope ?? "";
    this.headers = options.headers ?? (() => ({}));
    this.policy = options.policy;
    this.random = options.random ?? Math.random;
    this.attemptTimeoutMs = options.attemptTimeoutMs ?? 15000;
    this.reconcileDelayMs = options.reconcileDelayMs ?? 5000;
    this.lookupPath =
      options.lookupPath ?? ((keyValue) => `/operations/${encodeURIComponent(keyValue)}`);
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    /** @type {Map<string, () => void>} */
    this.wakers = new Map();
    this.listeners = new Set();
    this.channel =
      typeof BroadcastChannel === "function" ? new BroadcastChannel(`idemkey:${options.dbName ?? "idemkey"}`) : null;
    if (this.channel) {
      // Other tabs' progress, so every tab's panel shows the same operations.
      this.channel.onmessage = (event) => this.#emit(event.data, false);
    }
  }

  /**
   * Listens to progress: `{type: "update", op}`, `{type: "attempt", op, outcome, step}`,
   * `{type: "final", op, result}` and `{type: "busy", op}`. Returns an unsubscribe function.
   * @param {(event: import("./idempotent-client.d.ts").ClientEvent) => void} listener
   */
  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  #emit(event, broadcast = true) {
    for (const listener of this.listeners) listener({ ...event, remote: !broadcast });
    if (broadcast && this.channel) this.channel.postMessage(event);
  }

  /**
   * Starts one logical operation: a new key, stored with the request before
   * the first send, then sent until a final answer.
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
      scope: this.scope,
      attempts: 0,
      createdAt: Date.now(),
      nextAttemptAt: 0,
      last: null,
    };
    await this.#put(op);
    this.#emit({ type: "update", op });
    return this.run(op.id);
  }

  /**
   * The stored (unfinished) operations of this client's scope, oldest first.
   * @returns {Promise<StoredOperation[]>}
   */
  async pending() {
    const tx = this.db.transaction(STORE, "readonly");
    const all = await request(tx.objectStore(STORE).getAll());
    return all.filter((op) => (op.scope ?? "") === this.scope).sort((a, b) => a.createdAt - b.createdAt);
  }

  /**
   * Resumes every stored operation (call it on page load). Operations another
   * tab is sending are watched, and taken over if that tab goes away.
   * @returns {Promise<OperationResult[]>}
   */
  async resumePending() {
    const ops = await this.pending();
    return Promise.all(ops.map((op) => this.run(op.id)));
  }

  /**
   * Sends the stored operation `id` until a final answer, holding its Web
   * Lock. If another tab holds the lock, emits `busy`, waits for the lock and
   * then finishes what that tab left (if anything).
   * @param {string} id
   * @returns {Promise<OperationResult>}
   */
  async run(id) {
    const name = LOCK_PREFIX + id;
    const first = await navigator.locks.request(name, { ifAvailable: true }, async (lock) => {
      if (lock === null) return null;
      return this.#drive(id);
    });
    if (first !== null) return first;
    const op = await this.#get(id);
    if (op) this.#emit({ type: "busy", op }, false);
    // Another tab is sending it: wait our turn, then look again.
    return navigator.locks.request(name, async () => this.#drive(id));
  }

  /**
   * For demonstrations and tests only: replaces a pending operation's body
   * while keeping its key, as a buggy client would, and sends it at once. The
   * server answers 422 `idempotency-key-reused` and creates nothing.
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
      // Re-read on every attempt: the stored record is the truth (and may
      // be gone if another tab finished it).
      const op = await this.#get(id);
      if (!op) return { state: "finished-elsewhere", id };
      // The key is scoped to the account it was first sent for: sent with
      // another account's credentials, it would create a second effect.
      if ((op.scope ?? "") !== this.scope) return { state: "other-scope", id };
      const waitMs = op.nextAttemptAt - Date.now();
      if (waitMs > 0) {
        await sleep(waitMs, this.wakers, id);
        continue;
      }
      op.attempts += 1;
      op.last = { sending: true, at: Date.now() };
      // The attempt is counted before it is sent, so a reload mid-flight
      // never resets the budget.
      await this.#put(op);
      this.#emit({ type: "update", op });

      const { outcome, response, text } = await this.#send(op);
      const step = retryStep(op.attempts, outcome, this.random(), this.policy);
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
        case "reconcile": {
          const result = await this.#reconcile(op);
          if (result) return result;
          break;
        }
        default:
          throw new Error(`unknown retry step ${step.action}`);
      }
    }
  }

  /** One attempt: the outcome in the shape `retryStep` reads. */
  async #send(op) {
    let response;
    try {
      response = await this.fetch(this.baseUrl + op.url, {
        method: op.method,
        headers: {
          ...(await this.headers()),
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
    return {
      outcome: { status: response.status, retryAfter: response.headers.get("Retry-After") },
      response,
      text,
    };
  }

  /**
   * Looks the operation up. A final answer (completed, expired, unknown)
   * ends it; otherwise (in progress, or the lookup itself failed) it waits
   * and tries again, the stored operation kept.
   */
  async #reconcile(op) {
    let lookup;
    try {
      const response = await this.fetch(this.baseUrl + this.lookupPath(op.id), {
        headers: await this.headers(),
        cache: "no-store",
        signal: AbortSignal.timeout(this.attemptTimeoutMs),
      });
      if (response.ok) lookup = await response.json();
    } catch {
      lookup = undefined;
    }
    if (lookup && lookup.state !== "in_progress") {
      return this.#finish(op, { state: "reconciled", id: op.id, key: op.key, lookup });
    }
    // Not final: keep the operation. In a while it is sent again with the
    // same key (always safe), which replays, or with the budget spent comes
    // straight back here.
    op.nextAttemptAt = Date.now() + this.reconcileDelayMs;
    op.last = { ...op.last, action: "reconcile", lookup: lookup ?? null };
    await this.#put(op);
    this.#emit({ type: "update", op });
    return null;
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
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  }

  async #delete(id) {
    const tx = this.db.transaction(STORE, "readwrite", { durability: "strict" });
    tx.objectStore(STORE).delete(id);
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
    });
  }
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

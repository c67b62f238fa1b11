// Types of IdempotentClient (idempotent-client.js).
import type { Problem, RetryPolicy, RetryStep } from "./idemkey_wasm.js";

/** One logical operation as stored in IndexedDB before its first send. */
export interface StoredOperation {
  /** The key's value (unquoted); also the IndexedDB key and the Web Lock name suffix. */
  id: string;
  /** The Idempotency-Key field value sent with every attempt (a quoted sf-string). */
  key: string;
  /** Operation id, e.g. "POST /orders:v1". */
  operation: string;
  method: string;
  url: string;
  /** The JSON body, as sent. */
  body: string;
  /** Fingerprint of (operation, body) when the operation was created, 64 hex digits. */
  fingerprint: string;
  /** The scope (account) it belongs to: only ever sent while this scope is signed in. */
  scope: string;
  /** Attempts made so far (counted before each send; never while offline). */
  attempts: number;
  createdAt: number;
  /** Unix ms of the first send (null before it): the replay window is measured from here. */
  firstSentAt: number | null;
  /** Unix ms before which the next request is not sent. */
  nextAttemptAt: number;
  /**
   * What the next request is: the operation itself, its lookup, or (once
   * the server accepted it) a poll of its Location. An `accepted` operation
   * stays stored after its end until `acknowledge(id)`.
   */
  phase: "send" | "lookup" | "accepted";
  /** Set once the server accepted it (202, or a lookup that named its poll URL), or answered a long operation's end with its Location. */
  accepted?: AcceptedState;
  /** Set when a lookup said `unknown` past the replay window: the application decides. */
  decision: null | { reason: "unknown-past-window"; at: number; lookup: OperationLookup };
  /**
   * Whether an attempt may have been applied by the server (no answer, 5xx,
   * 408, 409 in progress, 410, or cut off by a reload). From then on a 404,
   * 400, 422, ... is looked up rather than ending the operation, and no
   * resend goes out past the replay window without a lookup first.
   * Absent on operations stored by an older client (then: `attempts > 0`).
   */
  maybeApplied?: boolean;
  /**
   * Set when the server refused the credentials (401/403): kept, unsent,
   * while the credentials are the refused ones (`refused`: their SHA-256,
   * never the credentials), or until `accountChanged()`. Other credentials
   * of the same account (a sign-in in another context) are tried.
   */
  authHold?: null | { status: number; at: number; code?: string; refused?: string };
  /** What the last attempt did. */
  last: null | {
    at: number;
    sending?: boolean;
    networkError?: boolean;
    status?: number;
    retryAfter?: string | null;
    action?: RetryStep["action"] | "resend" | "needs-decision";
    code?: string | null;
    delayMs?: number;
    lookup?: OperationLookup | null;
  };
}

/**
 * An operation the server runs on its own (a purchase), from its 202 to its
 * end being shown. Polled at its `location` (backoff from `pollMinMs` to
 * `pollCapMs` while nothing changes, a `pollTimeoutMs` per poll, one context
 * at a time under the operation's Web Lock) until it ends; then kept, ended,
 * until the application calls `acknowledge(id)`.
 */
export interface AcceptedState {
  /** The answer that accepted it (202), or null when a lookup found it. */
  status: number | null;
  /** Where it is polled (the answer's Location, or the lookup's `purchase`). */
  location: string;
  acceptedAt: number | null;
  /** The last state document (the 202's body, then each poll's). */
  doc?: unknown;
  polls: number;
  /** Polls in a row that changed nothing (the backoff's exponent). */
  quiet?: number;
  lastPoll?: { at: number; status: number | null };
  /** Whether its final answer is known (`result`). */
  ended: boolean;
  endedAt?: number;
  /** The poll answered 404: the server no longer knows it. */
  gone?: boolean;
  /** A step whose attempts ran out (`dead`): it waits for an operator, and is not lost. */
  stuck: null | { step: string; since: number };
  /** The final answer: its status and body (a poll's `result_status` and `result`, else the send's answer). */
  result: null | { status: number | null; body: unknown };
  /** The send's own final answer (201, 402, 409 with its Location), before the poll that fetches its state document. */
  answered?: { status: number; body: unknown };
  /** The lookup that found it, when a lookup did. */
  lookup?: OperationLookup;
}

/** What other tabs receive over BroadcastChannel (and `op` in their events): no body, no key field, no headers. */
export type OperationSummary = Pick<
  StoredOperation,
  "id" | "scope" | "operation" | "attempts" | "createdAt" | "firstSentAt" | "nextAttemptAt" | "phase" | "decision" | "last"
> & { maybeApplied: boolean | null; authHold: StoredOperation["authHold"] | null; accepted: Omit<AcceptedState, "doc"> | null };

/** The server's answer to GET /operations/{key}. */
export interface OperationLookup {
  key: string;
  operation: string;
  state: "completed" | "expired" | "unknown" | "in_progress";
  order?: string;
  /** The purchase's poll URL, for a lookup of `POST /purchases:v1`. */
  purchase?: string;
  created_at?: string;
  replay_until?: string;
}

/** How an operation ended (the stored operation is deleted), or why it is not being sent now. */
export type OperationResult =
  /**
   * A 2xx other than 202, maybe replayed. A long operation's (a purchase's)
   * answer with a Location is also kept, ended, until `acknowledge(id)`.
   */
  | { state: "done"; id: string; key: string; status: number; replayed: boolean; location: string | null; body: unknown }
  /**
   * Ended by an answer that proves the request was not applied: a 4xx on an
   * operation that nothing earlier may have applied (400, 404, 413, 415,
   * 422, ...), or at any time by a code the core calls final: 409
   * `order-reference-exists`, and a long operation's ends, 409 `out-of-stock`,
   * 402 `payment-declined`, 409 `operation-failed` (kept, ended, when the
   * answer carries the purchase's Location).
   */
  | { state: "stopped"; id: string; key: string; status: number; problem?: Problem }
  /**
   * The server refused the credentials (401/403), on a send or a lookup:
   * kept with its key, not sent, until `accountChanged()` (sign-in again,
   * a new token); then sent again with the same key. `discard(id)` drops it.
   */
  | { state: "needs-auth"; id: string; key: string; status: number; maybeApplied: boolean }
  | { state: "reconciled"; id: string; key: string; lookup: OperationLookup }
  /**
   * The server accepted it (202, or a lookup named its poll URL) and runs it:
   * kept and polled (`accepted`/`update`/`ended` events); `stuck` names a
   * step that waits for an operator. Never resend or buy again: it is running.
   */
  | { state: "accepted"; id: string; key: string; status: number | null; location: string; body: unknown; stuck: AcceptedState["stuck"]; replayed?: boolean }
  /** An accepted operation's end (`status`/`body`: its final answer), kept until `acknowledge(id)`. */
  | { state: "ended"; id: string; key: string; location: string; status: number | null; body: unknown; doc: unknown }
  /** The lookup said `unknown` past the replay window: kept, not sent, until `resend(id)` or `discard(id)`. */
  | { state: "needs-decision"; id: string; key: string; firstSentAt: number; attempts: number; lookup: OperationLookup }
  | { state: "discarded"; id: string; key: string }
  | { state: "finished-elsewhere"; id: string }
  /** Belongs to another account than the signed-in one: kept, not sent, resumed when that account signs in. */
  | { state: "other-scope"; id: string };

type Outcome = { status?: number; retryAfter?: string | null; networkError?: boolean };

/** Events of this tab carry the stored operation; events from another tab (remote) carry what this tab's store holds, or the summary. */
export type ClientEvent =
  | { type: "update"; op: StoredOperation | OperationSummary; remote: boolean }
  | { type: "attempt"; op: StoredOperation | OperationSummary; outcome: Outcome; step: RetryStep; remote: boolean }
  | { type: "final"; op: StoredOperation | OperationSummary; result: OperationResult; remote: boolean }
  | { type: "decision"; op: StoredOperation | OperationSummary; result: OperationResult; remote: boolean }
  | { type: "busy"; op: StoredOperation; remote: false }
  | { type: "held"; op: StoredOperation; reason: "other-scope" | "auth"; remote: false }
  | { type: "offline"; op: StoredOperation; remote: false }
  | { type: "accepted"; op: StoredOperation | OperationSummary; result: OperationResult; remote: boolean }
  | { type: "ended"; op: StoredOperation | OperationSummary; result: OperationResult; remote: boolean }
  | { type: "acknowledged"; op: StoredOperation | OperationSummary; remote: boolean };

export interface ClientOptions {
  /** Prefix of every URL, e.g. "https://api.example". Default "" (same origin). */
  baseUrl?: string;
  /**
   * Which account is signed in now: its account id (e.g. `session.accountId`),
   * evaluated with `headers()` before every request. An operation is only
   * sent while the scope that created it is the current one: the server
   * scopes keys per account, so the same key sent for another account would
   * create a second effect. Use the account, never the token or a hash of
   * it: tokens are rotated and expire, and a new token's scope would leave
   * every pending operation of the same account held (`other-scope`) for
   * good, so the user's next click would make a second order. A constant
   * string is accepted. Default "".
   */
  scope?: string | (() => string | Promise<string>);
  /** The signed-in account's request headers, e.g. () => ({ Authorization: `Bearer ${token}` }). */
  headers?: () => Record<string, string> | Promise<Record<string, string>>;
  /** Retry parameters; default the core's (base 250 ms, cap 30 s, 8 attempts). */
  policy?: RetryPolicy;
  /** Uniform in [0, 1); default Math.random. */
  random?: () => number;
  /** Per-attempt timeout, counted as a network error. Default 15000. */
  attemptTimeoutMs?: number;
  /** Wait before sending again when a lookup says in_progress or fails. Default 5000. */
  reconcileDelayMs?: number;
  /**
   * The server's replay window in ms. A lookup that says `unknown` is resent
   * with the same key inside it, and handed to the application past it; an
   * operation that may have been applied is never resent past it without a
   * lookup first. Default: read from the server's own contract when first
   * needed, `x-idempotency.retention.replayWindowSeconds` of
   * `GET {baseUrl}/openapi.json` times 1000 (see `publishedReplayWindowMs`),
   * and read again once older than `contractMaxAgeMs` or when the page
   * resumes from a pause (outside the operation's lock, with a timeout);
   * while it cannot be read, nothing is resent on a guess (the operation
   * is looked up again later). An attempt that may still be in flight at
   * the window's end (now + `attemptTimeoutMs`) counts as past it. Give it
   * only for a server that does not publish that member.
   */
  replayWindowMs?: number;
  /** How long a window read from the contract is used before it is read again. Default 600000 (10 min). */
  contractMaxAgeMs?: number;
  /**
   * Whether this context polls accepted operations to their end (default
   * true). A service worker sets false: it keeps what it got (202 included)
   * in the store, and the page polls and shows it.
   */
  pollAccepted?: boolean;
  /** First wait between polls of an accepted operation; doubles while nothing changes. Default 500. */
  pollMinMs?: number;
  /** Longest wait between polls (and never less than a Retry-After). Default 30000. */
  pollCapMs?: number;
  /** Timeout of one poll (counted as no answer). Default 10000. */
  pollTimeoutMs?: number;
  /**
   * A Background Sync tag to register with the page's service worker when an
   * operation waits for the network, e.g. "idemkey". The worker's `sync`
   * handler creates a client per account it holds credentials for (each
   * with that account's scope and headers) and calls `resumePending()`, so
   * the work finishes after the tab is closed. Default: none.
   */
  backgroundSync?: string;
  /**
   * Lookup path of a key's operation, given the key and the operation id the
   * request was submitted under (an API with several operations looks each
   * up in its own place). Default the core's `lookupPath(operation, keyValue)`:
   * `/operations/{key}`, with `?operation=purchases` for a purchase.
   */
  lookupPath?: (keyValue: string, operation: string) => string;
  /** IndexedDB database name (and BroadcastChannel suffix). Default "idemkey". */
  dbName?: string;
  /** Where idemkey_wasm_bg.wasm is, if not next to idemkey_wasm.js (e.g. a bundler's asset URL). */
  wasmUrl?: string | URL;
  fetch?: typeof fetch;
}

/**
 * The server's replay window in ms: `x-idempotency.retention.replayWindowSeconds`
 * of `GET {baseUrl}/openapi.json`, times 1000; null when it cannot be read.
 */
export declare function publishedReplayWindowMs(options?: { baseUrl?: string; fetch?: typeof fetch; timeoutMs?: number }): Promise<number | null>;

export declare class IdempotentClient {
  static create(options?: ClientOptions): Promise<IdempotentClient>;
  subscribe(listener: (event: ClientEvent) => void): () => void;
  submit(request: { method?: string; url: string; body: unknown; operation: string }): Promise<OperationResult>;
  currentScope(): Promise<string>;
  /** Operations still being sent or looked up (not the accepted ones). */
  pending(): Promise<StoredOperation[]>;
  /** Accepted operations, running or ended, kept until `acknowledge(id)`. */
  accepted(): Promise<StoredOperation[]>;
  /** The app has shown an accepted operation's end: delete it (every tab). */
  acknowledge(id: string): Promise<boolean>;
  resumePending(): Promise<OperationResult[]>;
  accountChanged(): Promise<OperationResult[]>;
  run(id: string): Promise<OperationResult>;
  resend(id: string): Promise<OperationResult>;
  discard(id: string): Promise<OperationResult>;
  forceBody(id: string, body: unknown): Promise<boolean>;
}

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
  /** The client's scope (e.g. the account) when the operation was created. */
  scope: string;
  /** Attempts made so far (counted before each send). */
  attempts: number;
  createdAt: number;
  /** Unix ms before which the next attempt is not sent. */
  nextAttemptAt: number;
  /** What the last attempt did. */
  last: null | {
    at: number;
    sending?: boolean;
    networkError?: boolean;
    status?: number;
    retryAfter?: string | null;
    action?: RetryStep["action"];
    delayMs?: number;
    lookup?: OperationLookup | null;
  };
}

/** The server's answer to GET /operations/{key}. */
export interface OperationLookup {
  key: string;
  operation: string;
  state: "completed" | "expired" | "unknown" | "in_progress";
  order?: string;
  created_at?: string;
  replay_until?: string;
}

/** How an operation ended (the stored operation is deleted), or that another tab finished it. */
export type OperationResult =
  | { state: "done"; id: string; key: string; status: number; replayed: boolean; location: string | null; body: unknown }
  | { state: "stopped"; id: string; key: string; status: number; problem?: Problem }
  | { state: "reconciled"; id: string; key: string; lookup: OperationLookup }
  | { state: "finished-elsewhere"; id: string }
  | { state: "other-scope"; id: string };

export type ClientEvent =
  | { type: "update"; op: StoredOperation; remote: boolean }
  | { type: "attempt"; op: StoredOperation; outcome: { status?: number; retryAfter?: string | null; networkError?: boolean }; step: RetryStep; remote: boolean }
  | { type: "final"; op: StoredOperation; result: OperationResult; remote: boolean }
  | { type: "busy"; op: StoredOperation; remote: boolean };

export interface ClientOptions {
  /** Prefix of every URL, e.g. "https://api.example". Default "" (same origin). */
  baseUrl?: string;
  /**
   * Who the operations belong to, e.g. an account id or a hash of the token.
   * An operation is only sent (and resumed) by a client of the same scope:
   * the server scopes keys per account, so the same key sent for another
   * account would create a second effect. Default "".
   */
  scope?: string;
  /** Extra request headers, e.g. () => ({ Authorization: `Bearer ${token}` }). */
  headers?: () => Record<string, string> | Promise<Record<string, string>>;
  /** Retry parameters; default the core's (base 250 ms, cap 30 s, 8 attempts). */
  policy?: RetryPolicy;
  /** Uniform in [0, 1); default Math.random. */
  random?: () => number;
  /** Per-attempt timeout, counted as a network error. Default 15000. */
  attemptTimeoutMs?: number;
  /** Wait before looking again when a lookup is not final. Default 5000. */
  reconcileDelayMs?: number;
  /** Lookup path of a key's operation. Default `/operations/${encodeURIComponent(keyValue)}`. */
  lookupPath?: (keyValue: string) => string;
  /** IndexedDB database name (and BroadcastChannel suffix). Default "idemkey". */
  dbName?: string;
  /** Where idemkey_wasm_bg.wasm is, if not next to idemkey_wasm.js. */
  wasmUrl?: string | URL;
  fetch?: typeof fetch;
}

export declare class IdempotentClient {
  static create(options?: ClientOptions): Promise<IdempotentClient>;
  subscribe(listener: (event: ClientEvent) => void): () => void;
  submit(request: { method?: string; url: string; body: unknown; operation: string }): Promise<OperationResult>;
  pending(): Promise<StoredOperation[]>;
  resumePending(): Promise<OperationResult[]>;
  run(id: string): Promise<OperationResult>;
  forceBody(id: string, body: unknown): Promise<boolean>;
}

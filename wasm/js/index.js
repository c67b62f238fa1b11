// @idemkey/client: the wasm functions of idemkey-core and IdempotentClient.
// `init()` (the default export) loads the module; IdempotentClient.create()
// calls it for you.
export * from "./idemkey_wasm.js";
export { default } from "./idemkey_wasm.js";
export { IdempotentClient, publishedReplayWindowMs } from "./idempotent-client.js";

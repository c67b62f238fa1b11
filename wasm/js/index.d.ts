// Types of @idemkey/client (index.js).
export * from "./idemkey_wasm.js";
export { default } from "./idemkey_wasm.js";
export * from "./idempotent-client.js";

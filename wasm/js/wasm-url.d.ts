// Types of `import wasmUrl from "@idemkey/client/idemkey_wasm_bg.wasm"`: the
// URL a bundler gives for the module file (esbuild's `file` loader, webpack's
// `asset/resource`), to pass as `IdempotentClient.create({ wasmUrl })` or
// `init({ module_or_path: wasmUrl })`.
declare const wasmUrl: string;
export default wasmUrl;

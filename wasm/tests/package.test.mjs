// The npm package as an app gets it: `npm pack` of wasm/pkg, installed from
// the tarball into a scratch app outside the repository, type-checked with
// TypeScript (strict, the package's own .d.ts files included), bundled with
// esbuild, and run in Debian's headless Chromium against a real
// `idemkey-server serve --demo` that serves the bundle.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { launch } from "./browser.mjs";
import { root, startServer } from "./server.mjs";

const wasmDir = join(root, "wasm");
const bin = (name) => join(wasmDir, "node_modules", ".bin", name);
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

/** The workspace version in Cargo.toml, which the crate and the package share. */
function crateVersion() {
  const toml = readFileSync(join(root, "Cargo.toml"), "utf8");
  return toml.match(/\[workspace\.package\][^[]*?\nversion = "([^"]+)"/)[1];
}

const APP_TS = `
import init, {
  IdempotentClient, afterUnknown, attemptMayHaveApplied, defaultRetryPolicy, fingerprint, initSync, newKey,
  orderOperation, parseKey, publishedReplayWindowMs, retryStep, validateOrder,
} from "@idemkey/client";
import type { ClientEvent, ClientOptions, OperationResult, RetryPolicy, RetryStep, StoredOperation, UnknownStep, ValidOrder } from "@idemkey/client";
import { IdempotentClient as FromSubpath } from "@idemkey/client/client";
import * as wasm from "@idemkey/client/wasm";
import wasmUrl from "@idemkey/client/idemkey_wasm_bg.wasm";

declare global {
  interface Window { scratch: Promise<unknown> }
}

async function main() {
  const { token } = (await (await fetch("/demo/token")).json()) as { token: string };
  const events: ClientEvent["type"][] = [];
  const options: ClientOptions = {
    scope: () => "demo",                       // the account, never its token
    headers: () => ({ Authorization: \`Bearer \${token}\` }),
    wasmUrl,
    dbName: "scratch",
  };
  const client = await IdempotentClient.create(options);
  client.subscribe((event) => events.push(event.type));
  const body = JSON.stringify({ sku: "LIBRO-TS", quantity: 3 });
  const order: ValidOrder = validateOrder(body);
  const key: string = newKey();
  const policy: RetryPolicy = defaultRetryPolicy();
  const step: RetryStep = retryStep(1, { networkError: true }, 0, policy);
  const maybeApplied: boolean = attemptMayHaveApplied({ networkError: true });
  const after404: RetryStep = retryStep(2, { status: 404 }, 0, policy, maybeApplied);
  const replayWindowMs: number | null = await publishedReplayWindowMs();
  const unknown: UnknownStep = afterUnknown(8, 1_000, 21_000, 86_400_000, 0.5, policy);
  const result: OperationResult = await client.submit({ url: "/orders", body, operation: orderOperation() });
  const pending: StoredOperation[] = await client.pending();
  return {
    result,
    events,
    pending: pending.length,
    fingerprintMatches: fingerprint(orderOperation(), body) === order.fingerprint,
    keyParses: \`"\${parseKey(key, "uuid")}"\` === key,
    step,
    after404,
    replayWindowMs,
    unknown,
    sameClass: FromSubpath === IdempotentClient,
    sameModule: wasm.newKey === newKey,
    wasmUrl,
    functions: [init, initSync].map((f) => typeof f),
  };
}

window.scratch = main();
`;

const TSCONFIG = {
  compilerOptions: {
    target: "es2022",
    module: "esnext",
    moduleResolution: "bundler",
    lib: ["es2022", "dom"],
    strict: true,
    noEmit: true,
    types: [],
  },
  include: ["src"],
};

test("the packed @idemkey/client installs, type-checks and bundles in a scratch app, and the bundle creates an order", async () => {
  const work = mkdtempSync(join(tmpdir(), "idemkey-package-"));
  let server;
  const browser = await launch();
  try {
    // npm pack, as a publisher would.
    const [packed] = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", work], join(wasmDir, "pkg")));
    const version = crateVersion();
    assert.equal(packed.name, "@idemkey/client");
    assert.equal(packed.version, version, "the package's version is the crate's");
    assert.equal(packed.filename, `idemkey-client-${version}.tgz`);
    const files = packed.files.map((f) => f.path).sort();
    for (const f of ["README.md", "index.d.ts", "index.js", "idempotent-client.d.ts", "idempotent-client.js", "idemkey_wasm.d.ts", "idemkey_wasm.js", "idemkey_wasm_bg.wasm", "package.json", "wasm-url.d.ts"]) {
      assert.ok(files.includes(f), `${f} is in the tarball: ${files}`);
    }
    console.log(`# ${packed.filename}: ${packed.size} bytes packed, ${packed.unpackedSize} unpacked, ${files.length} files`);

    // A scratch app outside the repository installs the tarball.
    const app = join(work, "app");
    mkdirSync(join(app, "src"), { recursive: true });
    mkdirSync(join(app, "dist"));
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "scratch-shop", private: true, type: "module" }));
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify(TSCONFIG));
    writeFileSync(join(app, "src", "app.ts"), APP_TS);
    writeFileSync(join(app, "dist", "index.html"), '<!doctype html><meta charset="utf-8"><title>scratch</title><script type="module" src="/app.js"></script>');
    run("npm", ["install", "--no-audit", "--no-fund", "--offline", join(work, packed.filename)], app);
    const installed = JSON.parse(readFileSync(join(app, "node_modules", "@idemkey", "client", "package.json"), "utf8"));
    assert.equal(installed.version, version);

    // Types: every import above must resolve through the exports map and type-check.
    try {
      run(bin("tsc"), ["-p", "tsconfig.json"], app);
    } catch (e) {
      assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
    }
    run(bin("esbuild"), ["src/app.ts", "--bundle", "--format=esm", "--outdir=dist", "--loader:.wasm=file", "--log-level=warning"], app);
    const out = readdirSync(join(app, "dist"));
    assert.ok(out.includes("app.js") && out.some((f) => f.endsWith(".wasm")), `bundle: ${out}`);
    assert.ok(!readFileSync(join(app, "dist", "app.js"), "utf8").includes(root), "the bundle does not point into the repository");

    // The bundle, served by a real server, creates an order.
    server = await startServer({ demoDir: join(app, "dist") });
    const page = await browser.context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`${server.base}/`);
    const r = await page.evaluate(() => window.scratch);
    assert.deepEqual(errors, []);
    assert.equal(r.result.state, "done", JSON.stringify(r));
    assert.equal(r.result.status, 201);
    assert.equal(r.result.replayed, false);
    assert.deepEqual(server.ordersOf("demo").map((o) => [o[0], o[1], o[2]]), [[r.result.body.id, "LIBRO-TS", 3]]);
    assert.equal(r.pending, 0);
    assert.ok(r.events.includes("final"));
    assert.equal(r.fingerprintMatches, true);
    assert.equal(r.keyParses, true);
    assert.equal(r.step.action, "wait");
    assert.deepEqual(r.after404, { action: "reconcile" }, "a 404 after a lost answer is looked up");
    assert.equal(r.replayWindowMs, 86_400_000, "the server's default window, read from its contract");
    assert.deepEqual(r.unknown, { action: "resend", delayMs: 15000 });
    assert.equal(r.sameClass, true);
    assert.equal(r.sameModule, true);
    assert.match(r.wasmUrl, /\.wasm$/);
    assert.deepEqual(r.functions, ["function", "function"]);
  } finally {
    await browser.close();
    server?.stop();
    rmSync(work, { recursive: true, force: true });
  }
});

// A real `idemkey-server serve --demo` on SQLite, 127.0.0.1 and a free port,
// for the browser tests, and what they read from its database.
//
// IDEMKEY_SERVER_BIN names the server binary (default: the debug build in
// CARGO_TARGET_DIR or target/).
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("../../", import.meta.url));
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, "target");
export const serverBin = process.env.IDEMKEY_SERVER_BIN ?? join(targetDir, "debug", "idemkey-server");

/**
 * The base URL that a starting `idemkey-server` child (`serve`, `provider`)
 * logs ("listening on http://127.0.0.1:PORT"); `output.text` collects what
 * it printed, also later.
 */
export function listeningOn(child, what, output = { text: "" }) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start:\n${output.text}`)), 30000);
    const read = (chunk) => {
      output.text += chunk;
      const m = output.text.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stdout.on("data", read);
    child.stderr.on("data", read);
    child.on("exit", (code) => reject(new Error(`${what} exited with ${code}:\n${output.text}`)));
  });
}

/**
 * Starts the server in demo mode serving `demoDir` (default js-demo/) at /.
 * `extra` are more `serve` arguments.
 */
export async function startServer({ demoDir = join(root, "js-demo"), extra = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "idemkey-e2e-"));
  const dbPath = join(dir, "demo.db");
  const dbUrl = `sqlite://${dbPath}`;
  const spawnAt = (bind) =>
    spawn(serverBin, ["serve", "--demo", "--demo-dir", demoDir, "--database-url", dbUrl, "--bind", bind, ...extra], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1", RUST_LOG: "info" },
    });
  let child = spawnAt("127.0.0.1:0");
  let output = { text: "" };
  const base = await listeningOn(child, "server", output);

  function sql(query, ...args) {
    const script = "import sqlite3,sys,json; c=sqlite3.connect(sys.argv[1]); print(json.dumps(c.execute(sys.argv[2], sys.argv[3:]).fetchall()))";
    return JSON.parse(execFileSync("python3", ["-c", script, dbPath, query, ...args], { encoding: "utf8" }));
  }

  return {
    base,
    dbUrl,
    sql,
    /** A fresh account; returns its token (the last line of stdout). */
    account(name) {
      const out = execFileSync(serverBin, ["account", "create", name, "--database-url", dbUrl], { encoding: "utf8" });
      return out.trim().split("\n").pop();
    },
    /** Orders of the account called `name`, straight from the database: [[id, sku, quantity]]. */
    ordersOf(name) {
      return sql("SELECT o.id, o.sku, o.quantity FROM orders o JOIN accounts a ON a.id = o.account_id WHERE a.name = ? ORDER BY o.id", name);
    },
    /** The demo accounts' tokens, as the server printed them: {demo, "demo-b"}. */
    demoTokens() {
      const tokens = {};
      for (const m of output.text.matchAll(/^(demo(?:-b)?) account token: (\S+)$/gm)) tokens[m[1]] = m[2];
      return tokens;
    },
    /**
     * Stops the server and starts it again on the same address and
     * database: demo mode issues new tokens and revokes the previous ones.
     */
    async restart() {
      child.removeAllListeners("exit");
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
      child = spawnAt(new URL(base).host);
      output = { text: "" };
      await listeningOn(child, "server", output);
    },
    stop() {
      child.kill("SIGTERM");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

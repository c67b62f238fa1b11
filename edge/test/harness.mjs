// Test harness: a throwaway PostgreSQL (idemkey-pg), the origin
// (idemkey-server) with one account, a counting proxy in front of it, and the
// edge Worker under workerd (edge/serve.sh) in front of the proxy.
//
//   client ──> edge (workerd) ──> counting proxy ──> origin ──> PostgreSQL
//   client ─────────────────────────────────────────> origin   (direct, for comparison)
//
// The proxy tells which requests reached the origin through the edge.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, chmodSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const EDGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const ROOT = path.dirname(EDGE_DIR);
const TARGET = process.env.CARGO_TARGET_DIR || path.join(os.homedir(), '.cache/idemkey/target');

/** A binary of the workspace: `$IDEMKEY_<NAME>_BIN`, else the debug or release build. */
export function bin(name, sub = '') {
  const envName = `IDEMKEY_${name.replace(/-/g, '_').toUpperCase()}_BIN`;
  const candidates = [process.env[envName], path.join(TARGET, 'debug', sub, name), path.join(TARGET, 'release', sub, name)];
  const found = candidates.find((p) => p && existsSync(p));
  if (!found) throw new Error(`${name} not built (looked in ${candidates.filter(Boolean).join(', ')}); set ${envName}`);
  return found;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(url, what, proc, timeoutMs = 60_000, okStatus = 200) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    if (proc && proc.exitCode !== null) throw new Error(`${what} exited with ${proc.exitCode}:\n${proc.output()}`);
    try {
      const res = await send(url, { method: 'GET', path: '/healthz' });
      if (res.status === okStatus) return;
      last = `status ${res.status}`;
    } catch (e) {
      last = e.message;
    }
    await sleep(150);
  }
  throw new Error(`${what} not ready at ${url}: ${last}\n${proc ? proc.output() : ''}`);
}

export function start(cmd, args, env = {}) {
  // Own process group, so stopping serve.sh also stops its workerd.
  const child = spawn(cmd, args, {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let out = '';
  const keep = (d) => {
    out += d;
    if (out.length > 200_000) out = out.slice(-100_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  child.output = () => out;
  return child;
}

export async function stop(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const done = new Promise((r) => child.once('exit', r));
  try {
    process.kill(-child.pid, 'SIGTERM');
  } catch {
    return;
  }
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {}
  }, 5000);
  await done;
  clearTimeout(timer);
}

/**
 * Sends one HTTP/1.1 request and reads the whole response.
 * `headers` is a list of [name, value] pairs sent as given (repeats allowed);
 * `body` a string or Buffer sent with Content-Length unless `chunked`, when
 * it goes in two chunks with no Content-Length.
 */
export function send(base, { method = 'POST', path: p = '/orders', headers = [], body, chunked = false } = {}) {
  const url = new URL(p, base);
  // With headers as a list Node adds no Host field: send it first, as clients do.
  const flat = ['Host', url.host];
  for (const [k, v] of headers) flat.push(k, v);
  const buf = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body);
  if (buf && !chunked && !headers.some(([k]) => k.toLowerCase() === 'content-length')) {
    flat.push('Content-Length', String(buf.length));
  }
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, method, path: url.pathname + url.search, headers: flat, agent: false, setHost: false },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode, headers: res.headers, raw: res.rawHeaders, body: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (buf && chunked) {
      const half = Math.floor(buf.length / 2);
      req.write(buf.subarray(0, half));
      req.write(buf.subarray(half));
    } else if (buf) {
      req.write(buf);
    }
    req.end();
  });
}

/** A proxy that counts and records what passes, then forwards it as is. */
function countingProxy(target) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method, url: req.url, rawHeaders: req.rawHeaders, body });
      const headers = [];
      for (let i = 0; i < req.rawHeaders.length; i += 2) headers.push(req.rawHeaders[i], req.rawHeaders[i + 1]);
      const up = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers, agent: false, setHost: false },
        (upRes) => {
          const flat = [];
          for (let i = 0; i < upRes.rawHeaders.length; i += 2) flat.push([upRes.rawHeaders[i], upRes.rawHeaders[i + 1]]);
          res.writeHead(upRes.statusCode, flat.flat());
          upRes.pipe(res);
        },
      );
      up.on('error', (e) => {
        res.writeHead(599);
        res.end(String(e));
      });
      up.end(body);
    });
  });
  return { server, seen };
}

/** Starts everything; `stack.close()` stops it all. */
export async function startStack({ keyProfile = 'lenient' } = {}) {
  const work = mkdtempSync(path.join(os.tmpdir(), 'idemkey-edge-test-'));
  // idemkey-pg runs the server as the `postgres` OS user, who must enter it.
  chmodSync(work, 0o755);
  const stack = { work, procs: [] };
  try {
    const pgBin = bin('idemkey-pg');
    const serverBin = bin('idemkey-server');
    const pgOut = execFileSync(pgBin, ['start', path.join(work, 'pg'), '--no-fsync', '--db', 'edge'], { encoding: 'utf8' });
    const dbUrl = /DATABASE_URL=(\S+)/.exec(pgOut)?.[1];
    if (!dbUrl) throw new Error(`idemkey-pg printed no DATABASE_URL:\n${pgOut}`);
    stack.pgDir = path.join(work, 'pg');
    stack.pgBin = pgBin;
    const accountOut = execFileSync(serverBin, ['account', 'create', 'edge-test', '--database-url', dbUrl], { encoding: 'utf8' });
    stack.token = accountOut.trim().split('\n').pop().trim();

    const [originPort, proxyPort, edgePort] = [await freePort(), await freePort(), await freePort()];
    stack.origin = `http://127.0.0.1:${originPort}`;
    const origin = start(serverBin, ['serve', '--database-url', dbUrl, '--bind', `127.0.0.1:${originPort}`, '--key-profile', keyProfile], {
      RUST_LOG: 'warn',
    });
    stack.procs.push(origin);
    await waitFor(stack.origin, 'idemkey-server', origin);

    const proxy = countingProxy(new URL(stack.origin));
    await new Promise((r) => proxy.server.listen(proxyPort, '127.0.0.1', r));
    stack.proxyServer = proxy.server;
    stack.seen = proxy.seen;

    stack.edge = `http://127.0.0.1:${edgePort}`;
    const edge = start(path.join(EDGE_DIR, 'serve.sh'), [String(edgePort), `http://127.0.0.1:${proxyPort}`], {
      EDGE_NO_BUILD: process.env.EDGE_NO_BUILD ?? '1',
      IDEMKEY_EDGE_SELFTEST: '1',
      KEY_PROFILE: keyProfile,
    });
    stack.procs.push(edge);
    await waitFor(stack.edge, 'edge/serve.sh', edge, 120_000);
    stack.edgeOutput = () => edge.output();
  } catch (e) {
    await closeStack(stack);
    throw e;
  }
  stack.close = () => closeStack(stack);
  return stack;
}

async function closeStack(stack) {
  for (const p of stack.procs.reverse()) await stop(p);
  if (stack.proxyServer) await new Promise((r) => stack.proxyServer.close(r));
  if (stack.pgDir) {
    try {
      execFileSync(stack.pgBin, ['stop', stack.pgDir], { stdio: 'ignore' });
    } catch {}
  }
  rmSync(stack.work, { recursive: true, force: true });
}

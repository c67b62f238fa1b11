// The shared test vectors of core/vectors/ checked against the wasm package.
// Runs unchanged in Node (vectors.test.mjs) and in Chromium
// (chromium.test.mjs): no Node APIs, no assertion library.
//
// Covered: keys.json (parseKey, and parseKeyLines where the build has it), fingerprints.json
// (fingerprint), retry.json (retryStep), unknown.json (afterUnknown),
// orders.json (validateOrder), downstream_keys.json (downstreamKey) and
// step_keys.json (stepDownstreamKey), both Node build only: the browser build
// leaves them out, feature downstream-key. Not
// covered, because the browser package does not expose them: decisions.json
// (the server decides) and problems.json (the server builds problems;
// validateOrder's request-invalid bodies are checked byte for byte).
// lookups.json, replay_headers.json and http_fingerprints.json run through
// the core compiled to wasm32 instead (wasm/tests/core_vectors.rs), in Node
// and Chromium, since the package does not export them either.

/** Stable JSON with sorted members, for deep comparisons. */
function canon(value) {
  if (Array.isArray(value)) return `[${value.map(canon).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value)
      .sort()
      .filter((k) => value[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canon(value[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(value);
}

function expectEqual(got, want, what) {
  if (canon(got) !== canon(want)) {
    throw new Error(`${what}: got ${canon(got)}, want ${canon(want)}`);
  }
}

function expectThrow(fn, check, what) {
  let err;
  try {
    const value = fn();
    throw new Error(`${what}: expected an error, got ${JSON.stringify(value)}`);
  } catch (e) {
    err = e;
  }
  if (err.message.startsWith(`${what}: expected an error`)) throw err;
  check(err);
}

/** The outcome shapes retryStep reads, for one vector outcome. */
function outcomes(outcome) {
  if (outcome.kind === "networkError") return [{ networkError: true }];
  // The problem's code, when the vector has one, goes with every shape.
  const code = outcome.code === undefined ? {} : { code: outcome.code };
  const measured = { status: outcome.status, retryAfterMs: outcome.retryAfterMs, ...code };
  if (outcome.retryAfterMs === null || outcome.retryAfterMs === undefined) {
    return [
      measured,
      { status: outcome.status, retryAfter: null, ...code },
      { status: outcome.status, ...code },
    ];
  }
  const shapes = [measured];
  if (outcome.retryAfterMs % 1000 === 0) {
    // The same wait as a Retry-After header (delay-seconds).
    shapes.push({ status: outcome.status, retryAfter: String(outcome.retryAfterMs / 1000), ...code });
  }
  return shapes;
}

/**
 * The key cases a build can check: all of them with parseKeyLines (the Node
 * build); the one-line cases through parseKey in the browser build, which
 * leaves parseKeyLines out (feature `field-lines`).
 */
export function keyCases(wasm, keys) {
  return wasm.parseKeyLines ? keys.cases : keys.cases.filter((c) => c.lines.length === 1);
}

/**
 * Runs every vector; returns one result per case: {suite, name, error?}.
 * @param {typeof import("../pkg/idemkey_wasm.js")} wasm
 * @param {{keys: any, fingerprints: any, retry: any, unknown?: any, orders: any, downstream_keys?: any, step_keys?: any}} vectors
 */
export function runVectors(wasm, vectors) {
  const results = [];
  const run = (suite, name, fn) => {
    try {
      fn();
      results.push({ suite, name });
    } catch (e) {
      results.push({ suite, name, error: String(e && e.message ? e.message : e) });
    }
  };

  for (const c of keyCases(wasm, vectors.keys)) {
    run("keys", `${c.name} (${c.profile})`, () => {
      const attempts = [];
      if (wasm.parseKeyLines) attempts.push(() => wasm.parseKeyLines(c.lines, c.profile));
      if (c.lines.length === 1) attempts.push(() => wasm.parseKey(c.lines[0], c.profile));
      for (const attempt of attempts) {
        if ("ok" in c) {
          expectEqual(attempt(), c.ok, "key");
        } else {
          expectThrow(attempt, (err) => {
            expectEqual({ code: err.code, reason: err.reason }, c.error, "key error");
            if (!(err instanceof Error)) throw new Error("not an Error");
          }, "key");
        }
      }
    });
  }

  for (const c of vectors.fingerprints.cases) {
    run("fingerprints", c.name, () => {
      expectEqual(wasm.fingerprint(c.operation, c.payload), c.hex, "fingerprint");
    });
  }

  const policy = vectors.retry.policy;
  expectEqual(wasm.defaultRetryPolicy(), policy, "default retry policy");
  for (const c of vectors.retry.cases) {
    run("retry", c.name, () => {
      const maybeApplied = c.earlier === "maybeApplied";
      if (!maybeApplied && c.earlier !== "notApplied") throw new Error(`unknown earlier ${c.earlier}`);
      for (const outcome of outcomes(c.outcome)) {
        expectEqual(wasm.retryStep(c.attempt, outcome, c.random, policy, maybeApplied), c.step, `step for ${canon(outcome)}`);
        expectEqual(wasm.retryStep(c.attempt, outcome, c.random, undefined, maybeApplied), c.step, "default policy");
        if (!maybeApplied) expectEqual(wasm.retryStep(c.attempt, outcome, c.random), c.step, "maybeApplied left out");
        expectEqual(wasm.attemptMayHaveApplied(outcome), c.mayHaveApplied, `attemptMayHaveApplied(${canon(outcome)})`);
      }
    });
  }

  for (const c of vectors.unknown?.cases ?? []) {
    run("unknown", c.name, () => {
      const args = [c.attempt, c.firstSentAt, c.now, c.replayWindowMs, c.random];
      expectEqual(wasm.afterUnknown(...args), c.step, "after unknown");
      expectEqual(wasm.afterUnknown(...args, vectors.unknown.policy), c.step, "explicit policy");
    });
  }

  for (const c of vectors.orders.cases) {
    run("orders", c.name, () => {
      if ("ok" in c) {
        const order = wasm.validateOrder(c.body);
        expectEqual({ sku: order.sku, quantity: order.quantity, reference: order.reference }, c.ok, "order");
        if ("reference" in order && !("reference" in c.ok)) throw new Error("reference present without one sent");
        expectEqual(order.fingerprint, c.fingerprint, "order fingerprint");
        expectEqual(order.fingerprint, wasm.fingerprint(wasm.orderOperation(), c.body), "body fingerprint");
      } else {
        expectThrow(() => wasm.validateOrder(c.body), (err) => {
          expectEqual(err.code, "request-invalid", "code");
          // Byte for byte: JSON.parse keeps member order.
          expectEqual(JSON.stringify(err.problem), c.problem, "problem body");
        }, "order");
      }
    });
  }
  // Only builds with downstreamKey (the Node build) are given these vectors.
  for (const c of vectors.downstream_keys?.cases ?? []) {
    run("downstream_keys", c.name, () => {
      const got = wasm.downstreamKey(c.scope, c.operation, c.key_header, c.profile, c.effect);
      expectEqual(got, c.uuid, "downstream key");
    });
  }
  for (const c of vectors.step_keys?.cases ?? []) {
    run("step_keys", c.name, () => {
      const got = wasm.stepDownstreamKey(c.scope, c.operation, c.key, c.instance, c.step, c.action);
      expectEqual(got, c.uuid, "step key");
    });
  }
  return results;
}

/** Properties of newKey that hold for any draw. */
export function checkNewKeys(wasm, count = 500) {
  const seen = new Set();
  for (let i = 0; i < count; i++) {
    const header = wasm.newKey();
    if (!/^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/.test(header)) {
      throw new Error(`not a quoted lowercase UUIDv4: ${header}`);
    }
    const value = wasm.parseKey(header, "uuid");
    if (`"${value}"` !== header || wasm.parseKey(header, "strict") !== value) {
      throw new Error(`does not round-trip: ${header}`);
    }
    seen.add(value);
  }
  if (seen.size !== count) throw new Error("repeated keys");
  return count;
}

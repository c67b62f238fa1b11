// The shared vectors through the web build (wasm/pkg) in headless Chromium,
// checked by the same code as in Node (vectors-lib.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { launch, serveStatic } from "./browser.mjs";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));

test("shared vectors give the native answers in Chromium", async () => {
  const server = await serveStatic({
    "/pkg/": here("../pkg/"),
    "/tests/": here("./"),
    "/vectors/": here("../../core/vectors/"),
  });
  const browser = await launch();
  try {
    const page = await browser.context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`${server.url}/`);
    const results = await page.evaluate(async () => {
      const wasm = await import("/pkg/idemkey_wasm.js");
      await wasm.default();
      const { runVectors, checkNewKeys, keyCases } = await import("/tests/vectors-lib.mjs");
      const load = async (name) => (await fetch(`/vectors/${name}.json`)).json();
      const vectors = { keys: await load("keys"), fingerprints: await load("fingerprints"), retry: await load("retry"), unknown: await load("unknown"), orders: await load("orders") };
      const oneLine = keyCases(wasm, vectors.keys).length;
      const total = oneLine + vectors.fingerprints.cases.length + vectors.retry.cases.length + vectors.unknown.cases.length + vectors.orders.cases.length;
      const counts = Object.fromEntries(Object.entries(vectors).map(([suite, doc]) => [suite, doc.cases.length]));
      return {
        counts,
        results: runVectors(wasm, vectors),
        total,
        oneLine,
        allKeys: vectors.keys.cases.length,
        hasFieldLines: "parseKeyLines" in wasm,
        hasDownstreamKey: "downstreamKey" in wasm,
        hasStepDownstreamKey: "stepDownstreamKey" in wasm,
        newKeys: checkNewKeys(wasm, 1000),
        ua: navigator.userAgent,
      };
    });
    assert.deepEqual(errors, []);
    const failed = results.results.filter((r) => r.error);
    assert.deepEqual(failed, [], `failed in ${results.ua}`);
    assert.equal(results.results.length, results.total);
    // Each file as the page fetched it holds at least its minimum, and every
    // case of it ran (the key cases: every one-line case).
    const minimums = JSON.parse(readFileSync(here("../../core/vectors/minimums.json"), "utf8")).files;
    for (const [suite, count] of Object.entries(results.counts)) {
      const least = minimums[`${suite}.json`].cases;
      assert.ok(count >= least, `${suite}: ${count} cases, fewer than the minimum ${least}`);
      const ran = results.results.filter((r) => r.suite === suite).length;
      assert.equal(ran, suite === "keys" ? results.oneLine : count, `${suite}: cases run`);
    }
    // The browser build leaves parseKeyLines out (feature field-lines): the
    // zero- and two-line key cases run in the Node build only.
    assert.equal(results.hasFieldLines, false);
    // Nor downstreamKey and stepDownstreamKey (feature downstream-key, a
    // server's business): the core's derivations run in Chromium through
    // tests/core_vectors.rs.
    assert.equal(results.hasDownstreamKey, false);
    assert.equal(results.hasStepDownstreamKey, false);
    assert.ok(results.oneLine > 100 && results.oneLine < results.allKeys, `${results.oneLine} of ${results.allKeys} key cases`);
    assert.equal(results.newKeys, 1000);
    console.log(`# ${results.results.length} vector cases and 1000 new keys passed in ${results.ua.match(/Chrome\/[\d.]+/)?.[0]}`);
  } finally {
    await browser.close();
    await server.close();
  }
});

/**
 * The output reservation's history (src/gateway/output-lengths.ts): a tenant's p95 once it has 8
 * answers, else the model's, else the default, else the context; answers age out after an hour; the
 * keys a client can multiply (model names, header tenants) are bounded.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  MAX_AGE_MS,
  MAX_KEYS,
  MIN_SAMPLES,
  OutputLengths,
  WINDOW,
} from "../../src/gateway/request/output-lengths.js";

describe("output lengths", () => {
  test("tenant p95, then the model's, then the default, then the context", () => {
    let now = 0;
    const lengths = new OutputLengths(() => now);
    assert.deepEqual(lengths.reservation("t", "m", undefined, 5000), { tokens: 5000, source: "context" });
    assert.deepEqual(lengths.reservation("t", "m", 300, 5000), { tokens: 300, source: "default" });
    for (let i = 1; i <= MIN_SAMPLES - 1; i++) lengths.learn("other", "m", 100 * i);
    assert.equal(lengths.reservation("t", "m", 300, 5000).source, "default", "7 answers are not a history");
    lengths.learn("other", "m", 800);
    now += 1;
    assert.deepEqual(lengths.reservation("t", "m", 300, 5000), { tokens: 800, source: "model" });
    for (let i = 1; i <= 100; i++) lengths.learn("t", "m", i);
    now += 1;
    // p95 of 1..100 is 95.
    assert.deepEqual(lengths.reservation("t", "m", 300, 5000), { tokens: 95, source: "tenant" });
    assert.equal(lengths.reservation("t", "other-model", 300, 5000).source, "default");
  });

  test("the window keeps the last answers, and an hour-old answer is forgotten", () => {
    let now = 0;
    const lengths = new OutputLengths(() => now);
    for (let i = 0; i < WINDOW; i++) lengths.learn("t", "m", 10_000);
    for (let i = 0; i < WINDOW; i++) lengths.learn("t", "m", 50);
    assert.equal(
      lengths.reservation("t", "m", undefined, 1e6).tokens,
      50,
      "the long answers left the window",
    );
    now += MAX_AGE_MS + 20_000;
    assert.equal(lengths.reservation("t", "m", undefined, 1e6).source, "context", "all aged out");
  });

  test("keys are bounded: a flood of model names drops the oldest", () => {
    const lengths = new OutputLengths(() => 0);
    for (let i = 0; i < 5 * MAX_KEYS; i++) lengths.learn("t", `model-${i}`, 10);
    assert.ok(lengths.size <= MAX_KEYS, `${lengths.size} keys`);
  });
});

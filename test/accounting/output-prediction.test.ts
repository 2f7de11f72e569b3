/**
 * The output-length predictor (src/accounting/output-prediction.ts) on an injected clock: the
 * decaying p95, the fallback chain with its sources, the request's cap, key bounds, and the error
 * ratio's definition.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  HALF_LIFE_MS,
  MAX_AGE_MS,
  MAX_KEYS,
  MIN_SAMPLES,
  OutputPredictor,
  predictionErrorRatio,
  QUANTILE,
} from "../../src/accounting/output-prediction.js";

const ask = (p: OutputPredictor, tenant = "t", maxTokens?: number, defaultOutputTokens?: number) =>
  p.predict({ tenant, model: "m", maxTokens, defaultOutputTokens, contextTokens: 4000 });

describe("output prediction", () => {
  test("the chain: tenant, then model, then default, then context, each naming its source", () => {
    let now = 0;
    const p = new OutputPredictor(() => now);
    assert.deepEqual(ask(p), { tokens: 4000, source: "context", learned: false });
    assert.deepEqual(ask(p, "t", undefined, 300), { tokens: 300, source: "default", learned: false });
    for (let i = 0; i < MIN_SAMPLES; i++) p.learn("other", "m", 200);
    now += 1;
    // Learned answers also give the expected length (the decaying mean), for KV packing.
    assert.deepEqual(ask(p, "t", undefined, 300), {
      tokens: 200,
      source: "model",
      learned: true,
      expectedTokens: 200,
    });
    for (let i = 0; i < MIN_SAMPLES; i++) p.learn("t", "m", 50);
    now += 1;
    assert.deepEqual(ask(p, "t", undefined, 300), {
      tokens: 50,
      source: "tenant",
      learned: true,
      expectedTokens: 50,
    });
    assert.equal(ask(p, "newcomer").source, "model", "a tenant without answers gets the model's");
  });

  test("the request's max_tokens caps the prediction and says so", () => {
    let now = 0;
    const p = new OutputPredictor(() => now);
    for (let i = 0; i < MIN_SAMPLES; i++) p.learn("t", "m", 500);
    now += 1;
    assert.deepEqual(ask(p, "t", 100), {
      tokens: 100,
      source: "max_tokens",
      learned: true,
      expectedTokens: 100,
    });
    assert.deepEqual(
      ask(p, "t", 800),
      { tokens: 500, source: "tenant", learned: true, expectedTokens: 500 },
      "a cap above it changes nothing",
    );
    assert.deepEqual(
      ask(p, "cold", 64),
      { tokens: 64, source: "max_tokens", learned: true, expectedTokens: 64 },
      "the model's, capped",
    );
    const empty = new OutputPredictor(() => 0);
    assert.deepEqual(ask(empty, "t", 64), { tokens: 64, source: "max_tokens", learned: false });
  });

  test("the quantile is the p95 when every answer is as old, and the expected length their mean", () => {
    const p = new OutputPredictor(() => 0);
    for (let i = 1; i <= 100; i++) p.learn("t", "m", i);
    assert.equal(QUANTILE, 0.95);
    assert.equal(ask(p).tokens, 95);
    assert.equal(ask(p).expectedTokens, 51, "the mean of 1..100, 50.5, rounded");
  });

  test("recent answers weigh more: after five half-lives new short answers win over old long ones", () => {
    let now = 0;
    const p = new OutputPredictor(() => now);
    for (let i = 0; i < 20; i++) p.learn("t", "m", 1000);
    now += HALF_LIFE_MS;
    for (let i = 0; i < 20; i++) p.learn("t", "m", 100);
    // One half-life: the long answers still hold 1/3 of the weight, above the top 5 %.
    assert.equal(ask(p).tokens, 1000);
    const fresh = new OutputPredictor(() => now);
    for (let i = 0; i < 20; i++) fresh.learn("t", "m", 1000);
    now += 5 * HALF_LIFE_MS;
    for (let i = 0; i < 20; i++) fresh.learn("t", "m", 100);
    // Five half-lives: the long answers weigh 20/32 of 20.6, 3 %, under the top 5 %; a plain p95
    // over the same 40 answers would still say 1000.
    assert.ok(5 * HALF_LIFE_MS < MAX_AGE_MS, "still inside the window");
    assert.equal(ask(fresh).tokens, 100);
  });

  test("answers older than MAX_AGE_MS are forgotten, and too few answers fall back", () => {
    let now = 0;
    const p = new OutputPredictor(() => now);
    for (let i = 0; i < MIN_SAMPLES; i++) p.learn("t", "m", 700);
    now += 1;
    assert.equal(ask(p).source, "tenant");
    now += MAX_AGE_MS + 20_000;
    assert.equal(ask(p).source, "context");
    for (let i = 0; i < MIN_SAMPLES - 1; i++) p.learn("t", "m", 700);
    now += 20_000;
    assert.equal(ask(p).source, "context", "7 answers are not a history");
  });

  test("a busy key's quantile follows new answers within a second, or at once after 16 of them", () => {
    let now = 0;
    const p = new OutputPredictor(() => now);
    for (let i = 0; i < 20; i++) p.learn("t", "m", 100);
    now += 1;
    assert.equal(ask(p).tokens, 100);
    for (let i = 0; i < 15; i++) p.learn("t", "m", 900);
    assert.equal(ask(p).tokens, 100, "15 new answers within the second: the last quantile stands");
    now += 1000;
    assert.equal(ask(p).tokens, 900, "a second later it is recomputed");
    for (let i = 0; i < 16; i++) p.learn("t", "m", 5000);
    assert.equal(ask(p).tokens, 5000, "16 new answers: recomputed at once");
  });

  test("keys are bounded, and bad lengths are ignored", () => {
    const p = new OutputPredictor(() => 0);
    for (let i = 0; i < 3 * MAX_KEYS; i++) p.learn(`tenant-${i}`, "m", 10);
    assert.ok(p.size <= MAX_KEYS, `${p.size} keys`);
    const q = new OutputPredictor(() => 0);
    q.learn("t", "m", Number.NaN);
    q.learn("t", "m", -1);
    q.learn("t", "m", Number.POSITIVE_INFINITY);
    assert.equal(q.size, 0);
  });

  test("the error ratio: |predicted - actual| / actual; capped answers and empty ones are not measured", () => {
    assert.equal(predictionErrorRatio(150, 100, false), 0.5);
    assert.equal(predictionErrorRatio(50, 100, false), 0.5);
    assert.equal(predictionErrorRatio(100, 100, false), 0);
    assert.equal(predictionErrorRatio(100, 100, true), undefined);
    assert.equal(predictionErrorRatio(100, 0, false), undefined);
  });
});

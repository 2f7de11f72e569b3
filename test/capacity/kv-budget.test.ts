/**
 * Capacity in KV tokens, the pure part (src/capacity/kv-budget.ts): a request's footprint, the
 * pool's mean footprint and its hysteresis, a worker's room in requests from its KV budget, and
 * which workers a request fits.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  FootprintMean,
  fitsKv,
  kvBudgetTokens,
  kvCandidates,
  kvHeadroom,
  kvRequestRoom,
  mostKvHeadroom,
  requestFootprint,
  validTargetUtilization,
} from "../../src/capacity/kv-budget.js";

describe("request footprint", () => {
  test("prompt + predicted output, the prediction capped by the request's limit", () => {
    assert.equal(requestFootprint({ promptTokens: 1000, predictedOutputTokens: 300 }), 1300);
    assert.equal(
      requestFootprint({ promptTokens: 1000, predictedOutputTokens: 300, maxOutputTokens: 50 }),
      1050,
    );
    assert.equal(
      requestFootprint({ promptTokens: 1000, predictedOutputTokens: 30, maxOutputTokens: 50 }),
      1030,
    );
  });

  test("less what the prefix cache holds; never below one token", () => {
    assert.equal(
      requestFootprint({ promptTokens: 1000, cachedPromptTokens: 800, predictedOutputTokens: 100 }),
      300,
    );
    assert.equal(requestFootprint({ promptTokens: 10, cachedPromptTokens: 50, predictedOutputTokens: 0 }), 1);
    assert.equal(requestFootprint({ promptTokens: 0, predictedOutputTokens: 0 }), 1);
  });
});

describe("mean footprint", () => {
  test("seeded by the first request, follows the mix, published only past 5% drift", () => {
    const m = new FootprintMean();
    assert.equal(m.published, undefined);
    assert.equal(m.observe(1000), true);
    assert.equal(m.published, 1000);
    // One request of 1100 moves the mean by 100/32 ~ 3: under 5%, not published.
    assert.equal(m.observe(1100), false);
    assert.equal(m.published, 1000);
    assert.ok(m.value! > 1000 && m.value! < 1010);
    // A mix that moved to 4000-token requests: published within a few arrivals, close to 4000 after ~100.
    let moves = 0;
    for (let i = 0; i < 150; i++) if (m.observe(4000)) moves++;
    assert.ok(moves >= 5, `published ${moves} times`);
    assert.ok(Math.abs(m.published! - 4000) / 4000 < 0.05, `published ${m.published}`);
  });

  test("ignores values that are no footprint", () => {
    const m = new FootprintMean();
    assert.equal(m.observe(0), false);
    assert.equal(m.observe(Number.NaN), false);
    assert.equal(m.observe(Number.POSITIVE_INFINITY), false);
    assert.equal(m.published, undefined);
  });
});

describe("a worker's room from its KV budget", () => {
  test("budget = capacity x target; room = budget / mean, within 1..max_running", () => {
    assert.equal(kvBudgetTokens(100_000, 0.9), 90_000);
    assert.equal(kvRequestRoom(90_000, 3000, 256), 30);
    assert.equal(kvRequestRoom(90_000, 100, 256), 256, "bounded by max_running");
    assert.equal(kvRequestRoom(90_000, 200_000, 256), 1, "one request however large");
    assert.equal(kvRequestRoom(90_000, undefined, 256), 256, "no request yet: max_running");
  });

  test("kv_target_utilization must be in (0, 1]", () => {
    for (const ok of [0.01, 0.5, 0.9, 1]) assert.equal(validTargetUtilization(ok), true, String(ok));
    for (const bad of [0, -0.1, 1.01, Number.NaN])
      assert.equal(validTargetUtilization(bad), false, String(bad));
  });
});

describe("placement by KV headroom", () => {
  const w = (name: string, budgetTokens: number | undefined, footprintTokens: number) => ({
    name,
    budgetTokens,
    footprintTokens,
  });

  test("a request fits while the footprint sum stays within the budget; an empty worker takes any", () => {
    assert.equal(fitsKv(w("a", 1000, 600), 400), true);
    assert.equal(fitsKv(w("a", 1000, 600), 401), false);
    assert.equal(fitsKv(w("a", 1000, 0), 5000), true);
    assert.equal(fitsKv(w("a", undefined, 10_000), 5000), true, "no budget: counts requests");
    assert.equal(kvHeadroom(w("a", undefined, 0)), Number.POSITIVE_INFINITY);
  });

  test("the candidates it fits; none fits: the one with the most headroom", () => {
    const a = w("a", 1000, 900);
    const b = w("b", 1000, 500);
    const c = w("c", 2000, 1200);
    assert.deepEqual(
      kvCandidates([a, b, c], 400).map((x) => x.name),
      ["b", "c"],
    );
    assert.deepEqual(
      kvCandidates([a, b, c], 50).map((x) => x.name),
      ["a", "b", "c"],
    );
    assert.deepEqual(
      kvCandidates([a, b, c], 900).map((x) => x.name),
      ["c"],
      "fits none: the most headroom (800)",
    );
    assert.equal(mostKvHeadroom([a, b, c], 400)?.name, "c");
    assert.equal(mostKvHeadroom([], 400), undefined);
  });
});

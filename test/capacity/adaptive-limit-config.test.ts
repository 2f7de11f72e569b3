import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import {
  ADAPTIVE_LIMIT_DEFAULTS,
  ADAPTIVE_LIMIT_KEYS,
  type AdaptiveBoundEvent,
  AdaptiveLimit,
  type AdaptiveLimitOptions,
  resolveAdaptiveLimitOptions,
} from "../../src/capacity/adaptive-limit.js";
import { BASE_TPOT, BOUNDS, configError, Sim, worker } from "./adaptive-sim.js";

// The adaptive limit's configuration: bounds, validation by YAML key, documented defaults, and the
// module's purity.

describe("AdaptiveLimit: bounds", () => {
  test("pinned at the maximum and at the minimum, each reported once per episode", () => {
    const seen: AdaptiveBoundEvent[] = [];
    const sim = new Sim({
      minCapacity: 4,
      maxCapacity: 12,
      initialCapacity: 8,
      tpotSloMs: 1.4 * BASE_TPOT,
      onBound: (e) => seen.push(e),
    });
    const climb = sim.run(300);
    assert.ok(climb.every((l) => l >= 4 && l <= 12));
    assert.equal(sim.ctl.limit, 12);
    assert.equal(sim.ctl.snapshot().bound, "max");
    assert.deepEqual(
      seen.map((e) => e.bound),
      ["max"],
    );
    sim.model.slowdown = 2;
    const fall = sim.run(300);
    assert.ok(fall.every((l) => l >= 4 && l <= 12));
    assert.equal(sim.ctl.limit, 4);
    assert.equal(sim.ctl.snapshot().bound, "min");
    assert.deepEqual(
      seen.map((e) => e.bound),
      ["max", "min"],
    );
    sim.model.slowdown = 1;
    sim.run(300);
    assert.equal(sim.ctl.limit, 12);
    assert.deepEqual(
      seen.map((e) => e.bound),
      ["max", "min", "max"],
    );
  });

  test("never outside [min, max] under a random schedule", () => {
    const r = prng(7);
    const sim = new Sim({ minCapacity: 3, maxCapacity: 40, initialCapacity: 35, tpotSloMs: 35 }, worker(), 7);
    for (let w = 0; w < 5000; w++) {
      if (w % 37 === 0) sim.demand = Math.floor(r() * 80);
      if (w % 101 === 0) sim.model.slowdown = 1 + 2 * r();
      if (w % 211 === 0) sim.model.knee = 4 + Math.floor(r() * 40);
      if (r() < 0.02) for (let i = 0; i < 5; i++) sim.ctl.observe({ kind: "overload" });
      sim.window();
      const l = sim.ctl.limit;
      assert.ok(Number.isInteger(l) && l >= 3 && l <= 40, `limit ${l} at window ${w}`);
    }
  });

  test("validation errors name the YAML key", () => {
    const cases: Array<[Partial<AdaptiveLimitOptions>, string, RegExp]> = [
      [{ minCapacity: 10, maxCapacity: 5 }, "adaptive_min_capacity", /<= adaptive_max_capacity \(10 > 5\)/],
      [{ minCapacity: 0 }, "adaptive_min_capacity", /must be > 0/],
      [{ minCapacity: -3 }, "adaptive_min_capacity", /must be > 0/],
      [{ minCapacity: 1.5 }, "adaptive_min_capacity", /integer/],
      [{ maxCapacity: 0 }, "adaptive_max_capacity", /must be > 0/],
      [{ maxCapacity: Number.NaN }, "adaptive_max_capacity", /number/],
      [{ initialCapacity: -1 }, "initial_capacity", />= 0/],
      [{ tpotSloMs: 0 }, "tpot_slo_ms", /must be > 0/],
      [{ tpotSloMs: -5 }, "tpot_slo_ms", /must be > 0/],
      [{ ttftSloMs: 0 }, "ttft_slo_ms", /must be > 0/],
      [{ ttftSloMs: Number.POSITIVE_INFINITY }, "ttft_slo_ms", /number/],
      [{ windowMs: 0 }, "adaptive_window_ms", /must be > 0/],
      [{ baselineHalfLifeMs: -1 }, "adaptive_baseline_half_life_ms", /must be > 0/],
      [{ increaseBelow: 0.9 }, "adaptive_increase_below", />= 1/],
      [{ decreaseAbove: 1.05 }, "adaptive_decrease_above", />= adaptive_increase_below/],
      [{ overloadFactor: 1 }, "adaptive_overload_factor", /< 1/],
      [{ probeStep: 0 }, "adaptive_probe_step", /> 0/],
      [{ probeSlack: 0.1 }, "adaptive_probe_slack", /< 1 - adaptive_probe_step/],
      [{ probeStep: 0.96 }, "adaptive_probe_slack", /< 1 - adaptive_probe_step \(0\.04\)/],
      [{ minSamples: 0 }, "adaptive_min_samples", /must be > 0/],
      [{ sampleCap: 5 }, "adaptive_sample_cap", />= adaptive_min_samples/],
      [{ sampleCap: 1e7 }, "adaptive_sample_cap", /<= 65536/],
      [{ probeIntervalMs: -1 }, "adaptive_probe_interval_ms", />= 0/],
      [{ probeAfterDecreases: 1.5 }, "adaptive_probe_after_decreases", /integer/],
      [{ sloReference: 1.5 }, "adaptive_slo_reference", />= 0 and <= 1/],
      [{ sloReference: -0.1 }, "adaptive_slo_reference", />= 0 and <= 1/],
      [{ sloReferenceCap: 0.9 }, "adaptive_slo_reference_cap", />= 1/],
      [{ sloMinDecrease: 1 }, "adaptive_slo_min_decrease", />= 0 and < 1/],
      [{ sloMaxDecrease: 1 }, "adaptive_slo_max_decrease", />= 0 and < 1/],
      [
        { sloMinDecrease: 0.2, sloMaxDecrease: 0.15 },
        "adaptive_slo_max_decrease",
        />= adaptive_slo_min_decrease \(0\.15 < 0\.2\)/,
      ],
      [{ sloFarAbove: 0.5 }, "adaptive_slo_far_above", />= 1/],
      [{ breachHoldMs: -1 }, "adaptive_breach_hold_ms", />= 0/],
      [
        { breachHoldMs: 60_000, breachHoldMaxMs: 30_000 },
        "adaptive_breach_hold_max_ms",
        />= adaptive_breach_hold_ms/,
      ],
      [{ breachMargin: -0.1 }, "adaptive_breach_margin", />= 0/],
    ];
    for (const [patch, key, message] of cases) {
      const err = configError(
        () => new AdaptiveLimit({ ...BOUNDS, ...patch } as AdaptiveLimitOptions, new ManualClock()),
        JSON.stringify(patch),
      );
      assert.equal(err.path, key, JSON.stringify(patch));
      assert.match(err.message, message);
      assert.ok(err.message.startsWith(`${key}: `));
    }
    // Raising the minimum cut alone is no error: an unset maximum follows it.
    assert.equal(resolveAdaptiveLimitOptions({ ...BOUNDS, sloMinDecrease: 0.4 }).sloMaxDecrease, 0.4);
    assert.equal(resolveAdaptiveLimitOptions(BOUNDS).sloMaxDecrease, 0.3);
  });

  test("every option has a YAML key, every default is in the top-of-file comment", () => {
    const resolved = resolveAdaptiveLimitOptions(BOUNDS);
    assert.deepEqual(Object.keys(ADAPTIVE_LIMIT_KEYS).sort(), Object.keys(resolved).sort());
    const source = readFileSync(new URL("../../src/capacity/adaptive-limit.ts", import.meta.url), "utf8");
    const header = source.slice(0, source.indexOf("*/"));
    for (const [option, value] of Object.entries(ADAPTIVE_LIMIT_DEFAULTS)) {
      const key = ADAPTIVE_LIMIT_KEYS[option as keyof typeof ADAPTIVE_LIMIT_KEYS];
      assert.match(header, new RegExp(`\\b${option}\\s+${key}\\s+${value}\\b`), option);
    }
    for (const option of ["minCapacity", "maxCapacity", "initialCapacity", "tpotSloMs", "ttftSloMs"]) {
      assert.ok(header.includes(option), option);
    }
  });
});

describe("AdaptiveLimit: a pure core module", () => {
  test("imports only the clock and the errors; no wall clock, no timers", () => {
    const source = readFileSync(new URL("../../src/capacity/adaptive-limit.ts", import.meta.url), "utf8");
    const imports = [...source.matchAll(/^import .* from "(.*)";$/gm)].map((m) => m[1]);
    assert.deepEqual(imports, [
      "@sluice/scheduler/core/clock.js",
      "@sluice/scheduler/core/errors.js",
      "@sluice/scheduler/core/random.js",
    ]);
    for (const banned of ["Date.now", "setTimeout", "setInterval", "performance", "node:"]) {
      assert.ok(!source.includes(banned), banned);
    }
  });
});

/**
 * The adaptive controller (src/capacity/adaptive-limit.ts) on a manual clock: its engine rules,
 * its TPOT guard and its cold start, against one simulated engine (adaptive-sim.ts) whose TPOT
 * grows linearly with the batch: 10 ms alone, 20 ms (the SLO here) at 40 requests, so the set
 * point (0.97 x 20 ms) sits at about 38 requests.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { ADAPTIVE_LIMIT_KEYS, AdaptiveLimit, CONTROLLER } from "../../src/capacity/adaptive-limit.js";
import { DEFAULT_KV_TARGET_UTILIZATION } from "../../src/capacity/kv-budget.js";
import { BOUNDS, configError, engine, range, Sim, SLO_MS } from "./adaptive-sim.js";

describe("adaptive limit: settings", () => {
  test("an operator has five settings; every other number is an internal constant", () => {
    const operator = Object.values(ADAPTIVE_LIMIT_KEYS).filter((k) => k !== "initial_capacity");
    assert.deepEqual(operator, [
      "adaptive_min_capacity",
      "adaptive_max_capacity",
      "tpot_slo_ms",
      "ttft_slo_ms",
      "kv_target_utilization",
    ]);
    assert.equal(CONTROLLER.windowMs, 1000);
    assert.equal(DEFAULT_KV_TARGET_UTILIZATION, 0.9);
  });

  test("a bad value is a ConfigError naming its YAML key", () => {
    const clock = new ManualClock();
    const make = (o: object) => () => new AdaptiveLimit({ ...BOUNDS, ...o }, clock);
    assert.equal(configError(make({ minCapacity: 0 }), "min 0").path, "adaptive_min_capacity");
    assert.equal(configError(make({ maxCapacity: 1.5 }), "max 1.5").path, "adaptive_max_capacity");
    const order = configError(make({ minCapacity: 10, maxCapacity: 5 }), "min > max");
    assert.match(order.message, /adaptive_min_capacity.*must be <= adaptive_max_capacity \(10 > 5\)/);
    assert.equal(configError(make({ tpotSloMs: 0 }), "tpot 0").path, "tpot_slo_ms");
    assert.equal(configError(make({ ttftSloMs: -1 }), "ttft -1").path, "ttft_slo_ms");
    assert.equal(configError(make({ kvTargetUtilization: 1.5 }), "kv 1.5").path, "kv_target_utilization");
    assert.equal(configError(make({ kvTargetUtilization: 0 }), "kv 0").path, "kv_target_utilization");
    assert.equal(configError(make({ initialCapacity: -1 }), "initial -1").path, "initial_capacity");
  });
});

describe("adaptive limit: the TPOT guard", () => {
  test("a cold start begins at a quarter of the reported capacity and settles at the set point", () => {
    const sim = new Sim();
    assert.equal(sim.ctl.limit, 64, "256 reported: starts at 64, not at 256");
    assert.equal(sim.ctl.snapshot().phase, "starting");
    const limits = sim.run(120);
    const [lo, hi] = range(limits.slice(40));
    assert.ok(lo >= 32 && hi <= 42, `settled within 32-42 (set point ~38): ${lo}-${hi}`);
    const s = sim.ctl.snapshot();
    assert.equal(s.phase, "tracking");
    assert.ok(s.tpotP90Ms! <= SLO_MS, `TPOT p90 ${s.tpotP90Ms} under the SLO`);
    assert.ok(s.sloDecreases >= 1);
    assert.ok(Math.abs(s.tpotBaselineMs! - 0.97 * SLO_MS) < 1.5, `baseline ${s.tpotBaselineMs}`);
  });

  test("a cold start under the knee doubles while TPOT is well under the set point", () => {
    const sim = new Sim({ initialCapacity: 32 });
    assert.equal(sim.ctl.limit, 8);
    const limits = sim.run(30);
    // 8 -> 16, then a step sized by the distance to the set point: each waits for a decision's
    // worth of fresh samples (60; 8 requests give 8 a window).
    assert.ok(limits.includes(16), `doubled: ${limits.join(",")}`);
    assert.ok(limits.at(-1)! >= 28, `then toward the set point: ${limits.join(",")}`);
  });

  test("samples measured before a level took effect do not count", () => {
    const sim = new Sim({ initialCapacity: 256 });
    sim.run(10);
    const before = sim.ctl.snapshot().staleSamples;
    // A sample whose measurement began 60 s ago describes an older level.
    sim.ctl.observe({ kind: "ok", tpotMs: 500, spanMs: 60_000 });
    assert.equal(sim.ctl.snapshot().staleSamples, before + 1);
    sim.ctl.observe({ kind: "ok", tpotMs: Number.NaN });
    assert.equal(sim.ctl.snapshot().invalidSamples, 1);
  });

  test("it grows only while the limit is in use", () => {
    const sim = new Sim({ initialCapacity: 256 });
    sim.demand = 10;
    const limits = sim.run(60);
    assert.deepEqual(range(limits), [64, 64], "10 requests never fill 64: no reason to grow");
  });

  test("a slowdown lowers the limit, and its end lets it climb back", () => {
    const sim = new Sim();
    sim.run(60);
    const healthy = sim.ctl.limit;
    sim.model.slowdown = 1.5; // TPOT 15 ms alone: the set point is reached at ~12 requests
    const slow = sim.run(90);
    const [lo, hi] = range(slow.slice(45));
    assert.ok(lo >= 8 && hi <= 16, `slowed: ${lo}-${hi}`);
    sim.model.slowdown = 1;
    const after = sim.run(90);
    assert.ok(Math.abs(after.at(-1)! - healthy) <= 6, `back to ${after.at(-1)} (was ${healthy})`);
  });

  test("ttft_slo_ms cuts on the TTFT p90 from dispatch", () => {
    const clock = new ManualClock();
    const ctl = new AdaptiveLimit({ ...BOUNDS, ttftSloMs: 1000, initialCapacity: 256 }, clock);
    ctl.sampleUsage(64, 0);
    clock.advance(500);
    for (let i = 0; i < CONTROLLER.minSamples; i++) ctl.observe({ kind: "ok", ttftMs: 2000, spanMs: 10 });
    clock.advance(1000);
    assert.equal(ctl.tick(), "slo");
    assert.equal(ctl.limit, 32, "p90 twice the SLO: half");
    assert.equal(ctl.snapshot().ttftRatio, 2);
  });

  test("runs repeat: the same seed gives the same limits", () => {
    assert.deepEqual(new Sim({}, engine(), 7).run(80), new Sim({}, engine(), 7).run(80));
  });
});

describe("adaptive limit: the engine's signals", () => {
  test("an engine that queues what it was sent: the limit comes down to what it runs", () => {
    // It runs 20 at once; TPOT at 20 is 15 ms, under the SLO: latency alone would not cut.
    const sim = new Sim({}, engine({ maxRunning: 20 }));
    const limits = sim.run(60);
    const [lo, hi] = range(limits.slice(20));
    assert.ok(lo >= 16 && hi <= 21, `held at what the engine runs: ${lo}-${hi}`);
    const s = sim.ctl.snapshot();
    assert.ok(s.engineDecreases >= 1);
    assert.equal(s.engineWaiting! <= 1, true, `engine waiting ${s.engineWaiting}`);
  });

  test("KV use over kv_target_utilization cuts in proportion; under it the limit may grow", () => {
    // 30 requests fill the KV; the 0.9 target holds 27.
    const sim = new Sim({}, engine({ kvTokens: 30_000 }));
    const limits = sim.run(60);
    const [lo, hi] = range(limits.slice(20));
    assert.ok(lo >= 22 && hi <= 28, `held under the KV target: ${lo}-${hi}`);
    assert.ok(sim.ctl.snapshot().engineKvUtilization! <= 0.95);
    const loose = new Sim({ kvTargetUtilization: 1 }, engine({ kvTokens: 30_000 }));
    const looser = range(loose.run(60).slice(20));
    assert.ok(looser[1] > hi, `a target of 1 lets it hold more (${looser.join("-")} against ${hi})`);
  });

  test("without an SLO the engine decides: it grows while the engine has room, to what it can run", () => {
    const sim = new Sim({ tpotSloMs: undefined }, engine({ maxRunning: 100 }));
    const limits = sim.run(60);
    assert.ok(limits.includes(100), `up to what the engine runs: ${limits.join(",")}`);
    const [lo, hi] = range(limits.slice(30));
    // Held there, but for the knee search's look a fifth below (at most once a minute, a level).
    const under = limits.slice(30).filter((l) => l < 90).length;
    assert.ok(lo >= 80 && hi <= 101 && under <= 6, `held there: ${lo}-${hi}, ${under} windows under 90`);
  });

  test("no SLO and no engine signals: only a worker's overload cuts", () => {
    const sim = new Sim({ tpotSloMs: undefined }, engine({ exportsSignals: false }));
    sim.run(60);
    assert.equal(sim.ctl.limit, 256, "grows to the bound while in use");
    sim.overloads = 3;
    assert.equal(sim.window(), "overload");
    assert.equal(sim.ctl.limit, 160, "one cut per window: 0.8 x the 200 that ran");
    assert.equal(sim.ctl.snapshot().overloadDecreases, 1);
  });
});

describe("adaptive limit: the knee search (no tpot_slo_ms)", () => {
  // An engine like `mock-worker --knee`: past its knee every request more slows all of them by
  // half a lone step, so throughput (running / TPOT) falls with more requests. It reports 256
  // running slots and never queues, so its own signals never object.
  const bent = (knee: number) => engine({ knee, perRequestMs: 0.05 });
  const throughput = (sim: Sim, running: number) => {
    const m = sim.model;
    const past = m.knee > 0 ? Math.max(0, running - m.knee) : 0;
    return running / ((m.floorMs + m.perRequestMs * running) * (1 + m.kneeSlowdown * past));
  };

  test("a worker that slows past a knee is held near it, serving most of what it can", () => {
    const sim = new Sim({ tpotSloMs: undefined }, bent(30));
    sim.run(120);
    const late = sim.ran.slice(60);
    const best = throughput(sim, 30);
    const mean = late.reduce((s, r) => s + throughput(sim, r), 0) / late.length;
    assert.ok(
      mean >= 0.8 * best,
      `throughput ${(mean / best).toFixed(2)} of the knee's; ran ${late.join(",")}`,
    );
    assert.ok(Math.max(...late) <= 40, `never far past the knee: ${late.join(",")}`);
    const s = sim.ctl.snapshot();
    assert.ok(s.kneeDecreases >= 1 && s.sloDecreases === 0 && s.engineDecreases === 0);
  });

  test("a cold start far past the knee comes down to it", () => {
    const sim = new Sim({ tpotSloMs: undefined }, bent(12));
    const limits = sim.run(40);
    assert.ok(
      limits.slice(20).every((l) => l <= 16),
      `near 12 after 20 windows: ${limits.join(",")}`,
    );
  });

  test("an engine whose throughput grows with its batch is never cut by the search", () => {
    const sim = new Sim({ tpotSloMs: undefined }, engine());
    sim.run(200);
    assert.equal(sim.ctl.snapshot().kneeDecreases, 0);
    assert.equal(sim.ctl.limit, 256);
  });

  test("the level found past the knee caps raises for a minute, then the search looks again", () => {
    const sim = new Sim({ tpotSloMs: undefined }, bent(30));
    sim.run(90);
    const ceiling = sim.ctl.snapshot().kneeCeiling;
    assert.ok(ceiling !== null && ceiling <= 45, `a ceiling near the knee: ${ceiling}`);
    // The engine gets better (a smaller model loaded): its knee leaves. Within the memory the
    // limit stays under the ceiling; after it, it climbs.
    sim.model.knee = 0;
    const soon = sim.run(20);
    assert.ok(
      soon.every((l) => l < 60),
      soon.join(","),
    );
    const later = sim.run(120);
    assert.ok(Math.max(...later) > 100, `climbs once the ceiling is forgotten: ${later.join(",")}`);
  });

  test("at the engine's bound, with the knee far below, the search looks below and comes down", () => {
    // The engine runs at most 64 and bends at 8: the cold start (a quarter of 256) is already at
    // that bound, so there is no raise to compare; a look a fifth lower, then the usual chain.
    const sim = new Sim({ tpotSloMs: undefined }, engine({ knee: 8, perRequestMs: 0.05, maxRunning: 64 }));
    const limits = sim.run(80);
    assert.ok(
      limits.slice(-20).every((l) => l <= 16),
      `down near 8: ${limits.join(",")}`,
    );
  });

  test("at the engine's bound with no knee, a look below costs one level a minute", () => {
    const sim = new Sim({ tpotSloMs: undefined }, engine({ maxRunning: 100 }));
    const limits = sim.run(240);
    const below = limits.slice(30).filter((l) => l < 100).length;
    assert.ok(below <= 24, `${below} of 210 windows under the bound: ${limits.join(",")}`);
    assert.ok(limits.at(-1)! >= 90, limits.join(","));
  });

  test("with tpot_slo_ms the SLO guards and the search stays out", () => {
    const sim = new Sim({}, bent(30));
    sim.run(120);
    assert.equal(sim.ctl.snapshot().kneeDecreases, 0);
  });
});

describe("adaptive limit: bounds", () => {
  test("the limit stays within its bounds, and onBound says so once per episode", () => {
    const events: string[] = [];
    const onBound = (e: { bound: string; limit: number }) => events.push(`${e.bound}:${e.limit}`);
    const high = new Sim({ maxCapacity: 30, onBound });
    const limits = high.run(60);
    assert.ok(limits.every((l) => l <= 30) && limits.at(-1) === 30, limits.join(","));
    assert.deepEqual(events, ["max:30"], "the set point (~38) is past the bound: said once");
    events.length = 0;
    // Three times slower: TPOT alone is 30 ms, over the 20 ms SLO at any level (a capacity problem).
    const low = new Sim({ minCapacity: 20, onBound }, engine({ slowdown: 3 }));
    const held = low.run(60);
    assert.ok(held.every((l) => l >= 20) && held.at(-1) === 20, held.join(","));
    assert.deepEqual(events, ["min:20"]);
  });
});

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ADAPTIVE_LIMIT_DEFAULTS, type AdaptiveLimitOptions } from "../../src/capacity/adaptive-limit.js";
import { BASE_TPOT, inBand, range, Sim, windowsToBand, worker } from "./adaptive-sim.js";

// The adaptive limit under SLOs: TPOT references, the breach ceiling, cuts far above an SLO, breaches in
// a row, and the band around the set point.

describe("AdaptiveLimit: TPOT under an SLO", () => {
  // TPOT rises with the batch from concurrency 4 on (a gentle slope, no knee in sight): 20 ms at
  // 4, 30 ms at 30. The SLO is 40 ms. The baseline is learnt at 4 in flight.
  const gentle = worker({ knee: 4, slope: 0.02 });
  const run = (options: Partial<AdaptiveLimitOptions>) => {
    const sim = new Sim({ tpotSloMs: 40, ...options }, gentle);
    sim.demand = 4;
    sim.run(60);
    sim.demand = 30;
    return sim.run(60);
  };

  test("TPOT that rises with the batch but stays under 0.9 x the SLO is no overload", (t) => {
    // The quiet start leaves the limit at what ran (about 4): it climbs to the new demand while
    // TPOT rises under the SLO's floor, and never steps back.
    const limits = run({});
    const reached = limits.findIndex((l) => l >= 30) + 1;
    t.diagnostic(`demand 30: at 30 after ${reached} windows; limits ${range(limits).join("..")}`);
    assert.ok(reached > 0 && reached <= 20, `the limit reached 30 after ${reached} windows`);
    assert.ok(
      limits.every((l, i) => i === 0 || l >= limits[i - 1]!),
      `the limit stepped back: ${limits.join(",")}`,
    );
  });

  test("a rise past adaptive_slo_reference_cap x the baseline is a knee, SLO or not", (t) => {
    const limits = run({ sloReferenceCap: 1.1 });
    t.diagnostic(`demand 30: limits ${range(limits).join("..")}`);
    assert.ok(Math.min(...limits) < 30, `the limit held: ${range(limits).join("..")}`);
  });

  test("adaptive_slo_reference 0: the same rise against the baseline alone shrinks the limit", (t) => {
    const limits = run({ sloReference: 0 });
    t.diagnostic(`demand 30: limits ${range(limits).join("..")}`);
    assert.ok(Math.min(...limits) < 30, `the limit held: ${range(limits).join("..")}`);
  });
});

describe("AdaptiveLimit: the breach ceiling", () => {
  // Coarse steps past a knee: 20 ms at 8 in flight, 27 ms at 9 (the next step crosses a 24 ms SLO
  // by 12.5%). At 8 the latency is under the SLO's reference, so the law climbs back to 9 as soon
  // as a breach has cut it.
  const coarse = () => worker({ knee: 8, slope: 0.35 });
  const settle = (options: Partial<AdaptiveLimitOptions>) => {
    const sim = new Sim({ tpotSloMs: 24, ...options }, coarse());
    sim.demand = 40;
    sim.run(60);
    return sim;
  };

  test("a level that breached by more than the margin is not tried again until its hold ends, and the hold doubles", (t) => {
    const off = settle({ breachHoldMs: 0 }).run(600);
    const sim = settle({});
    const on = sim.run(600);
    const atNine = (limits: number[]) => limits.filter((l) => l >= 9).length;
    t.diagnostic(`windows at 9+ of 600: without ${atNine(off)}, with ${atNine(on)}`);
    assert.ok(atNine(off) > 150, `without a ceiling the limit saws 8-9: ${off.slice(0, 40).join(" ")}`);
    assert.ok(atNine(on) <= 12, `with it, 9 is tried now and then: ${on.join(" ")}`);
    assert.ok(
      on.every((l) => l >= 7),
      "no lower than one step under the knee",
    );
    // The tries come further and further apart: 30 s, then 60, 120, 240, 300 (the max).
    const tries = on.flatMap((l, i) => (l >= 9 && (on[i - 1] ?? 0) < 9 ? [i] : []));
    const gaps = tries.slice(1).map((x, i) => x - tries[i]!);
    t.diagnostic(`tries at ${tries.join(" ")}`);
    assert.ok(gaps.length >= 2, `tried again: ${tries.join(" ")}`);
    for (let i = 1; i < gaps.length; i++) assert.ok(gaps[i]! >= gaps[i - 1]!, `gaps grow: ${gaps.join(" ")}`);
    assert.ok(
      gaps.at(-1)! >= 120 && gaps.at(-1)! <= 320,
      `up to adaptive_breach_hold_max_ms: ${gaps.join(" ")}`,
    );
    const snap = sim.ctl.snapshot();
    assert.ok(snap.ceilingHolds > 100, `holds counted: ${snap.ceilingHolds}`);
  });

  test("a breach within the margin (noise at the edge) marks nothing", () => {
    // 27 ms at 9 (a p90 of about 28 with the jitter) against a 26.5 ms SLO: 6% over, under
    // adaptive_breach_margin (10%).
    const sim = new Sim({ tpotSloMs: 26.5 }, coarse());
    sim.demand = 40;
    const limits = sim.run(300);
    assert.equal(sim.ctl.snapshot().ceilingHolds, 0);
    assert.ok(limits.slice(60).filter((l) => l >= 9).length > 50, "the law alone decides");
  });

  test("the snapshot shows the ceiling while it holds; a baseline well under the one it was marked at drops it", () => {
    const sim = settle({ breachHoldMaxMs: 3_600_000 });
    sim.run(400); // the hold has doubled to minutes
    let snap = sim.ctl.snapshot();
    if (snap.breachCeiling === null) {
      // Between holds: run until the next try marks it again.
      for (let i = 0; i < 400 && sim.ctl.snapshot().breachCeiling === null; i++) sim.window();
      snap = sim.ctl.snapshot();
    }
    assert.equal(snap.breachCeiling, 9);
    // The worker gets twice as fast (e.g. a shorter model): latency at 8 falls far under the
    // baseline, the baseline follows it down, and the limit climbs past 9 at once (to its new
    // edge, 27.5 ms at 13, which may become the next ceiling).
    sim.model.baseTpotMs = BASE_TPOT / 2;
    const after = sim.run(60);
    const ceiling = sim.ctl.snapshot().breachCeiling;
    assert.ok(ceiling === null || ceiling >= 12, `the old ceiling is gone: ${ceiling}`);
    assert.ok(
      after.slice(0, 30).some((l) => l >= 11),
      `climbs past the old ceiling within 30 s: ${after.join(" ")}`,
    );
  });
});

describe("AdaptiveLimit: far above an SLO", () => {
  // Cold start at 256 with the knee at 16: TPOT is 121x its healthy 20 ms (2.4 s), 60x the SLO.
  const start = (options: Partial<AdaptiveLimitOptions>) => {
    const sim = new Sim({ initialCapacity: 256, tpotSloMs: 40, ...options });
    sim.demand = 300;
    return sim.run(40);
  };

  test("the cut is proportional, at most half a window: from 16x the knee to near it in a few windows", (t) => {
    const far = start({});
    const quarters = start({ sloFarFloor: 0.25 });
    const stepwise = start({ sloFarAbove: 1e9 });
    t.diagnostic(
      `default: ${far.slice(0, 8).join(" ")}; floor 0.25: ${quarters.slice(0, 8).join(" ")}; never far: ${stepwise.slice(0, 8).join(" ")}`,
    );
    assert.deepEqual(far.slice(0, 3), [128, 64, 32], "halved while p90 > 3.6 x the SLO");
    assert.deepEqual(
      quarters.slice(0, 2),
      [64, 16],
      "adaptive_slo_far_floor 0.25: quartered while p90 > 7.2 x",
    );
    assert.ok(windowsToBand(far) <= 6, `in the band after ${windowsToBand(far)} windows: ${far.join(" ")}`);
    assert.ok(windowsToBand(stepwise) > 15, `10% steps take longer: ${stepwise.join(" ")}`);
    assert.ok(inBand(far.at(-1)!), `it stays near the knee: ${far.join(" ")}`);
  });

  test("nearer the ceiling (p90 < adaptive_slo_far_above x the SLO) a breach takes the usual 10%", () => {
    // TPOT 1.5x the SLO: one window, one small step (the cold start's: 64 -> 59), as with the far
    // rule off.
    const near = worker({ knee: 1000, baseTpotMs: 60 });
    const a = new Sim({ tpotSloMs: 40 }, near);
    const b = new Sim({ tpotSloMs: 40, sloFarAbove: 1e9 }, near);
    a.demand = b.demand = 64;
    a.window();
    b.window();
    assert.equal(a.ctl.limit, b.ctl.limit);
    assert.equal(a.ctl.limit, 59);
  });
});

describe("AdaptiveLimit: SLO breaches in a row", () => {
  // No knee: a 2x slowdown puts TPOT 1.5x over the SLO at any concurrency (a flat curve, as an
  // incident on every worker), so only the rule's own step sizes move the limit.
  const flat = () => worker({ knee: 1000 });
  const slo = 1.4 * BASE_TPOT;
  const atMax = (options: Partial<AdaptiveLimitOptions> = {}) => {
    const sim = new Sim({ tpotSloMs: slo, initialCapacity: 256, ...options }, flat());
    sim.demand = 300;
    sim.run(120);
    assert.equal(sim.ctl.limit, 256, "settled at the maximum under the SLO");
    return sim;
  };
  /** Each cut as the share of the limit it kept, two decimals. */
  const kept = (from: number, limits: number[]) =>
    limits.map((l, i) => Math.round((100 * l) / (i === 0 ? from : limits[i - 1]!)) / 100);

  test("the n-th breach past the margin in a row takes n x 10%, up to adaptive_slo_max_decrease (30%)", (t) => {
    const sim = atMax();
    sim.model.slowdown = 2;
    const limits = sim.run(5);
    t.diagnostic(`256 -> ${limits.join(" ")}`);
    assert.deepEqual(kept(256, limits), [0.9, 0.8, 0.7, 0.7, 0.7]);
    assert.equal(sim.ctl.snapshot().lastDecision, "slo");
  });

  test("a window within the SLOs ends the run: the next breach takes 10% again", () => {
    const sim = atMax();
    sim.model.slowdown = 2;
    sim.run(3);
    sim.model.slowdown = 1;
    const within = sim.ctl.limit;
    sim.window();
    assert.ok(sim.ctl.limit >= within, "no cut within the SLO");
    sim.model.slowdown = 2;
    const from = sim.ctl.limit;
    assert.deepEqual(kept(from, sim.run(2)), [0.9, 0.8]);
  });

  test("adaptive_slo_max_decrease equal to the minimum keeps every cut at 10%", () => {
    const sim = atMax({ sloMaxDecrease: 0.1 });
    sim.model.slowdown = 2;
    assert.deepEqual(kept(256, sim.run(4)), [0.9, 0.9, 0.9, 0.9]);
  });

  test("a breach within the margin (noise at the edge) never grows past 10%", () => {
    // 1.05 x the SLO: over it, under adaptive_breach_margin (10%) over it. Without the SLO band,
    // which would weigh it (next block), every such window cuts.
    const sim = atMax({ sloBand: 0 });
    sim.model.slowdown = (1.05 * slo) / (1.05 * BASE_TPOT);
    assert.deepEqual(kept(256, sim.run(3)), [0.9, 0.9, 0.9]);
  });
});

describe("AdaptiveLimit: the SLO band", () => {
  // A flat curve (no knee) settled at the maximum under the SLO; then TPOT is set window by window,
  // so the p90 sits where a test puts it against the set point (0.97 x the SLO). The jitter's p90
  // is about 1.04, so slowdown s puts the p90 near BASE_TPOT x 1.04 x s.
  const slo = 1.4 * BASE_TPOT;
  const setPoint = ADAPTIVE_LIMIT_DEFAULTS.sloSetPoint * slo;
  const settled = (options: Partial<AdaptiveLimitOptions> = {}) => {
    const sim = new Sim({ tpotSloMs: slo, initialCapacity: 256, ...options }, worker({ knee: 1000 }));
    sim.demand = 300;
    sim.run(120);
    assert.equal(sim.ctl.limit, 256, "settled at the maximum under the SLO");
    return sim;
  };
  /** Runs windows whose p90 is `x` times the set point, one per entry. */
  const at = (sim: Sim, xs: number[]) =>
    xs.map((x) => {
      sim.model.slowdown = (x * setPoint) / (1.04 * BASE_TPOT);
      sim.window();
      return sim.ctl.limit;
    });
  const alternating = (n: number) => Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 1.06 : 0.94));

  test("a p90 that swings 6% either side of the set point holds the limit; without the band it walks down", (t) => {
    const banded = at(settled(), alternating(30));
    const plain = at(settled({ sloBand: 0 }), alternating(30));
    t.diagnostic(`band: ${banded.slice(0, 12).join(" ")}; sloBand 0: ${plain.slice(0, 12).join(" ")}`);
    assert.deepEqual(range(banded), [256, 256], `held: ${banded.join(" ")}`);
    // Without it each window over the SLO (1.06 x 0.97 = 1.03 x) cuts 10% and each under it adds 5%.
    assert.ok(plain.at(-1)! < 0.6 * 256, `walked down: ${plain.join(" ")}`);
  });

  test("a p90 that stays 5% over the SLO is no noise: the evidence cuts every other window", () => {
    // 1.05 x the SLO is 1.0825 x the set point: 0.0825, then 0.165 > 0.1 cuts (10%) and starts again.
    const sim = settled();
    const x = 1.05 / ADAPTIVE_LIMIT_DEFAULTS.sloSetPoint;
    assert.deepEqual(at(sim, [x]), [256]);
    const evidence = sim.ctl.snapshot().sloEvidence;
    assert.ok(Math.abs(evidence - 0.0825) < 0.02, `the snapshot shows the evidence: ${evidence}`);
    const limits = at(sim, Array(5).fill(x));
    assert.deepEqual(limits, [230, 230, 207, 207, 186]);
    assert.equal(sim.ctl.snapshot().lastDecision, "slo");
    assert.equal(sim.ctl.snapshot().sloEvidence, 0, "cleared when it acts");
  });

  test("room under the set point is weighed too: an increase once the evidence passes the band", () => {
    // One window at 1.2 x the SLO (outside the band) cuts to 230; then 0.96 x the set point adds
    // -0.04 a window, so every third window increases by 5% (the breach's ceiling, 255, allows it).
    const sim = settled();
    const limits = at(sim, [1.2 / ADAPTIVE_LIMIT_DEFAULTS.sloSetPoint, ...Array(6).fill(0.96)]);
    assert.deepEqual(limits, [230, 230, 230, 241, 241, 241, 253]);
  });

  test("outside the band the rules act at once: 1.2 x the SLO cuts in its own window", () => {
    const sim = settled();
    assert.deepEqual(at(sim, [1.2 / ADAPTIVE_LIMIT_DEFAULTS.sloSetPoint]), [230]);
  });
});

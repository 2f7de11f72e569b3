import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import {
  ADAPTIVE_LIMIT_DEFAULTS,
  ADAPTIVE_LIMIT_KEYS,
  type AdaptiveBoundEvent,
  type AdaptiveDecision,
  AdaptiveLimit,
  type AdaptiveLimitOptions,
  resolveAdaptiveLimitOptions,
  TTFT_BUCKET_BOUNDS,
  ttftBucketOf,
} from "../../src/capacity/adaptive-limit.js";

// ---------------------------------------------------------------------------------------------
// A simulated worker pool with a knee, driven window by window (1 window = windowMs = 1 s).

interface WorkerModel {
  /** Concurrency up to which latency is flat. */
  knee: number;
  /** TPOT at or below the knee, ms. */
  baseTpotMs: number;
  /** Past the knee latency is base * (1 + slope * (c - knee)). */
  slope: number;
  /** TTFT = (ttftFixedMs + ttftPerTokenMs * promptTokens) * load factor. */
  ttftFixedMs: number;
  ttftPerTokenMs: number;
  /** A worker-wide slowdown (1 = none): every latency is multiplied by it. */
  slowdown: number;
}

const KNEE = 16;
const BASE_TPOT = 20;

function worker(overrides: Partial<WorkerModel> = {}): WorkerModel {
  return {
    knee: KNEE,
    baseTpotMs: BASE_TPOT,
    slope: 0.5,
    ttftFixedMs: 30,
    ttftPerTokenMs: 0.1,
    slowdown: 1,
    ...overrides,
  };
}

function loadFactor(w: WorkerModel, c: number): number {
  return (c <= w.knee ? 1 : 1 + w.slope * (c - w.knee)) * w.slowdown;
}

const shortPrompt = (r: () => number) => 100 + Math.floor(r() * 100);
const longPrompt = (r: () => number) => 8000 + Math.floor(r() * 4000);

/**
 * Fluid model: each window the pool runs c = min(limit, demand) requests, reports that level and
 * the queue behind it, and max(12, c) completions whose TPOT and TTFT follow the model at c, with
 * +-5% jitter.
 */
class Sim {
  readonly clock = new ManualClock();
  readonly ctl: AdaptiveLimit;
  readonly model: WorkerModel;
  readonly rand: () => number;
  demand = 100;
  prompt: (r: () => number) => number = shortPrompt;
  /** Share of the limit the scheduler's reservations hold back for idle higher classes. */
  reserved = 0;
  /** Tell the controller about those slots (setHeldBack), as the gateway does. */
  reportHeld = true;
  /** What ran, per window. */
  readonly ran: number[] = [];

  constructor(options: Partial<AdaptiveLimitOptions> = {}, model = worker(), seed = 1) {
    this.model = model;
    this.rand = prng(seed);
    this.ctl = new AdaptiveLimit(
      { minCapacity: 1, maxCapacity: 256, initialCapacity: 64, ...options },
      this.clock,
    );
  }

  window(): AdaptiveDecision | undefined {
    const room = Math.floor(this.ctl.limit * (1 - this.reserved));
    const c = Math.min(room, this.demand);
    this.ran.push(c);
    this.ctl.sampleUsage(c, this.demand - c);
    this.ctl.setHeldBack(this.reportHeld && this.demand > c ? this.ctl.limit - room : 0);
    const f = loadFactor(this.model, c);
    const n = c > 0 ? Math.max(12, c) : 0;
    for (let i = 0; i < n; i++) {
      const promptTokens = this.prompt(this.rand);
      const jitter = () => 0.95 + 0.1 * this.rand();
      this.ctl.observe({
        kind: "ok",
        promptTokens,
        ttftMs: (this.model.ttftFixedMs + this.model.ttftPerTokenMs * promptTokens) * f * jitter(),
        tpotMs: this.model.baseTpotMs * f * jitter(),
      });
    }
    this.clock.advance(1000);
    return this.ctl.tick();
  }

  /** Runs `n` windows; returns the limit after each. */
  run(n: number): number[] {
    const limits: number[] = [];
    for (let i = 0; i < n; i++) {
      this.window();
      limits.push(this.ctl.limit);
    }
    return limits;
  }
}

const LOW = 0.8 * KNEE; // 12.8
const HIGH = 1.25 * KNEE; // 20
const inBand = (limit: number) => limit >= LOW && limit <= HIGH;

/** Windows until the limit is in the band (1-based), or Infinity. */
function windowsToBand(limits: number[]): number {
  const i = limits.findIndex(inBand);
  return i < 0 ? Number.POSITIVE_INFINITY : i + 1;
}

function range(limits: number[]): [number, number] {
  return [Math.min(...limits), Math.max(...limits)];
}

function configError(fn: () => unknown, what: string): ConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `${what}: expected a ConfigError, got ${String(err)}`);
    return err;
  }
  assert.fail(`${what}: expected a ConfigError`);
}

const BOUNDS = { minCapacity: 1, maxCapacity: 256, initialCapacity: 64 };

// ---------------------------------------------------------------------------------------------

describe("AdaptiveLimit: cold start", () => {
  test("from a reported capacity of 64 (knee 16) it converges into [0.8, 1.25] x knee and stays there", (t) => {
    const sim = new Sim();
    const limits: number[] = [];
    let calibrated = 0;
    for (let w = 0; w < 330; w++) {
      sim.window();
      limits.push(sim.ctl.limit);
      if (calibrated === 0 && sim.ctl.snapshot().phase === "tracking") calibrated = w + 1;
    }
    const reached = windowsToBand(limits);
    const steady = limits.slice(30);
    t.diagnostic(
      `in band after ${reached} windows, calibrated after ${calibrated} (limit ${limits[calibrated - 1]}); ` +
        `steady range ${range(steady).join("..")}`,
    );
    assert.ok(calibrated <= 30);
    assert.ok(reached <= 30, `converged after ${reached} windows`);
    assert.ok(limits.slice(reached - 1).every(inBand), "left the band after converging");
    assert.deepEqual(range(steady), [13, 17]);
    const s = sim.ctl.snapshot();
    assert.equal(s.phase, "tracking");
    assert.ok(Math.abs(s.tpotBaselineMs! / (BASE_TPOT * 1.05) - 1) < 0.05, `baseline ${s.tpotBaselineMs}`);
    // The cold start's probe, then a re-probe every five minutes (adaptive_probe_interval_ms), each
    // dipping at most one step below the band.
    assert.ok(s.probes >= 2, `probes ${s.probes}`);
  });

  test("probeOffset delays the first periodic re-probe by that share of the interval, then every interval", () => {
    /** The windows in which a probe ended (the probe count rose). */
    const probeEnds = (sim: Sim, n: number): number[] => {
      const ends: number[] = [];
      let probes = 0;
      for (let i = 0; i < n; i++) {
        sim.window();
        const p = sim.ctl.snapshot().probes;
        if (p > probes) ends.push(i);
        probes = p;
      }
      return ends;
    };
    const plain = probeEnds(new Sim(), 1000);
    const offset = probeEnds(new Sim({ probeOffset: 0.5 }), 1000);
    assert.ok(plain.length >= 3 && offset.length >= 3, `${plain} / ${offset}`);
    assert.equal(offset[0], plain[0], "the cold start's probe is not delayed");
    const lag = offset[1]! - plain[1]!;
    assert.ok(lag >= 145 && lag <= 155, `first re-probe ${lag} windows later (half of 300)`);
    assert.ok(Math.abs(offset[2]! - offset[1]! - (plain[2]! - plain[1]!)) <= 5, "then every interval");
  });

  test("below the knee with enough demand it grows to the knee", (t) => {
    const sim = new Sim({ initialCapacity: 8 });
    const limits = sim.run(300);
    const reached = windowsToBand(limits);
    t.diagnostic(
      `8 -> band after ${reached} windows; range after ${range(limits.slice(reached - 1)).join("..")}`,
    );
    assert.ok(reached <= 15, `reached the band after ${reached} windows`);
    assert.ok(limits.slice(reached - 1).every(inBand));
  });

  test("an idle limit never grows (in-flight well under the limit, no queue)", () => {
    // The cold start's step from the in-flight peak (4) buys nothing and is undone to that level,
    // which runs full (4 >= 0.9 x 4): one increase, to 5, and 4 of 5 is idle: nothing more moves.
    const sim = new Sim({ initialCapacity: 8 });
    sim.demand = 4;
    const limits = sim.run(500);
    assert.deepEqual(limits.slice(0, 4), [8, 3, 4, 5]);
    assert.ok(limits.slice(3).every((l) => l === 5));
    assert.equal(sim.ctl.snapshot().increases, 1);

    // A big limit over light, healthy traffic comes down to what ran: the discovered capacity is
    // a claim the workers never ran, so the undone step goes back to the in-flight peak (10), not
    // to 64, and the limit stays within one increase of 1 / utilization over the demand. The first
    // window is the ramp-up from nothing, no reference for a step.
    const big = new Sim({ initialCapacity: 64 });
    big.demand = 10;
    const bigLimits = big.run(500);
    assert.deepEqual(bigLimits.slice(0, 5), [64, 9, 10, 11, 12]);
    assert.ok(bigLimits.slice(4).every((l) => l === 12));
    assert.equal(big.ctl.snapshot().phase, "tracking");
    assert.equal(big.ctl.snapshot().probes, 1);
  });

  test("demand under the reported capacity but past the knee (40 of 64): the cold start still finds the knee", (t) => {
    const sim = new Sim();
    sim.demand = 40; // in flight 40 < 0.9 x 64: the limit is not "in use", but latency is 13x
    const limits = sim.run(300);
    const reached = windowsToBand(limits);
    t.diagnostic(`in band after ${reached} windows; then ${range(limits.slice(reached - 1)).join("..")}`);
    assert.ok(reached <= 30, `converged after ${reached} windows`);
    assert.ok(limits.slice(reached - 1).every(inBand));
  });

  test("the cold start uses the discovered capacity clamped to the bounds", () => {
    const seen: AdaptiveBoundEvent[] = [];
    const clock = new ManualClock();
    const high = new AdaptiveLimit(
      { minCapacity: 2, maxCapacity: 32, initialCapacity: 1000, onBound: (e) => seen.push(e) },
      clock,
    );
    assert.equal(high.limit, 32);
    assert.deepEqual(seen, [{ bound: "max", limit: 32, wanted: 1000 }]);
    const low = new AdaptiveLimit({ minCapacity: 2, maxCapacity: 32, initialCapacity: 0 }, clock);
    assert.equal(low.limit, 2);
    assert.equal(low.snapshot().bound, "min");
    assert.equal(new AdaptiveLimit({ ...BOUNDS, initialCapacity: 10.7 }, clock).limit, 10);
  });
});

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

describe("AdaptiveLimit: slots held back by the scheduler's reservations", () => {
  // The built-in classes at a fleet of 256, scaled with the limit: 62.5% of it is held for idle
  // system and interactive traffic while default work waits.
  const run = (reportHeld: boolean) => {
    const sim = new Sim({ tpotSloMs: 30 });
    sim.reserved = 0.625;
    sim.reportHeld = reportHeld;
    sim.demand = 200;
    const limits = sim.run(600).slice(120);
    return { limits, ran: sim.ran.slice(120) };
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

  test("counted as run while work waits: the waiting class runs at its knee, the limit in a narrow band", (t) => {
    const off = run(false);
    const on = run(true);
    // Share of windows within 15% of the median limit.
    const steady = (xs: number[]) => {
      const m = median(xs);
      return xs.filter((x) => Math.abs(x - m) <= 0.15 * m).length / xs.length;
    };
    t.diagnostic(
      `ran median: not reported ${median(off.ran)}, reported ${median(on.ran)}; limit within 15% of its median: ${steady(off.limits).toFixed(2)} vs ${steady(on.limits).toFixed(2)}`,
    );
    // Unreported, a breach cuts the limit to what the waiting class ran, which then gets 37.5%
    // of that: it runs far under the knee (16) and the limit saws from a third of it back up.
    assert.ok(median(off.ran) < 0.75 * KNEE, `not reported: ${off.ran.slice(0, 60).join(" ")}`);
    assert.ok(steady(off.limits) < 0.6, `not reported: ${off.limits.slice(0, 60).join(" ")}`);
    assert.ok(median(on.ran) >= 0.8 * KNEE, `reported: ${on.ran.slice(0, 60).join(" ")}`);
    assert.ok(steady(on.limits) >= 0.95, `reported: ${on.limits.slice(0, 60).join(" ")}`);
  });

  test("a negative or non-finite report is taken as none", () => {
    const sim = new Sim();
    for (const bad of [-3, Number.NaN, Number.POSITIVE_INFINITY]) {
      sim.ctl.setHeldBack(bad);
      sim.run(1);
    }
    assert.ok(sim.ctl.limit >= 1);
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

describe("AdaptiveLimit: worker slowdown", () => {
  test("a 2x slowdown without an SLO: the limit drops, then the slowdown becomes the new normal; after it, recovers", (t) => {
    const sim = new Sim();
    sim.run(200);
    sim.model.slowdown = 2;
    const during = sim.run(120);
    const baselineDuring = sim.ctl.snapshot().tpotBaselineMs!;
    sim.model.slowdown = 1;
    const after: number[] = [];
    const baselines: number[] = [];
    for (let w = 0; w < 100; w++) {
      sim.window();
      after.push(sim.ctl.limit);
      baselines.push(sim.ctl.snapshot().tpotBaselineMs!);
    }
    const rebased = baselines.findIndex((b) => b < 1.1 * BASE_TPOT) + 1;
    t.diagnostic(
      `during: min ${Math.min(...during)} after ${during.indexOf(Math.min(...during)) + 1} windows, ` +
        `last 60 ${range(during.slice(60)).join("..")}; baseline ${baselineDuring.toFixed(1)} ms; ` +
        `after: baseline back under 1.1 x after ${rebased} windows, limits ${range(after).join("..")}`,
    );
    assert.ok(Math.min(...during) < LOW, "the limit dropped");
    assert.ok(during.slice(60).every(inBand), "the knee did not move: the limit returns to it");
    assert.ok(baselineDuring > 1.8 * BASE_TPOT, "the slowdown became the baseline");
    assert.ok(rebased >= 1 && rebased <= 5, `baseline re-learnt after ${rebased} windows`);
    assert.ok(after.every(inBand), `after: ${range(after)}`);
  });

  test("without an SLO, the windows the law reads as overload do not move the baseline; the probe after them does", () => {
    const sim = new Sim();
    sim.run(200);
    const before = sim.ctl.snapshot().tpotBaselineMs!;
    sim.model.slowdown = 3;
    const seen: Array<{ decision: AdaptiveDecision | undefined; baseline: number; phase: string }> = [];
    for (let w = 0; w < 4; w++) {
      const decision = sim.window();
      const s = sim.ctl.snapshot();
      seen.push({ decision, baseline: s.tpotBaselineMs!, phase: s.phase });
    }
    assert.deepEqual(
      seen.map((x) => x.decision),
      ["decrease", "decrease", "decrease", "decrease"],
      "3x latency: a decrease a window",
    );
    for (const x of seen) assert.equal(x.baseline, before, "the baseline does not absorb them");
    // The fifth decrease asks "is it load?": a probe, whose end makes the slowdown the baseline.
    sim.run(20);
    assert.ok(sim.ctl.snapshot().probes >= 2, "a re-probe ran");
    assert.ok(sim.ctl.snapshot().tpotBaselineMs! > 2.5 * before, "the slower worker is the new normal");
  });

  test("with an SLO, a 30-minute incident above it shrinks the limit and freezes the baseline; after it, back to the knee", (t) => {
    const slo = 1.4 * BASE_TPOT; // above the healthy p90, below the slowed one
    const sim = new Sim({ tpotSloMs: slo, minCapacity: 2 });
    sim.run(300);
    const before = sim.ctl.snapshot().tpotBaselineMs!;
    sim.model.slowdown = 2;
    const during = sim.run(1800);
    const s = sim.ctl.snapshot();
    assert.equal(s.baselineFrozen, true);
    assert.equal(s.lastDecision, "slo");
    assert.equal(s.tpotBaselineMs, before, "the baseline did not move during the incident");
    assert.ok(
      during.slice(30).every((l) => l === 2),
      "held at the minimum while above the SLO",
    );
    sim.model.slowdown = 1;
    const after = sim.run(300);
    const back = windowsToBand(after);
    t.diagnostic(`baseline ${before.toFixed(1)} ms before and after; back in band after ${back} windows`);
    assert.ok(back <= 20, `recovered after ${back} windows`);
    assert.ok(after.slice(back - 1).every(inBand));
    assert.ok(Math.abs(sim.ctl.snapshot().tpotBaselineMs! / before - 1) < 0.05);
  });

  test("when an incident ends, TPOT far under its baseline re-bases it at once: no probe steps down", (t) => {
    // No knee, and no periodic re-probe: only the trigger under test can step the limit down.
    const sim = new Sim(
      { tpotSloMs: 1.4 * BASE_TPOT, maxCapacity: 64, probeIntervalMs: 0 },
      worker({ knee: 1000 }),
    );
    sim.demand = 100;
    sim.run(300);
    sim.model.slowdown = 1.3; // under the SLO: the law's decreases, and the baseline follows up
    sim.run(600);
    const stale = sim.ctl.snapshot();
    assert.ok(stale.tpotBaselineMs! > 1.2 * BASE_TPOT, `baseline raised: ${stale.tpotBaselineMs}`);
    sim.model.slowdown = 1;
    const from = sim.ctl.limit;
    const after = sim.run(20);
    const s = sim.ctl.snapshot();
    t.diagnostic(
      `from ${from}: ${after.join(" ")}; baseline ${stale.tpotBaselineMs!.toFixed(1)} -> ${s.tpotBaselineMs!.toFixed(1)} ms`,
    );
    assert.equal(s.probeSteps, stale.probeSteps, "no probe step");
    assert.ok(s.tpotBaselineMs! < 1.1 * BASE_TPOT, "re-based to the healthy TPOT");
    assert.ok(
      after.every((l, i) => l >= (i === 0 ? from : after[i - 1]!)),
      `the limit only climbs back: ${after.join(" ")}`,
    );
  });

  test("a TTFT SLO shrinks too", () => {
    const sim = new Sim({ ttftSloMs: 100 });
    sim.run(100);
    sim.model.slowdown = 5; // short-prompt TTFT ~ 45 ms x 5
    sim.run(3);
    assert.equal(sim.ctl.snapshot().lastDecision, "slo");
    assert.ok(sim.ctl.snapshot().sloDecreases >= 3);
  });
});

/** A controller at 20 with work queued, and one window of 20 equal samples at a time. */
function ttftWindows() {
  const clock = new ManualClock();
  const ctl = new AdaptiveLimit({ ...BOUNDS, initialCapacity: 20 }, clock);
  const windowOf = (ttftMs: number, tpotMs?: number) => {
    ctl.sampleUsage(ctl.limit, 5);
    for (let i = 0; i < 20; i++) ctl.observe({ kind: "ok", ttftMs, promptTokens: 100, tpotMs });
    clock.advance(1000);
    return ctl.tick();
  };
  return { ctl, windowOf };
}

describe("AdaptiveLimit: TTFT by prompt length", () => {
  test("buckets", () => {
    assert.deepEqual(TTFT_BUCKET_BOUNDS, [256, 1024, 4096, 16384]);
    assert.deepEqual(
      [0, 255, 256, 1023, 1024, 4095, 4096, 16383, 16384, 1e6].map(ttftBucketOf),
      [0, 0, 1, 1, 2, 2, 3, 3, 4, 4],
    );
  });

  test("a shift from short to long prompts raises TTFT tenfold but the limit does not collapse", (t) => {
    const sim = new Sim();
    sim.run(200);
    const shortTtft = sim.ctl.snapshot().ttftP90Ms!;
    sim.prompt = longPrompt;
    const limits = sim.run(300);
    const s = sim.ctl.snapshot();
    t.diagnostic(
      `TTFT p90 ${shortTtft.toFixed(0)} -> ${s.ttftP90Ms!.toFixed(0)} ms; limits ${range(limits).join("..")}`,
    );
    assert.ok(s.ttftP90Ms! > 10 * shortTtft);
    assert.ok(limits.every(inBand), `limits ${range(limits)}`);
    assert.ok(s.ttftRatio! < 1.6);
    assert.ok(s.ttftBaselinesMs[0]! > 0 && s.ttftBaselinesMs[3]! > 10 * s.ttftBaselinesMs[0]!);

    // A mix of both, shifting every 50 windows, is no signal either.
    const mixed = new Sim();
    mixed.run(100);
    const all: number[] = [];
    for (let k = 0; k < 6; k++) {
      mixed.prompt = k % 2 ? shortPrompt : (r) => (r() < 0.5 ? shortPrompt(r) : longPrompt(r));
      all.push(...mixed.run(50));
    }
    // The re-probe due every 300 windows steps 10% down for a window, under the band's floor when
    // the limit sits at its edge (13 -> 12): an excursion by design, not a signal of the mix.
    const probeDip = (l: number) => l >= Math.floor(LOW * 0.9) && l <= HIGH;
    assert.ok(all.every(probeDip), `limits ${range(all)}`);
    assert.ok(all.filter((l) => !inBand(l)).length <= 2, `limits ${range(all)}`);
  });

  test("samples without a TPOT (0-1 output tokens) still give the TTFT signal", () => {
    const { ctl, windowOf } = ttftWindows();
    // Above the 250 ms noise floor, so the ratio is against the baseline itself.
    windowOf(500, 20); // the ramp-up from nothing: no reference yet
    windowOf(500, 20); // calibration: first step
    windowOf(500, 20); // no gain: undone, baselines set
    assert.equal(ctl.snapshot().phase, "tracking");
    assert.equal(windowOf(500), "increase");
    assert.equal(windowOf(1000), "decrease");
    assert.equal(ctl.snapshot().ttftRatio, 2);
  });

  test("TTFT under the noise floor is no signal: tens of ms of prefill jitter do not shrink the limit", () => {
    const { ctl, windowOf } = ttftWindows();
    windowOf(40, 20);
    windowOf(40, 20);
    windowOf(40, 20);
    assert.equal(ctl.snapshot().phase, "tracking");
    // 40 -> 100 ms is 2.5x the baseline, but under the floor: 100 / 250.
    assert.equal(windowOf(100, 20), "increase");
    assert.equal(ctl.snapshot().ttftRatio, 0.4);
  });
});

describe("AdaptiveLimit: overload and outcomes without a sample", () => {
  test("a burst of 429/503/timeouts in one window is exactly one multiplicative decrease", () => {
    const sim = new Sim();
    sim.run(100);
    const before = sim.ctl.limit;
    const { decreases } = sim.ctl.snapshot();
    for (let i = 0; i < 50; i++) sim.ctl.observe({ kind: "overload" });
    assert.equal(sim.window(), "overload");
    assert.equal(sim.ctl.limit, Math.floor(before * 0.8));
    const s = sim.ctl.snapshot();
    assert.equal(s.overloadDecreases, 1);
    assert.equal(s.decreases, decreases + 1);
    assert.equal(s.baselineFrozen, true);
    assert.notEqual(sim.window(), "overload");
    assert.equal(sim.ctl.snapshot().overloadDecreases, 1);
  });

  test("errors while the last decrease is still draining are not a second decrease", () => {
    const clock = new ManualClock();
    const ctl = new AdaptiveLimit({ ...BOUNDS, initialCapacity: 40 }, clock);
    ctl.observe({ kind: "overload" });
    ctl.sampleUsage(40, 10);
    clock.advance(1000);
    assert.equal(ctl.tick(), "overload");
    assert.equal(ctl.limit, 32);
    ctl.observe({ kind: "overload" });
    ctl.sampleUsage(38, 10); // 38 > 32 still in flight
    clock.advance(1000);
    assert.equal(ctl.tick(), "hold");
    assert.equal(ctl.limit, 32);
    assert.equal(ctl.snapshot().overloadDecreases, 1);
  });

  test("cancelled and preempted requests give no sample", () => {
    const a = new Sim();
    const b = new Sim();
    for (let w = 0; w < 200; w++) {
      for (let i = 0; i < 20; i++) {
        b.ctl.observe({ kind: "cancelled" });
        b.ctl.observe({ kind: "preempted" });
      }
      assert.equal(a.window(), b.window());
    }
    assert.deepEqual(a.ctl.snapshot(), b.ctl.snapshot());
    b.ctl.observe({ kind: "cancelled" });
    assert.equal(b.ctl.snapshot().storedSamples, 0);
  });

  test("invalid samples are dropped and counted, never thrown", () => {
    const ctl = new AdaptiveLimit(BOUNDS, new ManualClock());
    ctl.observe({ kind: "ok", ttftMs: Number.NaN, promptTokens: 10 });
    ctl.observe({ kind: "ok", ttftMs: 10, promptTokens: -1 });
    ctl.observe({ kind: "ok", tpotMs: -1 });
    ctl.observe({ kind: "ok", ttftMs: 10, promptTokens: 10, tpotMs: Number.POSITIVE_INFINITY });
    assert.equal(ctl.snapshot().invalidSamples, 4);
    assert.equal(ctl.snapshot().storedSamples, 0);
  });
});

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

describe("AdaptiveLimit: windows and samples", () => {
  test("memory is bounded: 1e5 samples in one window keep at most sampleCap per store", () => {
    const clock = new ManualClock();
    const ctl = new AdaptiveLimit({ ...BOUNDS, sampleCap: 512 }, clock);
    const r = prng(3);
    for (let i = 0; i < 100_000; i++) {
      ctl.observe({ kind: "ok", ttftMs: 100 * r(), promptTokens: 100, tpotMs: 100 * r() });
    }
    const s = ctl.snapshot();
    assert.equal(s.storedSamples, 3 * 512); // TPOT, TTFT bucket 0, TTFT all
    ctl.sampleUsage(64, 10);
    clock.advance(1000);
    ctl.tick();
    const p90 = ctl.snapshot().tpotP90Ms!;
    assert.ok(Math.abs(p90 - 90) < 4, `reservoir p90 ${p90} vs 90`);
    assert.equal(ctl.snapshot().storedSamples, 0);

    for (let i = 0; i < 100_000; i++) {
      ctl.observe({ kind: "ok", ttftMs: r(), promptTokens: Math.floor(r() * 40000), tpotMs: r() });
    }
    assert.equal(ctl.snapshot().storedSamples, 7 * 512);
  });

  test("tick closes a window only once windowMs has passed", () => {
    const clock = new ManualClock();
    const ctl = new AdaptiveLimit({ ...BOUNDS, windowMs: 500 }, clock);
    clock.advance(499);
    assert.equal(ctl.tick(), undefined);
    assert.equal(ctl.snapshot().windows, 0);
    clock.advance(1);
    assert.equal(ctl.tick(), "hold");
    assert.equal(ctl.tick(), undefined);
    assert.equal(ctl.snapshot().windows, 1);
  });

  test("too few samples carry over to the next window", () => {
    const clock = new ManualClock();
    const ctl = new AdaptiveLimit({ ...BOUNDS, initialCapacity: 20 }, clock);
    const decisions: Array<AdaptiveDecision | undefined> = [];
    for (let w = 0; w < 8; w++) {
      ctl.sampleUsage(ctl.limit, 3);
      for (let i = 0; i < 3; i++) ctl.observe({ kind: "ok", tpotMs: 20 });
      clock.advance(1000);
      decisions.push(ctl.tick());
    }
    // 3 a window: the 4th window has 12 >= 10 samples and the probe takes its first step.
    assert.deepEqual(decisions, ["hold", "hold", "hold", "decrease", "hold", "hold", "hold", "increase"]);
    assert.equal(ctl.limit, 20);
    assert.equal(ctl.snapshot().phase, "tracking");
  });

  test("runs are deterministic", () => {
    const trace = () => {
      const sim = new Sim({ tpotSloMs: 30 });
      const out = sim.run(200);
      sim.model.slowdown = 2;
      out.push(...sim.run(100));
      return [out, sim.ctl.snapshot()];
    };
    assert.deepEqual(trace(), trace());
  });

  test("recalibrate() re-learns the baselines at the next window in use", () => {
    const sim = new Sim();
    sim.run(100);
    const { probes } = sim.ctl.snapshot();
    sim.ctl.recalibrate();
    sim.window();
    assert.equal(sim.ctl.snapshot().phase, "probing");
    sim.run(5);
    assert.equal(sim.ctl.snapshot().phase, "tracking");
    assert.equal(sim.ctl.snapshot().probes, probes + 1);
  });
});

describe("AdaptiveLimit: requests that span windows", () => {
  /**
   * Request-level model: each request runs `life` windows, admitted while the pool is under the
   * limit, its TTFT reported in its first window. TPOT comes either from chunk timing (every
   * running request reports its TPOT over each window) or only at the end (the mean over its
   * life, so it lags). After a decrease the pool drains as requests finish: rule 0 holds until then.
   */
  function spanning(life: number, tpotAtEnd: boolean, windows: number): number[] {
    const clock = new ManualClock();
    // This worker's TTFT is tens of ms: with the default 250 ms floor it would give no signal.
    const ctl = new AdaptiveLimit({ ...BOUNDS, ttftFloorMs: 0 }, clock);
    const model = worker();
    const r = prng(11);
    let running: Array<{ left: number; sum: number }> = [];
    const limits: number[] = [];
    for (let w = 0; w < windows; w++) {
      while (running.length < ctl.limit) running.push({ left: life, sum: 0 });
      ctl.sampleUsage(running.length, 100);
      const f = loadFactor(model, running.length);
      for (const req of running) {
        const tpotMs = BASE_TPOT * f * (0.95 + 0.1 * r());
        req.sum += tpotMs;
        if (req.left === life) ctl.observe({ kind: "ok", ttftMs: 40 * f, promptTokens: 150 });
        if (!tpotAtEnd) ctl.observe({ kind: "ok", tpotMs });
        else if (req.left === 1) ctl.observe({ kind: "ok", tpotMs: req.sum / life });
      }
      for (const req of running) req.left--;
      running = running.filter((req) => req.left > 0);
      clock.advance(1000);
      ctl.tick();
      limits.push(ctl.limit);
    }
    return limits;
  }

  for (const [life, tpotAtEnd, bound] of [
    [4, false, 45],
    [16, true, 180],
  ] as const) {
    test(`requests of ${life} windows, TPOT ${tpotAtEnd ? "at the end" : "from chunk timing"}: converges and holds`, (t) => {
      const limits = spanning(life, tpotAtEnd, bound + 300);
      const reached = windowsToBand(limits);
      const steady = limits.slice(bound);
      t.diagnostic(`in band after ${reached} windows; steady range ${range(steady).join("..")}`);
      assert.ok(reached <= bound, `converged after ${reached} windows`);
      assert.ok(limits.slice(reached - 1).every(inBand), `range ${range(limits.slice(reached - 1))}`);
    });
  }
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

describe("AdaptiveLimit: a cold start far past the knee, answers many windows long", () => {
  /**
   * 64 clients' streams of `life` to `life` + 2 windows: each reports its pace every 5 windows
   * (the mean over them, span 5 s) and at its end the rest (span from its dispatch), as the
   * gateway's lease does. From the discovered 128 against a knee of 16, the first probe step
   * (64 -> 57) drains only when the first answers end, and the other answers that began at 64
   * end in the windows right after: their samples describe the old concurrency.
   */
  function streams(
    life: number | ((w: number) => number),
    windows: number,
    clients: (w: number) => number = () => 64,
    knee: (w: number) => number = () => KNEE,
  ): number[] {
    const clock = new ManualClock();
    const ctl = new AdaptiveLimit({ ...BOUNDS, initialCapacity: 128, ttftFloorMs: 0 }, clock);
    const r = prng(5);
    let running: Array<{ age: number; sum: number; marked: number; life: number }> = [];
    let started = 0;
    const limits: number[] = [];
    for (let w = 0; w < windows; w++) {
      const n = clients(w);
      while (running.length < ctl.limit && running.length < n) {
        running.push({
          age: 0,
          sum: 0,
          marked: 0,
          life: (typeof life === "number" ? life : life(w)) + (started++ % 3),
        });
      }
      ctl.sampleUsage(running.length, n - running.length);
      const f = loadFactor(worker({ knee: knee(w) }), running.length);
      for (const req of running) {
        req.sum += BASE_TPOT * f * (0.95 + 0.1 * r());
        req.age++;
        const span = (req.age - req.marked) * 1000;
        if (req.age === req.life || req.age - req.marked === 5) {
          const tpotMs = req.sum / (req.age - req.marked);
          ctl.observe({ kind: "ok", tpotMs, spanMs: req.age === req.life ? req.age * 1000 : span });
          req.sum = 0;
          req.marked = req.age;
        }
      }
      running = running.filter((req) => req.age < req.life);
      clock.advance(1000);
      ctl.tick();
      limits.push(ctl.limit);
    }
    return limits;
  }

  test("each step is judged by samples measured wholly after it took effect: the limit finds the knee", (t) => {
    const limits = streams(17, 400);
    const reached = windowsToBand(limits);
    t.diagnostic(`in band after ${reached} windows; then ${range(limits.slice(reached - 1)).join("..")}`);
    assert.ok(reached <= 200, `converged after ${reached} windows`);
    assert.ok(limits.slice(reached - 1).every(inBand), `range ${range(limits.slice(reached - 1))}`);
    assert.ok(
      limits.slice(20).every((l) => l < 64),
      "never back at the discovered capacity",
    );
  });

  test("a quiet start, then the flood: the limit climbs from what ran to the knee", (t) => {
    // 4 clients with answers of 1-3 windows for 30 windows (the cold start undoes its step to what
    // ran, not to the discovered 128), then 64 with answers of 17-19 windows: the limit climbs
    // while latency stays at its baseline, and stops at the knee.
    const limits = streams(
      (w) => (w < 30 ? 1 : 17),
      400,
      (w) => (w < 30 ? 4 : 64),
    );
    assert.ok(limits[29]! <= 8, `quiet: the limit is near what ran (${limits[29]})`);
    const flood = limits.slice(30);
    const reached = windowsToBand(flood);
    const out = flood.slice(reached - 1).filter((l) => !inBand(l)).length;
    t.diagnostic(
      `in band ${reached} windows into the flood; then ${range(flood.slice(reached - 1)).join("..")}, ${out} windows out (a re-probe's step)`,
    );
    assert.ok(reached <= 60, `converged ${reached} windows into the flood`);
    assert.ok(out <= 10, `${out} windows out of the band after it`);
  });

  test("a limit far past a knee that falls, answers many windows long: decreases without an increase between them start a probe that finds it", (t) => {
    // 100 clients with answers of 1-3 windows on a worker whose knee is far away (256) for 60
    // windows: the limit runs at about 100. Then the knee falls to 16 (a slower worker) and the
    // answers last 17-19 windows. Most windows carry no signal, and the baseline absorbs part of
    // the overload: before, neither stopped the count of decreases, the re-probe came only with
    // the 5-minute one, and its step, judged by answers begun at the old level, read as a loss:
    // 38-42 in flight for good over real HTTP (a worker with its knee at 16, TPOT 17x the quiet one).
    const limits = streams(
      (w) => (w < 60 ? 1 : 17),
      400,
      (w) => (w < 60 ? 100 : 64),
      (w) => (w < 60 ? 256 : KNEE),
    );
    assert.ok(limits[59]! >= 64, `healthy: the limit ran the demand (${limits[59]})`);
    const slow = limits.slice(60);
    const reached = windowsToBand(slow);
    t.diagnostic(
      `in band ${reached} windows after the knee fell; then ${range(slow.slice(reached - 1)).join("..")}`,
    );
    assert.ok(reached <= 150, `converged ${reached} windows after the knee fell`);
    assert.ok(slow.slice(reached - 1).every(inBand), `range ${range(slow.slice(reached - 1))}`);
  });
});

describe("AdaptiveLimit: cold-start probe steps", () => {
  /** One window: the in-flight level, then `n` TPOT samples (with a span when given). */
  function window(ctl: AdaptiveLimit, clock: ManualClock, inflight: number, tpotMs: number, spanMs?: number) {
    ctl.sampleUsage(inflight, 50);
    for (let i = 0; i < 10; i++) ctl.observe({ kind: "ok", tpotMs, spanMs });
    clock.advance(1000);
    return ctl.tick();
  }

  /** A cold start from 100 in flight: the ramp-up window, the reference window, the first step. */
  function firstStep(): { clock: ManualClock; ctl: AdaptiveLimit } {
    const clock = new ManualClock();
    const ctl = new AdaptiveLimit({ minCapacity: 1, maxCapacity: 256, initialCapacity: 100 }, clock);
    assert.equal(window(ctl, clock, 100, 100), "hold", "in flight rose from 0: no reference yet");
    window(ctl, clock, 100, 100);
    assert.equal(ctl.limit, 90, "the first step: 0.9");
    return { clock, ctl };
  }

  test("a step that raised the throughput (but not by a cliff's jump) makes the next one twice as deep", () => {
    const { clock, ctl } = firstStep();
    window(ctl, clock, 90, 80); // 90 / 80 against 100 / 100: +12.5%
    assert.equal(ctl.limit, 72, "two steps deep: floor(90 x 0.81)");
    window(ctl, clock, 72, 49); // +30%: a cliff, so one step again
    assert.equal(ctl.limit, 64);
    window(ctl, clock, 64, 60); // throughput -27%: the step is undone and the probe ends
    assert.equal(ctl.limit, 72);
    assert.equal(ctl.snapshot().phase, "tracking");
    assert.equal(ctl.snapshot().tpotBaselineMs, 60);
  });

  test("while steps cost nothing the next goes twice as deep, up to four steps; the first loss is undone", () => {
    const { clock, ctl } = firstStep();
    // Flat throughput (latency proportional to concurrency: a saturated worker).
    window(ctl, clock, 90, 90);
    assert.equal(ctl.limit, 72, "two steps: floor(90 x 0.81)");
    window(ctl, clock, 72, 72);
    assert.equal(ctl.limit, 47, "four steps: floor(72 x 0.6561)");
    window(ctl, clock, 47, 47);
    assert.equal(ctl.limit, 30, "still four: floor(47 x 0.6561)");
    window(ctl, clock, 30, 40); // under the knee: throughput 0.75 of the last level
    assert.equal(ctl.limit, 47, "the overshoot is undone");
    assert.equal(ctl.snapshot().phase, "tracking");
    assert.equal(ctl.snapshot().tpotBaselineMs, 40, "and its latency is the baseline");
    assert.equal(ctl.snapshot().probeSteps, 4);
  });

  test("a step takes effect when in flight is reported within the new limit, not at the end of that window", () => {
    const { clock, ctl } = firstStep();
    // 100 in flight, down to 90 400 ms into the window: rule 0 holds (the peak was above).
    ctl.sampleUsage(100, 50);
    clock.advance(400);
    ctl.sampleUsage(90, 50);
    clock.advance(600);
    assert.equal(ctl.tick(), "hold");
    // Reported now and measured over 0.5 s: began 100 ms after in flight reached 90, so it
    // judges the step (it began before the end of a window within the limit).
    window(ctl, clock, 90, 80, 500);
    assert.equal(ctl.limit, 72, "+12.5%: the next step, two deep");
    assert.equal(ctl.snapshot().staleSamples, 0);
  });

  test("after a step, samples whose measurement began before it took effect are dropped and counted", () => {
    const { clock, ctl } = firstStep();
    // Draining (in flight above the new limit): rule 0 holds whatever the samples say.
    assert.equal(window(ctl, clock, 100, 100, 500), "hold");
    // Drained in this window: samples reported during it began before, so they do not count.
    assert.equal(window(ctl, clock, 90, 300, 500), "hold");
    assert.equal(ctl.snapshot().staleSamples, 20);
    // A sample measured over 3 s now began before the settle; one over 0.5 s did not.
    window(ctl, clock, 90, 300, 3000);
    assert.equal(ctl.limit, 90, "the stale overload does not count");
    window(ctl, clock, 90, 80, 500);
    assert.equal(ctl.limit, 72, "the fresh samples judge the step (+12.5%: two deep)");
    assert.equal(ctl.snapshot().staleSamples, 30);
    // A sample without a span (a caller that cannot tell) always counts.
    window(ctl, clock, 72, 49);
    assert.equal(ctl.limit, 64);
  });
});

describe("AdaptiveLimit: increases", () => {
  /** From 40 under a knee of 200, demand far above: the limits, window by window. */
  const climb = (options: Partial<AdaptiveLimitOptions>) => {
    const sim = new Sim({ initialCapacity: 40, ...options }, worker({ knee: 200 }));
    sim.demand = 1000;
    return [sim.ctl.limit, ...sim.run(20)];
  };
  /** Each window's increase after the cold start's probe (the first three windows). */
  const increases = (limits: number[]) => limits.slice(3, -1).map((l, i) => [l, limits[i + 4]! - l]);

  test("latency at its baseline: each increase is 5% (at least 1)", () => {
    for (const [limit, step] of increases(climb({}))) {
      assert.equal(step, Math.max(1, Math.floor(limit! * 0.05)), `from ${limit}`);
    }
  });

  test("latency well under its reference: after the first increase, each is twice the step", () => {
    // tpot_slo_ms 40 puts the reference at 1.5 x the 20 ms baseline: TPOT reads 0.7 of it.
    const steps = increases(climb({ tpotSloMs: 40 }));
    assert.deepEqual(steps[0], [40, 2], "the first increase of a climb is 5%");
    for (const [limit, step] of steps.slice(1)) {
      assert.equal(step, Math.max(2, Math.floor(limit! * 0.1)), `from ${limit}`);
    }
  });
});

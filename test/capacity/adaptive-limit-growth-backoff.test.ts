import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { AdaptiveLimit, type AdaptiveLimitOptions } from "../../src/capacity/adaptive-limit.js";
import { BOUNDS, KNEE, Sim, worker } from "./adaptive-sim.js";

// The adaptive limit's growth and backoff outside the SLO rules: slots held back by reservations,
// overload outcomes, and the size of each increase.

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

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import { type AdaptiveDecision, AdaptiveLimit } from "../../src/capacity/adaptive-limit.js";
import { BASE_TPOT, BOUNDS, inBand, loadFactor, range, Sim, windowsToBand, worker } from "./adaptive-sim.js";

// The adaptive limit's windows and samples: bounded memory, window closing, carry-over, determinism, and
// requests that span windows.

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

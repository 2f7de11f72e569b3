import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { AdaptiveDecision } from "../../src/capacity/adaptive-limit.js";
import { BASE_TPOT, inBand, LOW, range, Sim, windowsToBand, worker } from "./adaptive-sim.js";

// The adaptive limit over long runs of worker slowdown and incidents, with and without SLOs.

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

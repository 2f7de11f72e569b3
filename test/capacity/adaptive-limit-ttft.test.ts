import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { AdaptiveLimit, TTFT_BUCKET_BOUNDS, ttftBucketOf } from "../../src/capacity/adaptive-limit.js";
import { BOUNDS, HIGH, inBand, LOW, longPrompt, range, Sim, shortPrompt } from "./adaptive-sim.js";

// The adaptive limit's TTFT signal: buckets by prompt length, samples without a TPOT, the noise floor.

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

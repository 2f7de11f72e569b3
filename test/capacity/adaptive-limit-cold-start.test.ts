import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import { type AdaptiveBoundEvent, AdaptiveLimit } from "../../src/capacity/adaptive-limit.js";
import {
  BASE_TPOT,
  BOUNDS,
  inBand,
  KNEE,
  loadFactor,
  range,
  Sim,
  windowsToBand,
  worker,
} from "./adaptive-sim.js";

// The adaptive limit's cold start: from the reported capacity to the knee, its probe steps, and answers
// that span many windows.

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

/**
 * Both shedders at once (issue 35, item 14): in a class under keyed shedding, the prioritizer's
 * fractional cut and the keyed percentage go by the same key order, so a session is let in or
 * refused whole, and the two cuts do not multiply (the stricter one wins). Manual clock, no timers.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { keyBucket } from "@sluice/scheduler/shedding/keyed-admission.js";
import fc from "fast-check";
import { LoadShedding } from "../../src/shedding/load-shedding.js";

const START = Date.UTC(2026, 10, 27, 12);
const ROTATION_MS = 3_600_000;

/**
 * A LoadShedding with both shedders, calibrated for `seconds` seconds in which `completions` were
 * served a second, `queued` requests of tenant acme's default class waited, `arrivals` arrived
 * (a session each) and the keyed classes' waits were `delayMs`.
 */
function calibrated(opts: {
  seconds: number;
  completions: number;
  queued: number;
  arrivals: number;
  delayMs: number;
}): { shedding: LoadShedding; clock: ManualClock } {
  const clock = new ManualClock(START);
  const shedding = new LoadShedding(
    {
      prioritized: { maxQueueWaitMs: 1000 },
      keyed: { classes: ["default"], targetDelayMs: 1000, rotationWindowMs: ROTATION_MS },
    },
    clock,
  );
  shedding.queue("default", "acme", opts.queued);
  for (let s = 0; s < opts.seconds; s++) {
    for (let i = 0; i < opts.completions; i++) shedding.prioritizer!.recordCompletion();
    for (let i = 0; i < opts.arrivals; i++) shedding.check("default", "acme", `warm-${s}-${i}`);
    shedding.queueWait("default", opts.delayMs);
    clock.advance(1000);
    shedding.calibrate();
  }
  return { shedding, clock };
}

/** The share of the level's arrivals the prioritizer lets in at its threshold (1: all). */
function admittedShare(threshold: number, level: number): number {
  const whole = Math.floor(threshold);
  if (level < whole) return 0;
  if (level >= whole + 1 || threshold === whole) return 1;
  return 1 - (threshold - whole);
}

describe("prioritized and keyed shedding together", () => {
  test("every session is let in or refused whole, and the admitted share is the stricter cut, not the product", () => {
    // 20 served a second, 25 queued (1.25 s past a 1 s bound), 30 arrivals a second: the
    // prioritizer admits half of acme's level; waits of 3 s cut the keyed percentage.
    const { shedding, clock } = calibrated({
      seconds: 3,
      completions: 20,
      queued: 25,
      arrivals: 30,
      delayMs: 3000,
    });
    const p = shedding.prioritizer!;
    const keyed = shedding.keyed!;
    const level = p.level("default", "acme");
    const a = admittedShare(p.threshold, level);
    const k = keyed.percent / 100;
    assert.ok(a > 0.2 && a < 0.9, `prioritizer admits ${a} (threshold ${p.threshold}, level ${level})`);
    assert.ok(k > 0.2 && k < 0.95, `keyed admits ${k}`);

    const sessions = Array.from({ length: 400 }, (_, i) => `session-${i}`);
    const verdicts = new Map<string, boolean[]>();
    // Five requests per session, interleaved, all inside one calibration period.
    for (let round = 0; round < 5; round++) {
      for (const s of sessions) {
        const v = shedding.check("default", "acme", s);
        const list = verdicts.get(s) ?? [];
        list.push(v.shed);
        verdicts.set(s, list);
      }
      clock.advance(100);
    }
    const mixed = [...verdicts].filter(([, v]) => v.some((x) => x) && v.some((x) => !x)).map(([s]) => s);
    assert.deepEqual(mixed, [], "sessions with mixed answers inside one window");

    // The admitted sessions are exactly those whose bucket is under the stricter cut.
    const window = Math.floor(clock.epochMs() / ROTATION_MS);
    const cut = Math.min(a, k) * 10_000;
    for (const s of sessions) {
      const expectShed = keyBucket(s, window) >= cut;
      assert.equal(verdicts.get(s)![0], expectShed, `${s}: bucket ${keyBucket(s, window)} against ${cut}`);
    }
    const admitted = sessions.filter((s) => !verdicts.get(s)![0]).length / sessions.length;
    assert.ok(
      Math.abs(admitted - Math.min(a, k)) < 0.07,
      `admitted ${admitted.toFixed(3)}: min ${Math.min(a, k).toFixed(3)}, product ${(a * k).toFixed(3)}`,
    );
  });

  test("property: with any calibration, a session's answers inside a calibration period never differ", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 60 }),
        fc.integer({ min: 0, max: 200 }),
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 0, max: 6000 }),
        fc.array(fc.string({ minLength: 1, maxLength: 12 }), { minLength: 1, maxLength: 30 }),
        (seconds, completions, queued, arrivals, delayMs, sessions) => {
          const { shedding } = calibrated({ seconds, completions, queued, arrivals, delayMs });
          for (const s of sessions) {
            const first = shedding.check("default", "acme", s).shed;
            for (let i = 0; i < 3; i++) assert.equal(shedding.check("default", "acme", s).shed, first, s);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  test("a class outside keyed shedding keeps the prioritizer's evenly spread draw", () => {
    const clock = new ManualClock(START);
    const shedding = new LoadShedding(
      { prioritized: { maxQueueWaitMs: 1000 }, keyed: { classes: ["default"], targetDelayMs: 1000 } },
      clock,
    );
    shedding.queue("bulk", "acme", 25);
    for (let i = 0; i < 20; i++) shedding.prioritizer!.recordCompletion();
    for (let i = 0; i < 30; i++) shedding.check("bulk", "acme", "one-session");
    clock.advance(1000);
    shedding.calibrate();
    const t = shedding.prioritizer!.threshold;
    assert.ok(t > 99 && t < 100, `threshold ${t}`);
    // One session, many requests: bulk is not keyed, so its refusals are spread over them.
    const shed = Array.from({ length: 100 }, () => shedding.check("bulk", "acme", "one-session").shed);
    const refused = shed.filter(Boolean).length;
    assert.ok(refused > 10 && refused < 90, `${refused} of 100 refused`);
  });
});

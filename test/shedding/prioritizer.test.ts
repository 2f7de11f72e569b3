/** Prioritized shedding: class-major levels, heavy users first, a threshold from the queue's levels. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { Prioritizer, SYSTEM_LEVEL } from "@sluice/scheduler/shedding/prioritizer.js";
import fc from "fast-check";

const CLASSES: PriorityClass[] = ["bulk", "default", "interactive", "system"];

/** One second of `completions` completions, then a calibration over `queued`. */
function second(
  p: Prioritizer,
  clock: ManualClock,
  completions: number,
  queued: Array<{ level: number; count: number }>,
) {
  for (let i = 0; i < completions; i++) p.recordCompletion();
  clock.advance(1000);
  p.calibrate(queued);
}

describe("levels", () => {
  test("class-major, and inside a class the heaviest recent users are lowest", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ maxQueueWaitMs: 1000 }, clock);
    p.recordUsage("bulk", "etl", 90_000);
    p.recordUsage("bulk", "small", 1_000);
    p.calibrate([]);
    const etl = p.level("bulk", "etl");
    const small = p.level("bulk", "small");
    const unknown = p.level("bulk", "new-tenant");
    assert.equal(etl, 0);
    assert.ok(small > etl && small < 100);
    assert.equal(unknown, 99);
    assert.ok(p.level("default", "etl") >= 100 && p.level("default", "etl") < 200);
    assert.equal(p.level("system", "etl"), SYSTEM_LEVEL + 99);
  });

  test("usage decays with its half-life: yesterday's heavy user is light today", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ maxQueueWaitMs: 1000, usageHalfLifeMs: 10_000 }, clock);
    p.recordUsage("default", "old", 100_000);
    clock.advance(100_000); // ten half-lives: 100,000 -> ~98
    p.recordUsage("default", "new", 10_000);
    p.calibrate([]);
    assert.ok(p.level("default", "old") > p.level("default", "new"));
  });
});

describe("calibration", () => {
  test("a short predicted wait sheds nothing", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ maxQueueWaitMs: 2000 }, clock);
    second(p, clock, 10, [{ level: 50, count: 15 }]); // 15 queued at 10/s: 1.5 s
    assert.equal(p.threshold, 0);
    assert.equal(p.shouldShed("bulk", 0), false);
  });

  test("a long predicted wait sheds the lowest levels, keeping what fits in the bound", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ maxQueueWaitMs: 2000 }, clock);
    // 10/s for 2 s fits 20: interactive 8 + default 10 fit, bulk 30 does not.
    second(p, clock, 10, [
      { level: 250, count: 8 },
      { level: 150, count: 10 },
      { level: 40, count: 30 },
    ]);
    assert.equal(p.threshold, 41);
    assert.equal(p.shouldShed("bulk", 40), true);
    assert.equal(p.shouldShed("bulk", 41), false);
    assert.equal(p.shouldShed("default", 150), false);
    assert.ok(p.retryAfterSecs("bulk") >= 1 && p.retryAfterSecs("bulk") <= 60);
    assert.equal(p.status().shed, 1);
  });

  test("a class is shed only after a period that refused every class below it", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ maxQueueWaitMs: 1000 }, clock);
    const overloaded = () => {
      for (let i = 0; i < 20; i++) p.shouldShed("interactive", 250);
      for (let i = 0; i < 50; i++) p.shouldShed("bulk", 40);
      // 10/s for 2 s fits 20: interactive alone (5 queued, 20 arriving) does not fit.
      second(p, clock, 10, [
        { level: 250, count: 5 },
        { level: 40, count: 30 },
      ]);
    };
    overloaded();
    assert.equal(p.threshold, 200, "first every bulk and default level");
    assert.equal(p.shouldShed("interactive", 250), false);
    assert.equal(p.shouldShed("default", 199), true);
    overloaded();
    // 21 interactive arrivals this period (the one just let in counts): 15 of them fit.
    assert.equal(p.threshold, 251 - 15 / 21, "then a fraction of the interactive level");
    // With nothing below to shed, the first calibration goes straight into the class.
    const rc = new ManualClock(0);
    const r = new Prioritizer({ maxQueueWaitMs: 1000 }, rc);
    for (let i = 0; i < 20; i++) r.shouldShed("interactive", 250);
    second(r, rc, 10, [{ level: 250, count: 15 }]); // 1.5 s of queue: shedding starts
    assert.equal(r.threshold, 250.75, "5 of the 20 arrivals fit");
  });

  test("system is never shed, even with nothing served and everything queued", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ maxQueueWaitMs: 100 }, clock);
    second(p, clock, 0, [
      { level: 399, count: 1000 },
      { level: 250, count: 10 },
    ]);
    assert.equal(p.threshold, SYSTEM_LEVEL);
    assert.equal(p.shouldShed("system", 300), false);
    assert.equal(p.shouldShed("interactive", 299), true);
    assert.equal(p.status().predictedWaitMs, -1);
  });

  test("property: no interactive request is shed while any bulk or default level is admitted", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ level: fc.integer({ min: 0, max: 399 }), count: fc.integer({ min: 0, max: 500 }) }),
          {
            maxLength: 30,
          },
        ),
        fc.integer({ min: 0, max: 200 }),
        fc.integer({ min: 1, max: 10_000 }),
        fc.array(
          fc.record({ level: fc.integer({ min: 0, max: 299 }), count: fc.integer({ min: 0, max: 300 }) }),
          {
            maxLength: 10,
          },
        ),
        (queued, rate, maxWait, arrivals) => {
          const clock = new ManualClock(0);
          const p = new Prioritizer({ maxQueueWaitMs: maxWait }, clock);
          // A first second that starts shedding (a long queue, nothing served), then one with arrivals.
          second(p, clock, 0, [{ level: 299, count: 1 }]);
          for (const a of arrivals) for (let i = 0; i < a.count; i++) p.shouldShed("bulk", a.level);
          second(p, clock, rate, queued);
          const t = p.threshold;
          assert.ok(t >= 0 && t <= SYSTEM_LEVEL, `threshold ${t}`);
          // Every level under the threshold's whole part is refused, every level above it admitted:
          // class-major, so interactive (200+) is refused only once every bulk and default level is.
          const whole = Math.floor(t);
          for (const level of [0, 99, 100, 199, 200, 299]) {
            if (level < whole) assert.equal(p.shouldShed("bulk", level), true, `level ${level} under ${t}`);
            if (level > whole) assert.equal(p.shouldShed("bulk", level), false, `level ${level} over ${t}`);
          }
          if (t > 200) for (let level = 0; level < 200; level++) assert.ok(level < whole);
          for (const cls of CLASSES) if (cls === "system") assert.equal(p.shouldShed(cls, 399), false);
        },
      ),
      { numRuns: 300, seed: 3 },
    );
  });
});

describe("one tenant, one level: the threshold refuses a fraction of it", () => {
  /**
   * 64 arrivals a second at one level (one tenant in one class) against 10 completions a second:
   * a whole-level threshold could only refuse all of them or none, a second of each, and every
   * open second queued 64 requests for six seconds of service. The fraction keeps the admitted
   * rate at the completions and the wait near its bound.
   */
  test("the admitted rate follows the completions; the queue stays near its bound", () => {
    const clock = new ManualClock(0);
    const maxQueueWaitMs = 1000;
    const p = new Prioritizer({ maxQueueWaitMs }, clock);
    const level = p.level("interactive", "chat");
    let queue = 0;
    const admittedPerSecond: number[] = [];
    const queues: number[] = [];
    for (let s = 0; s < 60; s++) {
      let admitted = 0;
      for (let i = 0; i < 64; i++) if (!p.shouldShed("interactive", level)) admitted++;
      queue = Math.max(0, queue + admitted - 10);
      admittedPerSecond.push(admitted);
      queues.push(queue);
      for (let i = 0; i < 10; i++) p.recordCompletion();
      clock.advance(1000);
      p.calibrate([{ level, count: queue }]);
    }
    const settled = admittedPerSecond.slice(10);
    assert.ok(
      settled.every((a) => a > 0 && a < 64),
      `a fraction every second, never all or none: ${settled.join(",")}`,
    );
    const mean = settled.reduce((x, y) => x + y, 0) / settled.length;
    assert.ok(mean > 8 && mean < 12, `admitted ${mean.toFixed(1)}/s against 10 completions/s`);
    // The queue holds at most what the bound and one second of service allow (20 here).
    assert.ok(Math.max(...queues.slice(10)) <= 20, `queue ${queues.slice(10).join(",")}`);
    const t = p.threshold;
    assert.ok(t > level && t < level + 1, `threshold ${t} inside the level`);
  });

  test("a burst that leaves a short queue sheds nothing; an empty queue sheds nothing", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ maxQueueWaitMs: 1000 }, clock);
    const level = p.level("interactive", "chat");
    for (let i = 0; i < 500; i++) p.shouldShed("interactive", level);
    second(p, clock, 10, [{ level, count: 5 }]); // 0.5 s of queue, 500 arrivals: within the bound
    assert.equal(p.threshold, 0);
    for (let i = 0; i < 500; i++) p.shouldShed("interactive", level);
    second(p, clock, 10, [{ level, count: 50 }]); // 5 s: shed, by the arrivals' forecast
    assert.ok(p.threshold > level, `threshold ${p.threshold}`);
    second(p, clock, 10, []);
    assert.equal(p.threshold, 0, "nothing waits: the slots took every arrival");
  });
});

describe("CoDel-style sojourn check", () => {
  test("a class whose smallest wait stays above target for an interval is shed, then released", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer(
      { maxQueueWaitMs: 60_000, codelClasses: ["bulk"], codelTargetMs: 500, codelIntervalMs: 1000 },
      clock,
    );
    for (let t = 0; t < 10; t++) {
      p.recordQueueWait("bulk", 800 + t);
      clock.advance(110);
    }
    assert.equal(p.shouldShed("bulk", 99), true, "every wait above target for a whole interval");
    assert.equal(p.shouldShed("default", 199), false, "default is not marked sheddable");
    for (let t = 0; t < 10; t++) {
      p.recordQueueWait("bulk", t === 3 ? 100 : 900);
      clock.advance(110);
    }
    assert.equal(p.shouldShed("bulk", 99), false, "one wait under target in the interval releases it");
    assert.deepEqual(p.status().codelShedding, []);
  });

  test("bad settings name their key; system cannot be sheddable", () => {
    const clock = new ManualClock(0);
    assert.throws(
      () => new Prioritizer({ maxQueueWaitMs: 0 }, clock),
      (err: unknown) => err instanceof ConfigError && /load_shedding.max_queue_wait_ms/.test(err.message),
    );
    assert.throws(
      () => new Prioritizer({ maxQueueWaitMs: 1, codelClasses: ["system"] }, clock),
      /codel_classes/,
    );
    assert.throws(() => new Prioritizer({ maxQueueWaitMs: 1, codelTargetMs: -1 }, clock), /codel_target_ms/);
  });
});

test("CoDel: a class shed whole (no waits at all in an interval) is let in again", () => {
  const clock = new ManualClock(0);
  const p = new Prioritizer(
    { maxQueueWaitMs: 60_000, codelClasses: ["bulk"], codelTargetMs: 500, codelIntervalMs: 1000 },
    clock,
  );
  for (let t = 0; t < 11; t++) {
    p.recordQueueWait("bulk", 900);
    clock.advance(100);
  }
  assert.equal(p.shouldShed("bulk", 99), true);
  // The interval in progress holds one more 900 ms wait: still shedding when it closes.
  clock.advance(1100);
  assert.equal(p.shouldShed("bulk", 99), true);
  // Everything of the class is shed now, so the next interval records no wait at all.
  clock.advance(1100);
  assert.equal(p.shouldShed("bulk", 99), false);
});

describe("a wait bound per class (each class's queue_timeout: adaptive mode's default)", () => {
  const TIMEOUTS = { system: 30_000, interactive: 30_000, default: 60_000, bulk: 300_000 };

  test("each class is shed only once its own predicted wait passes its bound", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ classWaitMs: TIMEOUTS }, clock);
    // 10 completions/s: 500 default requests queued wait 50 s (under 60), the 2,000 bulk ones
    // behind them 250 s (under 300). Nothing is shed.
    const queue = [
      { level: 150, count: 500 },
      { level: 50, count: 2000 },
    ];
    second(p, clock, 10, queue);
    assert.equal(p.threshold, 0);
    // 3,000 bulk: 350 s behind the default queue, past its 300 s. Bulk levels go; default stays.
    queue[1]!.count = 3000;
    second(p, clock, 10, queue);
    assert.ok(p.threshold > 0 && p.threshold <= 100, `threshold ${p.threshold}`);
    assert.equal(p.shouldShed("default", 150), false);
    // A single bound of 60 s sheds bulk at the first reading (250 s).
    const c2 = new ManualClock(0);
    const s2 = new Prioritizer({ maxQueueWaitMs: 60_000 }, c2);
    second(s2, c2, 10, [
      { level: 150, count: 500 },
      { level: 50, count: 2000 },
    ]);
    assert.ok(s2.threshold > 0, "one bound for all sheds bulk at 250 s");
    assert.equal(s2.status().boundsMs.bulk, 60_000);
    assert.deepEqual(p.status().boundsMs, TIMEOUTS);
  });

  test("nothing completed yet: a class is refused once the queue has stood its bound, not before", () => {
    const clock = new ManualClock(0);
    const p = new Prioritizer({ classWaitMs: { ...TIMEOUTS, bulk: 5_000 } }, clock);
    // Idle for a minute: the queue that forms now has no history.
    for (let i = 0; i < 60; i++) second(p, clock, 0, []);
    const queue = [{ level: 150, count: 3 }];
    for (let s = 1; s < 5; s++) {
      second(p, clock, 0, queue);
      assert.equal(p.threshold, 0, `${s} s without a completion`);
    }
    // Five seconds without a completion: bulk (bound 5 s) is refused, default (60 s) still queues.
    second(p, clock, 0, queue);
    assert.equal(p.threshold, 100);
    assert.equal(p.shouldShed("bulk", 99), true);
    assert.equal(p.shouldShed("default", 150), false);
    assert.equal(p.retryAfterSecs("bulk"), 20, "no forecast: four times the class's bound");
  });

  test("a class bound must be > 0, named by the class's key", () => {
    assert.throws(
      () => new Prioritizer({ classWaitMs: { ...TIMEOUTS, default: 0 } }, new ManualClock(0)),
      /classes\.default\.queue_timeout_secs/,
    );
    assert.throws(() => new Prioritizer({}, new ManualClock(0)), /load_shedding\.max_queue_wait_ms/);
  });
});

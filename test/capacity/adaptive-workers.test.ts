/**
 * AdaptiveCapacity with a worker list: one controller per worker, the pool's capacity their sum
 * (clamped to the bounds), each worker's limit written where routing reads it, and a pin that
 * lifts them; and the pool-wide controller's idle rule. Fake workers and a ManualClock: every
 * window is closed by hand.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import type { ClassSnapshot } from "@sluice/scheduler/core/events.js";
import { AdaptiveCapacity, type AdaptiveWorker, heldBackOf } from "../../src/capacity/adaptive.js";
import { CONTROLLER } from "../../src/capacity/adaptive-limit.js";
import { PinnableCapacity } from "../../src/capacity/pinned.js";
import { CapacityNotifier, type CapacitySource } from "../../src/contracts/capacity-source.js";

function fakeWorker(url: string, capacity: number): AdaptiveWorker & { inflight: number } {
  return { url, availableCapacity: capacity, inflight: 0, adaptiveLimit: undefined };
}

function setup(options: { min?: number; max?: number } = {}) {
  const clock = new ManualClock(0);
  const workers = [fakeWorker("http://a", 32), fakeWorker("http://b", 32)];
  const healthy = { list: workers as AdaptiveWorker[] };
  const notifier = new CapacityNotifier();
  const discovered: CapacitySource = {
    get capacity() {
      return healthy.list.reduce((s, w) => s + w.availableCapacity, 0);
    },
    subscribe: (listener) => notifier.subscribe(listener),
  };
  const adaptive = new AdaptiveCapacity(
    discovered,
    { minCapacity: options.min, maxCapacity: options.max, tpotSloMs: 20, workers: () => healthy.list },
    clock,
  );
  /** One window: each worker runs at its limit; `tpot(w, c)` gives its time per token at c. */
  const window = (tpot: (w: number, c: number) => number) => {
    workers.forEach((w, i) => {
      w.inflight = Math.min(w.adaptiveLimit ?? w.availableCapacity, w.availableCapacity);
      adaptive.dispatched();
      for (let k = 0; k < 20; k++) {
        adaptive.sample(
          { kind: "ok", tpotMs: tpot(i, w.inflight) * (0.98 + (0.04 * ((k * 7) % 10)) / 10) },
          w.url,
        );
      }
    });
    adaptive.queued(0);
    clock.advance(1000);
    adaptive.closeWindow();
  };
  return { clock, workers, healthy, notifier, adaptive, window };
}

/** TPOT 10 ms up to the knee, then +100% per extra request. */
const kneeAt = (knee: number) => (c: number) => (c <= knee ? 10 : 10 * (1 + (c - knee)));

describe("AdaptiveCapacity with one controller per worker", () => {
  test("cold start: each worker's limit is a quarter of its report, the pool's their sum", () => {
    const { adaptive, workers } = setup();
    assert.equal(adaptive.capacity, 16, "the pool starts at 8 + 8");
    assert.deepEqual(
      workers.map((w) => w.adaptiveLimit),
      [8, 8],
      "each worker's limit starts at a quarter of its report",
    );
    assert.deepEqual(
      adaptive.snapshot().workers.map((w) => [w.worker, w.limit]),
      [
        ["http://a", 8],
        ["http://b", 8],
      ],
      "the snapshot lists both",
    );
  });

  test("a worker with a lower knee gets a lower limit; the pool's capacity is the sum", () => {
    const { adaptive, workers, window } = setup();
    const knees = [8, 3];
    for (let i = 0; i < 60; i++) window((w, c) => kneeAt(knees[w]!)(c));
    const [a, b] = workers.map((w) => w.adaptiveLimit!);
    assert.ok(a! > b!, `fast ${a}, slow ${b}`);
    assert.ok(b! <= 5, `the slow worker's limit ${b} is near its knee of 3`);
    assert.ok(a! >= 6 && a! <= 12, `the fast worker's limit ${a} is near its knee of 8`);
    assert.equal(adaptive.capacity, a! + b!, `capacity ${adaptive.capacity} = ${a} + ${b}`);
  });

  test("the pool's capacity is clamped to adaptive_min_capacity and adaptive_max_capacity", () => {
    const low = setup({ min: 20 });
    for (let i = 0; i < 60; i++) low.window((_w, c) => kneeAt(2)(c));
    // The floor is shared by report: each worker holds at least 10 where its knee (2) is lower.
    assert.deepEqual(
      low.workers.map((w) => w.adaptiveLimit),
      [10, 10],
      "each worker sits at its share of the floor",
    );
    assert.equal(low.adaptive.capacity, 20, "the pool holds its floor");
    const high = setup({ max: 40 });
    for (let i = 0; i < 60; i++) high.window(() => 10);
    assert.equal(high.adaptive.capacity, 40, "TPOT never rises: the pool's limit stops at the ceiling");
    assert.deepEqual(
      high.workers.map((w) => w.adaptiveLimit),
      [32, 32],
      "each worker stops at its own report",
    );
  });

  test("a pin lifts the workers' limits, unpinning puts them back", () => {
    const { adaptive, workers, window } = setup();
    for (let i = 0; i < 60; i++) window((_w, c) => kneeAt(4)(c));
    const before = workers.map((w) => w.adaptiveLimit);
    assert.ok(
      before.every((l) => l !== undefined && l < 32),
      `limits ${before}`,
    );
    const pinnable = new PinnableCapacity(adaptive);
    pinnable.setPin(60);
    assert.equal(pinnable.capacity, 60);
    assert.deepEqual(
      workers.map((w) => w.adaptiveLimit),
      [undefined, undefined],
      "under a pin, routing bounds each worker by its report alone",
    );
    pinnable.setPin(undefined);
    assert.deepEqual(
      workers.map((w) => w.adaptiveLimit),
      before,
      "unpinned: the limits are back",
    );
  });

  test("reservations are sized at the fleet's size: the healthy workers' reports, under the max; a pin is its own", () => {
    const { adaptive, workers, window, healthy, notifier } = setup();
    const told: Array<[number, number | undefined]> = [];
    const pinnable = new PinnableCapacity(adaptive);
    pinnable.subscribe((c) => told.push([c, pinnable.reservedAt]));
    for (let i = 0; i < 60; i++) window((_w, c) => kneeAt(4)(c));
    assert.ok(adaptive.capacity < 64, `limit ${adaptive.capacity}`);
    assert.equal(adaptive.reservedAt, 64);
    assert.ok(told.length > 0 && told.every(([, at]) => at === 64), JSON.stringify(told));
    pinnable.setPin(20);
    assert.equal(pinnable.reservedAt, undefined, "a pin is the fleet's size");
    pinnable.setPin(undefined);
    assert.equal(pinnable.reservedAt, 64);
    // A worker leaves: the size is what the healthy ones report, and the listeners hear of it.
    told.length = 0;
    healthy.list = [workers[0]!];
    notifier.changed(32);
    assert.equal(adaptive.reservedAt, 32);
    assert.deepEqual(told.at(-1), [adaptive.capacity, 32]);
    const bounded = setup({ max: 40 });
    assert.equal(bounded.adaptive.reservedAt, 40, "adaptive_max_capacity bounds the size too");
  });

  test("heldBackOf: the unused reservations above the first class in line", () => {
    const cls = (reserved: number, inflight: number, queued: number): ClassSnapshot => ({
      reserved,
      inflight,
      queued,
      queueLimit: 100,
      headroom: 0,
      capacityPressure: 0,
    });
    const classes = (
      system: ClassSnapshot,
      interactive: ClassSnapshot,
      dflt: ClassSnapshot,
      bulk: ClassSnapshot,
    ): Record<PriorityClass, ClassSnapshot> => ({ system, interactive, default: dflt, bulk });
    // default waits: system's 4 unused and interactive's 16 - 6.
    assert.equal(heldBackOf(classes(cls(4, 0, 0), cls(16, 6, 0), cls(2, 3, 9), cls(0, 0, 5))), 14);
    // interactive waits (bulk too, behind it): only system's.
    assert.equal(heldBackOf(classes(cls(4, 1, 0), cls(16, 16, 2), cls(2, 0, 0), cls(0, 0, 5))), 3);
    // A class running past its reservation holds nothing back.
    assert.equal(heldBackOf(classes(cls(4, 9, 0), cls(16, 20, 0), cls(2, 0, 1), cls(0, 0, 0))), 0);
    assert.equal(
      heldBackOf(classes(cls(4, 0, 0), cls(16, 0, 0), cls(2, 0, 0), cls(0, 0, 0))),
      0,
      "none waits",
    );
    assert.equal(heldBackOf(null), 0, "legacy admission");
  });

  test("a worker that leaves takes its limit out of the pool's capacity at once", () => {
    const { adaptive, healthy, workers, notifier } = setup();
    const seen: number[] = [];
    adaptive.subscribe((c) => seen.push(c));
    healthy.list = [workers[0]!];
    notifier.changed(32);
    assert.equal(adaptive.capacity, 8, "only the remaining worker counts");
    assert.deepEqual(seen, [8], "listeners hear it");
  });

  test("samples without a known worker are dropped, not charged to another", () => {
    const { adaptive } = setup();
    adaptive.sample({ kind: "ok", tpotMs: 500 }, "http://unknown");
    adaptive.sample({ kind: "ok", tpotMs: 500 });
    assert.equal(adaptive.snapshot().storedSamples, 0, "no controller kept them");
  });

  test("dispatched(worker) samples that worker: a peak between two closes counts; the queue's peak too", () => {
    const { adaptive, workers, window, clock } = setup();
    for (let i = 0; i < 60; i++) window((_, c) => kneeAt(8)(c));
    const [a, b] = workers;
    // An idle window: what ran above a limit the last window lowered has drained.
    for (const w of workers) w.inflight = 0;
    clock.advance(1000);
    adaptive.closeWindow();
    const before = [a!.adaptiveLimit!, b!.adaptiveLimit!];
    assert.ok(
      before.every((l) => l < 16),
      `both settle near the knee of 8: ${before}`,
    );
    // One window at the baseline's latency. a runs at its limit only between dispatches (its
    // count is back to 0 at the close); b is never dispatched to, but a queue builds, is still
    // waiting when a slot is released, and drains.
    a!.inflight = a!.adaptiveLimit!;
    adaptive.dispatched(a!.url);
    a!.inflight = 0;
    adaptive.inflight(1);
    adaptive.queued(5);
    adaptive.inflight(-1);
    adaptive.queued(-5);
    for (const w of workers)
      for (let k = 0; k < CONTROLLER.minSamples; k++) adaptive.sample({ kind: "ok", tpotMs: 10 }, w.url);
    clock.advance(1000);
    adaptive.closeWindow();
    assert.ok(a!.adaptiveLimit! > before[0]!, `a was in use: ${before[0]} -> ${a!.adaptiveLimit}`);
    assert.ok(
      b!.adaptiveLimit! > before[1]!,
      `the queue kept b's limit in use: ${before[1]} -> ${b!.adaptiveLimit}`,
    );
    // The next window sees neither: a's peak and the queue's went with the close.
    for (const w of workers)
      for (let k = 0; k < CONTROLLER.minSamples; k++) adaptive.sample({ kind: "ok", tpotMs: 10 }, w.url);
    const after = [a!.adaptiveLimit!, b!.adaptiveLimit!];
    clock.advance(1000);
    adaptive.closeWindow();
    assert.deepEqual([a!.adaptiveLimit!, b!.adaptiveLimit!], after, "an idle limit does not grow");
  });

  test("requests let in at once pass through the queue without making an idle limit grow", () => {
    const { adaptive, workers, window, clock } = setup();
    for (let i = 0; i < 60; i++) window((_, c) => kneeAt(8)(c));
    for (const w of workers) w.inflight = 0;
    clock.advance(1000);
    adaptive.closeWindow();
    const before = workers.map((w) => w.adaptiveLimit!);
    // Windows of light load at the baseline's latency: each request enters the queue, is admitted
    // at once (in flight, then out of the queue, as the gateway and the simulator do), runs one
    // at a time on worker a, and is released before the next arrives.
    for (let win = 0; win < 5; win++) {
      for (let r = 0; r < 20; r++) {
        adaptive.queued(1);
        adaptive.inflight(1);
        adaptive.queued(-1);
        workers[0]!.inflight = 1;
        adaptive.dispatched(workers[0]!.url);
        adaptive.sample({ kind: "ok", tpotMs: 10 }, workers[0]!.url);
        workers[0]!.inflight = 0;
        adaptive.inflight(-1);
      }
      for (let k = 0; k < 20; k++) adaptive.sample({ kind: "ok", tpotMs: 10 }, workers[1]!.url);
      clock.advance(1000);
      adaptive.closeWindow();
    }
    assert.deepEqual(
      workers.map((w) => w.adaptiveLimit!),
      before,
      "no window had queued work or an in-flight peak near a limit",
    );
    assert.equal(adaptive.snapshot().queued, 0);
  });
});

describe("AdaptiveCapacity with one controller for the pool", () => {
  test("requests let in at once do not make an idle limit grow; requests that wait do", () => {
    const clock = new ManualClock(0);
    const discovered: CapacitySource = { capacity: 64, subscribe: () => () => {} };
    const adaptive = new AdaptiveCapacity(discovered, { tpotSloMs: 20 }, clock);
    let inflight = 0;
    /** One window at `level` in flight (admitted one by one, at once) and TPOT `tpot(level)`. */
    const window = (level: number, tpot: (c: number) => number) => {
      while (inflight < level) {
        adaptive.queued(1);
        adaptive.inflight(1);
        adaptive.queued(-1);
        adaptive.dispatched();
        inflight++;
      }
      for (let k = 0; k < 20; k++) adaptive.sample({ kind: "ok", tpotMs: tpot(inflight) });
      clock.advance(1000);
      adaptive.closeWindow();
    };
    /** Requests end until `level` are left in flight. */
    const releaseTo = (level: number) => {
      while (inflight > level) {
        adaptive.inflight(-1);
        inflight--;
      }
    };
    const knee8 = kneeAt(8);
    for (let i = 0; i < 60; i++) {
      // Each window runs at the limit: the requests above it have ended.
      releaseTo(adaptive.capacity);
      window(adaptive.capacity, knee8);
    }
    // The last window at the limit ends (its close started the next window from that level).
    releaseTo(0);
    window(0, () => 10);
    const settled = adaptive.capacity;
    assert.ok(settled < 16, `settled near the knee of 8: ${settled}`);

    // Light load: 4 in flight, each request released and replaced at once, latency at the baseline.
    for (let w = 0; w < 5; w++) {
      for (let r = 0; r < 20; r++) {
        adaptive.queued(1);
        adaptive.inflight(1);
        adaptive.queued(-1);
        adaptive.inflight(-1);
      }
      window(4, () => 10);
      releaseTo(0);
    }
    assert.equal(adaptive.capacity, settled, "an idle limit does not grow");

    // The same windows with a request still waiting when a slot is released: the limit binds.
    for (let w = 0; w < 3; w++) {
      adaptive.queued(1);
      adaptive.inflight(1);
      adaptive.inflight(-1);
      adaptive.queued(-1);
      window(4, () => 10);
      releaseTo(0);
    }
    assert.ok(adaptive.capacity > settled, `work that waited grows it: ${settled} -> ${adaptive.capacity}`);
  });
});

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  createScheduler,
  ManualClock,
  type Permit,
  type PriorityClass,
  type Scheduler,
  type SchedulerOptions,
} from "../../src/index.js";
import { flush, type Tracked, track } from "./helpers.js";

function make(capacity: number, extra: Partial<SchedulerOptions> = {}): Scheduler {
  return createScheduler({ capacity, clock: new ManualClock(), defaultMaxClass: "system", ...extra });
}

function headrooms(s: Scheduler): number[] {
  const c = s.snapshot().classes;
  return [c.system.headroom, c.interactive.headroom, c.default.headroom, c.bulk.headroom];
}

function reservations(s: Scheduler): number[] {
  const c = s.snapshot().classes;
  return [c.system.reserved, c.interactive.reserved, c.default.reserved, c.bulk.reserved];
}

/** Acquires `n` permits of a class and returns their tracked promises. */
function acquireN(s: Scheduler, priority: PriorityClass, n: number, tenant = "t"): Tracked<Permit>[] {
  return Array.from({ length: n }, () => track(s.acquire({ priority, tenant })));
}

function states(list: Tracked<Permit>[]): Record<string, number> {
  const out: Record<string, number> = { pending: 0, resolved: 0, rejected: 0 };
  for (const t of list) out[t.state]!++;
  return out;
}

/** Small, hand-checkable reservations: system 3, interactive 2, nobody preempts. */
const SMALL: SchedulerOptions["classes"] = {
  system: { reserved_floor: 3, can_preempt: false },
  interactive: { reserved_floor: 2, can_preempt: false },
  default: { reserved_floor: 0 },
  bulk: { reserved_floor: 0 },
};

describe("headroom", () => {
  test("with defaults at capacity 256 each class is held back only by higher classes' reservations", () => {
    const s = make(256);
    assert.deepEqual(reservations(s), [32, 128, 26, 0]);
    // system sees everything; interactive loses system's 32; default loses 32 + 128; bulk loses 32 + 128 + 26.
    assert.deepEqual(headrooms(s), [256, 224, 96, 70]);
  });

  test("a class's own unused reservation never reduces its own headroom", async () => {
    const s = make(256);
    const held = acquireN(s, "interactive", 10);
    await flush();
    assert.deepEqual(states(held), { pending: 0, resolved: 10, rejected: 0 });
    // interactive: 256 - 10 - 32 (system's) = 214, not reduced by its own 118 unused slots;
    // default still loses interactive's remaining 118 unused.
    assert.deepEqual(headrooms(s), [246, 214, 96, 70]);
  });

  test("higher classes' unused reservations are held back from lower classes", async () => {
    const s = make(10, { classes: SMALL });
    assert.deepEqual(headrooms(s), [10, 7, 5, 5]);
    const bulk = acquireN(s, "bulk", 6);
    await flush();
    // Only 5 bulk fit: 3 system + 2 interactive slots are held back although they are free.
    assert.deepEqual(states(bulk), { pending: 1, resolved: 5, rejected: 0 });
    assert.equal(s.snapshot().inflight, 5);
    const interactive = acquireN(s, "interactive", 3);
    await flush();
    assert.deepEqual(states(interactive), { pending: 1, resolved: 2, rejected: 0 });
    const system = acquireN(s, "system", 4);
    await flush();
    assert.deepEqual(states(system), { pending: 1, resolved: 3, rejected: 0 });
    assert.equal(s.snapshot().inflight, 10);
    assert.deepEqual(headrooms(s), [0, 0, 0, 0]);
  });

  test("a class running above its reservation holds nothing back (no negative hold)", async () => {
    const s = make(10, { classes: SMALL });
    const interactive = acquireN(s, "interactive", 8);
    await flush();
    // interactive can take 7 (system's 3 stay held); its overuse does not free anything for default.
    assert.deepEqual(states(interactive), { pending: 1, resolved: 7, rejected: 0 });
    assert.deepEqual(headrooms(s), [3, 0, 0, 0]);
    const def = acquireN(s, "default", 1);
    await flush();
    assert.equal(def[0]!.state, "pending");
  });

  test("capacity pressure reflects queue and slot pressure", async () => {
    const s = make(10, { classes: { ...SMALL, bulk: { reserved_floor: 0, queue_size: 4 } } });
    const snap0 = s.snapshot();
    assert.equal(snap0.classes.system.capacityPressure, 0);
    assert.equal(snap0.classes.bulk.capacityPressure, 0.5); // headroom 5 of capacity 10
    acquireN(s, "bulk", 7); // 5 admitted, 2 queued of 4
    await flush();
    const snap = s.snapshot();
    assert.equal(snap.utilization, 0.5);
    assert.equal(snap.classes.bulk.queued, 2);
    assert.equal(snap.classes.bulk.capacityPressure, 1); // no headroom at all
    assert.equal(snap.classes.system.capacityPressure, 0.5); // headroom 5 of 10
    assert.equal(snap.classes.interactive.capacityPressure, 0.8); // headroom 2 of 10
  });
});

describe("reservations follow capacity", () => {
  test("a dip 256 -> 80 fills the highest classes first; going back restores the configured values", () => {
    const s = make(256);
    assert.deepEqual(reservations(s), [32, 128, 26, 0]);
    s.setCapacity(80);
    assert.deepEqual(reservations(s), [32, 48, 0, 0]);
    assert.equal(s.capacity, 80);
    s.setCapacity(170);
    // default wants ceil(17) = 17 but only 10 remain after 32 + 128.
    assert.deepEqual(reservations(s), [32, 128, 10, 0]);
    s.setCapacity(20);
    assert.deepEqual(reservations(s), [20, 0, 0, 0]);
    s.setCapacity(0);
    assert.deepEqual(reservations(s), [0, 0, 0, 0]);
    s.setCapacity(256);
    // ceil(0.1 * 256) = 26; interactive max(128, ceil(0.25 * 256) = 64) = 128.
    assert.deepEqual(reservations(s), [32, 128, 26, 0]);
    s.setCapacity(1000);
    assert.deepEqual(reservations(s), [32, 250, 100, 0]);
  });

  test("a dip below what is in flight evicts nobody; headroom goes negative and higher classes still fit", async () => {
    const clock = new ManualClock();
    const s = make(256, { clock });
    const bulk = acquireN(s, "bulk", 70);
    await flush();
    assert.deepEqual(states(bulk), { pending: 0, resolved: 70, rejected: 0 });
    s.setCapacity(80);
    assert.equal(s.snapshot().inflight, 70);
    assert.deepEqual(headrooms(s), [10, -22, -70, -70]);
    const sys = acquireN(s, "system", 10);
    await flush();
    assert.deepEqual(states(sys), { pending: 0, resolved: 10, rejected: 0 });
    assert.equal(s.snapshot().inflight, 80);
    assert.equal(s.snapshot().utilization, 1);
    // Full now: the next system arrival waits its preempt_after_secs (0.25 s by default) for a slot
    // to free, then takes a bulk request's slot (preemption), total unchanged.
    const more = acquireN(s, "system", 1);
    await flush();
    assert.equal(more[0]!.state, "pending");
    clock.advance(249);
    await flush();
    assert.equal(more[0]!.state, "pending");
    clock.advance(1);
    await flush();
    assert.equal(more[0]!.state, "resolved");
    assert.equal(s.snapshot().inflight, 80);
    assert.equal(s.snapshot().classes.bulk.inflight, 69);
    assert.equal(s.snapshot().classes.system.inflight, 11);
  });

  test("capacity growth admits queued work at once", async () => {
    const s = make(200); // reservations 32 + 128 + 20 = 180: bulk headroom 20
    assert.deepEqual(headrooms(s), [200, 168, 40, 20]);
    const first = acquireN(s, "bulk", 20);
    const waiting = acquireN(s, "bulk", 5);
    await flush();
    assert.deepEqual(states(first), { pending: 0, resolved: 20, rejected: 0 });
    assert.deepEqual(states(waiting), { pending: 5, resolved: 0, rejected: 0 });
    s.setCapacity(205); // default now reserves ceil(20.5) = 21: bulk headroom 205 - 20 - 32 - 128 - 21 = 4
    await flush();
    assert.deepEqual(states(waiting), { pending: 1, resolved: 4, rejected: 0 });
    assert.equal(s.snapshot().classes.bulk.queued, 1);
    s.setCapacity(300);
    await flush();
    assert.deepEqual(states(waiting), { pending: 0, resolved: 5, rejected: 0 });
    assert.equal(s.snapshot().inflight, 25);
    assert.equal(s.snapshot().queued, 0);
  });

  test("setCapacity rejects a negative or fractional capacity and keeps the old one", () => {
    const s = make(256);
    assert.throws(() => s.setCapacity(-1), { name: "ConfigError", path: "capacity" });
    assert.throws(() => s.setCapacity(1.5), { name: "ConfigError", path: "capacity" });
    assert.equal(s.capacity, 256);
  });
});

describe("reservations sized at the fleet's size (an adaptive limit under it)", () => {
  test("each class keeps its share: 256's reservations scaled to 48, rounded down", () => {
    const s = make(256);
    s.setCapacity(48, 256);
    // At 256: system 32, interactive 128, default 26; x 48/256 = 6, 24, 4.875 -> 4.
    assert.deepEqual(reservations(s), [6, 24, 4, 0]);
    // default keeps 48 - 6 - 24 = 18 (37.5% as at 256, where it has 96), bulk 14.
    assert.deepEqual(headrooms(s), [48, 42, 18, 14]);
    // Sized at the capacity itself (the default), the floors fill it: the contract's dip.
    s.setCapacity(48);
    assert.deepEqual(reservations(s), [32, 16, 0, 0]);
    assert.deepEqual(headrooms(s), [48, 16, 0, 0]);
  });

  test("a dip at the fleet's size is clamped there first (highest classes filled), then scaled", () => {
    const s = make(256);
    // The fleet lost workers (80 reported) and the limit is 40: 80's clamp is 32, 48, 0.
    s.setCapacity(40, 80);
    assert.deepEqual(reservations(s), [16, 24, 0, 0]);
    // reservedAt under the capacity means the capacity itself.
    s.setCapacity(80, 40);
    assert.deepEqual(reservations(s), [32, 48, 0, 0]);
    s.setCapacity(256, 256);
    assert.deepEqual(reservations(s), [32, 128, 26, 0]);
  });

  test("default-class work is not locked out under a small limit; with the floors taken at the limit it waits for starvation promotion", async () => {
    for (const sized of [256, 48]) {
      const clock = new ManualClock();
      const s = make(256, { clock, defaultMaxClass: "default" });
      s.setCapacity(48, sized);
      const work = acquireN(s, "default", 30);
      await flush();
      if (sized === 256) assert.deepEqual(states(work), { pending: 12, resolved: 18, rejected: 0 });
      else assert.deepEqual(states(work), { pending: 30, resolved: 0, rejected: 0 });
      clock.advance(30_000); // default's starvation threshold
      await flush();
      // Starvation promotion (reservations ignored, capacity binding) lets the rest in either way.
      assert.deepEqual(states(work), { pending: 0, resolved: 30, rejected: 0 });
    }
  });

  test("a higher class still finds its scaled reservation free while lower classes fill the rest", async () => {
    const s = make(256, { classes: { interactive: { can_preempt: false }, system: { can_preempt: false } } });
    s.setCapacity(48, 256);
    const bulk = acquireN(s, "bulk", 48);
    const chat = acquireN(s, "interactive", 24);
    await flush();
    assert.deepEqual(states(bulk), { pending: 34, resolved: 14, rejected: 0 });
    assert.deepEqual(states(chat), { pending: 0, resolved: 24, rejected: 0 });
    assert.equal(s.snapshot().inflight, 38);
    // system keeps its 6 free; default 48 - 38 - 6 = 4; bulk also loses default's 4.
    assert.deepEqual(headrooms(s), [10, 4, 4, 0]);
  });

  test("setCapacity rejects a reservedAt that is not a finite number >= 0", () => {
    const s = make(256);
    assert.throws(() => s.setCapacity(48, Number.NaN), { name: "ConfigError", path: "reservedAt" });
    assert.throws(() => s.setCapacity(48, -1), { name: "ConfigError", path: "reservedAt" });
    assert.throws(() => s.setCapacity(48, Number.POSITIVE_INFINITY), {
      name: "ConfigError",
      path: "reservedAt",
    });
    assert.equal(s.capacity, 256);
  });
});

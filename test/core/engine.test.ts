import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { ClassOverrides } from "@sluice/scheduler/core/config.js";
import type { SchedulerPermit } from "@sluice/scheduler/core/inflight.js";
import {
  ClientCancelledError,
  ManualClock,
  PreemptedError,
  QueueFullError,
  QueueTimeoutError,
  type SchedulerObserver,
  type SchedulerOptions,
} from "../../src/index.js";
import {
  createTestScheduler,
  errorOf,
  flush,
  noReservations,
  permitOf,
  preemptAtOnce,
  type TestScheduler,
  type Tracked,
  track,
} from "./helpers.js";

type Event = [string, ...unknown[]];

interface Harness {
  s: TestScheduler;
  clock: ManualClock;
  events: Event[];
}

/** A scheduler on a manual clock whose observer records every callback in order. */
function setup(options: Partial<SchedulerOptions> & { capacity: number }): Harness {
  const clock = new ManualClock();
  const events: Event[] = [];
  const observer: SchedulerObserver = {
    admission: (...a) => events.push(["admission", ...a]),
    queueWait: (...a) => events.push(["queueWait", ...a]),
    preemption: (...a) => events.push(["preemption", ...a]),
    clamp: (...a) => events.push(["clamp", ...a]),
    unknownPriority: (...a) => events.push(["unknownPriority", ...a]),
    starvationPromotion: (...a) => events.push(["starvationPromotion", ...a]),
  };
  const s = createTestScheduler({
    clock,
    observer,
    defaultMaxClass: "system",
    ...options,
    classes: preemptAtOnce((options.classes as ClassOverrides | undefined) ?? noReservations()),
  });
  return { s, clock, events };
}

function inflightByClass(s: TestScheduler): number[] {
  const c = s.snapshot().classes;
  return [c.system.inflight, c.interactive.inflight, c.default.inflight, c.bulk.inflight];
}

function queuedByClass(s: TestScheduler): number[] {
  const c = s.snapshot().classes;
  return [c.system.queued, c.interactive.queued, c.default.queued, c.bulk.queued];
}

/** Records the order in which labelled acquires resolve, and their permits. */
function orderTracker(s: TestScheduler) {
  const order: string[] = [];
  const permits = new Map<string, SchedulerPermit>();
  const all = new Map<string, Tracked<SchedulerPermit>>();
  const add = (label: string, options: Parameters<TestScheduler["acquire"]>[0]): Tracked<SchedulerPermit> => {
    const t = track(s.acquire(options));
    all.set(label, t);
    t.promise.then(
      (p) => {
        order.push(label);
        permits.set(label, p);
      },
      () => {},
    );
    return t;
  };
  /** The permit of the most recently admitted label. */
  const last = (): SchedulerPermit => permits.get(order.at(-1)!)!;
  return { order, permits, all, add, last };
}

describe("admission", () => {
  test("an arrival with headroom and nobody ahead is admitted at once", async () => {
    const { s, events } = setup({ capacity: 4 });
    const permit = await s.acquire({ priority: "interactive", tenant: "auth:a", cost: 7 });
    assert.equal(permit.class, "interactive");
    assert.equal(permit.requestedClass, "interactive");
    assert.equal(permit.tenant, "auth:a");
    assert.equal(permit.cost, 7);
    assert.equal(permit.admission, "fast");
    assert.equal(permit.queueWaitMs, 0);
    assert.equal(permit.promoted, false);
    assert.equal(s.inflight, 1);
    assert.deepEqual(inflightByClass(s), [0, 1, 0, 0]);
    assert.deepEqual(events, [
      ["admission", "interactive", "admitted", "auth:a"],
      ["queueWait", "interactive", 0, "admitted"],
    ]);
  });

  test("defaults: tenant anonymous, class default, cost 1", async () => {
    const { s } = setup({ capacity: 4 });
    const permit = await s.acquire();
    assert.equal(permit.tenant, "anonymous");
    assert.equal(permit.class, "default");
    assert.equal(permit.cost, 1);
  });

  test("an invalid cost is rejected with a RangeError and takes nothing", async () => {
    const { s } = setup({ capacity: 4 });
    for (const cost of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      await assert.rejects(s.acquire({ cost }), RangeError);
    }
    assert.equal(s.inflight, 0);
    assert.equal(s.counters().admissions.default.admitted, 0);
  });

  test("a released slot goes to the queued waiter, not to an arrival in the same tick", async () => {
    const { s } = setup({ capacity: 1 });
    const holder = await s.acquire({ priority: "default" });
    const waiter = track(s.acquire({ priority: "default", tenant: "w" }));
    holder.release();
    // Same tick, before any microtask ran: the slot is already the waiter's.
    const arrival = track(s.acquire({ priority: "default", tenant: "late" }));
    assert.equal(s.snapshot().classes.default.queued, 1);
    await flush();
    assert.equal(permitOf(waiter).tenant, "w");
    assert.equal(permitOf(waiter).admission, "queued");
    assert.equal(arrival.state, "pending");
    // A lower-class arrival does not get past the queued default waiter either.
    const lower = track(s.acquire({ priority: "bulk" }));
    await flush();
    assert.equal(lower.state, "pending");
    assert.deepEqual(queuedByClass(s), [0, 0, 1, 1]);
  });

  test("a higher-class arrival is admitted past lower-class waiters when it has headroom", async () => {
    const { s } = setup({
      capacity: 4,
      classes: noReservations({ system: { reserved_floor: 2 } }),
    });
    const bulk = [track(s.acquire({ priority: "bulk" })), track(s.acquire({ priority: "bulk" }))];
    const queuedBulk = track(s.acquire({ priority: "bulk" }));
    await flush();
    assert.deepEqual(
      bulk.map((t) => t.state),
      ["resolved", "resolved"],
    );
    assert.equal(queuedBulk.state, "pending");
    const sys = await s.acquire({ priority: "system" });
    assert.equal(sys.admission, "fast");
    assert.equal(queuedBulk.state, "pending");
    assert.deepEqual(inflightByClass(s), [1, 0, 0, 2]);
  });

  test("an arrival with a same-class waiter ahead queues behind it instead of preempting", async () => {
    // capacity 1; bulk starves after 1 s; interactive traffic keeps the slot.
    const { s, clock } = setup({
      capacity: 1,
      classes: noReservations({ bulk: { starvation_threshold_secs: 1, queue_timeout_secs: 60 } }),
    });
    const i1 = await s.acquire({ priority: "interactive" });
    const bulk = track(s.acquire({ priority: "bulk", tenant: "b" }));
    clock.advance(1500);
    // No lower-class victim in flight (the holder is interactive): i2 queues.
    const i2 = track(s.acquire({ priority: "interactive", tenant: "i2" }));
    clock.advance(500);
    i1.release(); // the starving bulk waiter is promoted first
    await flush();
    const b = permitOf(bulk);
    assert.equal(b.promoted, true);
    assert.equal(i2.state, "pending");
    // A preemptible bulk request is now in flight, but i2 is queued ahead: i3 must not preempt.
    const i3 = track(s.acquire({ priority: "interactive", tenant: "i3" }));
    await flush();
    assert.equal(i3.state, "pending");
    assert.equal(b.preempted, false);
    assert.deepEqual(queuedByClass(s), [0, 2, 0, 0]);
    assert.equal(s.counters().admissions.bulk.preempted, 0);
  });
});

describe("dispatch order", () => {
  test("strict priority by class on release, FIFO inside a class for one tenant", async () => {
    const { s } = setup({ capacity: 1 });
    const holder = await s.acquire({ priority: "system" }); // nobody can preempt a system request
    const t = orderTracker(s);
    t.add("b1", { priority: "bulk" });
    t.add("d1", { priority: "default" });
    t.add("i1", { priority: "interactive" });
    t.add("s1", { priority: "system" });
    t.add("b2", { priority: "bulk" });
    t.add("i2", { priority: "interactive" });
    t.add("d2", { priority: "default" });
    t.add("s2", { priority: "system" });
    await flush();
    assert.deepEqual(queuedByClass(s), [2, 2, 2, 2]);
    let current = holder;
    for (let i = 1; i <= 8; i++) {
      current.release();
      await flush();
      assert.equal(t.order.length, i, "exactly one waiter admitted per release");
      assert.equal(s.inflight, 1);
      current = t.last();
    }
    assert.deepEqual(t.order, ["s1", "s2", "i1", "i2", "d1", "d2", "b1", "b2"]);
    current.release();
    assert.equal(s.inflight, 0);
  });
});

describe("queue limits and timeouts", () => {
  test("a full queue rejects with 429 scheduler_queue_full and the place is not taken", async () => {
    const { s } = setup({ capacity: 1, classes: noReservations({ bulk: { queue_size: 2 } }) });
    const holder = await s.acquire({ priority: "bulk" });
    const w1 = track(s.acquire({ priority: "bulk", tenant: "w1" }));
    const w2 = track(s.acquire({ priority: "bulk", tenant: "w2" }));
    const w3 = track(s.acquire({ priority: "bulk", tenant: "w3" }));
    await flush();
    const err = errorOf(w3);
    assert.ok(err instanceof QueueFullError);
    assert.equal(err.code, "scheduler_queue_full");
    assert.equal("status" in err, false, "a core error carries a reason, not an HTTP status");
    assert.equal(err.priorityClass, "bulk");
    assert.equal(err.retryAfterSecs, undefined);
    assert.equal(s.snapshot().classes.bulk.queued, 2);
    assert.equal(s.snapshot().classes.bulk.queueLimit, 2);
    assert.equal(s.counters().admissions.bulk.rejected_queue_full, 1);
    // Other classes' queues are separate.
    const d = track(s.acquire({ priority: "default" }));
    await flush();
    assert.equal(d.state, "pending");
    assert.equal(s.snapshot().classes.default.queued, 1);
    holder.release(); // the default waiter is the higher class
    await flush();
    assert.equal(w1.state, "pending");
    permitOf(d).release();
    await flush();
    assert.equal(permitOf(w1).tenant, "w1");
    assert.equal(w2.state, "pending");
    // w1 left the queue: one place is free again.
    const w4 = track(s.acquire({ priority: "bulk", tenant: "w4" }));
    const w5 = track(s.acquire({ priority: "bulk", tenant: "w5" }));
    await flush();
    assert.equal(w4.state, "pending");
    assert.equal(errorOf(w5).code, "scheduler_queue_full");
    assert.equal(s.counters().admissions.bulk.rejected_queue_full, 2);
  });

  test("queue_size 0 rejects whenever the request cannot run at once", async () => {
    const { s } = setup({ capacity: 1, classes: noReservations({ default: { queue_size: 0 } }) });
    await s.acquire({ priority: "default" });
    await assert.rejects(s.acquire({ priority: "default" }), { code: "scheduler_queue_full" });
  });

  test("a queued request times out at exactly its class's queue_timeout_secs with 408", async () => {
    const { s, clock, events } = setup({
      capacity: 1,
      classes: noReservations({ bulk: { queue_timeout_secs: 3, starvation_threshold_secs: 100 } }),
    });
    await s.acquire({ priority: "bulk", tenant: "h" });
    events.length = 0;
    const w1 = track(s.acquire({ priority: "bulk", tenant: "w1" }));
    clock.advance(1000);
    const w2 = track(s.acquire({ priority: "bulk", tenant: "w2" }));
    clock.advance(1999); // t = 2999
    await flush();
    assert.equal(w1.state, "pending");
    clock.advance(1); // t = 3000: exactly w1's timeout
    await flush();
    const err = errorOf(w1);
    assert.ok(err instanceof QueueTimeoutError);
    assert.equal(err.code, "scheduler_queue_timeout");
    assert.equal(err.priorityClass, "bulk");
    assert.match(err.message, /waited 3s in the bulk queue/);
    assert.equal(w2.state, "pending");
    assert.equal(s.snapshot().classes.bulk.queued, 1);
    clock.advance(999); // t = 3999
    await flush();
    assert.equal(w2.state, "pending");
    clock.advance(1); // t = 4000: w2's timeout
    await flush();
    assert.equal(errorOf(w2).code, "scheduler_queue_timeout");
    assert.equal(s.queued, 0);
    assert.equal(s.inflight, 1);
    assert.equal(s.counters().admissions.bulk.rejected_queue_timeout, 2);
    assert.deepEqual(events, [
      ["admission", "bulk", "rejected_queue_timeout", "w1"],
      ["queueWait", "bulk", 3, "rejected_queue_timeout"],
      ["admission", "bulk", "rejected_queue_timeout", "w2"],
      ["queueWait", "bulk", 3, "rejected_queue_timeout"],
    ]);
    assert.equal(clock.pendingTimers(), 0);
  });

  test("each class times out on its own setting", async () => {
    const { s, clock } = setup({
      capacity: 1,
      classes: noReservations({
        interactive: { queue_timeout_secs: 1, can_preempt: false },
        default: { queue_timeout_secs: 2 },
        bulk: { queue_timeout_secs: 0.5 },
      }),
    });
    await s.acquire({ priority: "system" });
    const i = track(s.acquire({ priority: "interactive" }));
    const d = track(s.acquire({ priority: "default" }));
    const b = track(s.acquire({ priority: "bulk" }));
    clock.advance(499);
    await flush();
    assert.deepEqual([i.state, d.state, b.state], ["pending", "pending", "pending"]);
    clock.advance(1);
    await flush();
    assert.deepEqual([i.state, d.state, b.state], ["pending", "pending", "rejected"]);
    clock.advance(500);
    await flush();
    assert.deepEqual([i.state, d.state, b.state], ["rejected", "pending", "rejected"]);
    clock.advance(999);
    await flush();
    assert.equal(d.state, "pending");
    clock.advance(1);
    await flush();
    assert.equal(errorOf(d).code, "scheduler_queue_timeout");
  });

  test("a waiter admitted before its timeout is not rejected later", async () => {
    const { s, clock } = setup({
      capacity: 1,
      classes: noReservations({ default: { queue_timeout_secs: 2 } }),
    });
    const holder = await s.acquire();
    const w = track(s.acquire());
    clock.advance(1999);
    holder.release();
    clock.advance(5000);
    await flush();
    assert.equal(permitOf(w).queueWaitMs, 1999);
    assert.equal(s.counters().admissions.default.rejected_queue_timeout, 0);
  });
});

describe("client cancellation", () => {
  test("an aborted waiter leaves its queue at once with 499 and frees its place", async () => {
    const { s, events } = setup({ capacity: 1, classes: noReservations({ bulk: { queue_size: 2 } }) });
    const holder = await s.acquire({ priority: "bulk" });
    const ac = new AbortController();
    const w1 = track(s.acquire({ priority: "bulk", tenant: "w1", signal: ac.signal }));
    const w2 = track(s.acquire({ priority: "bulk", tenant: "w2" }));
    assert.equal(errorOf(await settle(s.acquire({ priority: "bulk" }))).code, "scheduler_queue_full");
    assert.equal(s.snapshot().classes.bulk.queued, 2);
    events.length = 0;
    ac.abort();
    // Synchronously gone from the queue.
    assert.equal(s.snapshot().classes.bulk.queued, 1);
    assert.equal(s.queued, 1);
    // Its place is free for a new arrival although the queue was full.
    const w3 = track(s.acquire({ priority: "bulk", tenant: "w3" }));
    await flush();
    const err = errorOf(w1);
    assert.ok(err instanceof ClientCancelledError);
    assert.equal(err.code, "scheduler_client_cancelled");
    assert.equal(err.priorityClass, "bulk");
    assert.equal(w3.state, "pending");
    assert.equal(s.counters().admissions.bulk.client_cancelled, 1);
    assert.deepEqual(events.slice(0, 2), [
      ["admission", "bulk", "client_cancelled", "w1"],
      ["queueWait", "bulk", 0, "client_cancelled"],
    ]);
    holder.release();
    await flush();
    assert.equal(permitOf(w2).tenant, "w2");
    assert.equal(w3.state, "pending");
  });

  test("an already-aborted signal rejects at once, even with free capacity", async () => {
    const { s } = setup({ capacity: 4 });
    const ac = new AbortController();
    ac.abort();
    const t = track(s.acquire({ priority: "interactive", signal: ac.signal }));
    await flush();
    assert.equal(errorOf(t).code, "scheduler_client_cancelled");
    assert.equal(s.inflight, 0);
    assert.equal(s.queued, 0);
    assert.equal(s.counters().admissions.interactive.client_cancelled, 1);
    assert.equal(s.counters().admissions.interactive.admitted, 0);
  });

  test("aborting after admission does not touch the permit", async () => {
    const { s, clock } = setup({ capacity: 1 });
    const holder = await s.acquire();
    const ac = new AbortController();
    const w = track(s.acquire({ signal: ac.signal }));
    clock.advance(10);
    holder.release();
    await flush();
    const permit = permitOf(w);
    ac.abort();
    await flush();
    assert.equal(s.inflight, 1);
    assert.equal(permit.released, false);
    assert.equal(s.counters().admissions.default.client_cancelled, 0);
    // A fast-path permit with a signal is not affected either.
    permit.release();
    const ac2 = new AbortController();
    const fast = await s.acquire({ signal: ac2.signal });
    ac2.abort();
    assert.equal(s.inflight, 1);
    fast.release();
    assert.equal(s.inflight, 0);
  });

  test("a cancelled waiter is skipped; the next in line is admitted", async () => {
    const { s } = setup({ capacity: 1 });
    const holder = await s.acquire();
    const ac = new AbortController();
    const t = orderTracker(s);
    t.add("a", { tenant: "x" });
    t.add("b", { tenant: "x", signal: ac.signal });
    t.add("c", { tenant: "x" });
    ac.abort();
    holder.release();
    await flush();
    t.last().release();
    await flush();
    assert.deepEqual(t.order, ["a", "c"]);
    assert.equal(t.all.get("b")!.state, "rejected");
  });
});

/** Awaits a promise's settlement and returns it tracked. */
async function settle<T>(promise: Promise<T>): Promise<Tracked<T>> {
  const t = track(promise);
  await flush();
  return t;
}

describe("starvation promotion", () => {
  test("a bulk waiter is promoted once past its threshold while interactive traffic keeps the slot", async () => {
    const { s, clock, events } = setup({
      capacity: 1,
      classes: noReservations({ bulk: { starvation_threshold_secs: 10, queue_timeout_secs: 60 } }),
    });
    let holder = await s.acquire({ priority: "interactive", tenant: "i" });
    const bulk = track(s.acquire({ priority: "bulk", tenant: "b" }));
    let interactiveAdmitted = 1;
    for (let second = 1; second <= 9; second++) {
      const next = track(s.acquire({ priority: "interactive", tenant: "i" }));
      clock.advance(1000);
      holder.release();
      await flush();
      holder = permitOf(next);
      interactiveAdmitted++;
      assert.equal(bulk.state, "pending", `bulk still waiting at ${second}s`);
    }
    // t = 9 s: one more interactive arrival, then the 10th second passes.
    const blocked = track(s.acquire({ priority: "interactive", tenant: "i" }));
    clock.advance(1000); // t = 10 s, threshold reached but no free slot yet
    await flush();
    assert.equal(bulk.state, "pending");
    assert.equal(s.counters().starvationPromotions.bulk, 0);
    events.length = 0;
    holder.release();
    await flush();
    const b = permitOf(bulk);
    assert.equal(b.promoted, true);
    assert.equal(b.admission, "queued");
    assert.equal(b.queueWaitMs, 10_000);
    assert.equal(blocked.state, "pending");
    assert.equal(interactiveAdmitted, 10);
    assert.deepEqual(s.counters().starvationPromotions, { system: 0, interactive: 0, default: 0, bulk: 1 });
    assert.deepEqual(events, [
      ["starvationPromotion", "bulk"],
      ["admission", "bulk", "admitted", "b"],
      ["queueWait", "bulk", 10, "admitted"],
    ]);
    b.release();
    await flush();
    assert.equal(permitOf(blocked).promoted, false);
  });

  test("the starvation override may use a higher class's unused reservation", async () => {
    const { s, clock } = setup({
      capacity: 4,
      classes: noReservations({ system: { reserved_floor: 2 }, bulk: { starvation_threshold_secs: 2 } }),
    });
    await s.acquire({ priority: "bulk" });
    await s.acquire({ priority: "bulk" });
    const w = track(s.acquire({ priority: "bulk" }));
    clock.advance(1999);
    await flush();
    assert.equal(w.state, "pending");
    clock.advance(1); // threshold reached; a reserved system slot is free
    await flush();
    assert.equal(permitOf(w).promoted, true);
    assert.equal(s.inflight, 3);
    assert.equal(s.snapshot().classes.bulk.headroom, -1);
  });

  test("the starvation override never exceeds total capacity", async () => {
    const { s, clock } = setup({
      capacity: 2,
      classes: noReservations({ bulk: { starvation_threshold_secs: 1 } }),
    });
    await s.acquire({ priority: "bulk" });
    await s.acquire({ priority: "bulk" });
    const w = track(s.acquire({ priority: "bulk" }));
    clock.advance(5000);
    await flush();
    assert.equal(w.state, "pending");
    assert.equal(s.inflight, 2);
  });

  test("the next waiter's starvation mark is honoured on time after an older starving waiter left", async () => {
    // capacity 2 with 1 slot reserved for system: bulk can use only 1 slot unless starving.
    const { s, clock } = setup({
      capacity: 2,
      classes: noReservations({
        system: { reserved_floor: 1 },
        bulk: { starvation_threshold_secs: 2, queue_timeout_secs: 10 },
      }),
    });
    const bulkHolder = await s.acquire({ priority: "bulk" });
    const sysHolder = await s.acquire({ priority: "system" });
    const w1 = track(s.acquire({ priority: "bulk", tenant: "w1" }));
    clock.advance(1000);
    const w2 = track(s.acquire({ priority: "bulk", tenant: "w2" }));
    clock.advance(1000); // t = 2000: w1 starving, but no free slot
    await flush();
    assert.equal(w1.state, "pending");
    clock.advance(500); // t = 2500
    sysHolder.release(); // w1 is promoted into the freed (system-reserved) slot
    await flush();
    assert.equal(permitOf(w1).promoted, true);
    clock.advance(100); // t = 2600
    bulkHolder.release(); // a free slot, but reserved for system: w2 (waited 1.6 s) must wait
    await flush();
    assert.equal(w2.state, "pending");
    clock.advance(400); // t = 3000: w2 reaches its threshold with a free slot
    await flush();
    assert.equal(w2.state, "resolved", "w2 should be promoted at its starvation mark");
    assert.equal(permitOf(w2).promoted, true);
    assert.equal(permitOf(w2).queueWaitMs, 2000);
  });

  test("promotion picks the oldest starving waiter across classes", async () => {
    const { s, clock } = setup({
      capacity: 1,
      classes: noReservations({
        default: { starvation_threshold_secs: 5 },
        bulk: { starvation_threshold_secs: 1 },
        interactive: { starvation_threshold_secs: 5, can_preempt: false },
      }),
    });
    const holder = await s.acquire({ priority: "system" });
    const t = orderTracker(s);
    t.add("d", { priority: "default" });
    clock.advance(1000);
    t.add("b", { priority: "bulk" });
    clock.advance(1000);
    t.add("i", { priority: "interactive" });
    clock.advance(5000); // d waited 7 s (starving), b 6 s (starving), i 5 s (starving)
    holder.release();
    await flush();
    assert.deepEqual(t.order, ["d"]);
    assert.equal(t.last().promoted, true);
    t.last().release();
    await flush();
    assert.deepEqual(t.order, ["d", "b"]);
    t.last().release();
    await flush();
    assert.deepEqual(t.order, ["d", "b", "i"]);
    assert.deepEqual(s.counters().starvationPromotions, { system: 0, interactive: 1, default: 1, bulk: 1 });
  });

  /**
   * Capacity 1, interactive and bulk both always backlogged, every bulk waiter long past its mark:
   * runs `admissions` hand-overs of the one slot and counts the classes admitted.
   */
  async function contend(share: number | undefined, admissions: number, withInteractive = true) {
    const { s, clock } = setup({
      capacity: 1,
      classes: noReservations({
        bulk: {
          starvation_threshold_secs: 1,
          queue_timeout_secs: 1e6,
          ...(share === undefined ? {} : { starvation_max_share: share }),
        },
        interactive: { queue_timeout_secs: 1e6 },
      }),
    });
    let holder = await s.acquire({ priority: "system" });
    const waiting: { cls: string; t: Tracked<SchedulerPermit> }[] = [];
    const refill = () => {
      while (waiting.filter((w) => w.cls === "bulk").length < 3)
        waiting.push({ cls: "bulk", t: track(s.acquire({ priority: "bulk", tenant: "b" })) });
      while (withInteractive && waiting.filter((w) => w.cls === "interactive").length < 3)
        waiting.push({ cls: "interactive", t: track(s.acquire({ priority: "interactive", tenant: "i" })) });
    };
    refill();
    clock.advance(5000); // every bulk waiter is past its starvation mark from now on
    const admitted = { interactive: 0, bulk: 0 };
    for (let n = 0; n < admissions; n++) {
      holder.release();
      await flush();
      const i = waiting.findIndex((w) => w.t.state === "resolved");
      assert.ok(i >= 0, "the freed slot went to a waiter");
      const [w] = waiting.splice(i, 1);
      admitted[w!.cls as "interactive" | "bulk"]++;
      holder = permitOf(w!.t);
      refill();
      clock.advance(1000); // every waiter refilled now is past its mark by the next hand-over
    }
    return { admitted, promotions: s.counters().starvationPromotions.bulk };
  }

  test("promoted waiters take at most starvation_max_share of admissions while a higher class waits", async () => {
    // The built-in share is a tenth: 1000 hand-overs give bulk 100 (its first on the initial credit).
    const d = await contend(undefined, 1000);
    assert.equal(d.admitted.bulk, 100);
    assert.equal(d.promotions, 100);
    assert.equal(d.admitted.interactive, 900);
    // A quarter: bulk's share follows the key, never more, and it is also bulk's minimum.
    const q = await contend(0.25, 1000);
    assert.equal(q.admitted.bulk, 250);
    // 0: no promotion over a waiting higher class at all (strict priority while interactive waits).
    const z = await contend(0, 200);
    assert.equal(z.admitted.bulk, 0);
  });

  test("with no higher class waiting, promotion is not rationed", async () => {
    const r = await contend(0, 50, false);
    assert.equal(r.admitted.bulk, 50);
    assert.equal(r.promotions, 50);
  });

  test("starvation_max_share must be a number from 0 to 1", () => {
    assert.throws(
      () => createTestScheduler({ capacity: 1, classes: { bulk: { starvation_max_share: 1.5 } } }),
      /classes\.bulk\.starvation_max_share: must be a number from 0 to 1/,
    );
  });
});

describe("preemption", () => {
  test("takes the lowest class, most recently admitted, pre-first-byte victim; one per arrival", async () => {
    const { s, events } = setup({ capacity: 5 });
    const b1 = await s.acquire({ priority: "bulk", tenant: "b1" });
    const b2 = await s.acquire({ priority: "bulk", tenant: "b2" });
    const d1 = await s.acquire({ priority: "default", tenant: "d1" });
    const b3 = await s.acquire({ priority: "bulk", tenant: "b3" });
    const d2 = await s.acquire({ priority: "default", tenant: "d2" });
    assert.equal(b3.markFirstByte(), true); // b3 is past its first byte: immune
    const b2Signal = b2.signal; // created before preemption
    assert.equal(b2Signal.aborted, false);
    events.length = 0;

    // 1st arrival: bulk is the lowest class; b3 is immune, so the newest preemptible bulk is b2.
    const x1 = await s.acquire({ priority: "interactive", tenant: "x1" });
    assert.equal(x1.class, "interactive");
    assert.equal(x1.admission, "fast");
    assert.equal(b2.preempted, true);
    assert.equal(b2.preemptedBy, "interactive");
    assert.equal(b2Signal.aborted, true);
    const reason = b2Signal.reason as PreemptedError;
    assert.ok(reason instanceof PreemptedError);
    assert.equal(reason.code, "scheduler_preempted");
    assert.equal(reason.retryAfterSecs, 1);
    assert.equal(reason.priorityClass, "bulk");
    assert.equal(b2.markFirstByte(), false);
    for (const p of [b1, d1, b3, d2]) assert.equal(p.preempted, false);
    // The slot moved from bulk to interactive; the total is unchanged.
    assert.equal(s.inflight, 5);
    assert.deepEqual(inflightByClass(s), [0, 1, 2, 2]);
    assert.deepEqual(events, [
      ["preemption", "bulk", "interactive"],
      ["admission", "bulk", "preempted", "b2"],
      ["admission", "interactive", "admitted", "x1"],
      ["queueWait", "interactive", 0, "admitted"],
    ]);

    // The victim's release is a no-op for capacity.
    b2.release();
    assert.equal(s.inflight, 5);
    assert.deepEqual(inflightByClass(s), [0, 1, 2, 2]);

    // 2nd arrival (system): the only preemptible bulk left is b1. Its signal is created lazily, already aborted.
    await s.acquire({ priority: "system", tenant: "y" });
    assert.equal(b1.preempted, true);
    assert.equal(b1.signal.aborted, true);
    assert.equal((b1.signal.reason as PreemptedError).code, "scheduler_preempted");
    assert.deepEqual(inflightByClass(s), [1, 1, 2, 1]);

    // 3rd and 4th arrivals: no preemptible bulk (b3 is immune), so default, newest first.
    await s.acquire({ priority: "interactive", tenant: "x2" });
    assert.deepEqual([d2.preempted, d1.preempted], [true, false]);
    await s.acquire({ priority: "interactive", tenant: "x3" });
    assert.equal(d1.preempted, true);
    assert.deepEqual(inflightByClass(s), [1, 3, 0, 1]);
    assert.equal(s.inflight, 5);

    // 5th arrival: nothing preemptible below interactive: it queues.
    const x4 = track(s.acquire({ priority: "interactive", tenant: "x4" }));
    await flush();
    assert.equal(x4.state, "pending");
    assert.equal(b3.preempted, false);

    const c = s.counters();
    assert.deepEqual(c.preemptions.bulk, { bulk: 0, default: 0, interactive: 1, system: 1 });
    assert.deepEqual(c.preemptions.default, { bulk: 0, default: 0, interactive: 2, system: 0 });
    assert.equal(c.admissions.bulk.preempted, 2);
    assert.equal(c.admissions.default.preempted, 2);
    assert.equal(c.admissions.interactive.admitted, 3);
    assert.equal(c.admissions.system.admitted, 1);

    // Releasing the immune b3 frees a real slot: x4 gets it.
    b3.release();
    await flush();
    assert.equal(permitOf(x4).class, "interactive");
    assert.equal(s.inflight, 5);
  });

  test("a first byte marked before preemption makes the permit immune; the arrival queues", async () => {
    const { s } = setup({ capacity: 1 });
    const b = await s.acquire({ priority: "bulk" });
    assert.equal(b.markFirstByte(), true);
    assert.equal(b.markFirstByte(), true); // idempotent
    const i = track(s.acquire({ priority: "interactive" }));
    await flush();
    assert.equal(i.state, "pending");
    assert.equal(b.preempted, false);
    assert.equal(b.signal.aborted, false);
    assert.equal(s.counters().admissions.bulk.preempted, 0);
    b.release();
    await flush();
    assert.equal(permitOf(i).class, "interactive");
  });

  test("a preempted permit's first byte loses: markFirstByte returns false", async () => {
    const { s } = setup({ capacity: 1 });
    const b = await s.acquire({ priority: "default" });
    await s.acquire({ priority: "system" });
    assert.equal(b.markFirstByte(), false);
    assert.equal(b.firstByte, false);
  });

  test("never preempts a same-class or higher-class request", async () => {
    const { s } = setup({ capacity: 2 });
    await s.acquire({ priority: "interactive" });
    await s.acquire({ priority: "system" });
    const i = track(s.acquire({ priority: "interactive" }));
    await flush();
    assert.equal(i.state, "pending");
    assert.equal(s.counters().admissions.interactive.preempted, 0);
    assert.equal(s.counters().admissions.system.preempted, 0);
  });

  test("classes with can_preempt false never preempt", async () => {
    const { s } = setup({
      capacity: 1,
      classes: noReservations({ interactive: { can_preempt: false } }),
    });
    const b = await s.acquire({ priority: "bulk" });
    const d = track(s.acquire({ priority: "default" })); // default: can_preempt false by default
    const i = track(s.acquire({ priority: "interactive" }));
    await flush();
    assert.deepEqual([d.state, i.state, b.preempted], ["pending", "pending", false]);
    // system keeps its default can_preempt: true.
    const sys = track(s.acquire({ priority: "system" }));
    await flush();
    assert.equal(sys.state, "resolved");
    assert.equal(b.preempted, true);
  });

  test("a queued waiter does not preempt when later admitted by dispatch", async () => {
    const { s } = setup({ capacity: 2, classes: noReservations({ interactive: { can_preempt: false } }) });
    const b = await s.acquire({ priority: "bulk" });
    const s1 = await s.acquire({ priority: "system" });
    const i = track(s.acquire({ priority: "interactive" }));
    s1.release();
    await flush();
    assert.equal(permitOf(i).admission, "queued");
    assert.equal(b.preempted, false);
  });

  test("the preemptor's permit is itself preemptible by a higher class", async () => {
    const { s } = setup({ capacity: 1 });
    const b = await s.acquire({ priority: "bulk" });
    const d = await s.acquire({ priority: "interactive" });
    const sys = await s.acquire({ priority: "system" });
    assert.deepEqual([b.preempted, d.preempted, sys.preempted], [true, true, false]);
    assert.deepEqual(inflightByClass(s), [1, 0, 0, 0]);
    sys.release();
    assert.equal(s.inflight, 0);
  });

  describe("at the wait target (preempt_after_secs)", () => {
    const waitTarget = (extra: Partial<SchedulerOptions> = {}) =>
      setup({
        capacity: 1,
        classes: noReservations({ system: { preempt_after_secs: 0.5 } }),
        ...extra,
      });

    test("a waiter preempts only once it has waited its target with no slot freed", async () => {
      const { s, clock } = waitTarget();
      const bulk = await s.acquire({ priority: "bulk", tenant: "b" });
      const sys = track(s.acquire({ priority: "system", tenant: "s" }));
      clock.advance(499);
      await flush();
      assert.equal(sys.state, "pending");
      assert.equal(bulk.preempted, false);
      clock.advance(1);
      await flush();
      const p = permitOf(sys);
      assert.equal(bulk.preempted, true);
      assert.equal(p.admission, "queued");
      assert.equal(p.queueWaitMs, 500);
      assert.deepEqual(inflightByClass(s), [1, 0, 0, 0]);
      assert.equal(s.counters().admissions.bulk.preempted, 1);
    });

    test("a slot freed before the target saves the victim's work", async () => {
      const { s, clock } = waitTarget();
      const bulk = await s.acquire({ priority: "bulk", tenant: "b" });
      const sys = track(s.acquire({ priority: "system", tenant: "s" }));
      clock.advance(300);
      bulk.release();
      await flush();
      assert.equal(permitOf(sys).queueWaitMs, 300);
      clock.advance(1000);
      await flush();
      assert.equal(bulk.preempted, false);
      assert.equal(s.counters().admissions.bulk.preempted, 0);
    });

    test("a class that may not queue (queue_size 0) preempts at once", async () => {
      const { s } = setup({
        capacity: 1,
        classes: noReservations({ system: { preempt_after_secs: 0.5, queue_size: 0 } }),
      });
      const bulk = await s.acquire({ priority: "bulk" });
      const sys = await s.acquire({ priority: "system" });
      assert.equal(bulk.preempted, true);
      assert.equal(sys.admission, "fast");
    });

    test("the victim is the one that throws away the least work, where the shell reports it", async () => {
      const progress = new Map<string, number>([
        ["old-long", 900],
        ["mid-short", 40],
        ["new-queued-in-engine", 120],
      ]);
      const { s, clock } = setup({
        capacity: 3,
        classes: noReservations({ system: { preempt_after_secs: 0.5 } }),
        preemptionCost: (p) => progress.get(p.tenant) ?? 0,
      });
      const permits = [];
      for (const tenant of progress.keys()) permits.push(await s.acquire({ priority: "bulk", tenant }));
      const sys = track(s.acquire({ priority: "system" }));
      clock.advance(500);
      await flush();
      assert.equal(permitOf(sys).class, "system");
      assert.deepEqual(
        permits.map((p) => p.preempted),
        [false, true, false],
      );
    });
  });
});

describe("tenant clamp and unknown priorities", () => {
  test("a tenant with max_class default sending system is admitted as default and cannot preempt", async () => {
    const { s, events } = setup({ capacity: 1, tenantPolicies: { "auth:low": { max_class: "default" } } });
    const b = await s.acquire({ priority: "bulk", tenant: "auth:other" });
    events.length = 0;
    const low = track(s.acquire({ priority: "system", tenant: "auth:low" }));
    await flush();
    assert.equal(low.state, "pending");
    assert.equal(b.preempted, false);
    assert.deepEqual(queuedByClass(s), [0, 0, 1, 0]);
    assert.equal(s.counters().clamps, 1);
    assert.deepEqual(events, [["clamp", "auth:low", "system", "default"]]);
    b.release();
    await flush();
    const p = permitOf(low);
    assert.equal(p.class, "default");
    assert.equal(p.requestedClass, "system");
  });

  test("tenants without a policy use defaultMaxClass (default: 'default')", async () => {
    const s = createTestScheduler({ capacity: 4, clock: new ManualClock(), classes: noReservations() });
    const p = await s.acquire({ priority: "interactive", tenant: "nobody" });
    assert.equal(p.class, "default");
    assert.equal(s.counters().clamps, 1);
    const q = await s.acquire({ priority: "bulk", tenant: "nobody" });
    assert.equal(q.class, "bulk");
    assert.equal(s.counters().clamps, 1);
    assert.deepEqual(s.classify("SYSTEM", "nobody"), {
      requested: "system",
      effective: "default",
      unknown: false,
    });
  });

  test("a policy without max_class falls back to defaultMaxClass; a higher max_class is honoured", async () => {
    const s = createTestScheduler({
      capacity: 4,
      clock: new ManualClock(),
      classes: noReservations(),
      defaultMaxClass: "bulk",
      tenantPolicies: { heavy: { weight: 3 }, ops: { max_class: "system" } },
    });
    assert.equal((await s.acquire({ priority: "system", tenant: "heavy" })).class, "bulk");
    assert.equal((await s.acquire({ priority: "system", tenant: "ops" })).class, "system");
    assert.equal((await s.acquire({ priority: "system", tenant: "stranger" })).class, "bulk");
    assert.equal(s.counters().clamps, 2);
  });

  test("unknown values degrade to default and are counted; missing values are not", async () => {
    const { s, events } = setup({ capacity: 8 });
    assert.equal((await s.acquire({ priority: "urgent", tenant: "t1" })).class, "default");
    assert.equal((await s.acquire({ priority: "", tenant: "t2" })).class, "default");
    assert.equal((await s.acquire({ tenant: "t3" })).class, "default");
    assert.equal((await s.acquire({ priority: null, tenant: "t4" })).class, "default");
    assert.equal((await s.acquire({ priority: " SyStEm ", tenant: "t5" })).class, "system");
    assert.equal(s.counters().unknownPriority, 2);
    assert.deepEqual(
      events.filter((e) => e[0] === "unknownPriority"),
      [
        ["unknownPriority", "t1"],
        ["unknownPriority", "t2"],
      ],
    );
  });
});

describe("release, counters and observer", () => {
  test("release is idempotent: a double release frees one slot and admits one waiter", async () => {
    const { s } = setup({ capacity: 1 });
    const holder = await s.acquire();
    const w1 = track(s.acquire({ tenant: "w1" }));
    const w2 = track(s.acquire({ tenant: "w2" }));
    holder.release();
    holder.release();
    await flush();
    assert.equal(w1.state, "resolved");
    assert.equal(w2.state, "pending");
    assert.equal(s.inflight, 1);
    permitOf(w1).release();
    permitOf(w1).release();
    await flush();
    permitOf(w2).release();
    permitOf(w2).release();
    assert.equal(s.inflight, 0);
    assert.equal(s.snapshot().classes.default.inflight, 0);
    // markFirstByte after release is harmless.
    assert.equal(holder.markFirstByte(), true);
  });

  test("counters and observer callbacks over a mixed scenario", async () => {
    const { s, clock, events } = setup({
      capacity: 1,
      tenantPolicies: { capped: { max_class: "bulk" } },
      classes: noReservations({
        default: { can_preempt: true },
        bulk: { queue_size: 1, queue_timeout_secs: 2, starvation_threshold_secs: 50 },
      }),
    });
    const a = await s.acquire({ priority: "bulk", tenant: "a" }); // admitted (fast)
    const ac = new AbortController();
    const q = track(s.acquire({ priority: "Default", tenant: "capped", signal: ac.signal })); // clamped, queued
    const full = track(s.acquire({ priority: "bulk", tenant: "f" })); // bulk queue full
    clock.advance(500);
    ac.abort(); // cancelled after 0.5 s
    const t = track(s.acquire({ priority: "bulk", tenant: "t" })); // queued, will time out
    clock.advance(2000); // t times out at 2.5 s
    const sys = await s.acquire({ priority: "sys", tenant: "u" }); // unknown -> default, preempts a
    await flush();
    assert.equal(errorOf(q).code, "scheduler_client_cancelled");
    assert.equal(errorOf(full).code, "scheduler_queue_full");
    assert.equal(errorOf(t).code, "scheduler_queue_timeout");
    assert.equal(sys.class, "default");
    assert.equal(a.preempted, true);

    const c = s.counters();
    assert.deepEqual(c.admissions.bulk, {
      admitted: 1,
      rejected_queue_full: 1,
      rejected_queue_timeout: 1,
      preempted: 1,
      client_cancelled: 1,
    });
    assert.deepEqual(c.admissions.default, {
      admitted: 1,
      rejected_queue_full: 0,
      rejected_queue_timeout: 0,
      preempted: 0,
      client_cancelled: 0,
    });
    assert.equal(c.clamps, 1);
    assert.equal(c.unknownPriority, 1);
    assert.deepEqual(c.preemptions.bulk, { bulk: 0, default: 1, interactive: 0, system: 0 });
    assert.deepEqual(events, [
      ["admission", "bulk", "admitted", "a"],
      ["queueWait", "bulk", 0, "admitted"],
      ["clamp", "capped", "default", "bulk"],
      ["admission", "bulk", "rejected_queue_full", "f"],
      ["admission", "bulk", "client_cancelled", "capped"],
      ["queueWait", "bulk", 0.5, "client_cancelled"],
      ["admission", "bulk", "rejected_queue_timeout", "t"],
      ["queueWait", "bulk", 2, "rejected_queue_timeout"],
      ["unknownPriority", "u"],
      ["preemption", "bulk", "default"],
      ["admission", "bulk", "preempted", "a"],
      ["admission", "default", "admitted", "u"],
      ["queueWait", "default", 0, "admitted"],
    ]);
  });
});

describe("fair queuing hooks", () => {
  /** capacity 1, bulk only: A and B each queue `n` requests of cost 1 behind a holder. */
  async function twoTenants(n: number) {
    const h = setup({ capacity: 1 });
    const holder = await h.s.acquire({ priority: "bulk", tenant: "h" });
    const t = orderTracker(h.s);
    for (let i = 1; i <= n; i++) t.add(`A${i}`, { priority: "bulk", tenant: "A" });
    for (let i = 1; i <= n; i++) t.add(`B${i}`, { priority: "bulk", tenant: "B" });
    return { ...h, holder, t };
  }

  async function drain(
    holder: SchedulerPermit,
    t: ReturnType<typeof orderTracker>,
    n: number,
    onAdmit?: (p: SchedulerPermit) => void,
  ) {
    let current = holder;
    for (let i = 0; i < n; i++) {
      current.release();
      await flush();
      current = t.last();
      onAdmit?.(current);
    }
    current.release();
  }

  test("without corrections two equal tenants alternate", async () => {
    const { holder, t } = await twoTenants(4);
    await drain(holder, t, 8);
    assert.deepEqual(t.order, ["A1", "B1", "A2", "B2", "A3", "B3", "A4", "B4"]);
  });

  test("adjustCost on a queued permit shifts that tenant's later share", async () => {
    const { s, holder, t } = await twoTenants(7);
    let adjusted = false;
    await drain(holder, t, 14, (p) => {
      if (!adjusted && p.tenant === "A") {
        adjusted = true;
        assert.equal(p.admission, "queued");
        s.adjustCost(p, 5); // A1 actually cost 5, not 1: A owes 4 more units
      }
    });
    assert.deepEqual(t.order.slice(0, 9), ["A1", "B1", "B2", "B3", "B4", "B5", "A2", "B6", "A3"]);
  });

  test("adjustCost on a fast-path permit charges its own tenant only", async () => {
    const { s, holder, t } = await twoTenants(3);
    s.adjustCost(holder, 100); // the holder's tenant "h" pays; A and B are untouched
    await drain(holder, t, 6);
    assert.deepEqual(t.order, ["A1", "B1", "A2", "B2", "A3", "B3"]);
  });

  test("a lower actual cost gives the tenant its turn back sooner", async () => {
    const h = setup({ capacity: 1 });
    const holder = await h.s.acquire({ priority: "bulk", tenant: "h" });
    const t = orderTracker(h.s);
    for (let i = 1; i <= 3; i++) t.add(`A${i}`, { priority: "bulk", tenant: "A", cost: 4 });
    for (let i = 1; i <= 6; i++) t.add(`B${i}`, { priority: "bulk", tenant: "B", cost: 1 });
    let adjusted = false;
    await drain(holder, t, 9, (p) => {
      if (!adjusted && p.tenant === "A") {
        adjusted = true;
        h.s.adjustCost(p, 1); // A1 cost 1 after all
      }
    });
    // Counters of service received: A and B start equal, A1 goes first (older head) and charges 4.
    // Corrected to cost 1, A is level with B after B1 and A2 goes next (older head), instead of
    // after B4 as it would with the estimate standing.
    assert.deepEqual(t.order, ["A1", "B1", "A2", "B2", "B3", "B4", "B5", "A3", "B6"]);
  });

  test("tenant weights from policy order a contended class", async () => {
    const h = setup({ capacity: 1, tenantPolicies: { heavy: { weight: 3 } } });
    const holder = await h.s.acquire({ priority: "bulk", tenant: "h" });
    const t = orderTracker(h.s);
    for (let i = 1; i <= 6; i++) t.add(`H${i}`, { priority: "bulk", tenant: "heavy" });
    for (let i = 1; i <= 2; i++) t.add(`L${i}`, { priority: "bulk", tenant: "light" });
    await drain(holder, t, 8);
    // The flow with the least service per weight goes first (ties: the older head). heavy's counter
    // runs 0, 1/3, 2/3, 1, 4/3, ...; light's 0, 1, 2: three heavy per light in every window of four.
    assert.deepEqual(t.order, ["H1", "L1", "H2", "H3", "H4", "L2", "H5", "H6"]);
  });
});

describe("snapshot", () => {
  test("utilization and per-class fields", async () => {
    const { s } = setup({
      capacity: 4,
      classes: noReservations({ system: { reserved_floor: 1 }, bulk: { queue_size: 4 } }),
    });
    let snap = s.snapshot();
    assert.equal(snap.capacity, 4);
    assert.equal(snap.utilization, 0);
    assert.equal(snap.classes.system.capacityPressure, 0);
    assert.equal(snap.classes.bulk.capacityPressure, 0.25); // 1 of 4 slots held back for system
    for (let i = 0; i < 5; i++) track(s.acquire({ priority: "bulk" }));
    await flush();
    snap = s.snapshot();
    assert.equal(snap.inflight, 3);
    assert.equal(snap.queued, 2);
    assert.equal(snap.utilization, 0.75);
    assert.deepEqual(snap.classes.bulk, {
      inflight: 3,
      queued: 2,
      queueLimit: 4,
      reserved: 0,
      headroom: 0,
      capacityPressure: 1,
    });
    assert.deepEqual(snap.classes.system, {
      inflight: 0,
      queued: 0,
      queueLimit: 64,
      reserved: 1,
      headroom: 1,
      capacityPressure: 0.75,
    });
    for (const cls of ["system", "interactive", "default", "bulk"] as const) {
      const p = snap.classes[cls].capacityPressure;
      assert.ok(p >= 0 && p <= 1, `${cls} pressure ${p}`);
    }
    s.setCapacity(0);
    snap = s.snapshot();
    assert.equal(snap.utilization, 1); // in flight with no capacity
    for (const cls of ["system", "interactive", "default", "bulk"] as const) {
      assert.equal(snap.classes[cls].capacityPressure, 1);
      assert.equal(snap.classes[cls].reserved, 0);
    }
  });

  test("an empty scheduler at capacity 0 reports utilization 0", () => {
    const { s } = setup({ capacity: 0 });
    assert.equal(s.snapshot().utilization, 0);
    assert.equal(s.snapshot().inflight, 0);
  });
});

/**
 * The `strict` reference-behaviour scheduler (priority, FIFO inside a class, arrivals taking a freed
 * slot ahead of waiters during the wake-up), the SimClock's event order, the PRNG's determinism,
 * and the report's statistics (percentiles, Jain's index, the pairwise service gap).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveClassSettings } from "@sluice/scheduler/core/config.js";
import { EventQueue, SimClock } from "../../src/sim/clock.js";
import { FairnessGroup, stretchTime } from "../../src/sim/fairness.js";
import { jain, latency } from "../../src/sim/report.js";
import { Rng } from "../../src/sim/rng.js";
import { type StrictPermit, StrictScheduler } from "../../src/sim/strict.js";
import { ticks } from "../../src/sim/svg.js";

function strict(capacity: number, wakeupMs: number) {
  const queue = new EventQueue();
  const clock = new SimClock(queue, 0);
  const classes = resolveClassSettings({
    system: { reserved_floor: 0 },
    interactive: { reserved_floor: 0, can_preempt: false },
    default: { reserved_floor: 0 },
    bulk: { reserved_floor: 0, queue_timeout_secs: 10 },
  });
  const s = new StrictScheduler({
    capacity,
    classes,
    tenantPolicies: new Map([["auth:low", { max_class: "bulk" }]]),
    defaultMaxClass: "interactive",
    clock,
    wakeupMs,
  });
  const advance = async (to: number) => {
    while (queue.peekTime() <= to) {
      const ev = queue.pop()!;
      clock.current = ev.t;
      ev.fn();
    }
    clock.current = to;
    await new Promise((r) => setImmediate(r));
  };
  return { s, clock, advance };
}

test("strict: classes in priority order, FIFO inside a class, the max_class clamp", async () => {
  const { s, advance } = strict(1, 0);
  const order: string[] = [];
  const first = await s.acquire({ priority: "interactive", tenant: "auth:a" });
  const track = (name: string, p: Promise<StrictPermit>) =>
    p.then((permit) => {
      order.push(name);
      return permit;
    });
  const low = track("clamped", s.acquire({ priority: "system", tenant: "auth:low" })); // clamped to bulk
  const b1 = track("default-1", s.acquire({ priority: "default", tenant: "auth:a" }));
  const b2 = track("default-2", s.acquire({ priority: "default", tenant: "auth:b" }));
  const hi = track("interactive", s.acquire({ priority: "interactive", tenant: "auth:c" }));
  first.release();
  for (const p of [hi, b1, b2, low]) {
    await advance(0);
    (await p).release();
  }
  assert.deepEqual(order, ["interactive", "default-1", "default-2", "clamped"]);
  assert.equal(s.clamps, 1);
});

test("strict: an arrival takes a freed slot ahead of a waiter during the wake-up", async () => {
  const { s, clock, advance } = strict(1, 1);
  const held = await s.acquire({ priority: "default", tenant: "auth:a" });
  let waiterAdmitted = false;
  const waiter = s.acquire({ priority: "default", tenant: "auth:b" }).then((p) => {
    waiterAdmitted = true;
    return p;
  });
  held.release(); // the waiter is woken 1 ms from now
  const jumper = await s.acquire({ priority: "default", tenant: "auth:c" });
  assert.equal(jumper.queueWaitMs, 0);
  await advance(5);
  assert.equal(waiterAdmitted, false, "the jumper holds the only slot");
  jumper.release();
  await advance(clock.now() + 2);
  assert.equal(waiterAdmitted, true);
  (await waiter).release();
});

test("strict: queue timeouts reject with 408 scheduler_queue_timeout at their instant", async () => {
  const { s, advance } = strict(1, 0);
  await s.acquire({ priority: "bulk", tenant: "auth:a" });
  const late = s.acquire({ priority: "bulk", tenant: "auth:b" });
  const result = late.then(
    () => "admitted",
    (e: { code: string }) => e.code,
  );
  await advance(9_999);
  let settled = false;
  void result.then(() => {
    settled = true;
  });
  await advance(9_999.99);
  assert.equal(settled, false);
  await advance(10_000.001); // timers fire a nanosecond after their deadline (SimClock)
  assert.equal(await result, "scheduler_queue_timeout");
});

test("the event queue runs events in time order, ties in scheduling order; cancelled ones never", () => {
  const q = new EventQueue();
  const seen: string[] = [];
  q.schedule(5, () => seen.push("c"));
  q.schedule(1, () => seen.push("a"));
  const dead = q.schedule(3, () => seen.push("x"));
  q.schedule(1, () => seen.push("b"));
  dead.dead = true;
  for (let e = q.pop(); e; e = q.pop()) e.fn();
  assert.deepEqual(seen, ["a", "b", "c"]);
});

test("the PRNG is deterministic per seed and stream, and uniform enough", () => {
  const a = Rng.stream(1, "x");
  const b = Rng.stream(1, "x");
  const c = Rng.stream(1, "y");
  const xs = Array.from({ length: 5 }, () => a.next());
  assert.deepEqual(
    xs,
    Array.from({ length: 5 }, () => b.next()),
  );
  assert.notDeepEqual(
    xs,
    Array.from({ length: 5 }, () => c.next()),
  );
  const r = Rng.stream(42, "mean");
  let sum = 0;
  let exp = 0;
  for (let i = 0; i < 100_000; i++) {
    sum += r.next();
    exp += r.exponential(2);
  }
  assert.ok(Math.abs(sum / 100_000 - 0.5) < 0.01);
  assert.ok(Math.abs(exp / 100_000 - 2) < 0.05);
});

test("statistics: nearest-rank percentiles, Jain's index, tick steps", () => {
  const l = latency(Float64Array.from([5, 1, Number.NaN, 3, 2, 4]));
  assert.deepEqual(l, { n: 5, mean: 3, p50: 3, p90: 5, p99: 5, max: 5 });
  assert.equal(latency(new Float64Array(0)).p99, null);
  assert.equal(jain([1, 1, 1, 1]), 1);
  assert.equal(jain([1, 0, 0, 0]), 0.25);
  assert.deepEqual(ticks(128), [0, 50, 100, 150]);
});

test("fairness: shares only while all are backlogged; the gap is the largest swing over a co-backlogged stretch", () => {
  const g = new FairnessGroup(0, [0, 1], [1, 2], 2, [
    { name: "all", fromMs: 0, toMs: Number.POSITIVE_INFINITY },
  ]);
  g.queued(0, 0);
  g.dispatched(0, 100, 100, 1); // tenant 1 not backlogged: no share counted
  g.left(0, 1);
  g.queued(0, 2);
  g.queued(1, 2);
  g.queued(0, 2);
  g.dispatched(0, 300, 300, 3); // +300 for tenant 0 (weight 1)
  g.left(0, 3);
  g.dispatched(1, 200, 200, 4); // +100 per weight for tenant 1 (weight 2)
  g.left(1, 4); // tenant 1 drains: the stretch ends
  g.close(10);
  const w = g.windows[0]!;
  assert.deepEqual([...w.service], [300, 200]);
  assert.equal(w.backloggedMs, 2);
  assert.equal(w.largestGap().gap, 300);
  assert.equal(g.maxEstimate, 300);
});

test("fairness: shares spread each completed request's tokens over its time in the fleet, inside the backlogged stretches (issue 36)", () => {
  const g = new FairnessGroup(0, [0, 1], [2, 1], 2, [
    { name: "all", fromMs: 0, toMs: Number.POSITIVE_INFINITY },
  ]);
  g.queued(0, 0);
  g.queued(1, 0); // both backlogged from 0
  g.left(0, 100); // ... to 100: one stretch [0, 100)
  g.queued(0, 200);
  g.left(0, 200.5); // a stretch of half a millisecond
  g.close(1000);
  // Tenant 0: 1,000 tokens served over [-100, 100): half inside the stretch. Tenant 1: 300 over
  // [50, 350): 50 of its 300 ms inside the first stretch, and 0.5 ms inside the second.
  g.completed(0, -100, 100, 1000);
  g.completed(1, 50, 350, 300);
  const w = g.windows[0]!.window;
  assert.deepEqual([...g.spreadService(w)], [500, 50.5]);
  assert.deepEqual(g.stretches, [0, 100, 200, 200.5]);
  // Stretches shorter than the minimum are left out of the sustained shares.
  assert.deepEqual([...g.spreadService(w, 10)], [500, 50]);
  assert.equal(stretchTime(g.stretches, w, 10), 100);
});

/**
 * What is charged when (docs/fairness.md), each rule on its own, through the public TestScheduler API
 * on a manual clock: fast path, preemption refund, corrections (once, twice, after release, on a
 * preempted permit), leaving the middle of a flow, absurd costs, float precision after a very long
 * run, starvation promotion, and the timer regression found on the way (fractional deadlines).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { SchedulerPermit } from "@sluice/scheduler/core/inflight.js";
import { ManualClock, type SchedulerOptions } from "../../src/index.js";
import {
  createTestScheduler,
  flush,
  GuardedClock,
  noReservations,
  type TestScheduler,
  type Tracked,
  track,
} from "./helpers.js";

function setup(options: Partial<SchedulerOptions> & { capacity: number }) {
  const clock = new ManualClock();
  const s = createTestScheduler({
    clock,
    defaultMaxClass: "system",
    classes: noReservations({
      bulk: { queue_size: 100_000, queue_timeout_secs: 1e6, starvation_threshold_secs: 1e6 },
      system: { can_preempt: true },
    }),
    ...options,
  });
  return { s, clock };
}

/** Labelled bulk acquires, recording the order in which they are admitted. */
function tracker(s: TestScheduler) {
  const order: string[] = [];
  const permits = new Map<string, SchedulerPermit>();
  const all = new Map<string, Tracked<SchedulerPermit>>();
  const add = (label: string, tenant: string, cost = 1, signal?: AbortSignal) => {
    const t = track(s.acquire({ priority: "bulk", tenant, cost, signal }));
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
  /** Releases `holder`, then each newly admitted permit in turn, `n` times. */
  const drain = async (
    holder: SchedulerPermit,
    n: number,
    onAdmit?: (label: string, p: SchedulerPermit) => void,
  ) => {
    let current = holder;
    for (let i = 0; i < n; i++) {
      current.release();
      await flush();
      const label = order.at(-1)!;
      current = permits.get(label)!;
      onAdmit?.(label, current);
    }
    current.release();
    await flush();
  };
  return { order, permits, all, add, drain };
}

describe("what is charged when", () => {
  test("fast-path admissions are charged: a burst into an idle class is service received", async () => {
    const { s } = setup({ capacity: 4 });
    // A bursts 4 requests while the class is idle: all fast path.
    const burst = await Promise.all([1, 2, 3, 4].map(() => s.acquire({ priority: "bulk", tenant: "A" })));
    assert.ok(burst.every((p) => p.admission === "fast"));
    const t = tracker(s);
    t.add("A5", "A");
    for (let i = 1; i <= 4; i++) t.add(`B${i}`, "B");
    await flush();
    // As A's requests finish, B (lifted to A's settled service, not to its pending burst) goes
    // first until it has received as much; only then does A5 (the older head) win the tie.
    for (const p of burst) {
      p.release();
      await flush();
    }
    assert.deepEqual(t.order, ["B1", "B2", "B3", "B4"]);
    for (const label of ["B1", "B2", "B3"]) t.permits.get(label)!.release();
    await flush();
    assert.deepEqual(t.order, ["B1", "B2", "B3", "B4", "A5"]);
  });

  test("a request preempted before its first byte is refunded in full", async () => {
    const { s } = setup({ capacity: 1 });
    const victim = await s.acquire({ priority: "bulk", tenant: "V", cost: 100 });
    const sys = await s.acquire({ priority: "system", tenant: "S" }); // takes V's slot
    assert.equal(victim.preempted, true);
    s.adjustCost(victim, 5000); // ignored: a preempted permit was refunded and stays so
    const t = tracker(s);
    t.add("W1", "W");
    t.add("W2", "W");
    t.add("W3", "W");
    t.add("V2", "V");
    await t.drain(sys, 4);
    // V was charged nothing for the preempted request: V2 goes right after W1, not after W's 100.
    assert.deepEqual(t.order, ["W1", "V2", "W2", "W3"]);
  });

  test("adjustCost corrects fast-path permits too; a second call corrects relative to the first", async () => {
    const { s } = setup({ capacity: 1 });
    const a1 = await s.acquire({ priority: "bulk", tenant: "A", cost: 1 });
    assert.equal(a1.admission, "fast");
    s.adjustCost(a1, 10); // A owes 9 more
    s.adjustCost(a1, 3); // the last report stands: A's request cost 3
    const t = tracker(s);
    t.add("A2", "A");
    for (let i = 1; i <= 4; i++) t.add(`B${i}`, "B");
    await t.drain(a1, 5);
    // A at 3 (its 1 refined to 3), B lifted to A's settled 0: B gets 3 first, then A2 wins the tie.
    assert.deepEqual(t.order, ["B1", "B2", "B3", "A2", "B4"]);
  });

  test("adjustCost after release still corrects the tenant", async () => {
    const { s } = setup({ capacity: 1 });
    const holder = await s.acquire({ priority: "bulk", tenant: "H" });
    const t = tracker(s);
    t.add("A1", "A");
    for (let i = 1; i <= 4; i++) t.add(`B${i}`, "B");
    t.add("A2", "A");
    await t.drain(holder, 6, (label, p) => {
      if (label === "A1") {
        p.release(); // released first (the estimate of 1 stands)...
        s.adjustCost(p, 4); // ...then the actual arrives: A owes 3 more
      }
    });
    assert.deepEqual(t.order, ["A1", "B1", "B2", "B3", "B4", "A2"]);
  });

  test("an overestimate is credited back without clamping, while the tenant stays backlogged", async () => {
    const { s } = setup({ capacity: 1 });
    const holder = await s.acquire({ priority: "bulk", tenant: "H" });
    const t = tracker(s);
    for (let i = 1; i <= 4; i++) t.add(`A${i}`, "A", 10); // estimates of 10...
    for (let i = 1; i <= 8; i++) t.add(`B${i}`, "B", 1);
    await t.drain(holder, 12, (label, p) => {
      if (label.startsWith("A")) s.adjustCost(p, 1); // ...that really cost 1
    });
    // With the credit back A is level with B after each of its requests: A and B alternate.
    assert.deepEqual(t.order.slice(0, 8), ["A1", "B1", "A2", "B2", "A3", "B3", "A4", "B4"]);
  });

  test("a waiter that leaves from the middle of its flow charges nothing and moves nobody", async () => {
    const run = async (cancelMiddle: boolean) => {
      const { s } = setup({ capacity: 1 });
      const holder = await s.acquire({ priority: "bulk", tenant: "H" });
      const t = tracker(s);
      const ctl = new AbortController();
      t.add("A1", "A", 2);
      t.add("A2", "A", 5, ctl.signal);
      t.add("A3", "A", 2);
      for (let i = 1; i <= 6; i++) t.add(`B${i}`, "B", 1);
      if (cancelMiddle) ctl.abort();
      await flush();
      await t.drain(holder, cancelMiddle ? 8 : 9);
      return t.order;
    };
    const full = await run(false);
    const without = await run(true);
    // Per-flow counters, not per-item tags: A2 leaving changes nothing but A2 itself. (A2's own
    // cost was never charged, so A3 follows A1 exactly where A2 would have.)
    assert.deepEqual(
      without,
      full.map((l) => (l === "A2" ? "A3" : l === "A3" ? null : l)).filter((l) => l !== null),
    );
  });

  test("a starvation promotion admits the class's fair head, charged like any dispatch (issue 36)", async () => {
    const { s, clock } = setup({
      capacity: 1,
      classes: noReservations({
        bulk: { queue_size: 1000, queue_timeout_secs: 1e6, starvation_threshold_secs: 1 },
      }),
    });
    // A has received 10 already, so fair order serves B first.
    const a0 = await s.acquire({ priority: "bulk", tenant: "A", cost: 10 });
    const t = tracker(s);
    t.add("A1", "A", 1);
    clock.advance(100);
    for (let i = 1; i <= 12; i++) t.add(`B${i}`, "B", 1);
    clock.advance(900); // A1 reaches its starvation mark; the B's are 100 ms short of theirs
    a0.release();
    await flush();
    // The mark lets the class take the slot out of priority order; inside the class fair order
    // decides, so B1 (the fair head), not A1 (the oldest), is admitted as the promotion.
    assert.deepEqual(t.order, ["B1"]);
    assert.equal(t.permits.get("B1")!.promoted, true);
    // B catches up to A's 10, then A1 wins the tie with its older head; the B's after it follow.
    await t.drain(t.permits.get("B1")!, 12);
    assert.deepEqual(t.order, [...Array.from({ length: 10 }, (_, i) => `B${i + 1}`), "A1", "B11", "B12"]);
    // While A1 waited past its mark every dispatch was a promotion; after it, none (no B is past its own).
    assert.ok(t.order.slice(0, 11).every((l) => t.permits.get(l)!.promoted));
    assert.ok(t.order.slice(11).every((l) => !t.permits.get(l)!.promoted));
  });

  test("a class whose waiters all aged past the mark is still served in fair order (issue 36)", async () => {
    const { s, clock } = setup({
      capacity: 1,
      classes: noReservations({
        bulk: { queue_size: 1000, queue_timeout_secs: 1e6, starvation_threshold_secs: 1 },
      }),
    });
    const a0 = await s.acquire({ priority: "bulk", tenant: "A", cost: 10 });
    const t = tracker(s);
    for (let i = 1; i <= 20; i++) t.add(`A${i}`, "A", 1);
    clock.advance(100);
    for (let i = 1; i <= 20; i++) t.add(`B${i}`, "B", 1);
    clock.advance(5000); // every waiter is past its mark; A's are the oldest
    await t.drain(a0, 19);
    // Before: every dispatch promoted the oldest waiter, A1..A20 in arrival order (the class served
    // FIFO, weights ignored). Now B, 10 behind, gets its 10, then the two alternate (ties to the
    // older head), each admission still a promotion.
    assert.deepEqual(t.order.slice(0, 20), [
      ...Array.from({ length: 10 }, (_, i) => `B${i + 1}`),
      ...Array.from({ length: 5 }, (_, i) => [`A${i + 1}`, `B${i + 11}`]).flat(),
    ]);
    assert.ok(t.order.slice(0, 20).every((l) => t.permits.get(l)!.promoted));
  });
});

describe("robustness of the counters", () => {
  test("an absurd estimate (1e30) only ever hurts its own tenant", async () => {
    const { s } = setup({ capacity: 1, tenantPolicies: { B: { weight: 3 } } });
    const x = await s.acquire({ priority: "bulk", tenant: "X", cost: 1e30 });
    const t = tracker(s);
    t.add("X2", "X", 1);
    for (let i = 1; i <= 20; i++) t.add(`A${i}`, "A", 1);
    for (let i = 1; i <= 60; i++) t.add(`B${i}`, "B", 3); // same service per request in weight units
    await t.drain(x, 81);
    // A (weight 1, cost 1) and B (weight 3, cost 3) keep exact alternation: precision intact.
    const ab = t.order.filter((l) => l !== "X2");
    for (let i = 0; i < 40; i += 2)
      assert.deepEqual([ab[i]![0], ab[i + 1]![0]], ["A", "B"], `at ${i}: ${ab.slice(i, i + 2)}`);
    // X's estimate stood (no correction): X2 waits until the others have nothing left.
    assert.equal(t.order.indexOf("X2"), 80);
  });

  test("an absurd estimate corrected by its actual puts the tenant back at once", async () => {
    const { s } = setup({ capacity: 1 });
    const x = await s.acquire({ priority: "bulk", tenant: "X", cost: 1e30 });
    const t = tracker(s);
    t.add("X2", "X", 1);
    for (let i = 1; i <= 6; i++) t.add(`A${i}`, "A", 1);
    s.adjustCost(x, 2); // it really cost 2
    await t.drain(x, 7);
    // No residue of 1e30 (nor of rounding at that magnitude): X is at 2, A at 0 -> A1, A2, X2.
    assert.deepEqual(t.order.slice(0, 4), ["A1", "A2", "X2", "A3"]);
  });

  test("counters stay exact after the floor has passed 2^53 (renormalization)", async () => {
    const { s } = setup({ capacity: 1, tenantPolicies: { B: { weight: 3 } } });
    // 20,000 requests of 2^40 tokens each move every counter past 2^54.
    let holder = await s.acquire({ priority: "bulk", tenant: "A", cost: 2 ** 40 });
    for (let i = 0; i < 20_000; i++) {
      const next = s.acquire({ priority: "bulk", tenant: i % 2 === 0 ? "B" : "A", cost: 3 * 2 ** 40 });
      holder.release();
      holder = await next;
    }
    const t = tracker(s);
    for (let i = 1; i <= 10; i++) t.add(`A${i}`, "A", 1);
    for (let i = 1; i <= 30; i++) t.add(`B${i}`, "B", 1);
    s.adjustCost(holder, 0);
    await t.drain(holder, 40);
    // Weight 3 vs 1 with unit costs: B gets 3 for each A in every window of 4. At 2^54 without
    // renormalization a unit charge would round away and this would degrade to arrival order.
    const window = t.order.slice(4, 36);
    for (let i = 0; i < window.length; i += 4) {
      const chunk = window.slice(i, i + 4);
      assert.equal(chunk.filter((l) => l.startsWith("A")).length, 1, `window ${i}: ${chunk}`);
    }
  });

  test("invalid costs: acquire refuses them, adjustCost ignores them", async () => {
    const { s } = setup({ capacity: 1 });
    for (const cost of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      await assert.rejects(s.acquire({ priority: "bulk", tenant: "A", cost }), RangeError);
    }
    const p = await s.acquire({ priority: "bulk", tenant: "A", cost: 5 });
    for (const actual of [-1, Number.NaN, Number.NEGATIVE_INFINITY]) s.adjustCost(p, actual);
    s.adjustCost(p, Number.POSITIVE_INFINITY); // counts as the ceiling, 2^40: A pays dearly
    const t = tracker(s);
    t.add("A2", "A");
    t.add("B1", "B");
    t.add("B2", "B");
    await t.drain(p, 3);
    // The invalid reports changed nothing; the infinite one made A's request cost 2^40.
    assert.deepEqual(t.order, ["B1", "B2", "A2"]);
  });
});

describe("queue timeouts on fractional instants", () => {
  test("a deadline whose float sum rounds down fires once, not forever", async () => {
    const clock = new GuardedClock();
    const s = createTestScheduler({
      capacity: 1,
      clock,
      classes: noReservations({ bulk: { queue_timeout_secs: 2, starvation_threshold_secs: 1e6 } }),
    });
    const holder = await s.acquire({ priority: "bulk", tenant: "H" });
    clock.advance(48.2); // (48.2 + 2000) - 48.2 === 1999.9999999999998 < 2000
    const w = track(s.acquire({ priority: "bulk", tenant: "W" }));
    clock.advance(2000);
    await flush();
    assert.equal(w.state, "rejected");
    assert.ok(clock.fired <= 2, `fired ${clock.fired} timers`);
    holder.release();
  });
});

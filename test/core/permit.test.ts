/**
 * The holder's side of admission: the read-only Permit (effectiveClass, settle) and the minimal
 * CancelSignal that both the scheduler and the legacy limiter accept in place of an AbortSignal.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createLegacyLimiter } from "@sluice/scheduler/core/legacy.js";
import {
  type CancelSignal,
  ClientCancelledError,
  createScheduler,
  ManualClock,
  type Permit,
  type Scheduler,
} from "../../src/index.js";
import { errorOf, flush, noReservations, permitOf, track } from "./helpers.js";

/** A cancellation signal that is not an AbortSignal: what the gateway passes per request. */
class LazySignal implements CancelSignal {
  aborted = false;
  added = 0;
  removed = 0;
  private listener: (() => void) | undefined;
  addEventListener(_type: "abort", listener: () => void): void {
    this.added++;
    this.listener = listener;
  }
  removeEventListener(_type: "abort", listener: () => void): void {
    if (this.listener !== listener) return;
    this.removed++;
    this.listener = undefined;
  }
  fire(): void {
    this.aborted = true;
    const listener = this.listener;
    this.listener = undefined;
    listener?.();
  }
}

function oneSlot(): Scheduler {
  return createScheduler({
    capacity: 1,
    clock: new ManualClock(),
    defaultMaxClass: "system",
    classes: noReservations({ bulk: { queue_timeout_secs: 1e6, starvation_threshold_secs: 1e6 } }),
  });
}

/**
 * Tenant A holds the one slot with an estimate of 100, then A and B queue one request each (A's
 * first). `report` settles A's permit (or not) before it releases; returns who was served first.
 */
async function firstServedAfter(report: (s: Scheduler, a1: Permit) => void): Promise<string> {
  const s = oneSlot();
  const a1 = await s.acquire({ priority: "bulk", tenant: "A", cost: 100 });
  const order: string[] = [];
  void s.acquire({ priority: "bulk", tenant: "A", cost: 1 }).then(() => order.push("A"));
  void s.acquire({ priority: "bulk", tenant: "B", cost: 1 }).then(() => order.push("B"));
  report(s, a1);
  a1.release();
  await flush();
  return order.join(",");
}

describe("Permit", () => {
  test("effectiveClass is class; requestedClass is what was asked for", async () => {
    const s = createScheduler({
      capacity: 500,
      clock: new ManualClock(),
      tenantPolicies: { "auth:capped": { max_class: "default" } },
    });
    const p = await s.acquire({ priority: "system", tenant: "auth:capped" });
    assert.equal(p.class, "default");
    assert.equal(p.effectiveClass, "default");
    assert.equal(p.requestedClass, "system");
    assert.equal(p.tenant, "auth:capped");
    assert.equal(p.admission, "fast");
    assert.equal(p.queueWaitMs, 0);
    p.release();
  });

  test("settle(actual) is adjustCost(permit, actual): it replaces the estimate in the fair share", async () => {
    // Unsettled, A is charged its estimate of 100 and B goes first; settled to 0, A's older head wins the tie.
    assert.equal(await firstServedAfter(() => {}), "B");
    assert.equal(await firstServedAfter((_s, a1) => a1.settle(0)), "A");
    assert.equal(await firstServedAfter((s, a1) => s.adjustCost(a1, 0)), "A");
  });

  test("adjustCost with another scheduler's permit corrects the scheduler that granted it", async () => {
    const other = oneSlot();
    assert.equal(await firstServedAfter((_s, a1) => other.adjustCost(a1, 0)), "A");
    assert.equal(other.inflight, 0);
  });
});

describe("CancelSignal: any object with aborted and the two listener methods", () => {
  test("scheduler: a fast-path admission never registers a listener", async () => {
    const s = oneSlot();
    const signal = new LazySignal();
    const p = await s.acquire({ priority: "bulk", signal });
    assert.equal(signal.added, 0);
    p.release();
  });

  test("scheduler: firing it while queued cancels; admission removes the listener", async () => {
    const s = oneSlot();
    const holder = await s.acquire({ priority: "bulk" });
    const leaving = new LazySignal();
    const staying = new LazySignal();
    const w1 = track(s.acquire({ priority: "bulk", signal: leaving }));
    const w2 = track(s.acquire({ priority: "bulk", signal: staying }));
    assert.deepEqual([leaving.added, staying.added], [1, 1]);
    leaving.fire();
    await flush();
    assert.ok(errorOf(w1) instanceof ClientCancelledError);
    assert.equal(errorOf(w1).code, "scheduler_client_cancelled");
    holder.release();
    await flush();
    assert.equal(staying.removed, 1, "the admitted waiter's listener is removed");
    permitOf(w2).release();
    assert.deepEqual([s.inflight, s.queued], [0, 0]);
  });

  test("scheduler and legacy: an already-fired signal rejects at once", async () => {
    const fired = new LazySignal();
    fired.aborted = true;
    await assert.rejects(oneSlot().acquire({ signal: fired }), { code: "scheduler_client_cancelled" });
    const limiter = createLegacyLimiter({ maxConcurrentRequests: 1, clock: new ManualClock() });
    await assert.rejects(limiter.acquire({ signal: fired }), { code: "admission_client_cancelled" });
  });

  test("legacy: firing it while queued cancels; admission removes the listener", async () => {
    const limiter = createLegacyLimiter({ maxConcurrentRequests: 1, clock: new ManualClock() });
    const holder = await limiter.acquire();
    const leaving = new LazySignal();
    const staying = new LazySignal();
    const w1 = track(limiter.acquire({ signal: leaving }));
    const w2 = track(limiter.acquire({ signal: staying }));
    leaving.fire();
    await flush();
    assert.equal(errorOf(w1).code, "admission_client_cancelled");
    holder.release();
    await flush();
    assert.equal(staying.removed, 1);
    permitOf(w2).release();
    assert.deepEqual([limiter.inflight, limiter.queued], [0, 0]);
  });
});

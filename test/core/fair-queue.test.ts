/**
 * The class queue on its own (src/core/fair-queue.ts): bounded memory whatever the number of
 * tenants, late corrections after a flow was pruned, and renormalization keeping absolute counters.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  type Charge,
  FairQueue,
  type Flow,
  MAX_IDLE_FLOWS,
  type QueueItem,
  RENORMALIZE_AT,
  selectSmallest,
} from "@sluice/scheduler/core/fair-queue.js";

class Item implements QueueItem {
  flow: Flow<this> | null = null;
  prevInFlow: this | null = null;
  nextInFlow: this | null = null;
  constructor(
    readonly tenant: string,
    readonly cost: number,
    readonly seq: number,
    public weight = 1,
  ) {}
}

function ticket(tenant: string, weight = 1): Charge {
  return { tenant, weight, chargeFlow: null, charged: 0, chargeOpen: false };
}

describe("FairQueue", () => {
  test("memory stays bounded with any number of one-off tenants (fast path)", () => {
    const q = new FairQueue<Item>();
    let peak = 0;
    for (let i = 0; i < 50_000; i++) {
      const c = ticket(`user-${i}`);
      q.charge(c, 100, true);
      q.settle(c);
      peak = Math.max(peak, q.flowCount());
    }
    assert.ok(peak <= 2 * MAX_IDLE_FLOWS + 64, `peak ${peak} flows`);
  });

  test("flows with waiters or requests in flight are never dropped", () => {
    const q = new FairQueue<Item>();
    const held = ticket("held");
    q.charge(held, 5, true);
    q.push(new Item("waiting", 1, 0), q.flowFor("waiting", 1));
    for (let i = 0; i < 3 * MAX_IDLE_FLOWS; i++) {
      const c = ticket(`user-${i}`);
      q.charge(c, 100, true);
      q.settle(c);
    }
    assert.equal(q.lengthOf("waiting"), 1);
    assert.ok(q.flowOf("held") !== undefined);
    assert.equal(held.chargeFlow!.live, true);
  });

  test("a correction after the flow was pruned is charged to the tenant's live flow", () => {
    const q = new FairQueue<Item>();
    const x = ticket("x");
    q.charge(x, 10, true);
    q.settle(x); // x idle at floor + 10
    // Push the floor past x with another tenant's repeated requests, then force a prune.
    for (let i = 0; i < 3; i++) {
      const y = ticket("y");
      q.charge(y, 10, true);
      q.settle(y);
    }
    for (let i = 0; i < 200; i++) {
      const c = ticket(`u${i}`);
      q.charge(c, 1, true);
      q.settle(c);
    }
    assert.equal(x.chargeFlow!.live, false, "x was pruned (it was at or below the floor)");
    const floor = q.floor + q.offset;
    q.correct(x, 1010); // it really cost 1010: x owes 1000 more, and must keep owing it
    assert.equal(q.counterOf("x"), floor + 1000);
    assert.equal(x.chargeFlow!.live, true);
  });

  test("renormalization moves the offset, not the absolute counters", () => {
    const q = new FairQueue<Item>();
    let renormalized = 0;
    for (let i = 0; i < 8; i++) {
      const [who, other] = i % 2 === 0 ? ["a", "b"] : ["b", "a"];
      const otherBefore = q.counterOf(other);
      const offsetBefore = q.offset;
      const c = ticket(who);
      q.charge(c, RENORMALIZE_AT / 2, true);
      q.settle(c);
      if (q.offset !== offsetBefore) renormalized++;
      // Charging one tenant never moves another's absolute counter, renormalization included;
      // an idle flow may be dropped instead, but only when it was at or below the floor.
      const after = q.counterOf(other);
      if (after === undefined)
        assert.ok(otherBefore === undefined || otherBefore <= q.offset + q.floor, `step ${i}`);
      else assert.equal(after, otherBefore, `step ${i}`);
      assert.ok(q.floor < RENORMALIZE_AT, `step ${i}: floor ${q.floor}`);
    }
    assert.ok(renormalized > 0, "renormalized at least once");
  });

  test("a kept flow is never dropped: at the floor it stays, forgotten it goes to the floor, released it goes", () => {
    const q = new FairQueue<Item>();
    const kept = q.flowFor("k", 1, true);
    const x = ticket("k");
    q.charge(x, 10, true, kept);
    q.settle(x); // idle, above the floor
    // More than MAX_IDLE_FLOWS idle flows above the floor, each with a larger lead than k's: k is
    // among the ones a prune forgets.
    for (let i = 0; i < 3 * MAX_IDLE_FLOWS; i++) {
      const c = ticket(`u${i}`);
      q.charge(c, 1000, true);
      q.settle(c);
      q.correct(c, 1000 + i);
    }
    assert.equal(kept.live, true);
    assert.equal(q.flowFor("k", 1), kept, "the same object");
    assert.equal(kept.counter, q.floor, "forgotten: moved from floor + 10 to the floor");
    q.releaseKept();
    assert.equal(kept.kept, false);
    for (let i = 0; i < 3 * MAX_IDLE_FLOWS; i++) {
      const c = ticket(`v${i}`);
      q.charge(c, 1, true);
      q.settle(c);
    }
    assert.equal(kept.live, false, "an ordinary flow again: pruned");
  });

  test("selectSmallest puts the k smallest counters first", () => {
    let seed = 7;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (const n of [1, 2, 5, 64, 1000]) {
      for (const k of [1, Math.ceil(n / 2), n]) {
        // Few distinct values, so ties around the boundary are exercised too.
        const flows = Array.from({ length: n }, () => ({ counter: Math.floor(rand() * 20) }) as Flow);
        const sorted = flows.map((f) => f.counter).sort((a, b) => a - b);
        selectSmallest(flows, k);
        const first = flows
          .slice(0, k)
          .map((f) => f.counter)
          .sort((a, b) => a - b);
        assert.deepEqual(first, sorted.slice(0, k), `n ${n} k ${k}`);
      }
    }
  });
});

/** A pool ticket counts each step of a request once, and ending undoes only what was counted. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import { PoolTicket, type TicketCounters } from "../../src/accounting/pool-ticket.js";

/** Counters that write down every call, in order, on a clock the test moves. */
function recorder(withShedding = true) {
  const calls: string[] = [];
  let now = 0;
  const counters: TicketCounters = {
    tenants: {
      queued: (tenant, delta) => calls.push(`tenant ${tenant} queued ${delta}`),
      inflight: (tenant, delta) => calls.push(`tenant ${tenant} inflight ${delta}`),
    },
    feedback: {
      queued: (delta) => calls.push(`feedback queued ${delta}`),
      inflight: (delta) => calls.push(`feedback inflight ${delta}`),
    },
    shedding: withShedding
      ? {
          queue: (cls: PriorityClass, tenant: string, delta: number) =>
            calls.push(`shed ${cls} ${tenant} queue ${delta}`),
          queueWait: (cls: PriorityClass, waitMs: number, admitted?: boolean) =>
            calls.push(`shed ${cls} wait ${waitMs} ${admitted ? "admitted" : "gave up"}`),
          served: (cls: PriorityClass, tenant: string, tokens: number) =>
            calls.push(`shed ${cls} ${tenant} served ${tokens}`),
        }
      : undefined,
    now: () => now,
  };
  return { calls, counters, advance: (ms: number) => (now += ms) };
}

describe("pool ticket", () => {
  it("counts queued, admitted, served and ended once each, in the gateway's order", () => {
    const { calls, counters, advance } = recorder();
    const ticket = new PoolTicket(counters, "acme");
    ticket.queued("default");
    ticket.queued("default");
    advance(40);
    ticket.admitted();
    ticket.admitted();
    ticket.ended();
    ticket.ended();
    ticket.served("default", 120);
    ticket.served("default", 120);
    assert.deepEqual(calls, [
      "tenant acme queued 1",
      "feedback queued 1",
      "shed default acme queue 1",
      "tenant acme inflight 1",
      "feedback inflight 1",
      "tenant acme queued -1",
      "feedback queued -1",
      "shed default acme queue -1",
      "shed default wait 40 admitted",
      "tenant acme inflight -1",
      "feedback inflight -1",
      "shed default acme served 120",
    ]);
  });

  it("a request that ends while queued leaves the queue without a slot, and serves nothing", () => {
    const { calls, counters, advance } = recorder();
    const ticket = new PoolTicket(counters, "acme");
    ticket.queued("bulk");
    advance(7);
    ticket.ended();
    ticket.admitted();
    ticket.served("bulk", 10);
    ticket.ended();
    assert.deepEqual(calls, [
      "tenant acme queued 1",
      "feedback queued 1",
      "shed bulk acme queue 1",
      "tenant acme queued -1",
      "feedback queued -1",
      "shed bulk acme queue -1",
      "shed bulk wait 7 gave up",
    ]);
  });

  it("refused in the queue, then ended: the queue is left once", () => {
    const { calls, counters } = recorder();
    const ticket = new PoolTicket(counters, "acme");
    ticket.queued(undefined);
    ticket.notAdmitted();
    ticket.ended();
    ticket.notAdmitted();
    assert.deepEqual(calls, [
      "tenant acme queued 1",
      "feedback queued 1",
      "tenant acme queued -1",
      "feedback queued -1",
    ]);
  });

  it("ended before it queued: nothing was counted, nothing is undone, and it cannot count later", () => {
    const { calls, counters } = recorder();
    const ticket = new PoolTicket(counters, "acme");
    ticket.ended();
    ticket.queued("default");
    ticket.admitted();
    assert.deepEqual(calls, []);
  });

  it("without shedding, or without a class shedding tracks, the queue counts alone", () => {
    const { calls, counters } = recorder(false);
    const ticket = new PoolTicket(counters, "t");
    ticket.queued("default");
    ticket.admitted();
    ticket.served("default", 5);
    ticket.ended();
    assert.deepEqual(calls, [
      "tenant t queued 1",
      "feedback queued 1",
      "tenant t inflight 1",
      "feedback inflight 1",
      "tenant t queued -1",
      "feedback queued -1",
      "tenant t inflight -1",
      "feedback inflight -1",
    ]);
  });
});

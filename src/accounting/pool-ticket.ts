/**
 * One request's counts in its model pool, from queued through admitted and served to ended: its
 * tenant's queued and in-flight counts (the admin status page), adaptive capacity's queue and
 * in-flight counts, and load shedding's queue, queue waits and served tokens. The gateway's lease
 * and the simulator each hold one per request, so both count the same way.
 *
 * Each step counts once. Ending undoes only what was counted: a request that ends while queued
 * leaves the queue without a slot, one in flight gives its in-flight count back, one refused before
 * the queue has nothing to undo.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { CapacityFeedback } from "../capacity/adaptive.js";
import type { LoadShedding } from "../shedding/load-shedding.js";

/** Queued and in-flight counts per tenant (the gateway's tenant activity). */
export interface TenantCounts {
  queued(tenant: string, delta: number): void;
  inflight(tenant: string, delta: number): void;
}

/** Where a pool's tickets count; an absent counter counts nothing. */
export interface TicketCounters {
  readonly tenants?: TenantCounts | undefined;
  readonly feedback?: Pick<CapacityFeedback, "queued" | "inflight"> | undefined;
  readonly shedding?: Pick<LoadShedding, "queue" | "queueWait" | "served"> | undefined;
  /** Monotonic milliseconds: a queue wait is measured from the queue's entry to its exit. */
  now(): number;
}

type Stage = "new" | "queued" | "inflight" | "ended";

export class PoolTicket {
  private stage: Stage = "new";
  /** The class shedding counts the queued request under; undefined: shedding does not track it. */
  private shedClass: PriorityClass | undefined;
  private queuedAt = 0;
  private wasAdmitted = false;
  private servedCounted = false;

  constructor(
    private readonly counters: TicketCounters,
    readonly tenant: string,
    /** The request's predicted output tokens (all choices): its weight in shedding's queue. */
    readonly predictedOutputTokens?: number | undefined,
  ) {}

  /** The request entered the admission queue; `shedClass` is the class shedding tracks it under. */
  queued(shedClass: PriorityClass | undefined): void {
    if (this.stage !== "new") return;
    this.stage = "queued";
    const { tenants, feedback, shedding } = this.counters;
    tenants?.queued(this.tenant, 1);
    feedback?.queued(1);
    if (shedClass !== undefined && shedding !== undefined) {
      this.shedClass = shedClass;
      this.queuedAt = this.counters.now();
      shedding.queue(shedClass, this.tenant, 1, this.predictedOutputTokens);
    }
  }

  /** The request left the queue with a slot: in flight from now on. */
  admitted(): void {
    if (this.stage !== "queued") return;
    this.stage = "inflight";
    this.wasAdmitted = true;
    this.counters.tenants?.inflight(this.tenant, 1);
    this.counters.feedback?.inflight(1);
    this.leaveQueue(true);
  }

  /** The request left the queue without a slot (refused, timed out, gone): it is over. */
  notAdmitted(): void {
    if (this.stage !== "queued") return;
    this.stage = "ended";
    this.leaveQueue(false);
  }

  /**
   * What an admitted request was served, in tokens, under `cls`: once, for load shedding (with its
   * predicted output, the unit its queue is weighed in). It may come after `ended` (the gateway
   * gives back first and charges after).
   */
  served(cls: PriorityClass, tokens: number): void {
    if (this.servedCounted || !this.wasAdmitted) return;
    this.servedCounted = true;
    this.counters.shedding?.served(cls, this.tenant, tokens, this.predictedOutputTokens);
  }

  /** The request ended: whatever it still counts is given back, once. */
  ended(): void {
    if (this.stage === "queued") this.notAdmitted();
    else if (this.stage === "inflight") {
      this.stage = "ended";
      this.counters.tenants?.inflight(this.tenant, -1);
      this.counters.feedback?.inflight(-1);
    } else this.stage = "ended";
  }

  private leaveQueue(admitted: boolean): void {
    const { tenants, feedback, shedding } = this.counters;
    tenants?.queued(this.tenant, -1);
    feedback?.queued(-1);
    const cls = this.shedClass;
    if (cls !== undefined && shedding !== undefined) {
      shedding.queue(cls, this.tenant, -1, this.predictedOutputTokens);
      shedding.queueWait(cls, this.counters.now() - this.queuedAt, admitted);
    }
  }
}

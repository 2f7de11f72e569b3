/**
 * The three admission policies the simulator compares, behind one acquire/release shape:
 * - `fifo`: sluice's legacy limiter (createLegacyLimiter), what the gateway runs with the priority
 *   scheduler disabled: one FIFO queue, a concurrency limit, a queue size and timeout;
 * - `strict`: the reference priority scheduler's behaviour (strict.ts);
 * - `sluice`: the real core (createScheduler), with the tenant policy's weights and clamps.
 *
 * `settled()` counts acquire promises that have been resolved or rejected, synchronously, so the
 * event loop knows when every reaction it must run before moving time has run.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import { createScheduler, type Scheduler } from "@sluice/scheduler/core/engine.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import type { Permit } from "@sluice/scheduler/core/inflight.js";
import { createLegacyLimiter } from "@sluice/scheduler/core/legacy.js";
import type { PolicyName, Scenario } from "./scenario.js";
import { StrictScheduler } from "./strict.js";

export interface SimTicket {
  release(): void;
  markFirstByte(): boolean;
  onPreempt(listener: (error: Error) => void): void;
}

export interface AdmissionPolicy {
  readonly name: PolicyName;
  acquire(request: {
    priority: PriorityClass;
    tenant: string;
    cost: number;
    signal?: AbortSignal | undefined;
  }): Promise<SimTicket>;
  /** Acquire promises settled so far. */
  settled(): number;
  /** Reports a request's actual tokens (sluice corrects the tenant's fair-share counter). */
  adjustCost(ticket: SimTicket, actualTokens: number): void;
  /** `reservedAt`: the fleet's size under an adaptive limit (Scheduler.setCapacity). */
  setCapacity(capacity: number, reservedAt?: number): void;
  /** Starvation promotions per class rank. */
  promotions(): number[];
  clamps(): number;
  /** The sluice scheduler, when this policy is sluice (for snapshots). */
  readonly scheduler?: Scheduler | undefined;
}

/**
 * `pool`: the model pool the policy admits for (undefined: the whole fleet). `preemptionCost`: the
 * prefill a preemption of this ticket would throw away (sluice picks the victim that loses least).
 */
export function createPolicy(
  name: PolicyName,
  scenario: Scenario,
  capacity: number,
  clock: Clock,
  pool?: string | undefined,
  preemptionCost?: (ticket: SimTicket) => number,
): AdmissionPolicy {
  if (name === "fifo") {
    const limiter = createLegacyLimiter({
      maxConcurrentRequests: scenario.legacy.maxConcurrentRequests ?? Math.max(1, capacity),
      queueSize: scenario.legacy.queueSize,
      queueTimeoutSecs: scenario.legacy.queueTimeoutSecs,
      clock,
    });
    return {
      name,
      acquire: (r) => limiter.acquire({ signal: r.signal }),
      settled() {
        const c = limiter.counters();
        return c.admitted + c.rejectedQueueFull + c.rejectedQueueTimeout + c.clientCancelled;
      },
      adjustCost() {},
      setCapacity() {}, // legacy admission limits by --max-concurrent-requests, not by capacity
      promotions: () => [0, 0, 0, 0],
      clamps: () => 0,
    };
  }
  if (name === "strict") {
    const strict = new StrictScheduler({
      capacity,
      classes: scenario.classes,
      tenantPolicies: scenario.tenantPolicies,
      defaultMaxClass: scenario.defaultMaxClass,
      clock,
      wakeupMs: scenario.strict.wakeupMs,
    });
    return {
      name,
      acquire: (r) => strict.acquire(r),
      settled: () => strict.settled,
      adjustCost() {},
      setCapacity: (c) => strict.setCapacity(c),
      promotions: () => [...strict.promotions],
      clamps: () => strict.clamps,
    };
  }
  let settled = 0;
  let scheduler: Scheduler;
  try {
    scheduler = createScheduler({
      capacity,
      classes: scenario.classes,
      tenantPolicies: scenario.tenantPolicies,
      defaultMaxClass: scenario.defaultMaxClass,
      clock,
      preemptionCost,
      observer: {
        admission(_cls, outcome) {
          if (outcome !== "preempted") settled++;
        },
      },
    });
  } catch (err) {
    if (err instanceof ConfigError) {
      throw new ConfigError(
        `${scenario.file}: policy`,
        `${err.message} at ${pool === undefined ? "the fleet's" : `pool ${pool}'s`} capacity of ${capacity} (the gateway would fall back to legacy admission)`,
      );
    }
    throw err;
  }
  return {
    name,
    scheduler,
    acquire: (r) => scheduler.acquire(r),
    settled: () => settled,
    adjustCost: (t, actual) => scheduler.adjustCost(t as Permit, actual),
    setCapacity: (c, reservedAt) => scheduler.setCapacity(c, reservedAt),
    promotions() {
      const p = scheduler.counters().starvationPromotions;
      return [p.bulk, p.default, p.interactive, p.system];
    },
    clamps: () => scheduler.counters().clamps,
  };
}

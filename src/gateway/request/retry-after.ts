/**
 * The Retry-After of a refusal, from what will actually free up (docs/errors.md, "Retry-After"):
 *
 *   queue full, queue timeout, preempted, no worker room   the pool's shedding predictor's forecast
 *                                                           when it has one, else its queue drain
 *                                                           (queue-drain.ts)
 *   no healthy worker                                       the next chance a worker comes back
 *   token/request bucket, term budget, load shedding        the figure their deciders computed
 *                                                           (refill, period end, predicted wait)
 *
 * A refusal whose decider computed nothing and whose estimate has no data yet keeps the floor of
 * 1 s. Every figure is whole seconds, at least 1.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { ErrorCode } from "../../contracts/error-table.js";
import type { ModelPool } from "../fleet/model-pools.js";
import { type QueueDrain, wholeSecs } from "./queue-drain.js";

/** The codes whose wait is the queue's: a slot must free up for every request ahead. */
const QUEUE_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "scheduler_queue_full",
  "scheduler_queue_timeout",
  "scheduler_preempted",
  "admission_queue_full",
  "admission_queue_timeout",
  "worker_room_timeout",
]);

export interface RetryAfterFacts {
  readonly drain: QueueDrain;
  /** The pool the request was routed to; undefined when it was refused before routing. */
  readonly pool: ModelPool | undefined;
  /** The request's effective class; undefined before classification or in legacy admission. */
  readonly cls: PriorityClass | undefined;
  /**
   * Seconds until a worker out of rotation can be back: the next health-check round, or an open
   * circuit's cooldown when that is sooner.
   */
  readonly workerReturnSecs: number;
}

/**
 * The Retry-After seconds for a refusal with `code`, given the figure its decider attached (if any);
 * undefined for codes that carry none.
 */
export function retryAfterSecsFor(
  code: ErrorCode,
  decided: number | undefined,
  facts: RetryAfterFacts,
): number | undefined {
  if (QUEUE_CODES.has(code)) {
    const pool = facts.pool;
    if (pool === undefined) return decided ?? 1;
    // The shedding predictor's wait (queued / observed completion rate, calibrated each second)
    // measures throughput itself; without one, or before it has seen the queue, the drain estimate.
    const forecastMs = pool.shedding?.prioritizer?.status().predictedWaitMs;
    if (forecastMs !== undefined && forecastMs > 0) return wholeSecs(forecastMs);
    if (facts.drain.meanServiceMs(pool.name) === undefined) return decided ?? 1;
    return facts.drain.secsUntilAdmitted(pool.name, pool.admission.snapshot(), facts.cls);
  }
  if (code === "no_healthy_workers") return Math.max(1, Math.ceil(facts.workerReturnSecs));
  if (decided === undefined) return undefined;
  return Math.max(1, Math.ceil(decided));
}

/**
 * Seconds until a worker out of rotation may serve again: the soonest end of an open circuit's
 * cooldown among `workers`, else the health-check interval (the longest until the next probe round
 * can find one healthy; a worker's return is not predictable closer than that).
 */
export function secsUntilWorkerBack(
  workers: readonly { readonly breaker: { readonly cooldownEndsAt: number | undefined } }[],
  nowMs: number,
  healthIntervalSecs: number,
): number {
  let soonestMs = healthIntervalSecs * 1000;
  for (const w of workers) {
    const endsAt = w.breaker.cooldownEndsAt;
    if (endsAt !== undefined) soonestMs = Math.min(soonestMs, endsAt - nowMs);
  }
  return Math.max(1, Math.ceil(soonestMs / 1000));
}

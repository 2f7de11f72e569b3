/**
 * How long a pool's queue takes to drain, for the Retry-After of a refusal whose cause is the queue
 * (429 queue full, 408 queue timeout, 503 preempted, 503 no worker room): the requests ahead of the
 * refused one (queued in its class and above: strict priority serves those first), plus itself,
 * times the pool's recent service time per slot (the mean time a request holds its slot, divided by
 * the slots). A client that waits that long finds the queue it met gone.
 *
 * The mean is a moving average of served requests' slot-hold times, per pool; before the first one
 * there is no estimate and the rule's floor (1 s) stands (docs/errors.md).
 */
import { CLASS_RANK, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { AdmissionSnapshot } from "../../contracts/admission-backend.js";

/** Weight of the newest sample in the moving average: about the last 20 requests count. */
const SMOOTHING = 0.1;

/** Whole seconds, at least 1: a Retry-After never asks for less. */
export function wholeSecs(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

export class QueueDrain {
  /** Mean slot-hold time of served requests, ms, per pool name. */
  private readonly serviceMs = new Map<string, number>();

  /** A request served in `pool` held its slot `ms` (admission to release). */
  served(pool: string, ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    const mean = this.serviceMs.get(pool);
    this.serviceMs.set(pool, mean === undefined ? ms : mean + SMOOTHING * (ms - mean));
  }

  /** The pool's mean slot-hold time, ms; undefined before its first served request. */
  meanServiceMs(pool: string): number | undefined {
    return this.serviceMs.get(pool);
  }

  /**
   * Seconds (at least 1) until a request of `cls` (undefined: legacy admission, one FIFO queue)
   * arriving now would be admitted, from the pool's admission snapshot; 1 without a service sample.
   */
  secsUntilAdmitted(pool: string, snapshot: AdmissionSnapshot, cls: PriorityClass | undefined): number {
    const mean = this.serviceMs.get(pool);
    if (mean === undefined) return 1;
    const ahead = queuedAhead(snapshot, cls);
    // With no slot at all (every worker gone) one slot's worth is the least it can take.
    const slots = Math.max(1, snapshot.capacity);
    return wholeSecs(((ahead + 1) * mean) / slots);
  }
}

/** Requests queued that strict priority admits before a new request of `cls`. */
function queuedAhead(snapshot: AdmissionSnapshot, cls: PriorityClass | undefined): number {
  const classes = snapshot.classes;
  if (classes === null || cls === undefined) return snapshot.queued;
  const rank = CLASS_RANK[cls];
  let ahead = 0;
  for (const name in classes) {
    if (CLASS_RANK[name as PriorityClass] >= rank) ahead += classes[name as PriorityClass].queued;
  }
  return ahead;
}

/**
 * What the scheduler reports, without depending on any metrics library: an optional observer
 * called synchronously at each event, plus cumulative counters readable at any time.
 */
import type { PriorityClass } from "./class.js";

export const ADMISSION_OUTCOMES = [
  "admitted",
  "rejected_queue_full",
  "rejected_queue_timeout",
  "preempted",
  "client_cancelled",
] as const;
export type AdmissionOutcome = (typeof ADMISSION_OUTCOMES)[number];

export interface SchedulerObserver {
  /** One per outcome: admitted, rejected_queue_full, rejected_queue_timeout, preempted, client_cancelled. */
  admission?(cls: PriorityClass, outcome: AdmissionOutcome, tenant: string): void;
  /** Time spent queued, observed at admission (0 when admitted at once), timeout or cancel. */
  queueWait?(cls: PriorityClass, seconds: number, outcome: AdmissionOutcome): void;
  preemption?(victimClass: PriorityClass, byClass: PriorityClass): void;
  clamp?(tenant: string, requested: PriorityClass, effective: PriorityClass): void;
  unknownPriority?(tenant: string): void;
  starvationPromotion?(cls: PriorityClass): void;
}

export interface SchedulerCounters {
  admissions: Record<PriorityClass, Record<AdmissionOutcome, number>>;
  /** preemptions[victim][by] */
  preemptions: Record<PriorityClass, Record<PriorityClass, number>>;
  clamps: number;
  unknownPriority: number;
  starvationPromotions: Record<PriorityClass, number>;
}

export interface ClassSnapshot {
  inflight: number;
  queued: number;
  queueLimit: number;
  /** Effective reservation at the live capacity (after clamping on a dip). */
  reserved: number;
  /** Slots this class could take right now under reservation rules (may be negative). */
  headroom: number;
  /** 0..1: the worse of queue pressure (queued / limit) and slot pressure (1 - headroom / capacity). */
  capacityPressure: number;
}

export interface SchedulerSnapshot {
  capacity: number;
  inflight: number;
  queued: number;
  /** Total in-flight divided by capacity (0 when capacity is 0 and nothing runs). */
  utilization: number;
  classes: Record<PriorityClass, ClassSnapshot>;
}

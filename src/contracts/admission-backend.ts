/**
 * The admission-backend seam: what the gateway's request lifecycle asks of admission, whatever
 * keeps the state. The in-process backend (the core scheduler, or the legacy limiter) is the first
 * implementation; a shared one (Redis, so several replicas act as one) plugs in here.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { TenantPolicy } from "@sluice/scheduler/core/config.js";
import type { ClassSnapshot, SchedulerCounters } from "@sluice/scheduler/core/events.js";
import type { CancelSignal } from "@sluice/scheduler/core/signal.js";
import type { FallbackCode } from "./scheduler-fallback.js";

/**
 * The shared admission state is out of reach and the backend will not decide alone (fail mode
 * closed, or an operation that needs the whole fleet): answered 503 `scheduler_unavailable`.
 */
export class SharedStateUnavailableError extends Error {
  override readonly name = "SharedStateUnavailableError";
  readonly code = "scheduler_unavailable";
}

export type AdmissionMode = "scheduler" | "legacy";

export interface AdmissionRequest {
  /** The raw `x-smg-priority` value (parsed leniently). */
  priority: string | undefined;
  tenant: string;
  /** Estimated cost in tokens (fair sharing). */
  cost: number;
  /** Firing it while queued leaves the queue (client gone). */
  signal: CancelSignal | undefined;
  /**
   * The gateway's id for the request (`sluice_request_id`: unique per request, never the client's
   * `X-Request-Id`): a shared backend keys the budget hold on it.
   */
  requestId?: string | undefined;
  /** The budget hold the policy stage took, for a backend that reserves it with the admission. */
  hold?: unknown;
}

/** What a request holds from admission until its lease ends; read-only to the holder. */
export interface Slot {
  readonly admission: "fast" | "queued";
  readonly queueWaitMs: number;
  readonly requestedClass: PriorityClass | undefined;
  readonly effectiveClass: PriorityClass | undefined;
  /** Marks the first response byte; false when preemption won the race (answer 503 instead). */
  markFirstByte(): boolean;
  /** The one callback to run if the slot is taken by a higher class before the first byte. */
  onPreempt(listener: (error: Error) => void): void;
  /** The request's actual cost in tokens, once known (fair-share correction). 0 = nothing served. */
  settle(actualCost: number): void;
  /** Gives the slot back. Idempotent. */
  release(): void;
}

export interface AdmissionSnapshot {
  capacity: number;
  inflight: number;
  queued: number;
  utilization: number;
  /** Per class, in scheduler mode; null in legacy mode. */
  classes: Record<PriorityClass, ClassSnapshot> | null;
}

export interface AdmissionBackend {
  readonly mode: AdmissionMode;
  /** Why the scheduler is not in use, when it was enabled but failed safe. */
  readonly fallbackReason: string | undefined;
  /** The fallback's short code (src/contracts/scheduler-fallback.ts); undefined when none. */
  readonly fallbackCode?: FallbackCode | undefined;
  /** Resolves with a slot, or rejects with an AdmissionError (queue full, timeout, cancelled). */
  acquire(request: AdmissionRequest): Promise<Slot>;
  /** The classes a request would get, without admitting it (for records of rejected requests). */
  classify(
    priority: string | undefined,
    tenant: string,
  ): { requested: PriorityClass; effective: PriorityClass } | undefined;
  /**
   * `reservedAt`: the capacity the scheduler's reservations are sized at when `capacity` is an
   * adaptive limit under the fleet's size (Scheduler.setCapacity); legacy admission has none.
   */
  setCapacity(capacity: number, reservedAt?: number): void;
  setTenantPolicies(policies: ReadonlyMap<string, TenantPolicy>, defaultMaxClass: PriorityClass): void;
  snapshot(): AdmissionSnapshot;
  /** The scheduler's cumulative counters (admissions, preemptions, promotions); undefined in legacy mode. */
  counters(): SchedulerCounters | undefined;
}

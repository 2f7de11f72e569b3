/**
 * The in-process admission backend: the priority scheduler when enabled and valid, otherwise the
 * legacy limiter. The mode is decided once, after the first worker discovery, so reservations are
 * checked against real capacity; a scheduler that cannot be built fails safe to legacy with an
 * ERROR log that says why.
 */

import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import {
  type ClassOverrides,
  type ClassSettingsTable,
  resolveClassSettings,
  type TenantPolicy,
} from "@sluice/scheduler/core/config.js";
import { createScheduler, type Scheduler } from "@sluice/scheduler/core/engine.js";
import { ReservationsExceedCapacityError } from "@sluice/scheduler/core/errors.js";
import type { SchedulerObserver } from "@sluice/scheduler/core/events.js";
import {
  createLegacyLimiter,
  type LegacyLimiter,
  type LegacyLimiterOptions,
} from "@sluice/scheduler/core/legacy.js";
import type { Logger } from "pino";
import type {
  AdmissionBackend,
  AdmissionRequest,
  AdmissionSnapshot,
  Slot,
} from "../contracts/admission-backend.js";
import { type FallbackCode, fallbackCodeOf, reservationFix } from "../contracts/scheduler-fallback.js";

class SchedulerBackend implements AdmissionBackend {
  readonly mode = "scheduler" as const;
  readonly fallbackReason = undefined;
  readonly fallbackCode = undefined;
  constructor(private readonly scheduler: Scheduler) {}
  /** The permit is the slot: it has every Slot member (no wrapper, no extra promise). */
  acquire(request: AdmissionRequest): Promise<Slot> {
    return this.scheduler.acquire(request);
  }
  classify(priority: string | undefined, tenant: string) {
    return this.scheduler.classify(priority, tenant);
  }
  setCapacity(capacity: number, reservedAt?: number): void {
    this.scheduler.setCapacity(capacity, reservedAt);
  }
  setTenantPolicies(policies: ReadonlyMap<string, TenantPolicy>, defaultMaxClass: PriorityClass): void {
    this.scheduler.setTenantPolicies(policies, defaultMaxClass);
  }
  snapshot(): AdmissionSnapshot {
    return this.scheduler.snapshot();
  }
  counters() {
    return this.scheduler.counters();
  }
}

class LegacyBackend implements AdmissionBackend {
  readonly mode = "legacy" as const;
  constructor(
    private readonly legacy: LegacyLimiter,
    readonly fallbackReason: string | undefined,
    readonly fallbackCode: FallbackCode | undefined,
    private capacity: number,
    /** Adaptive capacity: the capacity bounds admission too (under max_concurrent_requests). */
    private readonly bounded: boolean,
  ) {
    if (bounded) legacy.setBound(capacity);
  }
  /** The legacy permit is the slot too. */
  acquire(request: AdmissionRequest): Promise<Slot> {
    return this.legacy.acquire(request);
  }
  classify() {
    return undefined;
  }
  counters() {
    return undefined;
  }
  setCapacity(capacity: number): void {
    // Legacy admission limits by --max-concurrent-requests, not by discovered capacity: the
    // capacity is kept for the snapshot only, unless it is adaptive capacity's limit.
    this.capacity = capacity;
    if (this.bounded) this.legacy.setBound(capacity);
  }
  setTenantPolicies(): void {
    // No classes or weights in legacy admission (budgets apply in both modes, elsewhere).
  }
  snapshot(): AdmissionSnapshot {
    const inflight = this.legacy.inflight;
    return {
      capacity: this.capacity,
      inflight,
      queued: this.legacy.queued,
      utilization: this.capacity > 0 ? inflight / this.capacity : 0,
      classes: null,
    };
  }
}

export interface InProcessOptions {
  /** The priority scheduler is enabled (else legacy admission). */
  enabled: boolean;
  defaultMaxClass: PriorityClass;
  /** The priority YAML's classes and tenant policies, already parsed and validated. */
  classes: ClassOverrides | ClassSettingsTable;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
  /** A priority YAML that could not be loaded: the scheduler fails safe to legacy with this reason. */
  loadError?: Error | undefined;
  capacity: number;
  legacy: Omit<LegacyLimiterOptions, "clock">;
  observer?: SchedulerObserver | undefined;
  clock: Clock;
  logger: Logger;
  /** No "priority scheduler enabled" line (a model pool's backend: the gateway logs it once). */
  quiet?: boolean | undefined;
  /**
   * Legacy admission is bounded by `capacity` as well as by max_concurrent_requests (set with
   * capacity_mode: adaptive, whose limit would otherwise bind nothing with the scheduler off).
   */
  legacyBoundByCapacity?: boolean | undefined;
}

export function createInProcessBackend(options: InProcessOptions): AdmissionBackend {
  const legacy = () => createLegacyLimiter({ ...options.legacy, clock: options.clock });
  const bounded = options.legacyBoundByCapacity === true;
  if (!options.enabled) return new LegacyBackend(legacy(), undefined, undefined, options.capacity, bounded);
  try {
    if (options.loadError !== undefined) throw options.loadError;
    const scheduler = createScheduler({
      capacity: options.capacity,
      classes: options.classes,
      tenantPolicies: options.tenantPolicies,
      defaultMaxClass: options.defaultMaxClass,
      clock: options.clock,
      ...(options.observer ? { observer: options.observer } : {}),
    });
    if (options.quiet !== true)
      options.logger.info({ capacity: options.capacity }, "priority scheduler enabled");
    return new SchedulerBackend(scheduler);
  } catch (err) {
    const fallback = describeFallback(err, options.classes);
    options.logger.error(
      { err: fallback.reason, fallback_code: fallback.code },
      `priority scheduler disabled, falling back to legacy admission: ${fallback.reason}`,
    );
    return new LegacyBackend(legacy(), fallback.reason, fallback.code, options.capacity, bounded);
  }
}

/** The fallback's code and message; reservations that do not fit also say how to make them fit. */
function describeFallback(
  err: unknown,
  classes: ClassOverrides | ClassSettingsTable,
): { code: FallbackCode; reason: string } {
  const message = (err as Error).message;
  if (!(err instanceof ReservationsExceedCapacityError))
    return { code: fallbackCodeOf(err), reason: message };
  const fix = reservationFix(resolveClassSettings(classes), err.capacity);
  return { code: "reservations_exceed_capacity", reason: fix ? `${message}: ${fix}` : message };
}

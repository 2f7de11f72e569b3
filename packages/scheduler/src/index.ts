/**
 * @sluice/scheduler: priority-aware admission for LLM inference fleets, as a library with no
 * runtime dependency.
 *
 * The public API, listed one by one on purpose: the scheduler, the read-only permit it grants,
 * the clock it runs on, its configuration and reporting types, and its errors; and the two
 * shedders (prioritized and keyed) for callers that run their own admission. The `core/*` and
 * `shedding/*` subpaths exist for the sluice gateway, which builds on the internals; they may change
 * without notice.
 */
export type { PriorityClass } from "./core/class.js";
export { PRIORITY_CLASSES } from "./core/class.js";
export type { Clock, TimerHandle } from "./core/clock.js";
export { ManualClock } from "./core/clock.js";
export type { BudgetPeriod, ClassOverrides, ClassSettings, TenantPolicy } from "./core/config.js";
export type { AcquireOptions, Scheduler, SchedulerOptions } from "./core/engine.js";
export { createScheduler } from "./core/engine.js";
export type { AdmissionErrorCode } from "./core/errors.js";
export {
  AdmissionError,
  ClientCancelledError,
  ConfigError,
  PreemptedError,
  QueueFullError,
  QueueTimeoutError,
  ReservationsExceedCapacityError,
} from "./core/errors.js";
export type {
  AdmissionOutcome,
  ClassSnapshot,
  SchedulerCounters,
  SchedulerObserver,
  SchedulerSnapshot,
} from "./core/events.js";
export type { AdmissionKind, Permit } from "./core/inflight.js";
export type { CancelSignal } from "./core/signal.js";
export type { KeyedAdmissionOptions, KeyedAdmissionStatus } from "./shedding/keyed-admission.js";
export { KeyedAdmission } from "./shedding/keyed-admission.js";
export type { PrioritizerOptions, PrioritizerStatus } from "./shedding/prioritizer.js";
export { Prioritizer } from "./shedding/prioritizer.js";

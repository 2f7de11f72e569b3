/**
 * sluice: priority-aware admission control for LLM inference fleets.
 *
 * The public API, listed one by one on purpose: the scheduler, the read-only permit it grants,
 * the clock it runs on, its configuration and reporting types, and its errors; and the capacity
 * controllers (adaptive limit, prioritized and keyed shedding) for callers that run their own
 * admission. Everything else in src/ is internal and may change without notice.
 */
export type {
  AdaptiveDecision,
  AdaptiveLimitOptions,
  AdaptiveLimitSnapshot,
  AdaptiveSample,
} from "./capacity/adaptive-limit.js";
export { AdaptiveLimit } from "./capacity/adaptive-limit.js";
export type { KeyedAdmissionOptions, KeyedAdmissionStatus } from "./capacity/keyed-admission.js";
export { KeyedAdmission } from "./capacity/keyed-admission.js";
export type {
  KeyedSheddingOptions,
  LoadSheddingOptions,
  LoadSheddingStatus,
  ShedVerdict,
} from "./capacity/load-shedding.js";
export { LoadShedding } from "./capacity/load-shedding.js";
export type { PrioritizerOptions, PrioritizerStatus } from "./capacity/prioritizer.js";
export { Prioritizer } from "./capacity/prioritizer.js";
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

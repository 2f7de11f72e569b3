/**
 * sluice: priority-aware admission control for LLM inference fleets.
 *
 * Everything of the library `@sluice/scheduler` (the scheduler, its permit, clock, configuration,
 * errors and the two shedders), plus the capacity controllers the gateway adds for callers that run
 * their own admission: the adaptive limit and load shedding. Everything else in src/ is internal and
 * may change without notice.
 */
export * from "@sluice/scheduler";
export type {
  AdaptiveDecision,
  AdaptiveLimitOptions,
  AdaptiveLimitSnapshot,
  AdaptiveSample,
} from "./capacity/adaptive-limit.js";
export { AdaptiveLimit } from "./capacity/adaptive-limit.js";
export type {
  KeyedSheddingOptions,
  LoadSheddingOptions,
  LoadSheddingStatus,
  ShedVerdict,
} from "./shedding/load-shedding.js";
export { LoadShedding } from "./shedding/load-shedding.js";

import type { Clock } from "@sluice/scheduler/core/clock.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { createInProcessBackend } from "../admission/in-process.js";
import type { SharedState } from "../admission/redis/index.js";
import type { AdmissionBackend } from "../contracts/admission-backend.js";
import type { FallbackCode } from "../contracts/scheduler-fallback.js";
import type { SluiceMetrics } from "../metrics/index.js";
import type { LivePolicy } from "./live-policy.js";
import type { GatewayOptions } from "./options.js";
import type { DiscoveredFleet } from "./start-workers.js";

/**
 * Decides the fleet's admission mode. Scheduler disabled, or its file failed to load: one legacy
 * limiter for the whole fleet (the contract's legacy admission), returned here; model pools then
 * only route. Otherwise undefined: each pool gets its own scheduler (pool-factory.ts).
 */
export function fleetWideLegacyAdmission(
  options: GatewayOptions,
  fleet: DiscoveredFleet,
  policy: LivePolicy,
  shared: SharedState | undefined,
  metrics: SluiceMetrics,
  clock: Clock,
): AdmissionBackend | undefined {
  const adaptiveMode = options.capacity?.mode === "adaptive";
  const legacy =
    !options.priorityScheduler.enabled || fleet.loadError !== undefined
      ? (shared?.legacy ?? createInProcessBackend)({
          enabled: options.priorityScheduler.enabled,
          defaultMaxClass: options.priorityScheduler.defaultMaxClass,
          classes: {},
          tenantPolicies: policy.tenantPolicies,
          loadError: fleet.loadError,
          capacity: fleet.workers.discoveredCapacity,
          legacy: options.legacy,
          observer: metrics.observer,
          clock,
          logger: options.logger,
          // Adaptive capacity binds legacy admission too: its limit is the fleet's (the pools' sum).
          legacyBoundByCapacity: adaptiveMode,
        })
      : undefined;
  if (legacy === undefined) options.logger.info("priority scheduler enabled");
  // Legacy admission does not hold workers to their reported capacity (the contract's
  // max_concurrent_requests alone); adaptive capacity's per-worker limits bind in either mode.
  fleet.workers.respectCapacity = legacy === undefined || adaptiveMode;
  return legacy;
}

/**
 * `--priority-scheduler-strict`: a fallback to legacy admission is a startup error (exit 2) naming
 * the file and key, instead of a gateway that runs without priorities. Undefined: no fallback, or
 * not strict.
 */
export function strictFallbackError(
  options: GatewayOptions,
  fallback: { readonly fallbackCode?: FallbackCode | undefined; readonly fallbackReason: string | undefined },
  loadError: Error | undefined,
): ConfigError | undefined {
  if (options.priorityScheduler.strict !== true || !options.priorityScheduler.enabled) return undefined;
  if (fallback.fallbackCode === undefined) return undefined;
  const refusal = "priority_scheduler_strict refuses the fallback to legacy admission";
  if (loadError instanceof ConfigError)
    return new ConfigError(loadError.path, `${loadError.reason} (${refusal})`);
  const file =
    options.priorityScheduler.configPath ?? "the built-in classes (no --priority-scheduler-config)";
  return new ConfigError(file, `${fallback.fallbackReason ?? fallback.fallbackCode} (${refusal})`);
}

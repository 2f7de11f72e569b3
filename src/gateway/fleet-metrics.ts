/**
 * The fleet's gauges on /metrics, read at scrape time from its live parts, and the counters the
 * request lifecycle adds to. Registered in this order: /metrics lists them in it.
 */
import type { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import type { SharedState } from "../admission/redis/index.js";
import { type CapacityMetrics, registerCapacityMetrics } from "../metrics/capacity.js";
import { type FlowControlMetrics, registerFlowControlMetrics } from "../metrics/flow-control.js";
import type { SluiceMetrics } from "../metrics/index.js";
import { registerPoolMetrics } from "../metrics/pools.js";
import { type RetryCounter, registerRetryMetrics } from "../metrics/routing.js";
import { registerEngineMetrics } from "./engine-metrics.js";
import type { Fleet } from "./start-pools.js";

export interface LifecycleMetrics {
  readonly capacityMetrics: CapacityMetrics;
  readonly retries: RetryCounter;
  /** The inference extension's flow-control series (docs/kubernetes.md). */
  readonly flowControl: FlowControlMetrics;
}

export function bindFleetMetrics(
  metrics: SluiceMetrics,
  fleet: Fleet,
  budgets: BudgetBook,
  shared: SharedState | undefined,
): LifecycleMetrics {
  const { admission, capacity, workers, pools } = fleet;
  metrics.bindBudgetRemaining(() =>
    budgets
      .tenants()
      .map((t) => [t, budgets.remaining(t) as Record<string, number>] as [string, Record<string, number>]),
  );
  metrics.bindScheduler(() => {
    const snapshot = admission.snapshot();
    return snapshot.classes === null ? undefined : { ...snapshot, classes: snapshot.classes };
  });
  metrics.bindCapacity(() => shared?.fleetCapacity() ?? capacity.capacity);
  metrics.bindAdmissionMode(() => admission.mode);
  metrics.bindSchedulerFallback(() => admission.fallbackCode);
  metrics.bindWorkersHealthy(() => workers.healthyCount);
  registerPoolMetrics(metrics.registry, () => pools.all);
  registerEngineMetrics(metrics.registry, workers, () => workers.now());
  const capacityMetrics = registerCapacityMetrics(metrics.registry, {
    limit: () => capacity.capacity,
    adaptive: () => fleet.mainPool()?.adaptive?.snapshot(),
    adjustments: () => fleet.mainPool()?.adaptive?.adjustments,
    shedding: () => fleet.mainPool()?.shedding?.status(),
  });
  const retries = registerRetryMetrics(metrics.registry);
  const flowControl = registerFlowControlMetrics(metrics.registry, metrics.tenants);
  return { capacityMetrics, retries, flowControl };
}

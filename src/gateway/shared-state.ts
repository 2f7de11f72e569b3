import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { TenantPolicy } from "@sluice/scheduler/core/config.js";
import { type SharedState, startSharedState } from "../admission/redis/index.js";
import type { SluiceMetrics } from "../metrics/index.js";
import type { GatewayOptions } from "./options.js";
import type { ShutdownList } from "./shutdown.js";

/**
 * Shared state (--state-url): the replicas admit as one, and share budgets, through Redis
 * (docs/replicas.md). Redis not answering yet is the fail mode's business, not a start failure.
 */
export async function startSharedStateIfAsked(
  options: GatewayOptions,
  tenantPolicies: ReadonlyMap<string, TenantPolicy>,
  metrics: SluiceMetrics,
  clock: Clock,
  stops: ShutdownList,
): Promise<SharedState | undefined> {
  if (options.state === undefined) return undefined;
  const shared = await startSharedState({
    state: options.state,
    tenantPolicies,
    pricing: options.pricing ?? {},
    clock,
    logger: options.logger,
    registry: metrics.registry,
    onBudgetRejection: (tenant, code) => metrics.countBudgetRejection(tenant, code),
  });
  stops.add("shared state", () => shared.close());
  return shared;
}

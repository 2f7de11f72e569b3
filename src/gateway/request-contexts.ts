/**
 * What the request lifecycle and each request's lease read from the gateway: its live parts and
 * the request limits, gathered once at start.
 */
import type { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import { realClock } from "@sluice/scheduler/core/clock.js";
import { describePredictionChain } from "../accounting/output-prediction.js";
import type { OutcomeSink } from "../contracts/outcome.js";
import type { SluiceMetrics } from "../metrics/index.js";
import { registerOutputPredictionMetrics } from "../metrics/output-prediction.js";
import { OutstandingWork } from "../routing/outstanding-work.js";
import { DEFAULT_MAX_RETRIES } from "../routing/retry.js";
import type { LifecycleMetrics } from "./fleet-metrics.js";
import { clientLimitsOf } from "./front.js";
import type { LivePolicy } from "./live-policy.js";
import type { GatewayOptions } from "./options.js";
import type { Recorders } from "./recorders.js";
import { DEFAULT_MAX_COST_TOKENS } from "./request/cost.js";
import type { LeaseContext } from "./request/lease.js";
import type { LifecycleContext } from "./request/lifecycle.js";
import { OutputLengths } from "./request/output-lengths.js";
import { QueueDrain } from "./request/queue-drain.js";
import type { Fleet } from "./start-pools.js";
import type { TenantActivity } from "./tenancy/tenant-activity.js";

interface RequestParts {
  readonly options: GatewayOptions;
  readonly fleet: Fleet;
  readonly policy: LivePolicy;
  readonly budgets: BudgetBook;
  readonly metrics: SluiceMetrics;
  readonly lifecycleMetrics: LifecycleMetrics;
  readonly activity: TenantActivity;
  readonly recorders: Recorders;
  /** Every finished request's outcome goes here. */
  readonly outcomes: OutcomeSink | undefined;
}

export function requestContexts(parts: RequestParts): { lifecycle: LifecycleContext; leases: LeaseContext } {
  const { options, fleet, policy, budgets, metrics, activity } = parts;
  const { logger } = options;
  const limits = clientLimitsOf(options);
  // Recent output lengths: what a budget reserves for a request without max_tokens, and the
  // weight of a queued request for load shedding (docs/output-prediction.md).
  const outputLengths = new OutputLengths();
  const predictionErrors = registerOutputPredictionMetrics(metrics.registry);
  // Say which chain is in force: without default_output_tokens a new tenant's request holds a context.
  logger.info({ chain: describePredictionChain(options.defaultOutputTokens) }, "output-length prediction");
  // Prompt + predicted output of the requests in flight on each worker (routing's least_tokens).
  const outstandingWork = new OutstandingWork();
  const lifecycle: LifecycleContext = {
    pools: fleet.pools,
    workers: fleet.workers,
    budgets,
    metrics,
    tenants: () => policy.tenants,
    maxPayloadSize: options.maxPayloadSize,
    bodyIdleMs: limits.bodyIdleTimeoutSecs * 1000,
    bodyDeadlineMs: limits.bodyTimeoutSecs * 1000,
    upstreamTimeoutMs: options.requestTimeoutSecs * 1000,
    // The cost ceiling: configured, else the largest context a worker reports, else a constant.
    maxCostTokens: () => options.maxCostTokens ?? fleet.workers.contextLength ?? DEFAULT_MAX_COST_TOKENS,
    outputLengths,
    outstandingWork,
    defaultOutputTokens: options.defaultOutputTokens,
    capacityMetrics: parts.lifecycleMetrics.capacityMetrics,
    retries: parts.lifecycleMetrics.retries,
    flowControl: parts.lifecycleMetrics.flowControl,
    logger,
    classFor: (priority, tenant) => policy.classFor(priority, tenant),
  };
  const leases: LeaseContext = {
    admission: fleet.admission,
    workers: fleet.workers,
    budgets,
    metrics,
    activity,
    outcomes: parts.outcomes,
    logger,
    maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
    upstreamTimeoutMs: options.requestTimeoutSecs * 1000,
    outputLengths,
    predictionErrors,
    outstandingWork,
    tracing: parts.recorders.tracing,
    rateLimitHeaders: options.rateLimitHeaders ?? true,
    queueDrain: new QueueDrain(),
    clock: options.clock ?? realClock,
    healthIntervalSecs: options.health.intervalSecs,
  };
  return { lifecycle, leases };
}

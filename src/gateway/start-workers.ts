/**
 * The workers, found before anything else: the admission mode is decided on the capacity the first
 * discovery found, and on whether the priority YAML loaded.
 */
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { SchedulerFileSettings } from "@sluice/scheduler/core/config.js";
import { loadSchedulerFile } from "../config/policy-file.js";
import type { SluiceMetrics } from "../metrics/index.js";
import { registerRoutingMetrics } from "../metrics/routing.js";
import { WorkerPool } from "./fleet/workers.js";
import type { GatewayOptions } from "./options.js";
import type { ShutdownList } from "./shutdown.js";

export interface DiscoveredFleet {
  readonly workers: WorkerPool;
  /** The priority YAML, when it loaded. */
  readonly policyFile: SchedulerFileSettings | undefined;
  /** Why it did not load (a SchedulerFileError, naming file, line and key): the fleet then runs legacy admission. */
  readonly loadError: Error | undefined;
}

/** Capacity assumed while no worker has reported one (or legacy admission sets no limit). */
export function fallbackCapacityOf(options: GatewayOptions): number {
  return options.legacy.maxConcurrentRequests > 0 ? options.legacy.maxConcurrentRequests : 1024;
}

export async function discoverWorkers(
  options: GatewayOptions,
  metrics: SluiceMetrics,
  clock: Clock,
  stops: ShutdownList,
): Promise<DiscoveredFleet> {
  // Worker choice and circuits: read at scrape time from the pool (`workers` is set by then).
  const routingObserver = registerRoutingMetrics(metrics.registry, {
    circuits: () => workers.workers.map((w) => ({ worker: w.url, state: w.breaker.state })),
    treeChars: () => workers.routingTreeChars,
  });
  const workers: WorkerPool = new WorkerPool({
    workers: options.workers,
    policy: options.policy,
    routing: options.routing,
    routingPolicy: options.routingPolicy,
    routingObserver,
    breaker: options.breaker,
    health: options.health,
    fallbackCapacity: fallbackCapacityOf(options),
    logger: options.logger,
    connectTimeoutSecs: options.upstreamConnectTimeoutSecs ?? 10,
    apiKey: options.workerApiKey,
    engineSignals: options.engineSignals,
    // Shared state counts every replica's requests already; the engine counts them too.
    countForeignLoad: options.state === undefined,
    clock,
  });
  stops.add("workers", () => workers.close());
  await workers.discover();
  try {
    const policyFile = await loadSchedulerFile(options.priorityScheduler.configPath);
    return { workers, policyFile, loadError: undefined };
  } catch (err) {
    return { workers, policyFile: undefined, loadError: err as Error };
  }
}

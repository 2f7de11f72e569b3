/**
 * The gateway: a composition of its parts, in the order they start. Each part that holds something
 * (a listener, timers, connections) registers its stop step on one shutdown list (shutdown.ts),
 * which `close()` and a start that fails half-way both run. Its own paths are /metrics, /health,
 * /readiness and /v1/models (own-paths.ts); every other request runs the lifecycle in
 * request/lifecycle.ts, owned by one lease (request/lease.ts).
 */
import { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import { realClock } from "@sluice/scheduler/core/clock.js";
import type { AdaptiveCapacity } from "../capacity/adaptive.js";
import type { OutcomeSink } from "../contracts/outcome.js";
import type { LedgerWriter } from "../ledger/writer.js";
import { createMetrics, type SluiceMetrics } from "../metrics/index.js";
import type { LoadShedding } from "../shedding/load-shedding.js";
import { warnOfAdaptiveSettingsWithoutEffect, warnOfAdaptiveWithoutGuards } from "./adaptive-settings.js";
import type { AdminServer } from "./admin/admin.js";
import type { DashboardFactory, GatewayDashboard } from "./admin/dashboard-port.js";
import { pinCapacityHandler } from "./admin/pin-capacity.js";
import { plugDashboard, startAdminListener } from "./admin-listener.js";
import { fleetWideLegacyAdmission, strictFallbackError } from "./admission-mode.js";
import type { FleetAdmission } from "./fleet/fleet-admission.js";
import type { FleetCapacity } from "./fleet/fleet-capacity.js";
import type { ModelPools } from "./fleet/model-pools.js";
import type { WorkerPool } from "./fleet/workers.js";
import { bindFleetMetrics } from "./fleet-metrics.js";
import { startFront } from "./front.js";
import { LivePolicy } from "./live-policy.js";
import type { GatewayOptions } from "./options.js";
import { fanOut, startRecorders } from "./recorders.js";
import { requestContexts } from "./request-contexts.js";
import { startSharedStateIfAsked } from "./shared-state.js";
import { ShutdownList } from "./shutdown.js";
import { startPools } from "./start-pools.js";
import { discoverWorkers, fallbackCapacityOf } from "./start-workers.js";
import { gatewayStatus } from "./status.js";
import { TenantActivity } from "./tenancy/tenant-activity.js";

/** What the embedder plugs in: parts that live above the gateway, or outside it. */
interface GatewayPlugins<D extends GatewayDashboard = GatewayDashboard> {
  /** Records every finished request's outcome (before the ledger and the dashboard do). */
  outcomes?: OutcomeSink | undefined;
  /** Builds the dashboard the admin listener serves (`createDashboard` of src/dashboard). */
  dashboard?: DashboardFactory<D> | undefined;
}

export interface Gateway<D extends GatewayDashboard = GatewayDashboard> {
  readonly url: string;
  readonly port: number;
  /** The fleet's admission: the model pools' backends read as totals. */
  readonly admission: FleetAdmission;
  readonly workers: WorkerPool;
  /** The model pools: each has its own capacity, admission, adaptive limit and shedding. */
  readonly pools: ModelPools;
  /** The fleet's capacity (the pools' sum); pinning it pins the only pool. */
  readonly capacity: FleetCapacity;
  /** The adaptive capacity source of the largest pool, in `capacity_mode: adaptive`. */
  readonly adaptive: AdaptiveCapacity | undefined;
  /** Shedding at the door of the largest pool, when `load_shedding` or `keyed_shedding` is configured. */
  readonly shedding: LoadShedding | undefined;
  readonly metrics: SluiceMetrics;
  readonly budgets: BudgetBook;
  /** The admin listener, when `options.admin` was given. */
  readonly adminServer: AdminServer | undefined;
  /** The usage ledger's writer, when `options.ledger` names one. */
  readonly ledger: LedgerWriter | undefined;
  /** The dashboard plugged in (`plugins.dashboard`) behind the admin listener's /dashboard. */
  readonly dashboard: D | undefined;
  /** Re-reads the policy files; a bad file throws and the running policy stays in force. */
  reload(): Promise<{ tenantPolicies: number }>;
  /** The admin status document (also `GET /api/v1/status`). */
  status(): Record<string, unknown>;
  /**
   * Stops the gateway. With `drainMs`, it first stops accepting connections, answers /readiness
   * with 503 and lets the requests already received (queued or running) finish for at most that
   * long; whatever is still running then is cut. Last, the ledger is flushed.
   */
  close(options?: { drainMs?: number }): Promise<void>;
}

export async function startGateway<D extends GatewayDashboard = GatewayDashboard>(
  options: GatewayOptions,
  plugins: GatewayPlugins<D> = {},
): Promise<Gateway<D>> {
  const { logger } = options;
  const clock = options.clock ?? realClock;
  const stops = new ShutdownList();
  try {
    const metrics = createMetrics({ tenantMetricTopN: options.priorityScheduler.tenantMetricTopN });
    const activity = new TenantActivity();
    const discovered = await discoverWorkers(options, metrics, clock, stops);
    const policy = new LivePolicy(options, discovered.policyFile);
    const shared = await startSharedStateIfAsked(options, policy.tenantPolicies, metrics, clock, stops);
    warnOfAdaptiveSettingsWithoutEffect(options.capacity, logger);
    warnOfAdaptiveWithoutGuards(options.capacity, logger);
    const fleetLegacy = fleetWideLegacyAdmission(options, discovered, policy, shared, metrics, clock);
    const fleet = startPools(
      {
        options,
        clock,
        metrics,
        policy,
        policyFile: discovered.policyFile,
        shared,
        fleetLegacy,
        fallbackCapacity: fallbackCapacityOf(options),
      },
      discovered.workers,
      stops,
    );
    const strict = strictFallbackError(options, fleet.admission, discovered.loadError);
    if (strict !== undefined) throw strict;
    // Tenant limits come from the same YAML as the scheduler's tenant policies; they apply in both
    // admission modes. A file the scheduler rejected was already logged; budgets then start empty.
    const budgets =
      shared?.budgets ??
      new BudgetBook({ policies: policy.tenantPolicies, pricing: options.pricing ?? {}, clock });
    const lifecycleMetrics = bindFleetMetrics(metrics, fleet, budgets, shared);
    const recorders = await startRecorders(options, metrics, stops);
    const dashboard = plugDashboard(
      options,
      plugins.dashboard,
      { metrics, fleet, activity, budgets, policy, ledger: recorders.ledger },
      stops,
    );
    const outcomes = fanOut([plugins.outcomes, recorders.ledger, dashboard?.outcomes]);
    const { lifecycle, leases } = requestContexts({
      options,
      fleet,
      policy,
      budgets,
      metrics,
      lifecycleMetrics,
      activity,
      recorders,
      outcomes,
    });
    const front = await startFront({ options, fleet, policy, metrics }, lifecycle, leases, stops);
    const status = () =>
      gatewayStatus({ options, fleet, activity, budgets, ledger: recorders.ledger, shared });
    const reload = () => policy.reload({ admission: fleet.admission, budgets });
    const pinCapacity = pinCapacityHandler(fleet.pools, fleet.capacity, shared, logger);
    const adminServer = await startAdminListener(options, { pinCapacity, status, reload }, dashboard, stops);

    return {
      url: front.url,
      port: front.port,
      admission: fleet.admission,
      workers: fleet.workers,
      pools: fleet.pools,
      capacity: fleet.capacity,
      get adaptive() {
        return fleet.mainPool()?.adaptive;
      },
      get shedding() {
        return fleet.mainPool()?.shedding;
      },
      metrics,
      budgets,
      adminServer,
      ledger: recorders.ledger,
      dashboard,
      reload,
      status,
      async close(closeOptions) {
        if (closeOptions?.drainMs !== undefined && closeOptions.drainMs > 0)
          await front.drain(closeOptions.drainMs);
        await stops.stop();
      },
    };
  } catch (err) {
    // A start that fails leaves nothing behind: whatever started stops, in the same order as on close.
    await stops
      .stop()
      .catch((stopErr: unknown) => logger.error({ err: stopErr }, "stopping after a failed start failed"));
    throw err;
  }
}

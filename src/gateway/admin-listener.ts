/**
 * The admin side, when `options.admin` is given: the dashboard plugged in from above (the gateway
 * only knows its port), and the admin listener serving the admin API and that dashboard.
 */
import type { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import type { LedgerWriter } from "../ledger/writer.js";
import type { SluiceMetrics } from "../metrics/index.js";
import { type AdminHandlers, type AdminServer, startAdminServer } from "./admin/admin.js";
import type { DashboardFactory, GatewayDashboard } from "./admin/dashboard-port.js";
import type { LivePolicy } from "./live-policy.js";
import type { GatewayOptions } from "./options.js";
import type { ShutdownList } from "./shutdown.js";
import type { Fleet } from "./start-pools.js";
import type { TenantActivity } from "./tenancy/tenant-activity.js";

/** The gateway's parts plugDashboard gathers the DashboardParts from. */
interface PartsForDashboard {
  readonly metrics: SluiceMetrics;
  readonly fleet: Fleet;
  readonly activity: TenantActivity;
  readonly budgets: BudgetBook;
  readonly policy: LivePolicy;
  readonly ledger: LedgerWriter | undefined;
}

/** The dashboard, built by `factory` when the admin listener is on (it is served there). */
export function plugDashboard<D extends GatewayDashboard>(
  options: GatewayOptions,
  factory: DashboardFactory<D> | undefined,
  sources: PartsForDashboard,
  stops: ShutdownList,
): D | undefined {
  if (options.admin === undefined || factory === undefined) return undefined;
  const { fleet, policy } = sources;
  const dashboard = factory({
    registry: sources.metrics.registry,
    admission: fleet.admission,
    capacity: fleet.capacity,
    workers: fleet.workers,
    get adaptive() {
      return fleet.mainPool()?.adaptive;
    },
    get shedding() {
      return fleet.mainPool()?.shedding;
    },
    activity: sources.activity,
    budgets: sources.budgets,
    policies: () => policy.tenantPolicies,
    ledger: sources.ledger,
    logger: options.logger,
    pools: () => fleet.pools.all,
  });
  stops.add("dashboard", () => dashboard.close());
  return dashboard;
}

/** Starts the admin listener, then the dashboard it serves. */
export async function startAdminListener(
  options: GatewayOptions,
  handlers: Omit<AdminHandlers, "dashboard">,
  dashboard: GatewayDashboard | undefined,
  stops: ShutdownList,
): Promise<AdminServer | undefined> {
  if (options.admin === undefined) return undefined;
  const adminServer = await startAdminServer({ ...options.admin, handlers: { ...handlers, dashboard } });
  stops.add("admin listener", () => adminServer.close());
  options.logger.info({ url: adminServer.url }, "admin API listening");
  dashboard?.start();
  return adminServer;
}

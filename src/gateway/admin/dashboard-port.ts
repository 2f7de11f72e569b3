/**
 * The port a dashboard plugs into. The gateway does not build one itself: the dashboard lives on
 * a floor above it (docs/design.md, "Layout"), so whoever starts the gateway (the CLI, a test)
 * hands it a factory, and the gateway calls it with its live parts when the admin listener is on.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import type { TenantPolicy } from "@sluice/scheduler/core/config.js";
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import type { AdaptiveCapacity } from "../../capacity/adaptive.js";
import type { OutcomeSink } from "../../contracts/outcome.js";
import type { PoolView } from "../../contracts/pool-view.js";
import type { LedgerWriter } from "../../ledger/writer.js";
import type { LoadShedding } from "../../shedding/load-shedding.js";
import type { FleetAdmission } from "../fleet/fleet-admission.js";
import type { FleetCapacity } from "../fleet/fleet-capacity.js";
import type { WorkerPool } from "../fleet/workers.js";
import type { TenantActivity } from "../tenancy/tenant-activity.js";

/** What the admin listener serves of a dashboard: its page, and its data behind the token. */
export interface AdminDashboard {
  /** True for the page's own paths (served without the token: the page holds no data). */
  isPagePath(path: string): boolean;
  /** Answers a request for one of the page's paths. */
  servePage(req: IncomingMessage, res: ServerResponse, path: string): Promise<void>;
  snapshot(): Promise<unknown>;
  /** Answers with an event stream that runs until the client leaves or the dashboard closes. */
  events(req: IncomingMessage, res: ServerResponse): void;
}

/** A dashboard as the gateway runs it: fed the outcome records, started and closed with it. */
export interface GatewayDashboard extends AdminDashboard {
  readonly outcomes: OutcomeSink;
  /** Called once the admin listener is up. */
  start(): void;
  /** Ends every stream; called before the admin listener closes. */
  close(): void;
}

/** The gateway's live parts a dashboard reads (read on every snapshot, never copied). */
export interface DashboardParts {
  readonly registry: Registry;
  readonly admission: FleetAdmission;
  readonly capacity: FleetCapacity;
  readonly workers: WorkerPool;
  /** The largest pool's adaptive capacity, when `capacity_mode: adaptive`. */
  readonly adaptive: AdaptiveCapacity | undefined;
  /** The largest pool's shedding, when configured. */
  readonly shedding: LoadShedding | undefined;
  readonly activity: TenantActivity;
  readonly budgets: BudgetBook;
  /** The tenant policies in force (a reload replaces them). */
  policies(): ReadonlyMap<string, TenantPolicy>;
  readonly ledger: LedgerWriter | undefined;
  readonly logger: Logger;
  /** The model pools now, in the order they formed (read-only views). */
  pools(): readonly PoolView[];
}

export type DashboardFactory<D extends GatewayDashboard = GatewayDashboard> = (parts: DashboardParts) => D;

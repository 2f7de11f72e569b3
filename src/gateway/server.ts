/**
 * The gateway: wires the parts (workers, capacity, admission backend, budgets, metrics) and serves
 * HTTP. Its own paths are /metrics, /health and /readiness; every other request runs the lifecycle
 * in lifecycle.ts, owned by one lease (lease.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { AdaptiveCapacity } from "../capacity/adaptive.js";
import { DiscoveredCapacity } from "../capacity/discovered.js";
import { LoadShedding } from "../capacity/load-shedding.js";
import { PinnableCapacity } from "../capacity/pinned.js";
import { BudgetBook } from "../core/budgets.js";
import { realClock } from "../core/clock.js";
import type { SchedulerFileSettings } from "../core/config.js";
import { ConfigError } from "../core/errors.js";
import { startLedger } from "../ledger/index.js";
import type { LedgerWriter } from "../ledger/writer.js";
import { registerCapacityMetrics } from "../metrics/capacity.js";
import { createMetrics, type SluiceMetrics } from "../metrics/index.js";
import type { AdmissionBackend } from "../state/backend.js";
import { createInProcessBackend } from "../state/in-process.js";
import { type AdminServer, startAdminServer } from "./admin.js";
import {
  type ClientLimits,
  closeAfterAnswer,
  DEFAULT_CLIENT_LIMITS,
  guardServer,
  serverTimeouts,
} from "./client-guard.js";
import { DEFAULT_MAX_COST_TOKENS } from "./cost.js";
import { GatewayError, sendError, sendJson } from "./http-errors.js";
import { Lease, type LeaseContext } from "./lease.js";
import { type LifecycleContext, runLifecycle } from "./lifecycle.js";
import type { GatewayOptions } from "./options.js";
import type { OutcomeSink } from "./outcome.js";
import { loadSchedulerFile } from "./policy-file.js";
import { pathOf } from "./request-checks.js";
import { requestIdFor } from "./request-id.js";
import { TenantActivity } from "./tenant-activity.js";
import { TenantResolver } from "./tenants.js";
import { WorkerPool } from "./workers.js";

export interface Gateway {
  readonly url: string;
  readonly port: number;
  readonly admission: AdmissionBackend;
  readonly workers: WorkerPool;
  readonly capacity: PinnableCapacity;
  /** The adaptive capacity source, in `capacity_mode: adaptive`. */
  readonly adaptive: AdaptiveCapacity | undefined;
  /** Shedding at the door, when `load_shedding` or `keyed_shedding` is configured. */
  readonly shedding: LoadShedding | undefined;
  readonly metrics: SluiceMetrics;
  readonly budgets: BudgetBook;
  /** The admin listener, when `options.admin` was given. */
  readonly adminServer: AdminServer | undefined;
  /** The usage ledger's writer, when `options.ledger` names one. */
  readonly ledger: LedgerWriter | undefined;
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

export async function startGateway(options: GatewayOptions, outcomes?: OutcomeSink): Promise<Gateway> {
  const { logger } = options;
  const clock = options.clock ?? realClock;
  let tenants = new TenantResolver(options);
  const activity = new TenantActivity();
  const metrics = createMetrics({ tenantMetricTopN: options.priorityScheduler.tenantMetricTopN });
  const fallbackCapacity =
    options.legacy.maxConcurrentRequests > 0 ? options.legacy.maxConcurrentRequests : 1024;

  const workers = new WorkerPool({
    workers: options.workers,
    policy: options.policy,
    health: options.health,
    fallbackCapacity,
    logger,
    connectTimeoutSecs: options.upstreamConnectTimeoutSecs ?? 10,
    apiKey: options.workerApiKey,
    clock,
  });
  const discovered = new DiscoveredCapacity(workers);

  // The admission mode is decided after the first discovery, on the capacity it found.
  let policyFile: SchedulerFileSettings | undefined;
  let loadError: string | undefined;
  let admission: AdmissionBackend;
  let adaptive: AdaptiveCapacity | undefined;
  let capacity: PinnableCapacity;
  let shedding: LoadShedding | undefined;
  try {
    await workers.discover();
    // Adaptive capacity cold-starts from what discovery found; a pin still wins over it.
    const capacityOptions = options.capacity;
    if (capacityOptions?.mode === "adaptive") {
      adaptive = new AdaptiveCapacity(
        discovered,
        {
          minCapacity: capacityOptions.minCapacity,
          maxCapacity: capacityOptions.maxCapacity,
          tpotSloMs: capacityOptions.tpotSloMs,
          ttftSloMs: capacityOptions.ttftSloMs,
        },
        clock,
        (bound, limit, wanted) =>
          logger.warn({ bound, limit, wanted }, `adaptive capacity held at its ${bound} bound (${limit})`),
      );
    }
    capacity = new PinnableCapacity(adaptive ?? discovered);
    if (options.shedding !== undefined) {
      const candidate = new LoadShedding(options.shedding, clock);
      if (candidate.enabled) shedding = candidate;
    }
    try {
      policyFile = await loadSchedulerFile(options.priorityScheduler.configPath);
    } catch (err) {
      loadError = (err as Error).message;
    }
    admission = createInProcessBackend({
      enabled: options.priorityScheduler.enabled,
      defaultMaxClass: options.priorityScheduler.defaultMaxClass,
      classes: policyFile?.classes ?? {},
      tenantPolicies: policyFile?.tenantPolicies ?? new Map(),
      loadError,
      capacity: capacity.capacity,
      legacy: options.legacy,
      observer: metrics.observer,
      clock,
      logger,
    });
  } catch (err) {
    // A start that fails must not leave the worker pools behind.
    await workers.close();
    throw err;
  }
  const active = admission;
  if (shedding !== undefined && active.mode !== "scheduler") {
    logger.warn("load shedding needs the priority scheduler; it is off while admission is legacy");
    shedding = undefined;
  }
  workers.respectCapacity = active.mode === "scheduler";
  let lastCapacity = capacity.capacity;
  capacity.subscribe((c) => {
    logger.info({ capacity: c, previous: lastCapacity, healthy: workers.healthyCount }, "capacity changed");
    lastCapacity = c;
    active.setCapacity(c);
  });
  workers.start();
  adaptive?.start();
  shedding?.start();

  // Tenant limits come from the same YAML as the scheduler's tenant policies; they apply in both
  // admission modes. A file the scheduler rejected was already logged; budgets then start empty.
  const budgets = new BudgetBook({
    policies: policyFile?.tenantPolicies ?? new Map(),
    pricing: options.pricing ?? {},
    clock,
  });
  metrics.bindBudgetRemaining(() =>
    budgets
      .tenants()
      .map((t) => [t, budgets.remaining(t) as Record<string, number>] as [string, Record<string, number>]),
  );
  metrics.bindScheduler(() => {
    const snapshot = active.snapshot();
    return snapshot.classes === null ? undefined : { ...snapshot, classes: snapshot.classes };
  });
  metrics.bindCapacity(() => capacity.capacity);
  metrics.bindAdmissionMode(() => active.mode);
  metrics.bindWorkersHealthy(() => workers.healthyCount);
  const capacityMetrics = registerCapacityMetrics(metrics.registry, {
    limit: () => adaptive?.capacity ?? capacity.capacity,
    adaptive: () => adaptive?.controller.snapshot(),
    adjustments: () => adaptive?.adjustments,
    shedding: () => shedding?.status(),
  });

  const limits: ClientLimits = { ...DEFAULT_CLIENT_LIMITS, ...options.clientLimits };
  const lifecycle: LifecycleContext = {
    admission: active,
    workers,
    budgets,
    metrics,
    activity,
    tenants: () => tenants,
    maxPayloadSize: options.maxPayloadSize,
    bodyIdleMs: limits.bodyIdleTimeoutSecs * 1000,
    upstreamTimeoutMs: options.requestTimeoutSecs * 1000,
    // The cost ceiling: configured, else the largest context a worker reports, else a constant.
    maxCostTokens: () => options.maxCostTokens ?? workers.contextLength ?? DEFAULT_MAX_COST_TOKENS,
    shedding,
    capacityMetrics,
    feedback: adaptive,
  };
  // The ledger is one more outcome sink; its rows are written in the background (docs/ledger.md).
  const ledger = startLedger(options.ledger, logger, metrics.registry);
  const leases: LeaseContext = {
    admission: active,
    workers,
    budgets,
    metrics,
    activity,
    outcomes: ledger === undefined ? outcomes : bothSinks(outcomes, ledger),
    logger,
    feedback: adaptive,
    shedding,
  };

  // Requests on the lifecycle that have not finished, for the drain on SIGTERM.
  let open = 0;
  let draining = false;
  let drained: (() => void) | undefined;
  const onRequestClosed = () => {
    open--;
    if (draining) {
      // A keep-alive connection whose answer just ended is idle now: close it, or the client
      // would send its next request to a gateway that is going away.
      setImmediate(() => server.closeIdleConnections());
      if (open === 0) drained?.();
    }
  };

  function handle(req: IncomingMessage, res: ServerResponse): void {
    const requestId = requestIdFor(req.headers["x-request-id"]);
    // While draining every answer says Connection: close, so clients reconnect elsewhere.
    if (draining) res.shouldKeepAlive = false;
    if (req.method === "GET" || req.method === "HEAD") {
      const path = pathOf(req.url ?? "/");
      // The gateway's own paths read no body: one sent anyway is not read, so close after the
      // answer (its framing may be broken, and a second answer must never follow).
      if (
        (path === "/metrics" || path === "/health" || path === "/readiness") &&
        (req.headers["transfer-encoding"] !== undefined ||
          (req.headers["content-length"] !== undefined && req.headers["content-length"] !== "0"))
      ) {
        closeAfterAnswer(req, res);
      }
      if (path === "/metrics") {
        void serveMetrics(res, requestId);
        return;
      }
      if (path === "/health") {
        sendJson(res, 200, { status: "ok" }, { "x-request-id": requestId });
        return;
      }
      if (path === "/readiness") {
        const ready = workers.healthyCount > 0 && !draining;
        sendJson(
          res,
          ready ? 200 : 503,
          {
            status: ready ? "ready" : draining ? "draining" : "not_ready",
            admission_mode: active.mode,
            healthy_workers: workers.healthyCount,
            capacity: capacity.capacity,
          },
          { "x-request-id": requestId },
        );
        return;
      }
    }
    open++;
    res.once("close", onRequestClosed);
    void runLifecycle(lifecycle, new Lease(leases, req, res, requestId), req);
  }

  /** Resolves when every request received so far has finished, or after `ms`. */
  async function drain(ms: number): Promise<void> {
    draining = true;
    server.close();
    server.closeIdleConnections();
    if (open === 0) return;
    logger.info({ requests: open, timeoutMs: ms }, "draining: waiting for requests in flight and queued");
    let timer: NodeJS.Timeout | undefined;
    const finished = await Promise.race([
      new Promise<boolean>((resolve) => {
        drained = () => resolve(true);
      }),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), ms);
      }),
    ]);
    clearTimeout(timer);
    if (finished) logger.info("drained: every request finished");
    else
      logger.warn({ requests: open }, `drain timed out after ${ms} ms: cutting the requests still running`);
  }

  async function serveMetrics(res: ServerResponse, requestId: string): Promise<void> {
    try {
      const text = await metrics.metricsText();
      res.writeHead(200, {
        "content-type": metrics.contentType,
        "content-length": Buffer.byteLength(text),
        "x-request-id": requestId,
      });
      res.end(text);
    } catch (err) {
      logger.error({ err }, "metrics collection failed");
      sendError(res, new GatewayError("metrics_failed"), { "x-request-id": requestId });
    }
  }

  const server: Server = createServer(serverTimeouts(limits), handle);
  guardServer(server, limits, logger, { answered: (status) => metrics.countHttpStatus(status) });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(options.port, options.host, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (err) {
    // Listening failed (port in use, bad host): stop the health checks, close the worker pools.
    await workers.close();
    await ledger?.close();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  logger.info(
    { port, host: options.host, mode: active.mode, capacity: capacity.capacity },
    "sluice gateway listening",
  );

  async function reload(): Promise<{ tenantPolicies: number }> {
    // Parse everything first; apply only when every file is valid, so a bad file changes nothing.
    const configPath = options.priorityScheduler.configPath;
    const file = await loadSchedulerFile(configPath).catch((err: unknown) => {
      if (err instanceof ConfigError) throw err;
      // A missing or unreadable file is a bad file too: 400 invalid_config naming it, not a 500.
      const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      throw new ConfigError("priority_scheduler_config", `cannot read ${configPath}: ${reason}`);
    });
    const gatewayFile = options.reloadGatewayConfig?.();
    const resolver = gatewayFile ? new TenantResolver({ ...options, apiKeys: gatewayFile.apiKeys }) : tenants;
    active.setTenantPolicies(file.tenantPolicies, options.priorityScheduler.defaultMaxClass);
    budgets.setPolicies(file.tenantPolicies, gatewayFile?.pricing ?? options.pricing ?? {});
    tenants = resolver;
    logger.info({ tenantPolicies: file.tenantPolicies.size }, "policy reloaded");
    return { tenantPolicies: file.tenantPolicies.size };
  }

  function status(): Record<string, unknown> {
    const snapshot = active.snapshot();
    const perTenant: Record<string, unknown> = {};
    const counts = activity.snapshot();
    for (const t of new Set([...counts.keys(), ...budgets.tenants()])) {
      const c = counts.get(t) ?? { inflight: 0, queued: 0 };
      perTenant[t] = { ...c, budget_remaining: budgets.remaining(t) };
    }
    return {
      admission_mode: active.mode,
      fallback_reason: active.fallbackReason ?? null,
      capacity: capacity.capacity,
      discovered_capacity: capacity.underlying,
      pinned_capacity: capacity.pinned ?? null,
      healthy_workers: workers.healthyCount,
      workers: workers.workers.map((w) => ({
        url: w.url,
        healthy: w.healthy,
        capacity: w.capacity,
        inflight: w.inflight,
      })),
      inflight: snapshot.inflight,
      queued: snapshot.queued,
      classes: snapshot.classes,
      tenants: perTenant,
      capacity_mode: adaptive === undefined ? "static" : "adaptive",
      adaptive: adaptive?.snapshot() ?? null,
      shedding: shedding?.status() ?? null,
    };
  }

  let adminServer: AdminServer | undefined;
  if (options.admin !== undefined) {
    try {
      adminServer = await startAdminServer({
        ...options.admin,
        handlers: {
          pinCapacity(pin) {
            capacity.setPin(pin);
            logger.info({ pinned: pin ?? null, capacity: capacity.capacity }, "capacity set by admin API");
            return { capacity: capacity.capacity, pinned: capacity.pinned };
          },
          status,
          reload,
        },
      });
    } catch (err) {
      // The admin listener failed: close the data-plane listener and the worker pools too.
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      adaptive?.stop();
      shedding?.stop();
      await workers.close();
      await ledger?.close();
      throw err;
    }
    logger.info({ url: adminServer.url }, "admin API listening");
  }

  return {
    url: `http://${host}:${port}`,
    port,
    admission: active,
    workers,
    capacity,
    adaptive,
    shedding,
    metrics,
    budgets,
    adminServer,
    ledger,
    reload,
    status,
    async close(closeOptions) {
      if (closeOptions?.drainMs !== undefined && closeOptions.drainMs > 0) await drain(closeOptions.drainMs);
      adaptive?.stop();
      shedding?.stop();
      await adminServer?.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await workers.close();
      // Last: the requests the close cut short have settled and recorded their outcomes by now.
      await ledger?.close();
    },
  };
}

function bothSinks(first: OutcomeSink | undefined, second: OutcomeSink): OutcomeSink {
  if (first === undefined) return second;
  return {
    record(outcome) {
      first.record(outcome);
      second.record(outcome);
    },
  };
}

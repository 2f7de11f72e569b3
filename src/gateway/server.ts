/**
 * The gateway: a node:http server that turns each request into acquire -> forward -> release.
 * Its own paths are /metrics, /health and /readiness; every other path goes to a worker.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { BudgetBook, type BudgetHold } from "../core/budgets.js";
import type { TenantPolicy } from "../core/config.js";
import { AdmissionError, ConfigError } from "../core/errors.js";
import { Permit } from "../core/inflight.js";
import { createMetrics, type SluiceMetrics } from "../metrics/index.js";
import { type AdminServer, startAdminServer } from "./admin.js";
import { type Admission, type AdmissionTicket, createAdmission, loadSchedulerFile } from "./admission.js";
import { readBody } from "./body.js";
import { estimateRequest } from "./cost.js";
import { GatewayError, sendError, sendJson, specFromError } from "./http-errors.js";
import type { GatewayOptions } from "./options.js";
import { forward, upstreamFailure } from "./proxy.js";
import { TenantActivity } from "./tenant-activity.js";
import { TenantResolver } from "./tenants.js";
import { UsageReader, withUsageRequested } from "./usage.js";
import { WorkerPool } from "./workers.js";

export interface Gateway {
  readonly url: string;
  readonly port: number;
  readonly admission: Admission;
  readonly workers: WorkerPool;
  readonly metrics: SluiceMetrics;
  readonly budgets: BudgetBook;
  /** The admin listener, when `options.admin` was given. */
  readonly adminServer: AdminServer | undefined;
  /** Re-reads the policy files; a bad file throws and the running policy stays in force. */
  reload(): Promise<{ tenantPolicies: number }>;
  close(): Promise<void>;
}

const PRIORITY_HEADER = "x-smg-priority";

export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const { logger } = options;
  let tenants = new TenantResolver(options);
  const activity = new TenantActivity();
  const metrics = createMetrics({ tenantMetricTopN: options.priorityScheduler.tenantMetricTopN });
  const fallbackCapacity =
    options.legacy.maxConcurrentRequests > 0 ? options.legacy.maxConcurrentRequests : 1024;

  let admission: Admission | undefined;
  const workers = new WorkerPool({
    workers: options.workers,
    policy: options.policy,
    health: options.health,
    fallbackCapacity,
    logger,
    onCapacityChange: (capacity) => admission?.setCapacity(capacity),
  });
  // The admission mode is decided after the first discovery, on the capacity it found.
  try {
    await workers.discover();
    admission = await createAdmission({
      enabled: options.priorityScheduler.enabled,
      defaultMaxClass: options.priorityScheduler.defaultMaxClass,
      configPath: options.priorityScheduler.configPath,
      capacity: workers.capacity,
      legacy: options.legacy,
      observer: metrics.observer,
      clock: options.clock,
      logger,
    });
  } catch (err) {
    // A start that fails must not leave the worker pools behind.
    await workers.close();
    throw err;
  }
  const active = admission;
  workers.start();

  // Tenant limits come from the same YAML as the scheduler's tenant policies; they apply in both
  // admission modes. A file the scheduler rejected was already logged; budgets then start empty.
  let policies: ReadonlyMap<string, TenantPolicy> = new Map();
  if (options.priorityScheduler.configPath !== undefined) {
    policies = await loadSchedulerFile(options.priorityScheduler.configPath).then(
      (file) => file.tenantPolicies,
      () => new Map(),
    );
  }
  const budgets = new BudgetBook({
    policies,
    pricing: options.pricing ?? {},
    ...(options.clock ? { clock: options.clock } : {}),
  });
  metrics.bindBudgetRemaining(() =>
    budgets
      .tenants()
      .map((t) => [t, budgets.remaining(t) as Record<string, number>] as [string, Record<string, number>]),
  );
  metrics.bindScheduler(() => active.scheduler?.snapshot());
  metrics.bindCapacity(() => workers.capacity);
  metrics.bindAdmissionMode(() => active.mode);
  metrics.bindWorkersHealthy(() => workers.healthyCount);

  const timeoutMs = options.requestTimeoutSecs * 1000;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? "/";
    if (req.method === "GET" || req.method === "HEAD") {
      if (url === "/metrics") return serveMetrics(res);
      if (url === "/health") return sendJson(res, 200, { status: "ok" });
      if (url === "/readiness") {
        const ready = workers.healthyCount > 0;
        return sendJson(res, ready ? 200 : 503, {
          status: ready ? "ready" : "not_ready",
          admission_mode: active.mode,
          healthy_workers: workers.healthyCount,
          capacity: workers.capacity,
        });
      }
    }

    // Client gone -> leave the queue, or abort the upstream request; either way the slot is freed.
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort();
    };
    res.on("close", onClose);

    let ticket: AdmissionTicket | undefined;
    let hold: BudgetHold | undefined;
    let served = false;
    // The worker's answer started reaching the client (then an error cuts the stream, and the work was done).
    let answered = false;
    let tenant = "anonymous";
    try {
      tenant = tenants.resolve(req.headers);
      const body = await readBody(req, options.maxPayloadSize);
      const estimate = estimateRequest(body, req.headers["content-type"]);
      if (budgets.governs(tenant)) {
        const verdict = budgets.check(tenant, estimate.model, {
          inputTokens: estimate.promptTokens,
          outputTokens: estimate.maxOutputTokens,
        });
        if (!verdict.ok) {
          metrics.countBudgetRejection(tenant, verdict.code);
          throw new GatewayError(
            verdict.status,
            verdict.code,
            verdict.message,
            verdict.retryAfterSecs !== undefined
              ? { "retry-after": String(verdict.retryAfterSecs) }
              : undefined,
          );
        }
        hold = verdict;
      }
      const priority = req.headers[PRIORITY_HEADER];
      activity.queued(tenant, 1);
      try {
        ticket = await active.acquire({
          priority: Array.isArray(priority) ? priority[0] : priority,
          tenant,
          cost: estimate.cost,
          signal: abort.signal,
        });
      } finally {
        activity.queued(tenant, -1);
      }
      activity.inflight(tenant, 1);
      const upstreamBody = withUsageRequested(url, body, estimate.json);
      let reader: UsageReader | undefined;
      const worker = workers.pick();
      if (worker === undefined) {
        throw new GatewayError(503, "no_healthy_workers", "no healthy worker is available", {
          "retry-after": "1",
        });
      }
      let preempted = false;
      ticket.onPreempt(() => {
        preempted = true;
        abort.abort();
      });
      worker.inflight++;
      try {
        const result = await forward({
          req,
          res,
          body: upstreamBody.body,
          worker,
          signal: abort.signal,
          timeoutMs,
          markFirstByte: () => ticket!.markFirstByte(),
          extraHeaders: {
            "x-sluice-admission": ticket.admission,
            "x-sluice-queue-wait-ms": String(Math.round(ticket.queueWaitMs)),
          },
          observe: (contentType) => {
            reader = new UsageReader(contentType, upstreamBody.strip);
            return reader;
          },
        });
        if (result.outcome === "preempted") throw preemptedError(ticket);
        served = true;
        metrics.httpRequests.inc({ status: String(result.status) });
        if (result.status >= 500) metrics.upstreamErrors.inc({ kind: "status_5xx" });
        const usage = reader?.usage;
        // A worker failure (5xx) without usage generated nothing: the hold goes back.
        const workerFailed = result.status >= 500 && usage === undefined;
        if (hold !== undefined) {
          if (workerFailed) budgets.refund(hold);
          else budgets.settle(hold, usage);
        }
        if (!workerFailed) {
          metrics.countTenantTokens(
            tenant,
            usage?.inputTokens ?? estimate.promptTokens,
            usage?.outputTokens ?? estimate.maxOutputTokens,
          );
        }
        // Correct the tenant's fair-queue flow by what the request really cost.
        if (usage !== undefined && ticket instanceof Permit) {
          active.scheduler?.adjustCost(ticket, usage.inputTokens + usage.outputTokens);
        }
      } catch (err) {
        if (preempted && !res.headersSent) throw preemptedError(ticket);
        if (err instanceof GatewayError || err instanceof AdmissionError) throw err;
        if (abort.signal.aborted)
          throw new GatewayError(499, "client_closed_request", "the client went away");
        const failure = upstreamFailure(err);
        metrics.upstreamErrors.inc({ kind: failure.kind });
        logger.warn(
          { worker: worker.url, err: (err as Error).message, kind: failure.kind },
          "upstream request failed",
        );
        throw failure.error;
      } finally {
        worker.inflight--;
      }
    } catch (err) {
      // Read before sendError below writes the gateway's own error answer (which sets headersSent).
      answered = res.headersSent;
      const spec = specFromError(err);
      metrics.httpRequests.inc({ status: String(spec.status) });
      if (spec.status === 499 || res.destroyed) {
        if (!res.destroyed) res.destroy();
        return;
      }
      if (spec.status >= 500 && !(err instanceof GatewayError) && !(err instanceof AdmissionError)) {
        logger.error({ err }, "unexpected gateway error");
      }
      sendError(res, spec);
    } finally {
      res.off("close", onClose);
      if (ticket !== undefined) {
        ticket.release();
        activity.inflight(tenant, -1);
      }
      // Never served (rejected, preempted, failed before the first byte): the hold goes back.
      // Served but cut short: the worker did the work, so the estimate stands.
      if (hold !== undefined) {
        if (served || answered) budgets.settle(hold, undefined);
        else budgets.refund(hold);
      }
    }
  }

  function preemptedError(ticket: AdmissionTicket): Error {
    const permit = ticket as { preemptionError?: () => Error };
    return permit.preemptionError?.() ?? new GatewayError(503, "scheduler_preempted", "preempted");
  }

  async function serveMetrics(res: ServerResponse): Promise<void> {
    try {
      const text = await metrics.metricsText();
      res.writeHead(200, { "content-type": metrics.contentType, "content-length": Buffer.byteLength(text) });
      res.end(text);
    } catch (err) {
      logger.error({ err }, "metrics collection failed");
      sendError(res, { status: 500, code: "metrics_failed", message: "metrics collection failed" });
    }
  }

  const server: Server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
    void handle(req, res);
  });
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
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  logger.info(
    { port, host: options.host, mode: active.mode, capacity: workers.capacity },
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
    active.scheduler?.setTenantPolicies(file.tenantPolicies, options.priorityScheduler.defaultMaxClass);
    budgets.setPolicies(file.tenantPolicies, gatewayFile?.pricing ?? options.pricing ?? {});
    tenants = resolver;
    logger.info({ tenantPolicies: file.tenantPolicies.size }, "policy reloaded");
    return { tenantPolicies: file.tenantPolicies.size };
  }

  function status() {
    const snapshot = active.scheduler?.snapshot();
    const perTenant: Record<string, unknown> = {};
    const counts = activity.snapshot();
    for (const t of new Set([...counts.keys(), ...budgets.tenants()])) {
      const c = counts.get(t) ?? { inflight: 0, queued: 0 };
      perTenant[t] = { ...c, budget_remaining: budgets.remaining(t) };
    }
    return {
      admission_mode: active.mode,
      fallback_reason: active.fallbackReason ?? null,
      capacity: workers.capacity,
      discovered_capacity: workers.discoveredCapacity,
      pinned_capacity: workers.pinnedCapacity ?? null,
      healthy_workers: workers.healthyCount,
      workers: workers.workers.map((w) => ({
        url: w.url,
        healthy: w.healthy,
        capacity: w.capacity,
        inflight: w.inflight,
      })),
      inflight: snapshot?.inflight ?? active.legacy?.inflight ?? 0,
      queued: snapshot?.queued ?? active.legacy?.queued ?? 0,
      classes: snapshot?.classes ?? null,
      tenants: perTenant,
    };
  }

  let adminServer: AdminServer | undefined;
  if (options.admin !== undefined) {
    try {
      adminServer = await startAdminServer({
        ...options.admin,
        handlers: {
          pinCapacity(capacity) {
            workers.pinCapacity(capacity);
            logger.info(
              { pinned: capacity ?? null, capacity: workers.capacity },
              "capacity set by admin API",
            );
            return { capacity: workers.capacity, pinned: workers.pinnedCapacity };
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
      await workers.close();
      throw err;
    }
    logger.info({ url: adminServer.url }, "admin API listening");
  }

  return {
    url: `http://${host}:${port}`,
    port,
    admission: active,
    workers,
    metrics,
    budgets,
    adminServer,
    reload,
    async close() {
      await adminServer?.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await workers.close();
    },
  };
}

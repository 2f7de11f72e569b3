/**
 * The gateway: wires the parts (workers, capacity, admission backend, budgets, metrics) and serves
 * HTTP. Its own paths are /metrics, /health and /readiness; every other request runs the lifecycle
 * in lifecycle.ts, owned by one lease (lease.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import { CLASSES_HIGH_TO_LOW, clamp, parsePriority } from "@sluice/scheduler/core/class.js";
import { realClock } from "@sluice/scheduler/core/clock.js";
import {
  BUILTIN_CLASS_DEFAULTS,
  type ClassOverrides,
  type ClassSettingsTable,
  type SchedulerFileSettings,
  type TenantPolicy,
} from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import type { Logger } from "pino";
import { createInProcessBackend, type InProcessOptions } from "../admission/in-process.js";
import { startSharedState } from "../admission/redis/index.js";
import { AdaptiveCapacity, heldBackOf } from "../capacity/adaptive.js";
import { PinnableCapacity } from "../capacity/pinned.js";
import { loadSchedulerFile } from "../config/policy-file.js";
import type { AdmissionBackend } from "../contracts/admission-backend.js";
import { GatewayError, toGatewayError } from "../contracts/gateway-error.js";
import type { OutcomeSink } from "../contracts/outcome.js";
import { newRequestId, requestIdFor } from "../contracts/request-id.js";
import { Dashboard } from "../dashboard/dashboard.js";
import { startLedger } from "../ledger/index.js";
import type { LedgerWriter } from "../ledger/writer.js";
import { registerCapacityMetrics } from "../metrics/capacity.js";
import { createMetrics, type SluiceMetrics } from "../metrics/index.js";
import { registerPoolMetrics } from "../metrics/pools.js";
import { registerRetryMetrics, registerRoutingMetrics } from "../metrics/routing.js";
import { DEFAULT_MAX_RETRIES } from "../routing/retry.js";
import { LoadShedding, resolveShedding } from "../shedding/load-shedding.js";
import { type AdminServer, startAdminServer } from "./admin/admin.js";
import { FleetAdmission } from "./fleet/fleet-admission.js";
import { FleetCapacity } from "./fleet/fleet-capacity.js";
import { type ModelPool, ModelPools, type PoolFactory } from "./fleet/model-pools.js";
import { WorkerPool } from "./fleet/workers.js";
import {
  type ClientLimits,
  closeAfterAnswer,
  DEFAULT_CLIENT_LIMITS,
  guardServer,
  serverTimeouts,
} from "./http/client-guard.js";
import { sendError, sendJson } from "./http/http-errors.js";
import { checkRequest, pathOf } from "./http/request-checks.js";
import type { CapacityOptions, GatewayOptions } from "./options.js";
import { DEFAULT_MAX_COST_TOKENS } from "./request/cost.js";
import { Lease, type LeaseContext } from "./request/lease.js";
import { type LifecycleContext, runLifecycle } from "./request/lifecycle.js";
import { OutputLengths } from "./request/output-lengths.js";
import { TenantActivity } from "./tenancy/tenant-activity.js";
import { TenantResolver } from "./tenancy/tenants.js";

export interface Gateway {
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
  /** The live dashboard behind the admin listener's /dashboard, when `options.admin` was given. */
  readonly dashboard: Dashboard | undefined;
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

  // Worker choice and circuits: read at scrape time from the pool (`workers` is set by then).
  const routingObserver = registerRoutingMetrics(metrics.registry, {
    circuits: () => workers.workers.map((w) => ({ worker: w.url, state: w.breaker.state })),
    treeChars: () => workers.routingTreeChars,
  });
  const workers = new WorkerPool({
    workers: options.workers,
    policy: options.policy,
    routing: options.routing,
    routingPolicy: options.routingPolicy,
    routingObserver,
    breaker: options.breaker,
    health: options.health,
    fallbackCapacity,
    logger,
    connectTimeoutSecs: options.upstreamConnectTimeoutSecs ?? 10,
    apiKey: options.workerApiKey,
    clock,
  });

  // The admission mode is decided after the first discovery, on the capacity it found.
  let policyFile: SchedulerFileSettings | undefined;
  let loadError: string | undefined;
  try {
    await workers.discover();
    try {
      policyFile = await loadSchedulerFile(options.priorityScheduler.configPath);
    } catch (err) {
      loadError = (err as Error).message;
    }
  } catch (err) {
    // A start that fails must not leave the worker pools behind.
    await workers.close();
    throw err;
  }
  let tenantPolicies: ReadonlyMap<string, TenantPolicy> = policyFile?.tenantPolicies ?? new Map();
  const defaultMaxClass = options.priorityScheduler.defaultMaxClass;
  // Shared state (--state-url): the replicas admit as one, and share budgets, through Redis
  // (docs/replicas.md). Redis not answering yet is the fail mode's business, not a start failure.
  const shared =
    options.state === undefined
      ? undefined
      : await startSharedState({
          state: options.state,
          tenantPolicies,
          pricing: options.pricing ?? {},
          clock,
          logger,
          registry: metrics.registry,
          onBudgetRejection: (tenant, code) => metrics.countBudgetRejection(tenant, code),
        });
  const adaptiveMode = options.capacity?.mode === "adaptive";
  const idleAdaptive = adaptiveSettingsWithoutEffect(options.capacity);
  if (idleAdaptive.length > 0) {
    // Accepted (a file shared by gateways in both modes stays valid) but said: an operator who set
    // an SLO or the controller's constants and forgot the mode would otherwise think them in force.
    logger.warn(
      { settings: idleAdaptive },
      `${idleAdaptive.join(", ")}: no effect while capacity_mode is static (--capacity-mode adaptive turns the controller on)`,
    );
  }
  // Scheduler disabled, or its file failed to load: one legacy limiter for the whole fleet (the
  // contract's legacy admission); model pools then only route.
  const sharedLegacy =
    !options.priorityScheduler.enabled || loadError !== undefined
      ? (shared?.legacy ?? createInProcessBackend)({
          enabled: options.priorityScheduler.enabled,
          defaultMaxClass,
          classes: {},
          tenantPolicies,
          loadError,
          capacity: workers.discoveredCapacity,
          legacy: options.legacy,
          observer: metrics.observer,
          clock,
          logger,
          // Adaptive capacity binds legacy admission too: its limit is the fleet's (the pools' sum).
          legacyBoundByCapacity: adaptiveMode,
        })
      : undefined;
  if (sharedLegacy === undefined) logger.info("priority scheduler enabled");
  // Legacy admission does not hold workers to their reported capacity (the contract's
  // max_concurrent_requests alone); adaptive capacity's per-worker limits bind in either mode.
  workers.respectCapacity = sharedLegacy === undefined || adaptiveMode;

  /** One model pool's parts: its own capacity, admission, adaptive limit and shedding. */
  const createPool: PoolFactory = (name, models, group, discovered) => {
    const poolLogger = logger.child({ pool: name });
    const capacityOptions = options.capacity;
    // Adaptive capacity cold-starts from what discovery found; a pin still wins over it.
    const adaptive =
      capacityOptions?.mode === "adaptive"
        ? new AdaptiveCapacity(
            discovered,
            {
              ...capacityOptions.tuning,
              minCapacity: capacityOptions.minCapacity,
              maxCapacity: capacityOptions.maxCapacity,
              tpotSloMs: capacityOptions.tpotSloMs,
              ttftSloMs: capacityOptions.ttftSloMs,
              // One controller per worker: each gets its own limit, which routing respects.
              workers: () => group.healthy,
            },
            clock,
            (bound, limit, wanted) =>
              poolLogger.warn(
                { bound, limit, wanted },
                `adaptive capacity held at its ${bound} bound (${limit})`,
              ),
          )
        : undefined;
    const capacity = new PinnableCapacity(adaptive ?? discovered);
    // A pin lifts the workers' rooms (WorkerGroup.pin): this pool's, or the fleet's in Redis.
    group.pin = () => capacity.pinned ?? shared?.redisBackend(name)?.pinnedCapacity;
    let admission = sharedLegacy;
    const classes =
      admission === undefined
        ? poolClasses(policyFile!.classes, models, options.pools, poolLogger)
        : undefined;
    if (admission === undefined) {
      // The startup check (reservations fit) runs on a real capacity: a pool that has no healthy
      // worker yet is checked against the fallback, then set to what it has.
      const create =
        shared === undefined
          ? createInProcessBackend
          : (o: InProcessOptions) => shared.backend({ ...o, pool: name });
      admission = create({
        enabled: true,
        defaultMaxClass,
        classes: classes!,
        tenantPolicies,
        capacity: capacity.capacity > 0 ? capacity.capacity : fallbackCapacity,
        legacy: options.legacy,
        observer: metrics.observer,
        clock,
        logger: poolLogger,
        quiet: true,
      });
      if (capacity.capacity !== admission.snapshot().capacity || capacity.reservedAt !== undefined) {
        admission.setCapacity(capacity.capacity, capacity.reservedAt);
      }
    }
    const backend = admission;
    adaptive?.setHeldBack(() => heldBackOf(backend.snapshot().classes));
    let shedding: LoadShedding | undefined;
    // Legacy admission has no classes of its own: the built-in ones check the block (it stays off).
    const sheddingOptions = resolveShedding(
      options.shedding,
      classes ?? BUILTIN_CLASS_DEFAULTS,
      adaptive !== undefined,
    );
    if (sheddingOptions !== undefined) {
      const candidate = new LoadShedding(sheddingOptions, clock);
      const configured = Boolean(options.shedding?.prioritized) || options.shedding?.keyed !== undefined;
      if (candidate.enabled && backend.mode === "scheduler") shedding = candidate;
      else if (candidate.enabled && configured) {
        // Only what the operator asked for: adaptive mode's default shedding is quietly off here.
        poolLogger.warn("load shedding needs the priority scheduler; it is off while admission is legacy");
      }
    }
    let last = capacity.capacity;
    capacity.subscribe((c) => {
      poolLogger.info({ capacity: c, previous: last, healthy: group.healthy.length }, "capacity changed");
      last = c;
      // The fleet-wide legacy limiter keeps the fleet's capacity for its snapshot.
      if (backend !== sharedLegacy) backend.setCapacity(c, capacity.reservedAt);
      else sharedLegacy.setCapacity(fleetCapacity());
    });
    adaptive?.start();
    shedding?.start();
    return {
      name,
      models: [],
      workers: group,
      admission: backend,
      sharedAdmission: backend === sharedLegacy,
      capacity,
      adaptive,
      shedding,
      stop() {
        adaptive?.stop();
        shedding?.stop();
      },
    };
  };
  const pools = new ModelPools(workers, createPool, logger, options.defaultModel);
  const fleetCapacity = () => pools.all.reduce((sum, p) => sum + p.capacity.capacity, 0);
  pools.refresh();
  workers.onChange(() => pools.refresh());
  const backends = (): AdmissionBackend[] =>
    sharedLegacy !== undefined ? [sharedLegacy] : pools.all.map((p) => p.admission);
  const active = new FleetAdmission(
    backends,
    sharedLegacy?.mode ?? "scheduler",
    sharedLegacy?.fallbackReason,
  );
  const capacity = new FleetCapacity(() => pools.all);
  // The fleet-wide views of adaptive capacity and shedding read the pool with the most capacity
  // (the only one, in a single-model fleet); per pool figures are in the admin status.
  const mainPool = (): ModelPool | undefined => {
    let best: ModelPool | undefined;
    for (const p of pools.all)
      if (best === undefined || p.capacity.capacity > best.capacity.capacity) best = p;
    return best;
  };
  workers.start();

  // Tenant limits come from the same YAML as the scheduler's tenant policies; they apply in both
  // admission modes. A file the scheduler rejected was already logged; budgets then start empty.
  const budgets =
    shared?.budgets ??
    new BudgetBook({
      policies: tenantPolicies,
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
  metrics.bindCapacity(() => shared?.fleetCapacity() ?? capacity.capacity);
  metrics.bindAdmissionMode(() => active.mode);
  metrics.bindWorkersHealthy(() => workers.healthyCount);
  registerPoolMetrics(metrics.registry, () => pools.all);
  const capacityMetrics = registerCapacityMetrics(metrics.registry, {
    limit: () => capacity.capacity,
    adaptive: () => mainPool()?.adaptive?.snapshot(),
    adjustments: () => mainPool()?.adaptive?.adjustments,
    shedding: () => mainPool()?.shedding?.status(),
  });

  const limits: ClientLimits = { ...DEFAULT_CLIENT_LIMITS, ...options.clientLimits };
  // Recent output lengths of answers without max_tokens: what a budget reserves for the next one.
  const outputLengths = new OutputLengths();
  const lifecycle: LifecycleContext = {
    pools,
    workers,
    budgets,
    metrics,
    tenants: () => tenants,
    maxPayloadSize: options.maxPayloadSize,
    bodyIdleMs: limits.bodyIdleTimeoutSecs * 1000,
    bodyDeadlineMs: limits.bodyTimeoutSecs * 1000,
    upstreamTimeoutMs: options.requestTimeoutSecs * 1000,
    // The cost ceiling: configured, else the largest context a worker reports, else a constant.
    maxCostTokens: () => options.maxCostTokens ?? workers.contextLength ?? DEFAULT_MAX_COST_TOKENS,
    outputLengths,
    defaultOutputTokens: options.defaultOutputTokens,
    capacityMetrics,
    retries: registerRetryMetrics(metrics.registry),
    logger,
    classFor: (priority, tenant) =>
      clamp(parsePriority(priority).class, tenantPolicies.get(tenant)?.max_class ?? defaultMaxClass),
  };
  // The ledger is one more outcome sink; its rows are written in the background (docs/ledger.md).
  const ledger = startLedger(options.ledger, logger, metrics.registry);
  // The live dashboard (docs/dashboard.md), on the admin listener; its latest rejections come from
  // the outcome records.
  const dashboard =
    options.admin === undefined
      ? undefined
      : new Dashboard(
          metrics.registry,
          {
            admission: active,
            capacity,
            workers,
            get adaptive() {
              return mainPool()?.adaptive;
            },
            get shedding() {
              return mainPool()?.shedding;
            },
            activity,
            budgets,
            policies: () => tenantPolicies,
            ledger,
          },
          { logger },
        );
  const leases: LeaseContext = {
    admission: active,
    workers,
    budgets,
    metrics,
    activity,
    outcomes: bothSinks(bothSinks(outcomes, ledger), dashboard?.outcomes),
    logger,
    maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
    upstreamTimeoutMs: options.requestTimeoutSecs * 1000,
    outputLengths,
    // Loaded only when on: with tracing off the OpenTelemetry SDK is never imported.
    tracing:
      options.otlpEndpoint === undefined
        ? undefined
        : new (await import("../tracing/setup.js")).GatewayTracing({ endpoint: options.otlpEndpoint }),
  };
  const tracing = leases.tracing;

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
    // The gateway's own id (unique: it keys the budget hold and the ledger row), and the
    // correlation id the answer echoes (the client's own when usable, else the gateway's).
    const sluiceRequestId = newRequestId();
    const requestId = requestIdFor(req.headers["x-request-id"], sluiceRequestId);
    // While draining every answer says Connection: close, so clients reconnect elsewhere.
    if (draining) res.shouldKeepAlive = false;
    if (req.method === "GET" || req.method === "HEAD") {
      const path = pathOf(req.url ?? "/");
      // The gateway's own paths read no body: one sent anyway is not read, so close after the
      // answer (its framing may be broken, and a second answer must never follow).
      if (
        (path === "/metrics" || path === "/health" || path === "/readiness" || path === "/v1/models") &&
        (req.headers["transfer-encoding"] !== undefined ||
          (req.headers["content-length"] !== undefined && req.headers["content-length"] !== "0"))
      ) {
        closeAfterAnswer(req, res);
      }
      if (path === "/metrics") {
        void serveMetrics(res, requestId);
        return;
      }
      if (path === "/v1/models") {
        serveModels(req, res, requestId);
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
    if (res.socket === null) closeWithItsConnection(req, res);
    void runLifecycle(lifecycle, new Lease(leases, req, res, requestId, sluiceRequestId), req);
  }

  /**
   * A pipelined request's answer waits, without a socket, for the answers before it; if the client
   * leaves meanwhile Node never closes it. Close it with its connection, so its lease sees the client
   * gone (the worker's work is cut, nothing is charged for an answer nobody reads) and the drain
   * stops counting it.
   */
  function closeWithItsConnection(req: IncomingMessage, res: ServerResponse): void {
    const socket = req.socket;
    const gone = () => {
      if (res.socket === null && !res.writableFinished) res.emit("close");
    };
    socket.once("close", gone);
    res.once("close", () => socket.off("close", gone));
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

  /**
   * `GET /v1/models`: the union of the pools' models, in OpenAI's list shape; authenticated like
   * any data-plane request, and only the models the tenant's allowlist lets it use.
   */
  function serveModels(req: IncomingMessage, res: ServerResponse, requestId: string): void {
    try {
      try {
        checkRequest(req);
      } catch (err) {
        // The request line or framing is at fault, as on any other path: answer, then close.
        closeAfterAnswer(req, res);
        throw err;
      }
      const tenant = tenants.resolve(req.headers);
      const allowed = tenantPolicies.get(tenant)?.models;
      const data = pools.servedModels
        .filter((id) => allowed === undefined || allowed.includes(id))
        .map((id) => ({ id, object: "model", created: 0, owned_by: "sluice" }));
      sendJson(res, 200, { object: "list", data }, { "x-request-id": requestId });
    } catch (err) {
      sendError(res, toGatewayError(err), { "x-request-id": requestId });
    }
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

  const server: Server = createServer(serverTimeouts(limits));
  guardServer(server, limits, logger, { answered: (status) => metrics.countHttpStatus(status) }, handle);
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
    await shared?.close();
    await tracing?.shutdown();
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
    active.setTenantPolicies(file.tenantPolicies, defaultMaxClass);
    budgets.setPolicies(file.tenantPolicies, gatewayFile?.pricing ?? options.pricing ?? {});
    tenantPolicies = file.tenantPolicies;
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
        // Routable: passing its health checks and its circuit not open (the two never disagree).
        healthy: w.routable,
        circuit: w.breaker.state,
        capacity: w.capacity,
        inflight: w.inflight,
        // Output tokens per event of its streams (adaptive capacity's pace; 1 unless learned or reported).
        tokens_per_event: Number(w.tokensPerEvent.value.toFixed(3)),
        models: w.served.kind === "models" ? w.served.models : w.served.kind,
        pool: w.group?.name ?? null,
      })),
      inflight: snapshot.inflight,
      queued: snapshot.queued,
      classes: snapshot.classes,
      tenants: perTenant,
      capacity_mode: options.capacity?.mode === "adaptive" ? "adaptive" : "static",
      adaptive: mainPool()?.adaptive?.snapshot() ?? null,
      shedding: mainPool()?.shedding?.status() ?? null,
      default_model: options.defaultModel ?? null,
      pools: Object.fromEntries(pools.all.map((p) => [p.name, poolStatus(p)])),
      ledger: ledger?.status() ?? null,
      ...shared?.statusFields(),
    };
  }

  function poolStatus(p: ModelPool): Record<string, unknown> {
    const snap = p.admission.snapshot();
    return {
      models: p.models,
      workers: p.workers.members.map((w) => w.url),
      healthy_workers: p.workers.healthy.length,
      capacity: p.capacity.capacity,
      discovered_capacity: p.capacity.underlying,
      pinned_capacity: p.capacity.pinned ?? null,
      admission_mode: p.admission.mode,
      fallback_reason: p.admission.fallbackReason ?? null,
      inflight: p.sharedAdmission ? p.workers.members.reduce((n, w) => n + w.inflight, 0) : snap.inflight,
      queued: p.sharedAdmission ? null : snap.queued,
      classes: p.sharedAdmission ? null : snap.classes,
      adaptive: p.adaptive?.snapshot() ?? null,
      shedding: p.shedding?.status() ?? null,
    };
  }

  let adminServer: AdminServer | undefined;
  if (options.admin !== undefined) {
    try {
      adminServer = await startAdminServer({
        ...options.admin,
        handlers: {
          pinCapacity(pin, model) {
            // With a model: that model's pool. Without: the only pool (400 when there are several).
            const pool = model === undefined ? undefined : pools.find(model);
            if (model !== undefined && pool === undefined) {
              throw new GatewayError("model_not_found", `no model pool serves "${model}"`, {
                param: "model",
              });
            }
            // Shared state: the pin goes to Redis and applies to every replica (docs/replicas.md).
            const pinned = shared?.redisBackend((pool ?? pools.all[0])?.name ?? "");
            if (pinned !== undefined && (pool !== undefined || pools.all.length === 1)) {
              const result = pinned.pinCapacity(pin);
              logger.info({ pool: pinned.pool, pinned: pin ?? null }, "fleet capacity set by admin API");
              return {
                model: pinned.pool,
                ...result,
                fleet_capacity: shared!.fleetCapacity(),
              };
            }
            if (pool === undefined) {
              try {
                capacity.setPin(pin);
              } catch (err) {
                throw new GatewayError("invalid_capacity", (err as Error).message, { param: "model" });
              }
            } else pool.capacity.setPin(pin);
            const target = pool ?? pools.all[0]!;
            logger.info(
              { pool: target.name, pinned: pin ?? null, capacity: target.capacity.capacity },
              "capacity set by admin API",
            );
            // The contract's shape, plus the pool when the call named a model.
            const answer = { capacity: target.capacity.capacity, pinned: target.capacity.pinned };
            return model === undefined ? answer : { model: target.name, ...answer };
          },
          status,
          reload,
          dashboard,
        },
      });
    } catch (err) {
      // The admin listener failed: close the data-plane listener and the worker pools too.
      dashboard?.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      pools.stop();
      await workers.close();
      await ledger?.close();
      await shared?.close();
      await tracing?.shutdown();
      throw err;
    }
    logger.info({ url: adminServer.url }, "admin API listening");
    dashboard?.start();
  }

  return {
    url: `http://${host}:${port}`,
    port,
    admission: active,
    workers,
    pools,
    capacity,
    get adaptive() {
      return mainPool()?.adaptive;
    },
    get shedding() {
      return mainPool()?.shedding;
    },
    metrics,
    budgets,
    adminServer,
    ledger,
    dashboard,
    reload,
    status,
    async close(closeOptions) {
      if (closeOptions?.drainMs !== undefined && closeOptions.drainMs > 0) await drain(closeOptions.drainMs);
      pools.stop();
      // The dashboard's streams end before the admin listener closes under them.
      dashboard?.close();
      await adminServer?.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await workers.close();
      // Last: the requests the close cut short have settled and recorded their outcomes by now.
      await ledger?.close();
      // After the releases of those requests went out.
      await shared?.close();
      // The spans of every request ended by now: the batch still held is exported.
      await tracing?.shutdown();
    },
  };
}

function bothSinks(first: OutcomeSink | undefined, second: OutcomeSink | undefined): OutcomeSink | undefined {
  if (first === undefined) return second;
  if (second === undefined) return first;
  return {
    record(outcome) {
      first.record(outcome);
      second.record(outcome);
    },
  };
}

/**
 * A pool's classes: the priority YAML's, with the gateway YAML's `pools.<model>.classes` on top
 * (per class, per key). Keyed by any model of the pool; if several of its models have an entry,
 * the alphabetically first wins and the others are logged.
 */
function poolClasses(
  base: ClassSettingsTable,
  models: readonly string[],
  overrides: Record<string, ClassOverrides> | undefined,
  logger: Logger,
): ClassSettingsTable {
  const keyed = models.filter((m) => overrides?.[m] !== undefined);
  if (keyed.length === 0) return base;
  if (keyed.length > 1) {
    logger.warn(
      { models: keyed, used: keyed[0] },
      `several models of one pool have a pools entry; using pools.${keyed[0]}`,
    );
  }
  const override = overrides![keyed[0]!]!;
  const out = { ...base };
  for (const cls of CLASSES_HIGH_TO_LOW) {
    const block = override[cls];
    if (block !== undefined && block !== null) out[cls] = { ...base[cls], ...block };
  }
  return out;
}

/** The adaptive controller's settings given while capacity_mode is static (they do nothing there). */
export function adaptiveSettingsWithoutEffect(capacity: CapacityOptions | undefined): string[] {
  if (capacity === undefined || capacity.mode === "adaptive") return [];
  const given: string[] = [];
  if (capacity.maxCapacity !== undefined) given.push("adaptive_max_capacity");
  if (capacity.tpotSloMs !== undefined) given.push("tpot_slo_ms");
  if (capacity.ttftSloMs !== undefined) given.push("ttft_slo_ms");
  if (capacity.tuning !== undefined && Object.keys(capacity.tuning).length > 0) given.push("adaptive_tuning");
  return given;
}

/**
 * The path of one request, top to bottom. Each stage is a function with typed input and output;
 * each either hands its result to the next or throws the error that ends the request. Whatever
 * happens, the request ends through its lease (lease.ts), exactly once.
 *
 *   parse     request line and framing, then (after identify) the body and its fields
 *   identify  the tenant, from authentication
 *   policy    the tenant's limits: activity, models, budgets
 *   route     the model pool the body's `model` names (404 model_not_found, 503 no_healthy_workers)
 *   shed      load shedding at the door, when configured (prioritized levels, keyed sessions)
 *   admit     a slot from the admission backend (fast, or after queueing)
 *   dispatch  a worker with room
 *   stream    the exchange with the worker, held until its first byte
 *   settle    the lease ends: answer, release, charge, count, record
 *
 * Where each outcome is decided: the request checks (request-checks.ts), authentication
 * (tenants.ts), body fields (cost.ts), budgets (core/budgets.ts), shedding (capacity/load-shedding.ts),
 * admission (core/engine.ts or
 * core/legacy.ts), worker choice (workers.ts), the worker's answer (upstream.ts), and the answer's
 * shape (error-table.ts).
 */
import type { IncomingMessage } from "node:http";
import type { BudgetBook } from "../core/budgets.js";
import type { PriorityClass } from "../core/class.js";
import { AdmissionError } from "../core/errors.js";
import type { CapacityMetrics } from "../metrics/capacity.js";
import type { SluiceMetrics } from "../metrics/index.js";
import { BodyRoutingRequest } from "../routing/request.js";
import { readBody } from "./body.js";
import { estimateRequest, type RequestEstimate } from "./cost.js";
import { withDefaultModel } from "./default-model.js";
import { requestHeadersForWorker } from "./headers.js";
import { GatewayError } from "./http-errors.js";
import type { Lease } from "./lease.js";
import type { ModelPool, ModelPools } from "./model-pools.js";
import { checkRequest } from "./request-checks.js";
import type { TenantActivity } from "./tenant-activity.js";
import type { TenantResolver } from "./tenants.js";
import { upstreamFailure } from "./upstream.js";
import { withUsageRequested } from "./usage.js";
import type { Worker, WorkerPool } from "./workers.js";

/** What the stages need from the gateway, beyond the lease. */
export interface LifecycleContext {
  /** The model pools; each request is admitted and served inside one. */
  readonly pools: ModelPools;
  readonly workers: WorkerPool;
  readonly budgets: BudgetBook;
  readonly metrics: SluiceMetrics;
  readonly activity: TenantActivity;
  /** The tenant resolver in force (replaced on reload). */
  tenants(): TenantResolver;
  readonly maxPayloadSize: number;
  readonly bodyIdleMs: number;
  /** Upstream headers timeout and body idle timeout. */
  readonly upstreamTimeoutMs: number;
  /** The cost ceiling in force. */
  maxCostTokens(): number;
  readonly capacityMetrics: CapacityMetrics;
}

const PRIORITY_HEADER = "x-smg-priority";

/** Runs one request through every stage; its lease ends it. */
export async function runLifecycle(ctx: LifecycleContext, lease: Lease, req: IncomingMessage): Promise<void> {
  let exchanging = false;
  try {
    parseHead(req);
    lease.tenant = identify(ctx, req);
    const body = await readBody(req, ctx.maxPayloadSize, ctx.bodyIdleMs);
    const estimate = parseBody(ctx, req, body);
    lease.estimate = estimate;
    // The tenant's own limits answer first (403 model_not_allowed before 404 model_not_found).
    policy(ctx, lease, estimate);
    const pool = route(ctx, estimate);
    lease.pool = pool;
    const shedClass = shed(ctx, pool, lease, req);
    await admit(ctx, pool, lease, req, estimate, shedClass);
    const waiting = dispatch(ctx, pool, lease, req, estimate);
    if (waiting !== undefined) await waiting;
    exchanging = true;
    const status = await stream(ctx, lease, req, body, estimate);
    exchanging = false;
    workerAnswered(ctx, lease.worker!, status);
    lease.answered(status);
  } catch (err) {
    if (exchanging) exchangeFailed(ctx, lease, err);
    lease.failed(err);
  }
}

// --- parse -------------------------------------------------------------------------------------

/** Request line and framing: a request the gateway will not forward fails here (400). */
function parseHead(req: IncomingMessage): void {
  checkRequest(req);
}

/** The body's fields admission reads, checked (400 naming the field), and the cost estimate. */
function parseBody(ctx: LifecycleContext, req: IncomingMessage, body: Buffer): RequestEstimate {
  return estimateRequest(body, req.headers["content-type"], ctx.maxCostTokens());
}

// --- identify ----------------------------------------------------------------------------------

/** The tenant key, from authentication (401 when required and missing or wrong). */
function identify(ctx: LifecycleContext, req: IncomingMessage): string {
  return ctx.tenants().resolve(req.headers);
}

// --- route -------------------------------------------------------------------------------------

/** The model pool of the body's `model` (or `default_model`); the request never leaves it. */
function route(ctx: LifecycleContext, estimate: RequestEstimate): ModelPool {
  return ctx.pools.route(estimate.model);
}

// --- policy ------------------------------------------------------------------------------------

/** The tenant's limits: 403 inactive / model not allowed / budget used up, 429 over its rate. */
function policy(ctx: LifecycleContext, lease: Lease, estimate: RequestEstimate): void {
  const { budgets } = ctx;
  if (!budgets.governs(lease.tenant)) return;
  const verdict = budgets.check(lease.tenant, estimate.model, {
    inputTokens: estimate.promptTokens,
    outputTokens: estimate.maxOutputTokens,
  });
  if (!verdict.ok) {
    ctx.metrics.countBudgetRejection(lease.tenant, verdict.code);
    throw new GatewayError(verdict.code, verdict.message, { retryAfterSecs: verdict.retryAfterSecs });
  }
  lease.hold = verdict;
}

// --- shed --------------------------------------------------------------------------------------

/**
 * Load shedding at the door (503 load_shed): the request's level is below the prioritizer's
 * threshold, its class fails the CoDel check, or its session is outside the keyed percentage.
 * Returns the effective class the shedder tracks the request under (undefined: shedding is off).
 */
function shed(
  ctx: LifecycleContext,
  pool: ModelPool,
  lease: Lease,
  req: IncomingMessage,
): PriorityClass | undefined {
  const shedding = pool.shedding;
  if (shedding === undefined) return undefined;
  const priority = req.headers[PRIORITY_HEADER];
  const cls = pool.admission.classify(
    Array.isArray(priority) ? priority[0] : priority,
    lease.tenant,
  )?.effective;
  if (cls === undefined) return undefined;
  const header = shedding.sessionHeader === undefined ? undefined : req.headers[shedding.sessionHeader];
  const verdict = shedding.check(cls, lease.tenant, Array.isArray(header) ? header[0] : header);
  if (verdict.shed) {
    ctx.capacityMetrics.countShed(cls, verdict.reason);
    throw new GatewayError(
      "load_shed",
      verdict.reason === "keyed"
        ? `the gateway is shedding load: this ${header === undefined ? "tenant" : "session"} is outside the admitted share for now`
        : `the gateway is shedding load: ${cls} requests at this level would wait past the queue bound`,
      { retryAfterSecs: verdict.retryAfterSecs },
    );
  }
  return cls;
}

// --- admit -------------------------------------------------------------------------------------

/** A slot: at once, or after queueing (429 queue full, 408 timeout, 499 client gone). */
async function admit(
  ctx: LifecycleContext,
  pool: ModelPool,
  lease: Lease,
  req: IncomingMessage,
  estimate: RequestEstimate,
  shedClass: PriorityClass | undefined,
): Promise<void> {
  const priority = req.headers[PRIORITY_HEADER];
  const { shedding, adaptive: feedback } = pool;
  ctx.activity.queued(lease.tenant, 1);
  feedback?.queued(1);
  if (shedClass !== undefined) shedding!.queue(shedClass, lease.tenant, 1);
  const started = shedClass === undefined ? 0 : performance.now();
  try {
    const slot = await pool.admission.acquire({
      priority: Array.isArray(priority) ? priority[0] : priority,
      tenant: lease.tenant,
      cost: estimate.cost,
      signal: lease,
      requestId: lease.requestId,
      hold: lease.hold,
    });
    lease.admitted(slot);
  } catch (err) {
    // Queued in a pool whose workers all left: the answer is theirs being gone, not the wait.
    if (
      err instanceof AdmissionError &&
      (err.code === "scheduler_queue_timeout" || err.code === "admission_queue_timeout") &&
      pool.workers.healthy.length === 0
    ) {
      throw new GatewayError("no_healthy_workers", `no healthy worker serves pool ${pool.name} now`);
    }
    throw err;
  } finally {
    ctx.activity.queued(lease.tenant, -1);
    feedback?.queued(-1);
    if (shedClass !== undefined) {
      shedding!.queue(shedClass, lease.tenant, -1);
      shedding!.queueWait(shedClass, performance.now() - started);
    }
  }
}

// --- dispatch ----------------------------------------------------------------------------------

/**
 * A worker with room, chosen by the pool's routing policy from the body already parsed and the
 * headers (503 when none is healthy); waits only when every worker is full.
 */
function dispatch(
  ctx: LifecycleContext,
  pool: ModelPool,
  lease: Lease,
  req: IncomingMessage,
  estimate: RequestEstimate,
): Promise<void> | undefined {
  const routing = new BodyRoutingRequest(estimate.json, req.headers);
  // Inside its pool, only a worker that serves the request's model.
  const model = estimate.model ?? ctx.pools.defaultModel;
  const now = ctx.workers.tryAcquire(pool.workers, routing, model);
  if (now === null) {
    return ctx.workers
      .acquire(lease, pool.workers, routing, model)
      .then((worker) => dispatched(lease, worker));
  }
  dispatched(lease, now);
  return undefined;
}

function dispatched(lease: Lease, worker: Worker | undefined): void {
  if (worker === undefined) throw new GatewayError("no_healthy_workers");
  lease.dispatched(worker);
}

// --- stream ------------------------------------------------------------------------------------

/** The exchange with the worker; resolves with the worker's status once its answer went out. */
function stream(
  ctx: LifecycleContext,
  lease: Lease,
  req: IncomingMessage,
  body: Buffer,
  estimate: RequestEstimate,
): Promise<number> {
  const url = req.url ?? "/";
  // A request routed by default_model tells the worker which model it is for.
  const defaultModel = estimate.model === undefined ? ctx.pools.defaultModel : undefined;
  const named = defaultModel === undefined ? body : withDefaultModel(body, estimate.json, defaultModel);
  const upstreamBody = withUsageRequested(url, named, estimate.json);
  lease.stripUsage = upstreamBody.strip;
  return lease.forward({
    method: req.method as "POST",
    path: url,
    headers: requestHeadersForWorker(req.headers, lease.worker!.authorization),
    body: upstreamBody.body.length > 0 ? upstreamBody.body : null,
    headersTimeout: ctx.upstreamTimeoutMs,
    bodyTimeout: ctx.upstreamTimeoutMs,
  });
}

// --- the worker's circuit ------------------------------------------------------------------------

/** Statuses that count against a worker's circuit: it failed (429, busy, and 4xx do not count). */
function failedStatus(status: number): boolean {
  return status === 500 || status === 502 || status === 503 || status === 504;
}

/** The worker answered in full: a success for its circuit breaker, unless a 5xx. */
function workerAnswered(ctx: LifecycleContext, worker: Worker, status: number): void {
  ctx.workers.recordOutcome(worker, !failedStatus(status));
}

/**
 * The exchange failed: a failure for the worker's circuit when the worker caused it (reset, timeout,
 * bad response). A refused connection opens the circuit through the lease (`reportUnreachable`);
 * a client gone or a preemption says nothing about the worker.
 */
function exchangeFailed(ctx: LifecycleContext, lease: Lease, err: unknown): void {
  const worker = lease.worker;
  if (worker === undefined || lease.aborted || !(err instanceof Error)) return;
  const { kind } = upstreamFailure(err);
  if (kind === "reset" || kind === "timeout" || kind === "bad_response")
    ctx.workers.recordOutcome(worker, false);
}

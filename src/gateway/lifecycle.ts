/**
 * The path of one request, top to bottom. Each stage is a function with typed input and output;
 * each either hands its result to the next or throws the error that ends the request. Whatever
 * happens, the request ends through its lease (lease.ts), exactly once.
 *
 *   parse     request line and framing, then (after identify) the body and its fields
 *   identify  the tenant, from authentication
 *   policy    the tenant's limits: activity, models, budgets
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
import type { CapacityFeedback } from "../capacity/adaptive.js";
import type { LoadShedding } from "../capacity/load-shedding.js";
import type { BudgetBook } from "../core/budgets.js";
import type { PriorityClass } from "../core/class.js";
import type { CapacityMetrics } from "../metrics/capacity.js";
import type { SluiceMetrics } from "../metrics/index.js";
import type { AdmissionBackend } from "../state/backend.js";
import { readBody } from "./body.js";
import { estimateRequest, type RequestEstimate } from "./cost.js";
import { requestHeadersForWorker } from "./headers.js";
import { GatewayError } from "./http-errors.js";
import type { Lease } from "./lease.js";
import { checkRequest } from "./request-checks.js";
import type { TenantActivity } from "./tenant-activity.js";
import type { TenantResolver } from "./tenants.js";
import { withUsageRequested } from "./usage.js";
import type { Worker, WorkerPool } from "./workers.js";

/** What the stages need from the gateway, beyond the lease. */
export interface LifecycleContext {
  readonly admission: AdmissionBackend;
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
  /** Shedding at the door; absent when not configured. */
  readonly shedding: LoadShedding | undefined;
  readonly capacityMetrics: CapacityMetrics;
  /** Queue and in-flight counts for adaptive capacity; absent in static mode. */
  readonly feedback: CapacityFeedback | undefined;
}

const PRIORITY_HEADER = "x-smg-priority";

/** Runs one request through every stage; its lease ends it. */
export async function runLifecycle(ctx: LifecycleContext, lease: Lease, req: IncomingMessage): Promise<void> {
  try {
    parseHead(req);
    lease.tenant = identify(ctx, req);
    const body = await readBody(req, ctx.maxPayloadSize, ctx.bodyIdleMs);
    const estimate = parseBody(ctx, req, body);
    lease.estimate = estimate;
    policy(ctx, lease, estimate);
    const shedClass = shed(ctx, lease, req);
    await admit(ctx, lease, req, estimate, shedClass);
    const waiting = dispatch(ctx, lease);
    if (waiting !== undefined) await waiting;
    const status = await stream(ctx, lease, req, body, estimate);
    lease.answered(status);
  } catch (err) {
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
function shed(ctx: LifecycleContext, lease: Lease, req: IncomingMessage): PriorityClass | undefined {
  const shedding = ctx.shedding;
  if (shedding === undefined) return undefined;
  const priority = req.headers[PRIORITY_HEADER];
  const cls = ctx.admission.classify(
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
  lease: Lease,
  req: IncomingMessage,
  estimate: RequestEstimate,
  shedClass: PriorityClass | undefined,
): Promise<void> {
  const priority = req.headers[PRIORITY_HEADER];
  const { shedding, feedback } = ctx;
  ctx.activity.queued(lease.tenant, 1);
  feedback?.queued(1);
  if (shedClass !== undefined) shedding!.queue(shedClass, lease.tenant, 1);
  const started = shedClass === undefined ? 0 : performance.now();
  try {
    const slot = await ctx.admission.acquire({
      priority: Array.isArray(priority) ? priority[0] : priority,
      tenant: lease.tenant,
      cost: estimate.cost,
      signal: lease,
    });
    lease.admitted(slot);
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

/** A worker with room (503 when none is healthy); waits only when every worker is full. */
function dispatch(ctx: LifecycleContext, lease: Lease): Promise<void> | undefined {
  const now = ctx.workers.tryAcquire();
  if (now === null) return ctx.workers.acquire(lease).then((worker) => dispatched(lease, worker));
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
  const upstreamBody = withUsageRequested(url, body, estimate.json);
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

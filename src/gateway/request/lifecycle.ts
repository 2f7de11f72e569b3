/**
 * The path of one request, top to bottom. Each stage is a function with typed input and output;
 * each either hands its result to the next or throws the error that ends the request. Whatever
 * happens, the request ends in the settle stage, exactly once. What the request holds meanwhile
 * is its lease's (lease.ts); its counts are its pool ticket's (accounting/pool-ticket.ts).
 *
 *   parse     request line and framing, then (after identify) the body and its fields
 *   identify  the tenant, from authentication
 *   policy    the tenant's limits: activity, models, budgets
 *   route     the model pool the body's `model` names (404 model_not_found, 503 no_healthy_workers)
 *   shed      load shedding at the door, when configured (prioritized levels, keyed sessions)
 *   admit     a slot from the admission backend (fast, or after queueing)
 *   dispatch  a worker with room
 *   stream    the exchange with the worker, held until its first byte
 *   settle    the lease closes (answer, give back), then charge, feed, count, record
 *
 * Where each outcome is decided: the request checks (request-checks.ts), authentication
 * (tenants.ts), body fields (cost.ts), budgets (core/budgets.ts), shedding (shedding/load-shedding.ts),
 * admission (core/engine.ts or core/legacy.ts), worker choice (workers.ts), the worker's answer
 * (upstream.ts), and the answer's shape and outcome kind (error-table.ts).
 */
import type { IncomingMessage } from "node:http";
import type { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import { AdmissionError } from "@sluice/scheduler/core/errors.js";
import type { Logger } from "pino";
import { type OutputPrediction, predictionErrorRatio } from "../../accounting/output-prediction.js";
import type { Slot } from "../../contracts/admission-backend.js";
import { GatewayError } from "../../contracts/gateway-error.js";
import type { CapacityMetrics } from "../../metrics/capacity.js";
import type { FlowControlMetrics, FlowControlOutcome } from "../../metrics/flow-control.js";
import type { SluiceMetrics } from "../../metrics/index.js";
import type { RetryCounter } from "../../metrics/routing.js";
import type { OutstandingWork } from "../../routing/outstanding-work.js";
import { BodyRoutingRequest } from "../../routing/request.js";
import { type RetryReason, retryableFailure, retryableStatus, retryBackoffMs } from "../../routing/retry.js";
import type { ModelPool, ModelPools } from "../fleet/model-pools.js";
import type { Worker, WorkerPool } from "../fleet/workers.js";
import { readBody } from "../http/body.js";
import { firstHeaderValue, requestedPriority, requestHeadersForWorker } from "../http/headers.js";
import { checkRequest } from "../http/request-checks.js";
import type { TenantResolver } from "../tenancy/tenants.js";
import { estimateRequest, generatesOutput, type RequestEstimate } from "./cost.js";
import { withDefaultModel } from "./default-model.js";
import type { Ending, Lease } from "./lease.js";
import type { OutputLengths } from "./output-lengths.js";
import { UpstreamStatusError, upstreamFailure } from "./upstream.js";
import { withUsageRequested } from "./usage.js";

/** What the stages need from the gateway, beyond the lease. */
export interface LifecycleContext {
  /** The model pools; each request is admitted and served inside one. */
  readonly pools: ModelPools;
  readonly workers: WorkerPool;
  readonly budgets: BudgetBook;
  readonly metrics: SluiceMetrics;
  /** The tenant resolver in force (replaced on reload). */
  tenants(): TenantResolver;
  readonly maxPayloadSize: number;
  readonly bodyIdleMs: number;
  /** Time the whole body has to arrive (`--client-body-timeout-secs`). */
  readonly bodyDeadlineMs: number;
  /** Upstream headers timeout and body idle timeout. */
  readonly upstreamTimeoutMs: number;
  /** The cost ceiling in force. */
  maxCostTokens(): number;
  /** Recent output lengths, for the budget reservation of a request without max_tokens. */
  readonly outputLengths: OutputLengths;
  /** Tokens outstanding per worker: what `least_tokens` routing reads. */
  readonly outstandingWork: OutstandingWork;
  /** `default_output_tokens`: the reservation when no history exists; undefined = the model's context. */
  readonly defaultOutputTokens: number | undefined;
  readonly capacityMetrics: CapacityMetrics;
  /** `sluice_upstream_retries_total{reason}`. */
  readonly retries: RetryCounter;
  /** The inference extension's flow-control series and the unknown-objective count. */
  readonly flowControl: FlowControlMetrics;
  readonly logger: Logger;
  /**
   * The class a request without a scheduler slot (legacy admission) is forwarded under: its
   * `x-smg-priority` clamped to the tenant's `max_class`, as the scheduler would.
   */
  classFor(priority: string | undefined, tenant: string): PriorityClass;
}

/** Runs one request through every stage; the settle stage ends it. */
export async function runLifecycle(ctx: LifecycleContext, lease: Lease, req: IncomingMessage): Promise<void> {
  let exchanging = false;
  try {
    parseHead(req);
    lease.tenant = identify(ctx, req);
    const body = await readBody(req, ctx.maxPayloadSize, ctx.bodyIdleMs, ctx.bodyDeadlineMs);
    const estimate = parseBody(ctx, req, body);
    lease.estimate = estimate;
    lease.generates = generatesOutput(req.url ?? "/");
    if (lease.generates) lease.prediction = predictOutput(ctx, lease.tenant, estimate);
    // The tenant's own limits answer first (403 model_not_allowed before 404 model_not_found).
    policy(ctx, lease, estimate);
    const pool = route(ctx, estimate);
    lease.routed(pool);
    const shedClass = shed(ctx, pool, lease, req);
    await admit(ctx, pool, lease, req, estimate, shedClass);
    const waiting = dispatch(ctx, pool, lease, req, estimate);
    if (waiting !== undefined) await waiting;
    exchanging = true;
    let status: number;
    for (;;) {
      try {
        status = await stream(ctx, lease, req, body, estimate);
        break;
      } catch (err) {
        if (!(await retried(ctx, pool, lease, req, estimate, err))) throw err;
      }
    }
    exchanging = false;
    workerAnswered(ctx, lease.worker!, status);
    settle(lease, { answered: status });
  } catch (err) {
    if (exchanging) exchangeFailed(ctx, lease, err);
    settle(lease, { failed: err });
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

/**
 * The tenant key, from authentication (401 when required and missing or wrong); then a trusted
 * inference gateway's objective becomes the class input (400 invalid_inference_header), or, not
 * trusted, its headers are removed.
 */
function identify(ctx: LifecycleContext, req: IncomingMessage): string {
  const tenants = ctx.tenants();
  const tenant = tenants.resolve(req.headers);
  const objective = tenants.applyInferenceHeaders(req.headers);
  if (objective !== undefined && !objective.known) {
    ctx.flowControl.unknownObjectives.inc();
    warnUnknownObjective(ctx, objective.name);
  }
  return tenant;
}

/** Objective names already warned about (bounded: a misconfigured gateway could send many). */
const warnedObjectives = new Set<string>();

function warnUnknownObjective(ctx: LifecycleContext, name: string): void {
  if (warnedObjectives.has(name) || warnedObjectives.size >= 100) return;
  warnedObjectives.add(name);
  ctx.logger.warn(
    { objective: name },
    "x-gateway-inference-objective names an objective missing from inference_objectives; priority 0 applies",
  );
}

// --- policy ------------------------------------------------------------------------------------

/** The tenant's limits: 403 inactive / model not allowed / budget used up, 429 over its rate. */
function policy(ctx: LifecycleContext, lease: Lease, estimate: RequestEstimate): void {
  const { budgets } = ctx;
  if (!budgets.governs(lease.tenant)) return;
  const verdict = budgets.check(lease.tenant, estimate.model, {
    inputTokens: estimate.promptTokens,
    outputTokens:
      estimate.outputLimited || !lease.generates
        ? estimate.maxOutputTokens
        : outputReservation(ctx, lease, estimate),
  });
  if (!verdict.ok) {
    ctx.metrics.countBudgetRejection(lease.tenant, verdict.code);
    throw new GatewayError(verdict.code, verdict.message, { retryAfterSecs: verdict.retryAfterSecs });
  }
  lease.hold = verdict;
}

/**
 * One answer's output length (accounting/output-prediction.ts): the tenant's or the model's recent
 * high quantile, else `default_output_tokens`, else what the model's context leaves after the
 * prompt; capped by the request's own limit per choice. The budget, shedding and the metric read it.
 */
function predictOutput(ctx: LifecycleContext, tenant: string, estimate: RequestEstimate): OutputPrediction {
  const context = Math.max(1, ctx.maxCostTokens() - estimate.promptTokens);
  return ctx.outputLengths.predict({
    tenant,
    model: estimate.model,
    maxTokens: estimate.outputLimited ? estimate.maxOutputTokens / estimate.choices : undefined,
    defaultOutputTokens: ctx.defaultOutputTokens,
    contextTokens: context,
  });
}

/**
 * The output a budget holds for a request that sets no limit: the prediction per answer, times
 * `n`, within the cost ceiling. Never 0: a request that may produce output holds some.
 */
function outputReservation(ctx: LifecycleContext, lease: Lease, estimate: RequestEstimate): number {
  const ceiling = ctx.maxCostTokens();
  const per = (lease.prediction ?? predictOutput(ctx, lease.tenant, estimate)).tokens;
  return Math.max(1, Math.min(Math.min(per, ceiling) * estimate.choices, ceiling));
}

// --- route -------------------------------------------------------------------------------------

/** The model pool of the body's `model` (or `default_model`); the request never leaves it. */
function route(ctx: LifecycleContext, estimate: RequestEstimate): ModelPool {
  return ctx.pools.route(estimate.model);
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
  const cls = pool.admission.classify(requestedPriority(req.headers), lease.tenant)?.effective;
  if (cls === undefined) return undefined;
  lease.effectiveClass = cls;
  const session =
    shedding.sessionHeader === undefined ? undefined : firstHeaderValue(req.headers[shedding.sessionHeader]);
  const verdict = shedding.check(cls, lease.tenant, session);
  if (verdict.shed) {
    ctx.capacityMetrics.countShed(cls, verdict.reason);
    throw new GatewayError(
      "load_shed",
      verdict.reason === "keyed"
        ? `the gateway is shedding load: this ${session === undefined ? "tenant" : "session"} is outside the admitted share for now`
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
  const ticket = lease.ticket!;
  const priority = requestedPriority(req.headers);
  // Classified now, so a refusal from the queue names the class it was refused under.
  lease.effectiveClass = shedClass ?? pool.admission.classify(priority, lease.tenant)?.effective;
  ticket.queued(shedClass);
  lease.spans?.queueStarted();
  const started = performance.now();
  const model =
    estimate.model !== undefined && pool.models.includes(estimate.model) ? estimate.model : pool.name;
  const inFlowControl = ctx.flowControl.enter({
    tenant: lease.tenant,
    priority: ctx.classFor(requestedPriority(req.headers), lease.tenant),
    pool: pool.name,
    model,
  });
  let slot: Slot;
  try {
    slot = await pool.admission.acquire({
      priority,
      tenant: lease.tenant,
      cost: estimate.cost,
      signal: lease,
      // The gateway's id, never the client's: a shared backend keys the budget hold on it.
      requestId: lease.sluiceRequestId,
      hold: lease.hold,
    });
  } catch (err) {
    inFlowControl.leave(flowControlOutcome(err), (performance.now() - started) / 1000);
    ticket.notAdmitted();
    if (err instanceof AdmissionError && err.priorityClass !== undefined)
      lease.effectiveClass = err.priorityClass;
    // Left the queue without a slot (408 after its queue timeout, 499 gone while queued): the time
    // it waited, as the admission backend measured it, is its row's queue_wait_ms.
    if (err instanceof AdmissionError && err.queueWaitMs !== undefined) lease.leftQueue(err.queueWaitMs);
    // Queued in a pool whose workers all left: the answer is theirs being gone, not the wait.
    if (
      err instanceof AdmissionError &&
      (err.code === "scheduler_queue_timeout" || err.code === "admission_queue_timeout") &&
      pool.workers.healthy.length === 0
    ) {
      throw new GatewayError("no_healthy_workers", `no healthy worker serves pool ${pool.name} now`);
    }
    throw err;
  }
  inFlowControl.leave("Dispatched", (performance.now() - started) / 1000);
  ticket.admitted();
  // Legacy admission has no class of its own: the worker is told the clamped one (stream).
  lease.effectiveClass = slot.effectiveClass ?? ctx.classFor(priority, lease.tenant);
  lease.admitted(slot);
}

/** How a request that got no slot left admission, in the inference extension's outcome names. */
function flowControlOutcome(err: unknown): FlowControlOutcome {
  if (!(err instanceof AdmissionError)) return "RejectedOther";
  switch (err.code) {
    case "scheduler_queue_full":
    case "admission_queue_full":
      return "RejectedCapacity";
    case "scheduler_queue_timeout":
    case "admission_queue_timeout":
      return "EvictedTTL";
    case "scheduler_client_cancelled":
    case "admission_client_cancelled":
      return "EvictedContextCancelled";
    default:
      return err.queueWaitMs === undefined ? "RejectedOther" : "EvictedOther";
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
  const routing = new BodyRoutingRequest(estimate.json, req.headers, ctx.outstandingWork);
  // Inside its pool, only a worker that serves the request's model.
  const model = estimate.model ?? ctx.pools.defaultModel;
  const now = ctx.workers.tryAcquire(pool.workers, routing, model, lease.kvFootprint);
  if (now === null) {
    return ctx.workers
      .acquire(lease, pool.workers, routing, model, lease.kvFootprint)
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
    // The class it was admitted under, never the one the client asked for (the worker reads it).
    headers: requestHeadersForWorker(
      req.headers,
      lease.worker!.authorization,
      lease.slot?.effectiveClass ?? ctx.classFor(requestedPriority(req.headers), lease.tenant),
    ),
    body: upstreamBody.body.length > 0 ? upstreamBody.body : null,
    // A retried attempt gets what is left of the request's deadline.
    headersTimeout:
      lease.attempts === 0 ? ctx.upstreamTimeoutMs : Math.max(1, Math.ceil(lease.attemptTimeLeftMs)),
    bodyTimeout: ctx.upstreamTimeoutMs,
  });
}

// --- retry --------------------------------------------------------------------------------------

/**
 * The attempt failed before any byte reached the client: when the failure is retryable
 * (src/routing/retry.ts) and the lease allows another attempt, waits the jittered backoff, moves
 * the request to an untried worker of its pool (same lease, same slot, no queueing) and returns
 * true. Otherwise returns false and the failure stands, recorded as before (exchangeFailed,
 * the lease). The failed attempt of a retry is recorded here: its worker's circuit (a refused
 * connection through reportUnreachable), the retry count, and a 503 as an overload sample.
 */
async function retried(
  ctx: LifecycleContext,
  pool: ModelPool,
  lease: Lease,
  req: IncomingMessage,
  estimate: RequestEstimate,
  err: unknown,
): Promise<boolean> {
  if (!(err instanceof Error)) return false;
  const status = err instanceof UpstreamStatusError ? err.status : undefined;
  const reason = status !== undefined ? retryableStatus(status) : retryableFailure(upstreamFailure(err).kind);
  if (reason === undefined) return false;
  // A dropped 502/503 was already agreed by the lease (retriesStatus); the rest is asked now.
  if (status === undefined && !lease.mayRetry()) return false;
  const wait = retryBackoffMs(lease.attempts);
  if (wait >= lease.attemptTimeLeftMs) return stopRetrying(status);
  if (wait > 0) await sleepUnlessAborted(wait, lease);
  if (lease.aborted) {
    // The paths that record a standing failure skip a cancelled request: the attempt failed anyway.
    attemptFailed(ctx, lease.worker!, reason);
    return false;
  }
  const model = estimate.model ?? ctx.pools.defaultModel;
  const routing = new BodyRoutingRequest(estimate.json, req.headers, ctx.outstandingWork);
  const next = ctx.workers.tryAcquireFor(
    pool.workers,
    routing,
    model,
    (w) => lease.untried(w),
    lease.kvFootprint,
  );
  if (next === undefined) return stopRetrying(status);
  const failed = lease.worker!;
  attemptFailed(ctx, failed, reason);
  if (reason === "status_503") lease.overloadSample();
  ctx.retries.count(reason);
  ctx.logger.warn(
    { worker: failed.url, next: next.url, reason, attempt: lease.attempts, err: err.message },
    "upstream attempt failed before the first byte; retrying on another worker",
  );
  lease.leaveWorker();
  lease.dispatched(next);
  return true;
}

/** A failed attempt, for its worker's circuit: a refused connection opens it at once. */
function attemptFailed(ctx: LifecycleContext, worker: Worker, reason: RetryReason): void {
  if (reason === "connect") ctx.workers.reportUnreachable(worker);
  else ctx.workers.recordOutcome(worker, false);
}

/**
 * No retry after all. A refused or reset attempt's own failure stands (false); a 502/503 whose
 * answer was already dropped cannot be forwarded any more, so the gateway answers for it:
 * 503 no_healthy_workers for a 503, 502 upstream_unavailable for a 502 (docs/errors.md).
 */
function stopRetrying(status: number | undefined): boolean {
  if (status === undefined) return false;
  throw status === 503
    ? new GatewayError(
        "no_healthy_workers",
        "the worker answered 503 and no other worker of its pool could take the request",
      )
    : new GatewayError(
        "upstream_unavailable",
        "the worker answered 502 and no other worker of its pool could take the request",
      );
}

/** Waits `ms`, or less when the client leaves or the request is preempted. */
function sleepUnlessAborted(ms: number, lease: Lease): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      lease.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    lease.addEventListener("abort", done);
  });
}

// --- settle ------------------------------------------------------------------------------------

/**
 * The request ends, once, whatever ended it: the lease answers and gives back what it holds
 * (`close`); then what was served is charged, with the same numbers for budgets, fair share, tenant
 * tokens and the record; adaptive capacity and shedding learn from it; it is counted and recorded.
 */
function settle(lease: Lease, ending: Ending): void {
  // A request refused before it held a slot gives its budget hold back before its answer is
  // written, so the answer's rate-limit headers show the limits as the refusal leaves them.
  if ("failed" in ending && lease.hold !== undefined && lease.slot === undefined && !lease.answerStarted) {
    lease.ctx.budgets.refund(lease.hold);
  }
  const closed = lease.close(ending);
  if (closed === undefined) return;
  const { budgets, metrics, outputLengths, outcomes } = lease.ctx;
  const { status, code, outcome } = closed;
  const { tenant, hold, slot, estimate } = lease;

  // Charge what was served. A worker error (4xx/5xx) without usage generated nothing; nor did a
  // request never served.
  const usage = lease.reportedUsage;
  const workerAnswered = "answered" in ending;
  const nothingServed = workerAnswered ? status >= 400 && usage === undefined : !closed.bytesSent;
  const charge = nothingServed ? undefined : lease.charge(usage);
  const tokens = charge === undefined ? 0 : charge.usage.inputTokens + charge.usage.outputTokens;
  if (hold !== undefined) {
    if (charge === undefined) budgets.refund(hold);
    else budgets.settle(hold, charge.usage);
  }
  slot?.settle(tokens);
  if (charge !== undefined) {
    metrics.countTenantTokens(tenant, charge.usage.inputTokens, charge.usage.outputTokens);
    // An answer the model ended by itself (no limit, or under it) teaches the predictor; one that
    // stopped at its limit says only that the model had more to say.
    if (
      estimate !== undefined &&
      lease.generates &&
      charge.source !== "estimated" &&
      workerAnswered &&
      status < 400
    ) {
      const perChoice = charge.usage.outputTokens / estimate.choices;
      const capped = estimate.outputLimited && perChoice >= estimate.maxOutputTokens / estimate.choices;
      if (!capped) outputLengths?.learn(tenant, estimate.model, perChoice);
      const prediction = lease.prediction;
      if (prediction !== undefined) {
        const ratio = predictionErrorRatio(prediction.tokens, perChoice, capped);
        if (ratio !== undefined)
          lease.ctx.predictionErrors?.observe(lease.pool?.name ?? "", prediction.source, ratio);
      }
    }
  }

  // Feed capacity and shedding, count and record.
  const adaptive = lease.pool?.adaptive;
  if (adaptive !== undefined) lease.feedCapacity(adaptive, status, code, outcome, usage);
  if (slot?.effectiveClass !== undefined && charge !== undefined)
    lease.ticket?.served(slot.effectiveClass, tokens);
  metrics.countHttpStatus(status);
  const spans = lease.spans;
  if (outcomes !== undefined || spans !== undefined) {
    const record = lease.record(status, code, outcome, charge);
    outcomes?.record(record);
    spans?.ended(record, lease.pool?.name);
  }
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

/**
 * A lease owns what one request holds from arrival to its one outcome: its tenant, estimate and
 * budget hold, its pool's ticket (its counts), the slot, the worker, the upstream exchange, and what
 * the worker's answer told (usage, first byte, pace). Whatever ends the request — completion, a
 * rejection, preemption, the client going away, a worker failure, a timeout — the lifecycle's settle
 * stage ends it through `close`, which runs once: it writes the answer (or cuts the stream) and
 * gives back the worker, the slot and the ticket's counts. Exactly one release happens by
 * construction.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { BudgetBook, BudgetHold, Usage } from "@sluice/scheduler/core/budgets.js";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import { AdmissionError, BudgetRefusedError } from "@sluice/scheduler/core/errors.js";
import type { CancelSignal } from "@sluice/scheduler/core/signal.js";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import type { OutputPrediction } from "../../accounting/output-prediction.js";
import { PoolTicket } from "../../accounting/pool-ticket.js";
import { type CapacityFeedback, PACE_MIN_TAIL_TOKENS } from "../../capacity/adaptive.js";
import { requestFootprint } from "../../capacity/kv-budget.js";
import {
  type AdmissionBackend,
  SharedStateUnavailableError,
  type Slot,
} from "../../contracts/admission-backend.js";
import { ERROR_TABLE, type ErrorCode } from "../../contracts/error-table.js";
import { GatewayError, toGatewayError } from "../../contracts/gateway-error.js";
import type {
  AdmissionPath,
  OutcomeKind,
  OutcomeRecord,
  OutcomeSink,
  TokenSource,
} from "../../contracts/outcome.js";
import type { SluiceMetrics } from "../../metrics/index.js";
import type { PredictionErrorObserver } from "../../metrics/output-prediction.js";
import type { OutstandingWork } from "../../routing/outstanding-work.js";
import { retryableStatus } from "../../routing/retry.js";
import type { RequestSpans } from "../../tracing/request-spans.js";
import type { GatewayTracing } from "../../tracing/setup.js";
import type { ModelPool } from "../fleet/model-pools.js";
import { streamTokensPerEvent } from "../fleet/tokens-per-event.js";
import type { Worker, WorkerPool } from "../fleet/workers.js";
import { closeAfterAnswer } from "../http/client-guard.js";
import { requestedPriority } from "../http/headers.js";
import { sendError } from "../http/http-errors.js";
import { rateLimitHeaders } from "../http/rate-limit-headers.js";
import type { TenantActivity } from "../tenancy/tenant-activity.js";
import { ANONYMOUS_TENANT } from "../tenancy/tenants.js";
import type { RequestEstimate } from "./cost.js";
import type { OutputLengths } from "./output-lengths.js";
import type { QueueDrain } from "./queue-drain.js";
import { retryAfterSecsFor, secsUntilWorkerBack } from "./retry-after.js";
import { type BodyTransform, type ExchangeOwner, UpstreamExchange, upstreamFailure } from "./upstream.js";
import { MAX_PENDING_BYTES, UsageReader } from "./usage.js";

/** What every lease needs from the gateway. */
export interface LeaseContext {
  /** The fleet's admission, for requests that never reached a pool (classes of a rejected one). */
  readonly admission: Pick<AdmissionBackend, "mode" | "classify">;
  readonly workers: WorkerPool;
  readonly budgets: BudgetBook;
  readonly metrics: SluiceMetrics;
  readonly activity: TenantActivity;
  readonly outcomes: OutcomeSink | undefined;
  readonly logger: Logger;
  /** OpenTelemetry tracing (`--otlp-endpoint`, docs/tracing.md); undefined = off, nothing traced. */
  readonly tracing?: GatewayTracing | undefined;
  /** Retries after the first attempt (`--max-retries`; docs/routing.md "Retries"); 0 = none. */
  readonly maxRetries: number;
  /** The request's deadline for its upstream attempts together (`--request-timeout-secs`). */
  readonly upstreamTimeoutMs: number;
  /** Recent output lengths: answers of requests without max_tokens teach it (output-lengths.ts). */
  readonly outputLengths?: OutputLengths | undefined;
  /** Tokens outstanding per worker (routing's `least_tokens`); absent: not counted. */
  readonly outstandingWork?: OutstandingWork | undefined;
  /** `sluice_output_prediction_error_ratio`; absent: not observed. */
  readonly predictionErrors?: PredictionErrorObserver | undefined;
  /** `x-ratelimit-*` and `x-sluice-budget-*` on answers to identified tenants (`rate_limit_headers`). */
  readonly rateLimitHeaders: boolean;
  /** Served requests' slot-hold times: the queue-drain estimate of a queue refusal's Retry-After. */
  readonly queueDrain: QueueDrain;
  /** The gateway's clock (the workers' circuit cooldowns are on it). */
  readonly clock: Clock;
  /** `health_check_interval_secs`: the longest until a worker out of rotation may be seen back. */
  readonly healthIntervalSecs: number;
}

/** The tokens a served request is charged, and where they come from. */
export interface Charge {
  usage: Usage;
  source: TokenSource;
}

/** How a request ended, as the lifecycle reports it to its lease. */
export type Ending = { answered: number } | { failed: unknown };

/** The answer a request ended with, as `close` wrote it. */
export interface Closing {
  readonly status: number;
  /** The gateway's error code; undefined when the worker's answer went out. */
  readonly code: ErrorCode | undefined;
  readonly outcome: OutcomeKind;
  /** Bytes of the answer had reached the client before the request ended. */
  readonly bytesSent: boolean;
}

/** Monotonic time, for the ticket's queue waits. */
const monotonicNow = (): number => performance.now();

const CLIENT_GONE = new Error("the client went away");

/**
 * The lease is its own cancel signal (the core's CancelSignal: `aborted`, add/removeEventListener):
 * it fires when the client goes away or the slot is preempted, and costs no AbortController.
 */
export class Lease implements ExchangeOwner, CancelSignal {
  readonly tsMs = Date.now();
  private readonly t0 = performance.now();
  tenant = ANONYMOUS_TENANT;
  estimate: RequestEstimate | undefined;
  /** Prompt tokens this request counts in its worker's KV estimate while dispatched there. */
  private heldPromptTokens = 0;
  /**
   * Its KV footprint (prompt + predicted output) when its pool counts in KV tokens (set by
   * `routed`); undefined otherwise. Held on its worker while dispatched there.
   */
  kvFootprint: number | undefined;
  /** The request asks for generated output (a chat, a completion), not an embedding or a score. */
  generates = false;
  /** One answer's predicted output tokens (requests that generate; set before routing). */
  prediction: OutputPrediction | undefined;
  hold: BudgetHold | undefined;
  /** The model pool the request was routed to (undefined until routed). */
  pool: ModelPool | undefined;
  /** The request's counts in its pool (undefined until routed). */
  ticket: PoolTicket | undefined;
  slot: Slot | undefined;
  /**
   * The class the request is admitted (or was refused) under, after the tenant's clamp, once
   * classified: sent as `X-Sluice-Class`.
   */
  effectiveClass: PriorityClass | undefined;
  worker: Worker | undefined;
  /** The request's spans when tracing is on; undefined when off (every hook is one `?.`). */
  readonly spans: RequestSpans | undefined;
  /** Upstream attempts made (retries included); the outcome record carries it. */
  attempts = 0;
  /** When the first attempt started (performance.now()): the retries' deadline counts from here. */
  private firstAttemptAt = 0;
  /** Workers already tried and failed, made at the first retry (a first success never makes it). */
  private tried: Worker[] | undefined;
  /** The worker's reported usage, once its answer has been read. */
  private reader: UsageReader | undefined;
  /** Strip the usage chunk sluice itself asked for from a stream. */
  stripUsage = false;
  readonly answerHeaders: string[];
  private exchange: UpstreamExchange | undefined;
  private abortListeners: Array<() => void> | undefined;
  private firstByteMs: number | undefined;
  /**
   * A running stream's decode pace for adaptive capacity: the last mark (ms since arrival) and
   * the events read then, the events of the first chunk, and the pace samples sent so far.
   */
  private paceAtMs = 0;
  private paceEvents = 0;
  private firstEvents = -1;
  private paceSamples = 0;
  /** Output tokens per event of this worker's streams, read as the stream starts (tokens-per-event.ts). */
  private tokensPerEvent = 1;
  /** A stream's first event was seen; its TTFT went to adaptive capacity then (`ttftSent`). */
  private firstSeen = false;
  private ttftSent = false;
  /** When the worker was chosen, ms since arrival: TTFT for capacity starts here, not at arrival. */
  private dispatchedMs: number | undefined;
  /** When the slot was granted (performance.now()): its hold time feeds the queue-drain estimate. */
  private admittedAt: number | undefined;
  /** Time in the queue of a request that left it without a slot (408, 499, 429), ms. */
  private queuedMs = 0;
  private clientGone = false;
  private preempted = false;
  private ended = false;
  private settleExchange: ((status: number) => void) | undefined;
  private failExchange: ((error: Error) => void) | undefined;

  constructor(
    /** What the gateway gave the request: the settle stage charges, counts and records through it. */
    readonly ctx: LeaseContext,
    private readonly req: IncomingMessage,
    private readonly res: ServerResponse,
    /** The correlation id (`X-Request-Id`): the client's own when usable; echoed and stored. */
    readonly requestId: string,
    /** The gateway's own id, unique per request: the budget hold's and the ledger row's key. */
    readonly sluiceRequestId: string,
  ) {
    this.answerHeaders = ["x-request-id", requestId];
    this.spans = ctx.tracing === undefined ? undefined : ctx.tracing.startRequest(req, requestId);
    res.on("close", this.onClose);
  }

  // --- CancelSignal: fired when the client goes away or the slot is preempted -----------------

  get aborted(): boolean {
    return this.clientGone || this.preempted;
  }

  addEventListener(_type: "abort", listener: () => void): void {
    if (this.abortListeners === undefined) this.abortListeners = [listener];
    else this.abortListeners.push(listener);
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const listeners = this.abortListeners;
    if (listeners === undefined) return;
    const i = listeners.indexOf(listener);
    if (i !== -1) listeners.splice(i, 1);
  }

  private fireAbort(): void {
    const listeners = this.abortListeners;
    if (listeners === undefined) return;
    this.abortListeners = undefined;
    for (const listener of listeners) listener();
  }

  /** Bytes of the answer have gone out (its head at least). */
  get answerStarted(): boolean {
    return this.res.headersSent;
  }

  get isClientGone(): boolean {
    return this.clientGone;
  }

  private readonly onClose = (): void => {
    if (this.res.writableFinished) return;
    this.clientGone = true;
    this.fireAbort();
    this.exchange?.abort(CLIENT_GONE);
  };

  private readonly onPreempted = (error: Error): void => {
    this.preempted = true;
    // A worker already had it: its prompt's prefill (or some of it) is thrown away. The gateway sees
    // no progress before the first byte, so the prompt is counted whole: an upper bound.
    if (this.attempts > 0 && this.slot !== undefined) {
      this.ctx.metrics.preemptedPrefillTokens.inc(
        { class: this.slot.effectiveClass },
        this.estimate?.promptTokens ?? 0,
      );
    }
    this.fireAbort();
    this.exchange?.abort(error);
  };

  /** The route stage chose the model pool: the request counts in it from now on. */
  routed(pool: ModelPool): void {
    this.pool = pool;
    if (pool.workers.kv.unit === "kv_tokens" && this.estimate !== undefined) {
      const estimate = this.estimate;
      // The output a sum of requests holds: the expected length when answers taught it, else the
      // request's own cap. The predictor's p95 and its fallbacks (the default, the context) are
      // what one request may need: a mean of them took a replay's capacity to a request or two a
      // worker with the KV 15% used (docs/capacity.md).
      const expected = this.prediction?.expectedTokens;
      const known = expected !== undefined || estimate.outputLimited;
      this.kvFootprint = requestFootprint({
        promptTokens: estimate.promptTokens,
        predictedOutputTokens: known ? (expected ?? Number.POSITIVE_INFINITY) * estimate.choices : 0,
        maxOutputTokens: estimate.outputLimited ? estimate.maxOutputTokens : undefined,
      });
      // Taken at arrival: the pool's capacity follows a change of mix before admitting it.
      if (known) pool.workers.observeFootprint(this.kvFootprint);
    }
    this.ticket = new PoolTicket(
      { tenants: this.ctx.activity, feedback: pool.adaptive, shedding: pool.shedding, now: monotonicNow },
      this.tenant,
      // Shedding weighs the queue by predicted output (every choice), when answers taught it: a
      // ceiling (the default, the context) is no length.
      this.prediction?.learned ? this.prediction.tokens * (this.estimate?.choices ?? 1) : undefined,
    );
  }

  /** The admit stage got a slot: from now on the lease holds it. */
  admitted(slot: Slot): void {
    this.slot = slot;
    this.admittedAt = performance.now();
    slot.onPreempt(this.onPreempted);
    this.spans?.admitted(slot.admission);
    this.answerHeaders.push(
      "x-sluice-admission",
      slot.admission,
      "x-sluice-queue-wait-ms",
      String(Math.round(slot.queueWaitMs)),
    );
  }

  /** The admit stage ended without a slot after `ms` in the queue (its timeout, the client gone). */
  leftQueue(ms: number): void {
    this.queuedMs = ms;
  }

  /** The dispatch stage chose a worker. */
  dispatched(worker: Worker): void {
    this.worker = worker;
    // Its prompt counts in the worker's KV estimate until it leaves (docs/capacity.md).
    this.heldPromptTokens = this.estimate?.promptTokens ?? 0;
    worker.promptTokensInFlight += this.heldPromptTokens;
    worker.footprintTokens += this.kvFootprint ?? 0;
    this.ctx.outstandingWork?.add(worker.url, this.workTokens());
    this.dispatchedMs = performance.now() - this.t0;
    // The worker's in-flight count moved: its adaptive controller re-samples its usage.
    this.pool?.adaptive?.dispatched?.(worker.url);
  }

  /**
   * What the request costs its worker in tokens, for routing's outstanding work: the prompt and the
   * predicted output of every choice. The same on dispatch and on leaving.
   */
  private workTokens(): number {
    const estimate = this.estimate;
    if (estimate === undefined) return 0;
    const output = this.prediction === undefined ? 0 : this.prediction.tokens * estimate.choices;
    return estimate.promptTokens + output;
  }

  /** Runs the exchange with the worker; resolves with the worker's status. */
  forward(options: Omit<Dispatcher.DispatchOptions, "origin">): Promise<number> {
    const worker = this.worker!;
    if (this.attempts++ === 0) this.firstAttemptAt = performance.now();
    // One upstream span per attempt; the worker's traceparent names it (the client's is replaced).
    if (this.spans !== undefined)
      this.spans.attemptStarted(worker.url, options, this.estimate, worker.engine);
    return new Promise<number>((resolve, reject) => {
      this.settleExchange = resolve;
      this.failExchange = reject;
      this.exchange = new UpstreamExchange(this, this.res);
      if (this.clientGone) this.exchange.abort(CLIENT_GONE);
      else if (this.preempted) this.exchange.abort(new Error("preempted"));
      worker.pool.dispatch(options, this.exchange);
    });
  }

  // --- retries (docs/routing.md "Retries"; the policy is src/routing/retry.ts) ---------------

  /** Time left of the request's deadline for its attempts, ms. */
  get attemptTimeLeftMs(): number {
    return this.firstAttemptAt + this.ctx.upstreamTimeoutMs - performance.now();
  }

  /**
   * Another attempt may follow the current one: retries left, the client still there, the request
   * not preempted, nothing sent, time left, and a routable worker of the pool not tried yet.
   */
  mayRetry(): boolean {
    if (this.attempts > this.ctx.maxRetries || this.aborted || this.res.headersSent) return false;
    if (this.attemptTimeLeftMs <= 0) return false;
    const group = this.pool?.workers;
    if (group === undefined) return false;
    for (const w of group.healthy) if (this.untried(w)) return true;
    return false;
  }

  /** Not the current worker, nor one that failed an earlier attempt. */
  untried(worker: Worker): boolean {
    return worker !== this.worker && (this.tried === undefined || !this.tried.includes(worker));
  }

  /**
   * The current attempt failed and another follows: its worker is given back and marked tried
   * (the slot and the lease stay); `dispatched` takes the next one.
   */
  leaveWorker(): void {
    const worker = this.worker;
    if (worker === undefined) return;
    if (this.tried === undefined) this.tried = [worker];
    else this.tried.push(worker);
    this.ctx.outstandingWork?.remove(worker.url, this.workTokens());
    this.worker = undefined;
    this.exchange = undefined;
    worker.promptTokensInFlight -= this.heldPromptTokens;
    worker.footprintTokens -= this.kvFootprint ?? 0;
    this.ctx.workers.release(worker);
  }

  /**
   * A retried attempt's 503: an overload sample for the pool's adaptive capacity, as a final one
   * is, for the worker that answered it (the current one: called before `leaveWorker`).
   */
  overloadSample(): void {
    if (this.dispatchedMs !== undefined) this.pool?.adaptive?.sample({ kind: "overload" }, this.worker?.url);
  }

  // --- ExchangeOwner -------------------------------------------------------------------------

  retriesStatus(status: number): boolean {
    return retryableStatus(status) !== undefined && this.mayRetry();
  }

  markFirstByte(): boolean {
    if (this.slot !== undefined && !this.slot.markFirstByte()) return false;
    this.firstByteMs = performance.now() - this.t0;
    this.spans?.firstByte();
    return true;
  }

  observe(contentType: string | undefined): BodyTransform | undefined {
    const adaptive = this.pool?.adaptive !== undefined;
    this.firstEvents = -1;
    this.paceSamples = 0;
    this.tokensPerEvent = this.worker?.tokensPerEvent.value ?? 1;
    this.firstSeen = false;
    this.ttftSent = false;
    // The callback is made only in adaptive mode: a static gateway allocates nothing for it.
    this.reader = new UsageReader(
      contentType,
      this.stripUsage,
      adaptive ? (events) => this.paceMark(events) : undefined,
    );
    if (this.reader.isStream) this.reader.onOversized = (bytes) => this.oversizedEvent(bytes);
    // Tracing on: the answer's model and finish reasons are read on the way (never its text).
    return this.spans === undefined ? this.reader : this.spans.watchAnswer(contentType, this.reader);
  }

  /** Once per stream: an SSE event passed the scanner's bound and goes to the client unread. */
  private oversizedEvent(bytes: number): void {
    this.ctx.logger.warn(
      { worker: this.worker?.url, requestId: this.requestId, bytes, limit: MAX_PENDING_BYTES },
      "stream event past the usage scanner's bound: its bytes pass through unread",
    );
  }

  /**
   * While a stream runs, its decode pace goes to adaptive capacity every paceIntervalMs: a long
   * answer at an overloaded worker tells the controller while it runs, not when it ends (maybe a
   * minute later), and about the concurrency of then.
   */
  private paceMark(events: number): void {
    const nowMs = performance.now() - this.t0;
    if (!this.firstSeen && events >= 1) {
      this.firstSeen = true;
      this.ttftSent = this.firstToken(nowMs);
    }
    if (this.firstEvents < 0) {
      this.firstEvents = events;
      this.paceAtMs = nowMs;
      this.paceEvents = events;
      return;
    }
    const feedback = this.pool?.adaptive;
    if (feedback === undefined || nowMs - this.paceAtMs < (feedback.paceIntervalMs ?? 5000)) return;
    const tokens = (events - this.paceEvents) * this.tokensPerEvent;
    if (tokens < 1) return;
    const spanMs = nowMs - this.paceAtMs;
    feedback.sample({ kind: "ok", tpotMs: spanMs / tokens, spanMs }, this.worker?.url);
    this.paceAtMs = nowMs;
    this.paceEvents = events;
    this.paceSamples++;
  }

  /**
   * A stream's first event is its first token: its TTFT goes to adaptive capacity now, not with
   * the answer's end. At a cold start far past the knee an answer lasts many windows, and a TTFT
   * reported at its end began before the probe's first step and is dropped as stale: a
   * `ttft_slo_ms` would act only after the first cohort's whole life. The prompt's length picks the
   * TTFT bucket; the worker's count comes only with the usage at the end, so the request's own
   * estimate (prompt characters / 4) stands in for it here.
   */
  private firstToken(nowMs: number): boolean {
    const feedback = this.pool?.adaptive;
    const dispatchedMs = this.dispatchedMs;
    const estimate = this.estimate;
    // Without an estimate the answer's end reports it, with the worker's count.
    if (feedback === undefined || dispatchedMs === undefined || estimate === undefined) return false;
    const ttftMs = nowMs - dispatchedMs;
    feedback.sample(
      { kind: "ok", ttftMs, promptTokens: estimate.promptTokens, spanMs: ttftMs },
      this.worker?.url,
    );
    return true;
  }

  exchangeDone(status: number): void {
    this.spans?.exchangeDone(status, this.reader?.usage);
    this.settleExchange?.(status);
  }

  exchangeFailed(error: Error): void {
    this.spans?.exchangeFailed(error);
    this.failExchange?.(error);
  }

  // --- the one exit (the lifecycle's settle stage) ----------------------------------------------

  /**
   * Ends the request, once: the worker's answer went out in full, or the failure's answer is
   * written now (or the stream is cut, or nobody is left to answer); then the worker, the slot and
   * the ticket's counts are given back. Undefined when the request had already ended.
   */
  close(ending: Ending): Closing | undefined {
    if (this.ended) return undefined;
    this.ended = true;
    const { ctx, res } = this;
    res.off("close", this.onClose);

    // The answer.
    const bytesSent = res.headersSent;
    let status: number;
    let code: ErrorCode | undefined;
    let outcome: OutcomeKind;
    if ("answered" in ending) {
      status = ending.answered;
      outcome = status >= 500 ? "error" : "ok";
      if (status >= 500) ctx.metrics.upstreamErrors.inc({ kind: "status_5xx" });
    } else {
      const error = this.errorFor(ending.failed);
      status = error.status;
      code = error.code;
      outcome = ERROR_TABLE[code].outcome;
      if (bytesSent || status === 499 || res.destroyed) {
        // The answer already started (the stream is cut), or nobody is left to answer.
        if (!res.destroyed) res.destroy();
      } else {
        if (!this.req.complete) closeAfterAnswer(this.req, res);
        sendError(res, this.withRetryAfter(error), this.refusalHeaders());
      }
    }

    // A served request's slot-hold time is what the next queue refusal's Retry-After is made of.
    if (this.admittedAt !== undefined && this.pool !== undefined && status < 400 && !this.aborted) {
      ctx.queueDrain.served(this.pool.name, performance.now() - this.admittedAt);
    }
    // Give back what the request holds.
    if (this.worker !== undefined) {
      this.worker.promptTokensInFlight -= this.heldPromptTokens;
      this.worker.footprintTokens -= this.kvFootprint ?? 0;
      ctx.workers.release(this.worker);
      ctx.outstandingWork?.remove(this.worker.url, this.workTokens());
    }
    this.slot?.release();
    this.ticket?.ended();
    return { status, code, outcome, bytesSent };
  }

  /** The usage the worker reported, once its answer has been read. */
  get reportedUsage(): Usage | undefined {
    return this.reader?.usage;
  }

  /**
   * One sample for adaptive capacity: a served answer's TTFT (from dispatch) and time per output
   * token, or an overload signal (the worker's 429/503, an upstream timeout). Preempted, cancelled
   * and refused requests say nothing about the worker's speed.
   */
  feedCapacity(
    feedback: CapacityFeedback,
    status: number,
    code: ErrorCode | undefined,
    outcome: OutcomeKind,
    usage: Usage | undefined,
  ): void {
    const dispatchedMs = this.dispatchedMs;
    if (dispatchedMs === undefined) return;
    // The worker that served it (still set: `end` gives it back but keeps it).
    const worker = this.worker?.url;
    if (code === "upstream_timeout" || (code === undefined && (status === 429 || status === 503))) {
      feedback.sample({ kind: "overload" }, worker);
      return;
    }
    if (outcome !== "ok" || status >= 400) return;
    const reader = this.reader;
    const stream = reader?.isStream === true;
    // Token events: all but the sure framing ones and one more (a role or a finish chunk).
    const tokenEvents = stream ? reader.events - reader.framingEvents - 1 : 0;
    let output: number;
    let promptTokens: number | undefined;
    // Tokens per event for the tail after the last mark: the stream's own ratio when its usage
    // tells it (the worker's running estimate may be a few percent off, and over a tail of a few
    // dozen tokens after hundreds marked that is a pace off by half), else the one the marks used.
    let perEvent = this.tokensPerEvent;
    if (usage !== undefined) {
      output = usage.outputTokens;
      promptTokens = usage.inputTokens;
      if (stream) {
        perEvent = streamTokensPerEvent(output, tokenEvents) ?? perEvent;
        // Its own count against the events that carried it: the pace of the next streams reads
        // tokens, not events.
        this.worker?.tokensPerEvent.learn(output, tokenEvents);
      }
    } else if (stream) {
      // A worker that ignores stream_options sends no usage: its events are the count (at the
      // worker's tokens per event), and the request's own estimate stands for the prompt. Without
      // this, answers shorter than a pace mark's interval would give no TPOT at all.
      output = Math.round(tokenEvents * this.tokensPerEvent);
      promptTokens = this.estimate?.promptTokens;
    } else {
      return; // a whole answer without usage: nothing counts its tokens
    }
    const endMs = performance.now() - this.t0;
    const firstMs = this.firstByteMs ?? endMs;
    // Since the dispatch: a cold start's probe drops a sample that began before its last step.
    const spanMs = endMs - dispatchedMs;
    if (stream) {
      // A stream: its first byte is the first token, and the rest came at the decode pace. The
      // pace up to the last mark went out while it ran (onChunk), and so did the TTFT (at the
      // first event); this sample has the rest.
      let tpotMs: number | undefined;
      if (this.paceSamples === 0) {
        tpotMs = output >= 2 ? (endMs - firstMs) / (output - 1) : undefined;
      } else {
        // Only a tail of PACE_MIN_TAIL_TOKENS or more: SSE events are not exactly tokens, and
        // over a few tokens one miscounted reads as a pace far off.
        const rest = output - 1 - (this.paceEvents - this.firstEvents) * perEvent;
        tpotMs = rest >= PACE_MIN_TAIL_TOKENS ? (endMs - this.paceAtMs) / rest : undefined;
      }
      if (!this.ttftSent && promptTokens !== undefined) {
        feedback.sample({ kind: "ok", ttftMs: firstMs - dispatchedMs, promptTokens, tpotMs, spanMs }, worker);
      } else if (tpotMs !== undefined) {
        feedback.sample({ kind: "ok", tpotMs, spanMs }, worker); // its TTFT went at the first event
      }
    } else if (output >= 1) {
      // A whole answer at once: only its pace per token is known (prefill included).
      feedback.sample({ kind: "ok", tpotMs: spanMs / output, spanMs }, worker);
    }
  }

  /**
   * What a served request is charged (docs/tenants.md, "Token accounting"): the worker's usage when
   * it reported one; for a stream without usage, its events counted (events x the worker's tokens
   * per event, as adaptive capacity reads a stream's pace) with the prompt estimated; for a whole
   * generated answer without usage, an estimate from its text. Never 0 output tokens for a
   * generated answer: it produced at least one. A request that generates nothing (an embedding)
   * without usage is charged its prompt estimate.
   */
  charge(usage: Usage | undefined): Charge {
    if (usage !== undefined) return { usage, source: "reported" };
    const inputTokens = this.estimate?.promptTokens ?? 0;
    const reader = this.reader;
    if (reader?.isStream === true) {
      // Token events: all but the sure framing ones and one more (a role or a finish chunk).
      const tokenEvents = reader.events - reader.framingEvents - 1;
      const outputTokens = Math.max(1, Math.round(tokenEvents * this.tokensPerEvent));
      return { usage: { inputTokens, outputTokens }, source: "counted" };
    }
    const outputTokens = this.generates ? Math.max(1, reader?.estimatedOutputTokens ?? 1) : 0;
    return { usage: { inputTokens, outputTokens }, source: "estimated" };
  }

  /**
   * The headers sluice adds to the worker's answer: the request id, the admission and queue wait,
   * `X-Sluice-Class`, and the tenant's rate-limit headers as they stand now (after this request's
   * hold). Read once, as the answer's head goes out.
   */
  headersForAnswer(): string[] {
    const headers = [...this.answerHeaders];
    if (this.effectiveClass !== undefined) headers.push("x-sluice-class", this.effectiveClass);
    for (const h of this.tenantRateLimits()) headers.push(h);
    return headers;
  }

  /** The headers of a refusal: the request id, the class once known, the rate-limit headers. */
  private refusalHeaders(): Record<string, string> {
    const out: Record<string, string> = { "x-request-id": this.requestId };
    if (this.effectiveClass !== undefined) out["x-sluice-class"] = this.effectiveClass;
    const limits = this.tenantRateLimits();
    for (let i = 0; i + 1 < limits.length; i += 2) out[limits[i]!] = limits[i + 1]!;
    return out;
  }

  /** The rate-limit headers for an identified tenant with such limits; empty otherwise or when off. */
  private tenantRateLimits(): string[] {
    if (!this.ctx.rateLimitHeaders || this.tenant === ANONYMOUS_TENANT) return [];
    const policy = this.ctx.budgets.policyOf(this.tenant);
    if (policy === undefined) return [];
    return rateLimitHeaders(policy, this.ctx.budgets.remaining(this.tenant));
  }

  /** The error with the Retry-After of what will free up (retry-after.ts), for codes that carry one. */
  private withRetryAfter(error: GatewayError): GatewayError {
    const { ctx } = this;
    const secs = retryAfterSecsFor(error.code, error.retryAfterSecs, {
      drain: ctx.queueDrain,
      pool: this.pool,
      cls: this.effectiveClass,
      workerReturnSecs:
        error.code === "no_healthy_workers"
          ? secsUntilWorkerBack(
              this.pool?.workers.members ?? ctx.workers.workers,
              ctx.clock.now(),
              ctx.healthIntervalSecs,
            )
          : 0,
    });
    if (secs === error.retryAfterSecs || ERROR_TABLE[error.code].retryAfter !== "computed") return error;
    return new GatewayError(error.code, error.message, {
      param: error.param,
      headers: error.headers,
      retryAfterSecs: secs,
    });
  }

  /** The gateway's answer for a failure; upstream failures are counted and logged here. */
  private errorFor(failure: unknown): GatewayError {
    if (this.clientGone) {
      return new GatewayError(
        (this.pool?.admission ?? this.ctx.admission).mode === "scheduler"
          ? "scheduler_client_cancelled"
          : "admission_client_cancelled",
      );
    }
    if (this.preempted && !this.res.headersSent) {
      return failure instanceof AdmissionError
        ? toGatewayError(failure)
        : new GatewayError("scheduler_preempted");
    }
    if (
      failure instanceof GatewayError ||
      failure instanceof AdmissionError ||
      failure instanceof BudgetRefusedError ||
      failure instanceof SharedStateUnavailableError
    ) {
      return toGatewayError(failure);
    }
    const worker = this.worker;
    if (worker !== undefined && failure instanceof Error) {
      const { kind, error } = upstreamFailure(failure);
      this.ctx.metrics.upstreamErrors.inc({ kind });
      this.ctx.logger.warn({ worker: worker.url, err: failure.message, kind }, "upstream request failed");
      if (kind === "connect") this.ctx.workers.reportUnreachable(worker);
      if (kind === "refused_arguments") worker.resetPool();
      return error;
    }
    const error = toGatewayError(failure);
    if (error.code === "internal_error") this.ctx.logger.error({ err: failure }, "unexpected gateway error");
    return error;
  }

  record(
    status: number,
    code: ErrorCode | undefined,
    outcome: OutcomeKind,
    charge: Charge | undefined,
  ): OutcomeRecord {
    const slot = this.slot;
    let requested = slot?.requestedClass;
    let effective = slot?.effectiveClass;
    if (slot === undefined) {
      const classes = (this.pool?.admission ?? this.ctx.admission).classify(
        requestedPriority(this.req.headers),
        this.tenant,
      );
      requested = classes?.requested;
      effective = classes?.effective;
    }
    const estimate = this.estimate;
    const admission: AdmissionPath = slot === undefined ? "rejected" : slot.admission;
    return {
      tsMs: this.tsMs,
      requestId: this.requestId,
      sluiceRequestId: this.sluiceRequestId,
      tenantId: this.tenant,
      model: estimate?.model,
      requestedClass: requested,
      effectiveClass: effective,
      admission,
      outcome,
      status,
      errorCode: code,
      queueWaitMs: slot?.queueWaitMs ?? this.queuedMs,
      ttftMs: this.firstByteMs,
      durationMs: performance.now() - this.t0,
      estimatedTokens: estimate?.cost ?? 0,
      inputTokens: charge?.usage.inputTokens,
      outputTokens: charge?.usage.outputTokens,
      tokenSource: charge?.source,
      costUsd: charge !== undefined ? this.ctx.budgets.costUsd(estimate?.model, charge.usage) : undefined,
      worker: this.worker?.url,
      attempts: this.attempts,
    };
  }
}

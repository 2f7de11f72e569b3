/**
 * The spans of one request: `sluice.request` (SERVER) and its children `sluice.queue` (the
 * admission wait), one upstream span (CLIENT) per dispatch to a worker, and `sluice.stream` (the
 * answer flowing to the client, from its first byte). Children get their parent explicitly, never
 * through a context manager: no async context is tracked for any of this.
 *
 * A request on a GenAI route (chat, completion, embeddings) also gets the GenAI semantic
 * conventions (docs/genai-telemetry.md): its upstream spans are named `{operation} {model}` and
 * both they and the request span carry `gen_ai.*`; with GenAI metrics on, the finished request goes
 * to the metrics sink. Prompts and answers are never recorded: only the answer's model and finish
 * reasons are read from it (answer-facts.ts).
 *
 * Only a gateway with tracing on creates one; the lease calls it through `lease.spans?.…`.
 */
import type { IncomingMessage } from "node:http";
import { type Context, type Span, SpanKind, SpanStatusCode, type Tracer, trace } from "@opentelemetry/api";
import type { OutcomeRecord } from "../contracts/outcome.js";
import { AnswerFacts } from "./answer-facts.js";
import {
  ATTR_ADMISSION,
  ATTR_ATTEMPT,
  ATTR_ATTEMPTS,
  ATTR_CLASS_EFFECTIVE,
  ATTR_CLASS_REQUESTED,
  ATTR_ERROR_CODE,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_MODEL,
  ATTR_OUTCOME,
  ATTR_POOL,
  ATTR_QUEUE_WAIT_MS,
  ATTR_REQUEST_ID,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_TENANT,
  ATTR_TOKENS_INPUT,
  ATTR_TOKENS_OUTPUT,
  ATTR_URL_FULL,
  ATTR_WORKER,
  SPAN_QUEUE,
  SPAN_REQUEST,
  SPAN_STREAM,
  SPAN_UPSTREAM,
} from "./attributes.js";
import {
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MAX_TOKENS,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
  ATTR_GEN_AI_RESPONSE_MODEL,
  ATTR_GEN_AI_SYSTEM,
  ATTR_GEN_AI_USAGE_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_OUTPUT_TOKENS,
  type GenAiOperation,
  genAiSpanName,
  operationOf,
  PROVIDER_UNKNOWN,
  providerOf,
} from "./genai-attributes.js";
import type { FinishedCall, FinishedCallSink } from "./genai-call.js";
import { parentFromHeaders, type WorkerHeaders, withTraceParent } from "./propagation.js";

/** The part of a dispatch the upstream span reads and rewrites (undici's dispatch options). */
interface AttemptRequest {
  method: string;
  path: string;
  headers?: WorkerHeaders;
}

/** What the request asked the model for, as the body said (read once the body is in). */
export interface GenAiAsk {
  readonly model: string | undefined;
  /** The parsed JSON body: only its output limit is read from it. */
  readonly json: Record<string, unknown> | undefined;
}

/** The answer's body on its way to the client (the shape of the gateway's body transform). */
export interface AnswerTransform {
  readonly changesLength: boolean;
  transform(chunk: Buffer): Buffer;
  flush(): Buffer | undefined;
}

/** The tokens the worker reported for its answer. */
export interface ReportedUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
}

/** How the spans of every request are made (the gateway's tracing settings). */
export interface RequestSpansOptions {
  /** OTEL_SEMCONV_STABILITY_OPT_IN holds gen_ai_latest_experimental: no `gen_ai.system` beside the provider. */
  readonly latestGenAiOnly: boolean;
  /** GenAI metrics, when on. */
  readonly metrics: FinishedCallSink | undefined;
}

const DEFAULT_OPTIONS: RequestSpansOptions = { latestGenAiOnly: false, metrics: undefined };

/** The body's output limit per choice: `max_completion_tokens`, else `max_tokens`, else SGLang's `max_new_tokens`. */
function maxTokensOf(json: Record<string, unknown> | undefined): number | undefined {
  if (json === undefined) return undefined;
  for (const value of [
    json.max_completion_tokens,
    json.max_tokens,
    (json.sampling_params as Record<string, unknown> | null | undefined)?.max_new_tokens,
  ]) {
    if (typeof value === "number" && Number.isInteger(value) && value >= 0) return value;
  }
  return undefined;
}

/** The request's path without its query: the gateway serves a handful of fixed routes. */
function routeOf(url: string | undefined): string {
  if (url === undefined) return "/";
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}

export class RequestSpans {
  readonly request: Span;
  /** The request span's context: the parent of every child span. */
  private readonly context: Context;
  private queue: Span | undefined;
  private attempt: Span | undefined;
  private attempts = 0;
  private stream: Span | undefined;
  /** The GenAI operation of the request's route; undefined: no GenAI attributes, no GenAI metrics. */
  private readonly operation: GenAiOperation | undefined;
  /** What the body asked for, once an attempt started. */
  private ask: GenAiAsk | undefined;
  /** The current (then the last) attempt's worker: its engine, address and port. */
  private provider = PROVIDER_UNKNOWN;
  private serverAddress: string | undefined;
  private serverPort: number | undefined;
  /** What the last answer read said (its model, finish reasons). */
  private answer: AnswerFacts | undefined;
  private queued = false;

  constructor(
    private readonly tracer: Tracer,
    req: IncomingMessage,
    requestId: string,
    private readonly options: RequestSpansOptions = DEFAULT_OPTIONS,
  ) {
    const parent = parentFromHeaders(req.headers);
    const route = routeOf(req.url);
    this.operation = operationOf(route);
    const attributes: Record<string, string> = {
      [ATTR_HTTP_REQUEST_METHOD]: req.method ?? "GET",
      [ATTR_HTTP_ROUTE]: route,
      [ATTR_REQUEST_ID]: requestId,
    };
    if (this.operation !== undefined) attributes[ATTR_GEN_AI_OPERATION_NAME] = this.operation;
    this.request = tracer.startSpan(SPAN_REQUEST, { kind: SpanKind.SERVER, attributes }, parent);
    this.context = trace.setSpan(parent, this.request);
  }

  /** The admit stage starts waiting for a slot. */
  queueStarted(): void {
    this.queued = true;
    this.queue = this.tracer.startSpan(SPAN_QUEUE, { kind: SpanKind.INTERNAL }, this.context);
  }

  /** A slot was granted: at once (`fast`) or after queueing (`queued`). */
  admitted(admission: string): void {
    const queue = this.queue;
    if (queue === undefined) return;
    this.queue = undefined;
    queue.setAttribute(ATTR_ADMISSION, admission);
    queue.end();
  }

  /**
   * One dispatch to `workerUrl` starts: a new upstream span (ending one still open, whose exchange
   * the caller abandoned), and the worker's `traceparent` rewritten to name it as the parent.
   */
  attemptStarted(
    workerUrl: string,
    request: AttemptRequest,
    ask?: GenAiAsk,
    engine?: string | undefined,
  ): void {
    if (this.attempt !== undefined) this.attemptEnded(undefined, "abandoned");
    this.attempts++;
    this.answer = undefined;
    const attributes: Record<string, string | number> = {
      [ATTR_HTTP_REQUEST_METHOD]: request.method,
      [ATTR_WORKER]: workerUrl,
      [ATTR_ATTEMPT]: this.attempts,
    };
    this.serverAddress = undefined;
    this.serverPort = undefined;
    try {
      const url = new URL(request.path, workerUrl);
      attributes[ATTR_URL_FULL] = url.href;
      this.serverAddress = url.hostname;
      this.serverPort = Number(url.port || (url.protocol === "https:" ? 443 : 80));
      attributes[ATTR_SERVER_ADDRESS] = this.serverAddress;
      attributes[ATTR_SERVER_PORT] = this.serverPort;
    } catch {
      // A worker URL that does not parse was refused at startup; the span goes without these.
    }
    let name = SPAN_UPSTREAM;
    const operation = this.operation;
    if (operation !== undefined) {
      this.ask = ask;
      this.provider = providerOf(engine);
      this.setProvider(attributes);
      attributes[ATTR_GEN_AI_OPERATION_NAME] = operation;
      const model = ask?.model;
      if (model !== undefined) attributes[ATTR_GEN_AI_REQUEST_MODEL] = model;
      const maxTokens = maxTokensOf(ask?.json);
      if (maxTokens !== undefined) attributes[ATTR_GEN_AI_REQUEST_MAX_TOKENS] = maxTokens;
      name = genAiSpanName(operation, model);
    }
    const span = this.tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, this.context);
    this.attempt = span;
    this.request.setAttribute(ATTR_WORKER, workerUrl);
    request.headers = withTraceParent(request.headers, span);
  }

  /**
   * The worker's answer starts: on a GenAI route, the answer is read on its way for its model and
   * finish reasons (answer-facts.ts) before `transform` passes it on.
   */
  watchAnswer(
    contentType: string | undefined,
    transform: AnswerTransform | undefined,
  ): AnswerTransform | undefined {
    if (this.operation === undefined) return transform;
    const facts = new AnswerFacts(contentType);
    this.answer = facts;
    if (transform === undefined) {
      return {
        changesLength: false,
        transform: (chunk) => {
          facts.read(chunk);
          return chunk;
        },
        flush: () => undefined,
      };
    }
    return {
      changesLength: transform.changesLength,
      transform: (chunk) => {
        facts.read(chunk);
        return transform.transform(chunk);
      },
      flush: () => transform.flush(),
    };
  }

  /** The worker's first body byte (or the end of an empty body) goes to the client. */
  firstByte(): void {
    if (this.stream !== undefined) return;
    this.stream = this.tracer.startSpan(SPAN_STREAM, { kind: SpanKind.INTERNAL }, this.context);
  }

  /** The exchange with the worker ended with its whole answer, with this status. */
  exchangeDone(status: number, usage?: ReportedUsage | undefined): void {
    const attempt = this.attempt;
    if (attempt !== undefined && this.operation !== undefined) {
      this.answer?.end();
      this.setAnswered(attempt, usage);
    }
    this.attemptEnded(status, undefined);
    this.streamEnded(status >= 500 ? `status ${status}` : undefined);
  }

  /** The exchange failed: before the first byte (the attempt failed) or after it (the stream was cut). */
  exchangeFailed(error: Error): void {
    const { code, status } = error as { code?: unknown; status?: unknown };
    const attempt = this.attempt;
    // A worker's 502/503 dropped to retry elsewhere fails the exchange carrying its status.
    if (attempt !== undefined && typeof status === "number") {
      this.attemptEnded(status, undefined);
      return;
    }
    const errorType = typeof code === "string" ? code : error.name;
    if (attempt !== undefined) {
      attempt.recordException(error);
      // A stream cut part-way: what its events said so far (the model, choices already finished).
      if (this.operation !== undefined) this.setAnswered(attempt, undefined);
      this.attemptEnded(undefined, errorType);
    }
    this.streamEnded(errorType);
  }

  /** The request ended (its lease's one exit): the outcome record's fields, then every open span ends. */
  ended(record: OutcomeRecord, pool: string | undefined): void {
    const code = record.errorCode;
    if (this.queue !== undefined) {
      // Still waiting when it ended: rejected from the queue (timeout, full, cancelled).
      this.queue.setAttribute(ATTR_ADMISSION, "rejected");
      if (code !== undefined) this.queue.setAttribute(ATTR_ERROR_CODE, code);
      this.queue.end();
      this.queue = undefined;
    }
    if (this.attempt !== undefined) this.attemptEnded(undefined, code ?? "unfinished");
    this.streamEnded(code);

    const span = this.request;
    span.setAttribute(ATTR_TENANT, record.tenantId);
    span.setAttribute(ATTR_ADMISSION, record.admission);
    span.setAttribute(ATTR_OUTCOME, record.outcome);
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, record.status);
    if (this.attempts > 0) span.setAttribute(ATTR_ATTEMPTS, this.attempts);
    if (this.queued) span.setAttribute(ATTR_QUEUE_WAIT_MS, record.queueWaitMs);
    if (record.model !== undefined) span.setAttribute(ATTR_MODEL, record.model);
    if (pool !== undefined) span.setAttribute(ATTR_POOL, pool);
    if (record.requestedClass !== undefined) span.setAttribute(ATTR_CLASS_REQUESTED, record.requestedClass);
    if (record.effectiveClass !== undefined) span.setAttribute(ATTR_CLASS_EFFECTIVE, record.effectiveClass);
    if (record.inputTokens !== undefined) span.setAttribute(ATTR_TOKENS_INPUT, record.inputTokens);
    if (record.outputTokens !== undefined) span.setAttribute(ATTR_TOKENS_OUTPUT, record.outputTokens);
    if (code !== undefined) {
      span.setAttribute(ATTR_ERROR_CODE, code);
      span.setAttribute(ATTR_ERROR_TYPE, code);
    }
    // HTTP server convention: a 5xx is the server's error; a 4xx is the client's, left unset.
    if (record.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: code });
    const reported = record.tokenSource === "reported";
    if (this.operation !== undefined) {
      const attributes: Record<string, string | number> = { [ATTR_GEN_AI_OPERATION_NAME]: this.operation };
      this.setProvider(attributes);
      const model = record.model ?? this.ask?.model;
      if (model !== undefined) attributes[ATTR_GEN_AI_REQUEST_MODEL] = model;
      const maxTokens = maxTokensOf(this.ask?.json);
      if (maxTokens !== undefined) attributes[ATTR_GEN_AI_REQUEST_MAX_TOKENS] = maxTokens;
      if (this.serverAddress !== undefined) attributes[ATTR_SERVER_ADDRESS] = this.serverAddress;
      if (this.serverPort !== undefined) attributes[ATTR_SERVER_PORT] = this.serverPort;
      span.setAttributes(attributes);
      this.setAnswered(
        span,
        reported && record.inputTokens !== undefined && record.outputTokens !== undefined
          ? { inputTokens: record.inputTokens, outputTokens: record.outputTokens }
          : undefined,
      );
    }
    span.end();
    this.options.metrics?.record(this.finishedCall(record, pool, reported));
  }

  /** `gen_ai.provider.name`, and the name up to conventions 1.36 gave it unless opted out. */
  private setProvider(attributes: Record<string, string | number>): void {
    attributes[ATTR_GEN_AI_PROVIDER_NAME] = this.provider;
    if (!this.options.latestGenAiOnly) attributes[ATTR_GEN_AI_SYSTEM] = this.provider;
  }

  /** What the answer said: the model that answered, the finish reasons, the reported usage. */
  private setAnswered(span: Span, usage: ReportedUsage | undefined): void {
    const answer = this.answer;
    if (answer?.responseModel !== undefined)
      span.setAttribute(ATTR_GEN_AI_RESPONSE_MODEL, answer.responseModel);
    if (answer !== undefined && answer.finishReasons.length > 0)
      span.setAttribute(ATTR_GEN_AI_RESPONSE_FINISH_REASONS, answer.finishReasons);
    if (usage !== undefined) {
      span.setAttribute(ATTR_GEN_AI_USAGE_INPUT_TOKENS, usage.inputTokens);
      span.setAttribute(ATTR_GEN_AI_USAGE_OUTPUT_TOKENS, usage.outputTokens);
    }
  }

  /** The finished request for the metrics: durations in seconds, the worker's reported tokens only. */
  private finishedCall(record: OutcomeRecord, pool: string | undefined, reported: boolean): FinishedCall {
    const succeeded = record.errorCode === undefined && record.status < 400;
    const stream = this.answer?.stream === true;
    const output = reported ? record.outputTokens : undefined;
    let ttft: number | undefined;
    let tpot: number | undefined;
    if (succeeded && stream && record.ttftMs !== undefined) {
      ttft = record.ttftMs / 1000;
      if (output !== undefined && output >= 2)
        tpot = (record.durationMs - record.ttftMs) / 1000 / (output - 1);
    }
    return {
      operation: this.operation,
      provider: this.provider,
      requestModel: record.model ?? this.ask?.model,
      responseModel: this.answer?.responseModel,
      serverAddress: this.serverAddress,
      serverPort: this.serverPort,
      errorType: succeeded ? undefined : (record.errorCode ?? String(record.status)),
      durationS: record.durationMs / 1000,
      timeToFirstTokenS: ttft,
      timePerOutputTokenS: tpot,
      inputTokens: reported ? record.inputTokens : undefined,
      outputTokens: output,
      queueWaitS: this.queued ? record.queueWaitMs / 1000 : undefined,
      effectiveClass: record.effectiveClass,
      pool,
      admission: record.admission,
    };
  }

  /** Ends the open upstream span with the worker's status, or with an error type. */
  private attemptEnded(status: number | undefined, errorType: string | undefined): void {
    const span = this.attempt;
    if (span === undefined) return;
    this.attempt = undefined;
    if (status !== undefined) {
      span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
      // HTTP client convention: any 4xx or 5xx from the worker is an error of this call.
      if (status >= 400) {
        span.setAttribute(ATTR_ERROR_TYPE, String(status));
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
    } else if (errorType !== undefined) {
      span.setAttribute(ATTR_ERROR_TYPE, errorType);
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    }
    span.end();
  }

  private streamEnded(errorType: string | undefined): void {
    const span = this.stream;
    if (span === undefined) return;
    this.stream = undefined;
    if (errorType !== undefined) {
      span.setAttribute(ATTR_ERROR_TYPE, errorType);
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    }
    span.end();
  }
}

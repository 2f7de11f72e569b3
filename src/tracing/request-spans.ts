/**
 * The spans of one request: `sluice.request` (SERVER) and its children `sluice.queue` (the
 * admission wait), one `sluice.upstream` (CLIENT) per dispatch to a worker, and `sluice.stream`
 * (the answer flowing to the client, from its first byte). Children get their parent explicitly,
 * never through a context manager: no async context is tracked for any of this.
 *
 * Only a gateway with tracing on creates one; the lease calls it through `lease.spans?.…`.
 */
import type { IncomingMessage } from "node:http";
import { type Context, type Span, SpanKind, SpanStatusCode, type Tracer, trace } from "@opentelemetry/api";
import type { OutcomeRecord } from "../contracts/outcome.js";
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
import { parentFromHeaders, type WorkerHeaders, withTraceParent } from "./propagation.js";

/** The part of a dispatch the upstream span reads and rewrites (undici's dispatch options). */
interface AttemptRequest {
  method: string;
  path: string;
  headers?: WorkerHeaders;
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

  constructor(
    private readonly tracer: Tracer,
    req: IncomingMessage,
    requestId: string,
  ) {
    const parent = parentFromHeaders(req.headers);
    this.request = tracer.startSpan(
      SPAN_REQUEST,
      {
        kind: SpanKind.SERVER,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: req.method ?? "GET",
          [ATTR_HTTP_ROUTE]: routeOf(req.url),
          [ATTR_REQUEST_ID]: requestId,
        },
      },
      parent,
    );
    this.context = trace.setSpan(parent, this.request);
  }

  /** The admit stage starts waiting for a slot. */
  queueStarted(): void {
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
  attemptStarted(workerUrl: string, request: AttemptRequest): void {
    if (this.attempt !== undefined) this.attemptEnded(undefined, "abandoned");
    this.attempts++;
    const attributes: Record<string, string | number> = {
      [ATTR_HTTP_REQUEST_METHOD]: request.method,
      [ATTR_WORKER]: workerUrl,
      [ATTR_ATTEMPT]: this.attempts,
    };
    try {
      const url = new URL(request.path, workerUrl);
      attributes[ATTR_URL_FULL] = url.href;
      attributes[ATTR_SERVER_ADDRESS] = url.hostname;
      attributes[ATTR_SERVER_PORT] = Number(url.port || (url.protocol === "https:" ? 443 : 80));
    } catch {
      // A worker URL that does not parse was refused at startup; the span goes without these.
    }
    const span = this.tracer.startSpan(SPAN_UPSTREAM, { kind: SpanKind.CLIENT, attributes }, this.context);
    this.attempt = span;
    this.request.setAttribute(ATTR_WORKER, workerUrl);
    request.headers = withTraceParent(request.headers, span);
  }

  /** The worker's first body byte (or the end of an empty body) goes to the client. */
  firstByte(): void {
    if (this.stream !== undefined) return;
    this.stream = this.tracer.startSpan(SPAN_STREAM, { kind: SpanKind.INTERNAL }, this.context);
  }

  /** The exchange with the worker ended with its whole answer, with this status. */
  exchangeDone(status: number): void {
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
    span.end();
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

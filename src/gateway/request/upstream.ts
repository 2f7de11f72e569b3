/**
 * One request's exchange with its worker, as an undici dispatch handler: no stream objects and no
 * async iteration between the worker's socket and the client's.
 *
 * The worker's status and headers are held until the first body byte (or the end of the body):
 * that is the moment the slot's first byte is marked, and if preemption won the race the exchange
 * is aborted and the client gets a clean 503 instead of a truncated 200. After that, chunks pass
 * through as they come, with backpressure: when the client's socket is full the worker's is paused.
 */
import type { ServerResponse } from "node:http";
import { type Dispatcher, errors as undiciErrors } from "undici";
import { GatewayError } from "../../contracts/gateway-error.js";
import { type ResponseHeaderFilter, responseHeaderFilter } from "../http/headers.js";
import { isRateLimitHeader } from "../http/rate-limit-headers.js";

export type UpstreamErrorKind = "connect" | "reset" | "timeout" | "bad_response" | "refused_arguments";

/** Maps an undici failure to the gateway's answer: 502 when the worker failed, 504 when it was slow. */
export function upstreamFailure(err: unknown): { kind: UpstreamErrorKind; error: GatewayError } {
  const code = (err as { code?: string }).code;
  if (code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") {
    return { kind: "timeout", error: new GatewayError("upstream_timeout") };
  }
  if (err instanceof undiciErrors.InvalidArgumentError || code === "UND_ERR_INVALID_ARG") {
    // The request checks make this unreachable; if undici still refuses, it is the request's
    // shape, not the worker: answer 400, never blame the worker.
    return { kind: "refused_arguments", error: new GatewayError("invalid_request") };
  }
  if (
    (typeof code === "string" && code.startsWith("HPE_")) ||
    code === "UND_ERR_RES_CONTENT_LENGTH_MISMATCH" ||
    err instanceof undiciErrors.HTTPParserError
  ) {
    return { kind: "bad_response", error: new GatewayError("upstream_bad_response") };
  }
  if (
    code === "UND_ERR_CONNECT_TIMEOUT" ||
    code === "ECONNREFUSED" ||
    code === "ENOTFOUND" ||
    code === "EHOSTUNREACH" ||
    code === "ENETUNREACH"
  ) {
    return { kind: "connect", error: new GatewayError("upstream_unavailable") };
  }
  return { kind: "reset", error: new GatewayError("upstream_reset") };
}

/** Sees (and for streams, may rewrite) every body chunk on its way to the client. */
export interface BodyTransform {
  /** True when the transform may drop bytes (then Content-Length cannot be kept). */
  readonly changesLength: boolean;
  /** What to send to the client for this chunk (may be empty). */
  transform(chunk: Buffer): Buffer;
  /** Held-back bytes at the end of the body. */
  flush(): Buffer | undefined;
}

/** What the exchange needs from the request that owns it. */
export interface ExchangeOwner {
  /** The first body byte (or the end) is here; false = preempted: do not answer. */
  markFirstByte(): boolean;
  /** Given the worker's content type, may return a transform for the body. */
  observe(contentType: string | undefined): BodyTransform | undefined;
  /** Headers the gateway adds to the worker's answer (flat name/value list), as they stand now. */
  headersForAnswer(): string[];
  /**
   * The worker's status line is a 502 or 503 and nothing has reached the client: true = drop this
   * answer (the exchange fails with an UpstreamStatusError) because another worker will be tried.
   */
  retriesStatus(status: number): boolean;
  /** The exchange ended: the worker's status, or the failure. */
  exchangeDone(status: number): void;
  exchangeFailed(error: Error): void;
}

const PREEMPTED = new Error("preempted before the first byte");

/** A 502 or 503 status line dropped before any byte of it was forwarded, to retry elsewhere. */
export class UpstreamStatusError extends Error {
  constructor(readonly status: number) {
    super(`the worker answered ${status}; retrying on another worker`);
  }
}

export class UpstreamExchange implements Dispatcher.DispatchHandler {
  private abortFn: ((err?: Error) => void) | undefined;
  private resumeFn: (() => void) | undefined;
  private status = 0;
  private rawHeaders: Buffer[] | undefined;
  private transform: BodyTransform | undefined;
  private started = false;
  /** The status and headers have gone to the client (with a body byte, or flushed alone). */
  private headFlushed = false;
  private done = false;
  /** Set when abort() came before undici handed over its abort function. */
  private pendingAbort: Error | undefined;
  private readonly onDrain = () => this.resumeFn?.();

  constructor(
    private readonly owner: ExchangeOwner,
    private readonly res: ServerResponse,
  ) {}

  /** Ends the exchange now (preemption, client gone); the owner hears it through exchangeFailed. */
  abort(reason: Error): void {
    if (this.done) return;
    if (this.abortFn !== undefined) this.abortFn(reason);
    else this.pendingAbort = reason;
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortFn = abort;
    if (this.pendingAbort !== undefined) abort(this.pendingAbort);
  }

  onHeaders(statusCode: number, headers: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx informational: wait for the real answer
    // Nothing is sent yet (the status is held until the first body byte): a retried 502/503
    // costs the client nothing. The answer is dropped with its connection.
    if ((statusCode === 502 || statusCode === 503) && this.owner.retriesStatus(statusCode)) {
      this.abortFn?.(new UpstreamStatusError(statusCode));
      return false;
    }
    this.status = statusCode;
    this.rawHeaders = headers;
    this.resumeFn = resume;
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (!this.started && !this.start()) return false;
    const out = this.transform !== undefined ? this.transform.transform(chunk) : chunk;
    if (out.length === 0) {
      // The transform holds the chunk (an SSE event not yet ended): the client gets the status and
      // headers now rather than with the first byte it lets through.
      if (!this.headFlushed) {
        this.headFlushed = true;
        this.res.flushHeaders();
      }
      return true;
    }
    this.headFlushed = true;
    if (this.res.write(out)) return true;
    // The client's socket is full: pause the worker until it drains.
    this.res.once("drain", this.onDrain);
    return false;
  }

  onComplete(): void {
    if (!this.started && !this.start()) return;
    const tail = this.transform?.flush();
    if (tail !== undefined && tail.length > 0) this.res.write(tail);
    this.res.end();
    this.finish();
    this.owner.exchangeDone(this.status);
  }

  onError(err: Error): void {
    if (this.done) return;
    this.finish();
    this.owner.exchangeFailed(err === PREEMPTED ? PREEMPTED : err);
  }

  /** True when the error is the exchange's own preemption abort. */
  static isPreemption(err: Error): boolean {
    return err === PREEMPTED;
  }

  private finish(): void {
    this.done = true;
    this.res.off("drain", this.onDrain);
  }

  /** First byte: mark it (or lose to preemption), then send the held status and headers. */
  private start(): boolean {
    if (!this.owner.markFirstByte()) {
      this.abortFn?.(PREEMPTED);
      return false;
    }
    this.started = true;
    const filter: ResponseHeaderFilter = responseHeaderFilter(this.rawHeaders ?? []);
    this.transform = this.owner.observe(filter.contentType);
    const headers = filter.headers;
    // A transform may change the length: let Node frame the body instead.
    if (this.transform?.changesLength) dropHeader(headers, "content-length");
    const ours = this.owner.headersForAnswer();
    // One value per name: the tenant's limits are the gateway's to say, not the worker's.
    dropRateLimitHeaders(headers, ours);
    for (const h of ours) headers.push(h);
    this.res.writeHead(this.status, headers);
    return true;
  }
}

/** Drops the worker's values of the rate-limit headers the gateway sends itself (`ours`). */
function dropRateLimitHeaders(flat: string[], ours: string[]): void {
  const names = new Set<string>();
  for (let i = 0; i < ours.length; i += 2) if (isRateLimitHeader(ours[i]!)) names.add(ours[i]!);
  if (names.size === 0) return;
  for (let i = flat.length - 2; i >= 0; i -= 2) if (names.has(flat[i]!)) flat.splice(i, 2);
}

function dropHeader(flat: string[], name: string): void {
  for (let i = 0; i < flat.length; i += 2) {
    if (flat[i]!.length === name.length && flat[i]!.toLowerCase() === name) {
      flat.splice(i, 2);
      i -= 2;
    }
  }
}

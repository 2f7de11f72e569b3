/**
 * Forwards one admitted request to a worker and streams the answer back.
 *
 * The upstream status and headers are held until the first body byte (or the end of the body)
 * arrives: that is the moment the permit's first byte is marked, and if preemption won the race
 * the client gets a clean 503 instead of a truncated 200. After that, chunks pass through as they
 * come, with backpressure: a slow client pauses the upstream read.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { errors as undiciErrors } from "undici";
import { GatewayError } from "./http-errors.js";
import type { Worker } from "./workers.js";

// Hop-by-hop headers (RFC 9110 7.6.1) and the ones the proxy sets itself.
const DROP_REQUEST = new Set([
  "host",
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "content-length",
  "expect",
]);
const DROP_RESPONSE = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "trailer",
  "upgrade",
  "proxy-authenticate",
]);

export function forwardHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    if (DROP_REQUEST.has(name)) continue;
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

function responseHeaders(
  headers: Record<string, string | string[] | undefined>,
  extra: Record<string, string>,
) {
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    if (DROP_RESPONSE.has(name)) continue;
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  for (const name in extra) out[name] = extra[name]!;
  return out;
}

export type UpstreamErrorKind = "connect" | "reset" | "timeout";

/** Maps an undici failure to the gateway's answer: 502 when the worker failed, 504 when it was slow. */
export function upstreamFailure(err: unknown): { kind: UpstreamErrorKind; error: GatewayError } {
  const code = (err as { code?: string }).code;
  if (
    err instanceof undiciErrors.HeadersTimeoutError ||
    err instanceof undiciErrors.BodyTimeoutError ||
    code === "UND_ERR_HEADERS_TIMEOUT" ||
    code === "UND_ERR_BODY_TIMEOUT"
  ) {
    return {
      kind: "timeout",
      error: new GatewayError(504, "upstream_timeout", "the worker did not answer in time"),
    };
  }
  if (
    err instanceof undiciErrors.ConnectTimeoutError ||
    code === "ECONNREFUSED" ||
    code === "UND_ERR_CONNECT_TIMEOUT" ||
    code === "ENOTFOUND"
  ) {
    return {
      kind: "connect",
      error: new GatewayError(502, "upstream_unavailable", "could not connect to the worker"),
    };
  }
  return {
    kind: "reset",
    error: new GatewayError(502, "upstream_reset", "the worker closed the connection"),
  };
}

export interface ForwardOptions {
  req: IncomingMessage;
  res: ServerResponse;
  body: Buffer;
  worker: Worker;
  signal: AbortSignal;
  timeoutMs: number;
  /** Called when the first body byte (or the end) arrived; false = preempted, answer 503 instead. */
  markFirstByte: () => boolean;
  /** Extra response headers (admission info). */
  extraHeaders: Record<string, string>;
  /** Given the upstream content type, may return a transform every body chunk passes through. */
  observe?: ((contentType: string | undefined) => BodyTransform | undefined) | undefined;
}

export interface BodyTransform {
  /** True when the transform may drop bytes (then Content-Length cannot be kept). */
  readonly changesLength: boolean;
  /** What to send to the client for this chunk (may be empty). */
  transform(chunk: Buffer): Buffer;
  /** Held-back bytes at the end of the body. */
  flush(): Buffer | undefined;
}

export type ForwardResult = { outcome: "done"; status: number } | { outcome: "preempted" };

/** Throws GatewayError-carrying failures before the first byte; after it, errors cut the stream. */
export async function forward(options: ForwardOptions): Promise<ForwardResult> {
  const { req, res, worker, signal } = options;
  const upstream = await worker.pool.request({
    method: req.method as "GET",
    path: req.url ?? "/",
    headers: forwardHeaders(req.headers),
    body: options.body.length > 0 ? options.body : null,
    signal,
    headersTimeout: options.timeoutMs,
    bodyTimeout: options.timeoutMs,
  });
  const body = upstream.body;
  const chunks = body[Symbol.asyncIterator]();
  let first: IteratorResult<Buffer>;
  try {
    first = await chunks.next();
  } catch (err) {
    body.destroy();
    throw err;
  }
  if (!options.markFirstByte()) {
    body.destroy();
    return { outcome: "preempted" };
  }
  const contentType = upstream.headers["content-type"];
  const transform = options.observe?.(Array.isArray(contentType) ? contentType[0] : contentType);
  const headers = responseHeaders(upstream.headers, options.extraHeaders);
  // A transform may change the length: let Node frame the body instead.
  if (transform?.changesLength) delete headers["content-length"];
  res.writeHead(upstream.statusCode, headers);
  let next = first;
  while (!next.done) {
    const out = transform ? transform.transform(next.value) : next.value;
    if (out.length > 0 && !res.write(out)) await drained(res);
    next = await chunks.next();
  }
  const tail = transform?.flush();
  if (tail !== undefined && tail.length > 0) res.write(tail);
  res.end();
  return { outcome: "done", status: upstream.statusCode };
}

async function drained(res: ServerResponse): Promise<void> {
  if (!res.destroyed) {
    await new Promise<void>((resolve) => {
      const done = () => {
        res.off("drain", done);
        res.off("close", done);
        resolve();
      };
      res.on("drain", done);
      res.on("close", done);
    });
  }
  if (res.destroyed) throw new GatewayError(499, "client_closed_request", "the client went away");
}

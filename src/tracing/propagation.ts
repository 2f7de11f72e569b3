/**
 * W3C trace context across the gateway: a client's `traceparent`/`tracestate` in, the upstream
 * attempt's own `traceparent` out to the worker. The client's values are always replaced on the way
 * out, never passed as they came: the worker's parent is the gateway's attempt span, not the client.
 */
import type { IncomingHttpHeaders } from "node:http";
import {
  type Context,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  type Span,
  type TextMapGetter,
  trace,
} from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import type { Dispatcher } from "undici";

const propagator = new W3CTraceContextPropagator();

const TRACEPARENT = "traceparent";
const TRACESTATE = "tracestate";

const incomingGetter: TextMapGetter<IncomingHttpHeaders> = {
  keys: (headers) => Object.keys(headers),
  get: (headers, key) => headers[key],
};

/** The client's trace context as the parent of the request span (the root context without one). */
export function parentFromHeaders(headers: IncomingHttpHeaders): Context {
  if (headers[TRACEPARENT] === undefined) return ROOT_CONTEXT;
  return propagator.extract(ROOT_CONTEXT, headers, incomingGetter);
}

/** What the worker is sent as headers (undici's forms: a record, a flat list, name/value pairs, none). */
export type WorkerHeaders = Dispatcher.DispatchOptions["headers"];

/**
 * The worker's headers with `span` (the upstream attempt) as their trace parent: the client's
 * `traceparent` and `tracestate` are dropped first, so a retried attempt overwrites the last one's.
 * Returns the headers to send (the same record when given one).
 */
export function withTraceParent(headers: WorkerHeaders, span: Span): WorkerHeaders {
  const carrier: Record<string, string> = {};
  propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, defaultTextMapSetter);
  if (Array.isArray(headers)) {
    const out: string[] = [];
    for (let i = 0; i + 1 < headers.length; i += 2) {
      const name = headers[i]!.toLowerCase();
      if (name !== TRACEPARENT && name !== TRACESTATE) out.push(headers[i]!, headers[i + 1]!);
    }
    for (const name in carrier) out.push(name, carrier[name]!);
    return out;
  }
  let record: Record<string, string | string[] | undefined>;
  if (headers === null || headers === undefined) record = {};
  else if (Symbol.iterator in headers) {
    record = {};
    for (const [name, value] of headers as Iterable<[string, string | string[] | undefined]>)
      record[name.toLowerCase()] = value;
  } else record = headers as Record<string, string | string[] | undefined>;
  delete record[TRACEPARENT];
  delete record[TRACESTATE];
  Object.assign(record, carrier);
  return record;
}

/**
 * Which headers cross the proxy, in each direction.
 *
 * Hop-by-hop headers (RFC 9110 7.6.1) describe one connection and never pass: `Connection`, every
 * header it names, `Keep-Alive`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, and `Proxy-*`.
 * Credentials never pass either: sluice authenticates the client, so the client's `Authorization`
 * (its sluice API key, or whatever else it sent) is dropped and replaced by the worker's own key
 * when one is configured. The proxy sets `Host` and `Content-Length` itself. `x-smg-priority` is
 * the gateway's to say: the worker (SGLang reads it) gets the class the request was admitted under,
 * after the tenant's `max_class` clamp, never the one the client asked for.
 */
import type { IncomingHttpHeaders } from "node:http";

/** The header a client asks for its priority class with (SGLang's name). */
const PRIORITY_HEADER = "x-smg-priority";

/** A header's first value: Node gives a repeated header (set-cookie and unknown names) as an array. */
export function firstHeaderValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** The priority the client asked for (`x-smg-priority`), raw: admission parses it leniently. */
export function requestedPriority(headers: IncomingHttpHeaders): string | undefined {
  return firstHeaderValue(headers[PRIORITY_HEADER]);
}

const DROP_REQUEST = new Set([
  "host",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "content-length",
  "expect",
  "authorization",
  "http2-settings",
  PRIORITY_HEADER,
]);
const DROP_RESPONSE = new Set(["connection", "keep-alive", "te", "transfer-encoding", "trailer", "upgrade"]);

/** Header names listed in a `Connection` value (lowercase), or undefined when there are none to drop. */
function namedInConnection(value: string | string[] | undefined): Set<string> | undefined {
  if (value === undefined) return undefined;
  // The common values name no other header.
  if (value === "keep-alive" || value === "close" || value === "Keep-Alive" || value === "Close")
    return undefined;
  const text = Array.isArray(value) ? value.join(",") : value;
  let names: Set<string> | undefined;
  for (const part of text.split(",")) {
    const name = part.trim().toLowerCase();
    // "keep-alive" and "close" are the common values and are dropped anyway.
    if (name === "" || name === "close" || name === "keep-alive") continue;
    if (names === undefined) names = new Set();
    names.add(name);
  }
  return names;
}

/**
 * The client's headers as the worker should see them. `workerAuthorization` is the worker's own
 * `Authorization` value (e.g. `Bearer <worker key>`), added when configured; `priority` is the
 * request's effective class, sent as `x-smg-priority` in place of whatever the client sent.
 */
export function requestHeadersForWorker(
  headers: IncomingHttpHeaders,
  workerAuthorization: string | undefined,
  priority?: string | undefined,
): Record<string, string | string[]> {
  const named = namedInConnection(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    if (DROP_REQUEST.has(name) || name.startsWith("proxy-")) continue;
    if (named?.has(name)) continue;
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  if (workerAuthorization !== undefined) out.authorization = workerAuthorization;
  if (priority !== undefined) out[PRIORITY_HEADER] = priority;
  return out;
}

export interface ResponseHeaderFilter {
  /** The headers to pass to the client, as a flat name/value list (what `writeHead` takes). */
  headers: string[];
  contentType: string | undefined;
}

/** The worker's raw response headers (undici's name/value buffers), filtered for the client. */
export function responseHeaderFilter(raw: Buffer[]): ResponseHeaderFilter {
  const headers: string[] = [];
  let contentType: string | undefined;
  let named: Set<string> | undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toString("latin1").toLowerCase();
    const value = raw[i + 1]!.toString("latin1");
    if (DROP_RESPONSE.has(name) || name.startsWith("proxy-")) {
      if (name === "connection") named = mergeNamed(named, namedInConnection(value));
      continue;
    }
    if (name === "content-type") contentType = value;
    headers.push(name, value);
  }
  if (named !== undefined) {
    for (let i = headers.length - 2; i >= 0; i -= 2) if (named.has(headers[i]!)) headers.splice(i, 2);
  }
  return { headers, contentType };
}

function mergeNamed(a: Set<string> | undefined, b: Set<string> | undefined): Set<string> | undefined {
  if (a === undefined) return b;
  if (b !== undefined) for (const n of b) a.add(n);
  return a;
}

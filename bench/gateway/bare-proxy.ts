/**
 * The reference Node proxy: the parts sluice is built from (a node:http server, an undici Pool with
 * sluice's pool options) and nothing else. It reads the body, forwards it, and sends the worker's answer back,
 * dropping the headers sluice drops. It has no admission, no tenants, no metrics and no cost estimate.
 * Run it as its own process:
 *
 *   node --import tsx bench/gateway/bare-proxy.ts <upstream-url> <port> [dispatch|stream|pipe]
 *
 * The three variants do the same job, from the leanest to the most naive:
 * - `dispatch` (the default, the bench's "bare proxy"): `pool.dispatch` with a minimal handler. It
 *   writes the worker's raw status and headers, then every body chunk straight into the ServerResponse, with
 *   backpressure. No promise, no stream object between the two sockets (sluice's own upstream.ts does
 *   the same).
 * - `stream`: `pool.stream()`, whose factory returns the ServerResponse as the body's destination.
 * - `pipe`: `pool.request()`, then `body.pipe(res)`: the bench's reference before it became `dispatch`
 *   (naive: it does not abort the upstream request when the client leaves).
 *
 * Header hygiene equals sluice's (src/gateway/headers.ts): the request loses the hop-by-hop headers
 * (RFC 9110 7.6.1, with those named in `Connection`), `Proxy-*`, `Host`, `Content-Length`, `Expect` and
 * `Authorization`. The response loses the hop-by-hop headers and `Proxy-*`. With `dispatch` and `stream`,
 * a client that leaves aborts the upstream request.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import { type Dispatcher, Pool } from "undici";

const [upstream, portArg, modeArg = "dispatch"] = process.argv.slice(2);
if (upstream === undefined || portArg === undefined || !["dispatch", "stream", "pipe"].includes(modeArg))
  throw new Error("usage: bare-proxy.ts <upstream-url> <port> [dispatch|stream|pipe]");
const mode = modeArg as "dispatch" | "stream" | "pipe";

const pool = new Pool(upstream, { connections: 256, pipelining: 1, keepAliveTimeout: 30_000 });

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
]);
const DROP_RESPONSE = new Set(["connection", "keep-alive", "te", "transfer-encoding", "trailer", "upgrade"]);

/** Header names a `Connection` value lists (beyond its common values), or undefined. */
function named(value: string | string[] | undefined): Set<string> | undefined {
  if (value === undefined || value === "keep-alive" || value === "close") return undefined;
  let names: Set<string> | undefined;
  for (const part of (Array.isArray(value) ? value.join(",") : value).split(",")) {
    const name = part.trim().toLowerCase();
    if (name === "" || name === "close" || name === "keep-alive") continue;
    names ??= new Set();
    names.add(name);
  }
  return names;
}

function requestHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const extra = named(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    if (DROP_REQUEST.has(name) || name.startsWith("proxy-") || extra?.has(name)) continue;
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

/** undici's raw response headers (name/value buffers) as the flat list `writeHead` takes. */
function responseHeadersRaw(raw: Buffer[]): string[] {
  const out: string[] = [];
  let extra: Set<string> | undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toString("latin1").toLowerCase();
    const value = raw[i + 1]!.toString("latin1");
    if (DROP_RESPONSE.has(name) || name.startsWith("proxy-")) {
      if (name === "connection") extra = named(value);
      continue;
    }
    out.push(name, value);
  }
  if (extra !== undefined) {
    for (let i = out.length - 2; i >= 0; i -= 2) if (extra.has(out[i]!)) out.splice(i, 2);
  }
  return out;
}

/** undici's parsed response headers (pool.request / pool.stream), filtered the same way. */
function responseHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const extra = named(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    if (DROP_RESPONSE.has(name) || name.startsWith("proxy-") || extra?.has(name)) continue;
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

function badGateway(res: ServerResponse): void {
  if (res.headersSent) res.destroy();
  else res.writeHead(502, { "content-length": "0" }).end();
}

const CLIENT_GONE = new Error("client gone");

/** `dispatch`: the worker's bytes go straight into the ServerResponse. */
class Exchange implements Dispatcher.DispatchHandler {
  private abortFn: ((err?: Error) => void) | undefined;
  private resumeFn: (() => void) | undefined;
  private done = false;
  private readonly onDrain = () => this.resumeFn?.();
  private readonly onClose = () => {
    if (!this.done) this.abortFn?.(CLIENT_GONE);
  };

  constructor(private readonly res: ServerResponse) {
    res.once("close", this.onClose);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortFn = abort;
  }

  onHeaders(statusCode: number, headers: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true;
    this.resumeFn = resume;
    this.res.writeHead(statusCode, responseHeadersRaw(headers));
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.res.write(chunk)) return true;
    this.res.once("drain", this.onDrain);
    return false;
  }

  onComplete(): void {
    this.done = true;
    this.res.end();
  }

  onError(): void {
    this.done = true;
    badGateway(this.res);
  }
}

type Forward = (req: IncomingMessage, res: ServerResponse, body: Buffer | null) => void;

const forwarders: Record<typeof mode, Forward> = {
  dispatch(req, res, body) {
    pool.dispatch(
      { method: req.method as "POST", path: req.url ?? "/", headers: requestHeaders(req.headers), body },
      new Exchange(res),
    );
  },
  stream(req, res, body) {
    // undici watches the returned writable: a client that leaves aborts the upstream request.
    pool.stream(
      { method: req.method as "POST", path: req.url ?? "/", headers: requestHeaders(req.headers), body },
      ({ statusCode, headers }) => res.writeHead(statusCode, responseHeaders(headers as IncomingHttpHeaders)),
      (err) => {
        if (err !== null) badGateway(res);
      },
    );
  },
  pipe(req, res, body) {
    pool
      .request({
        method: req.method as "POST",
        path: req.url ?? "/",
        headers: requestHeaders(req.headers),
        body,
      })
      .then(
        (up) => {
          res.writeHead(up.statusCode, responseHeaders(up.headers as IncomingHttpHeaders));
          // .pipe, not stream.pipeline: on Node 20 pipeline builds an AbortError (with a stack) per call.
          up.body.on("error", () => res.destroy()).pipe(res);
        },
        () => badGateway(res),
      );
  },
};

const forward = forwarders[mode];
const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
  if (req.url === "/health") {
    res.writeHead(200, { "content-length": "2" }).end("OK");
    return;
  }
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    forward(req, res, chunks.length === 0 ? null : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
  });
});
server.listen(Number(portArg), "127.0.0.1");
process.once("SIGTERM", () => server.close(() => process.exit(0)).closeAllConnections());
process.once("SIGINT", () => server.close(() => process.exit(0)).closeAllConnections());

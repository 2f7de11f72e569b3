/**
 * The client side's edges: timeouts, the connection cap, Node's own parse errors, CONNECT, and
 * "answer, then close" for requests rejected before their body was read.
 *
 * Every answer, including the ones Node's HTTP parser makes up (400 for a malformed request, 431
 * for headers too large, 408 for headers that took too long), carries the gateway's JSON error body
 * and `X-SMG-Error-Code`, and a connection gets at most one answer per request.
 *
 * Requests reach the server's handler through `guardServer`, which checks first what Node's parser
 * lets through: the HTTP version (only 1.0 and 1.1; RFC 9112 2.3), `Transfer-Encoding` on HTTP/1.0
 * (faulty framing, RFC 9112 6.1), and whether the connection is still taking requests at all. After
 * an answer that closes the connection (an early answer, a `Connection: close` request, HTTP/1.0
 * without keep-alive), whatever the client pipelined behind it is dropped unread by the handler:
 * never admitted, forwarded, answered or counted (RFC 9112 9.6).
 */
import type { IncomingMessage, RequestListener, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "pino";
import type { ClientLimits } from "../../config/gateway-settings.js";
import { GatewayError } from "../../contracts/gateway-error.js";
import { requestIdFor } from "../../contracts/request-id.js";
import { rawErrorResponse, sendError } from "./http-errors.js";

// Defined beside the option table (src/config), which produces the command's limits.
export type { ClientLimits } from "../../config/gateway-settings.js";

export const DEFAULT_CLIENT_LIMITS: ClientLimits = {
  headersTimeoutSecs: 10,
  bodyIdleTimeoutSecs: 30,
  bodyTimeoutSecs: 60,
  keepAliveTimeoutSecs: 65,
  maxConnections: 8192,
};

/**
 * Whole-request receipt bound (headers and body), Node's own: a backstop behind the headers timeout
 * and the body deadline, which answer first.
 */
const REQUEST_RECEIPT_TIMEOUT_MS = 300_000;
/** After an early answer, at most this much of the unread body is drained before closing. */
const LINGER_BYTES = 64 * 1024;
const LINGER_MS = 2000;

/** Node's createServer options for these limits. */
export function serverTimeouts(limits: ClientLimits) {
  const headersTimeout = Math.max(1, Math.round(limits.headersTimeoutSecs * 1000));
  const bodyTimeout = Math.max(1, Math.round(limits.bodyTimeoutSecs * 1000));
  return {
    headersTimeout,
    requestTimeout: Math.max(REQUEST_RECEIPT_TIMEOUT_MS, headersTimeout + bodyTimeout + 1000),
    keepAliveTimeout: Math.max(1, Math.round(limits.keepAliveTimeoutSecs * 1000)),
    // How often Node checks the two timeouts above: often enough to hold them within ~25%.
    connectionsCheckingInterval: Math.max(250, Math.min(1000, Math.floor(headersTimeout / 4))),
    // The gateway checks Host itself, so the answer has its JSON body.
    requireHostHeader: false,
  };
}

/** Event on an IncomingMessage whose body failed to parse (see body.ts). */
export const FRAMING_ERROR = "sluice:framing-error";

/**
 * Sockets that already got an answer to a request whose body was never read (or a refusal of the
 * connection): they close after it, and nothing more on them is served.
 */
const answeredEarly = new WeakSet<Socket>();

/**
 * What the guard knows of one client connection: when it opened, whether it has shown a valid
 * credential (the admin listener), whether its last request said it was the last, and the lines
 * of its bytes that may be request lines (so a request's own request line can be looked at:
 * Node's parser does not say what followed the target).
 */
interface Connection {
  readonly socket: Socket;
  readonly openedAt: number;
  /** A request on it carried the valid admin token (markProven). */
  proven: boolean;
  /** A request on it was answered with `Connection: close`: nothing after it is served. */
  closing: boolean;
  /** Lines read that may end with a request line, in order, not yet matched to a request. */
  lines: string[];
  /** Their characters together (at most MAX_LINE: the oldest go first). */
  lineChars: number;
  /** The last bytes (at most CARRY) of a line not ended at the end of the last read (a copy). */
  carry: Buffer | undefined;
  /** `carry` as it was before the read being parsed (for a parse error in that read). */
  carriedIn: Buffer | undefined;
}

/** Longest request line looked at (Node refuses a request line and headers above 16 KiB). */
const MAX_LINE = 16 * 1024;
/**
 * Bytes of an unfinished line kept across reads: a request line split over two reads is put back
 * together when its part in the earlier read is at most this long.
 */
const CARRY = 2048;

const connections = new WeakMap<Socket, Connection>();

/**
 * Marks the connection of a request that carried a valid credential: the admin listener keeps it
 * when it must make room for a new connection (guardServer's `evictUnproven`).
 */
export function markProven(socket: Socket): void {
  const conn = connections.get(socket);
  if (conn !== undefined) conn.proven = true;
}

/**
 * Marks an answer that goes out before the request body was read: the connection closes after it
 * (the rest of the body is not worth reading, and the framing may be broken), reading at most
 * LINGER_BYTES for LINGER_MS so the client sees the answer instead of a reset. From here on no
 * request of this connection reaches the handler.
 */
export function closeAfterAnswer(req: IncomingMessage, res: ServerResponse): void {
  const socket = req.socket;
  if (answeredEarly.has(socket)) return;
  answeredEarly.add(socket);
  if (!res.headersSent) res.setHeader("connection", "close");
  res.shouldKeepAlive = false;
  // Stop Node from draining the declared body after the answer (it would read all of it).
  req.pause();
  // Node closes a `Connection: close` socket with destroySoon() once the answer is written: that
  // closes the descriptor with the client's unread body still arriving, and the kernel answers it
  // with a reset that can reach the client before it has read the answer (RFC 9112 9.6). Linger
  // instead: half-close after the answer, read and drop what is still coming, then close.
  socket.destroySoon = () => linger(socket);
}

/** Sockets already lingering: linger() may be reached from several paths for one connection. */
const lingering = new WeakSet<Socket>();

function linger(socket: Socket): void {
  if (lingering.has(socket)) return;
  lingering.add(socket);
  socket.on("error", ignore);
  if (socket.destroyed) return;
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
  // The client has sent all it will: close once the answer is flushed, with nothing left to reset.
  socket.once("end", () => {
    if (socket.writableFinished) socket.destroy();
    else socket.once("finish", () => socket.destroy());
  });
  // A 'data' listener also takes the socket back from Node's HTTP parser, so the bytes are counted.
  // Node's parser still reads them: a request it finds is dropped by the guard (answeredEarly).
  const readBefore = socket.bytesRead;
  socket.on("data", () => {
    if (socket.bytesRead - readBefore > LINGER_BYTES) socket.destroy();
  });
  socket.resume();
  socket.end();
}

function writeRaw(socket: Socket, error: GatewayError): void {
  // A client may reset the connection while the answer is written: that is not the gateway's error.
  socket.on("error", ignore);
  if (!socket.writable || answeredEarly.has(socket)) {
    socket.destroy();
    return;
  }
  answeredEarly.add(socket);
  socket.write(rawErrorResponse(error, requestIdFor(undefined)));
  linger(socket);
}

function ignore(): void {}

// --- HTTP versions -------------------------------------------------------------------------------

/**
 * The end of a well-formed request line (RFC 9112 3): method SP request-target SP HTTP-version. (A
 * request line may follow a body's last bytes, so its start is not anchored.)
 */
const REQUEST_LINE = /[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ ]+ HTTP\/(\d)\.(\d)\r?$/;

/**
 * The request line a parse error happened in, from the bytes Node's parser was reading (and, when
 * the line began in an earlier read, the start of it that the connection kept).
 */
function offendingLine(err: NodeJS.ErrnoException, carriedIn: Buffer | undefined): string | undefined {
  const { rawPacket, bytesParsed } = err as { rawPacket?: unknown; bytesParsed?: unknown };
  if (!Buffer.isBuffer(rawPacket) || typeof bytesParsed !== "number") return undefined;
  const at = Math.max(0, Math.min(bytesParsed, rawPacket.length));
  const start = at === 0 ? 0 : rawPacket.lastIndexOf(0x0a, at - 1) + 1;
  let end = rawPacket.indexOf(0x0a, at);
  if (end === -1) end = rawPacket.length;
  const line = rawPacket.toString("latin1", start, Math.min(end, start + MAX_LINE));
  return start === 0 && carriedIn !== undefined ? carriedIn.toString("latin1") + line : line;
}

/**
 * Node's parser refused the version: 505 when the line is well formed and names another version
 * (`HTTP/1.2`, `HTTP/3.0`), else 400, the client's malformed line (`HTTP/1.1x`, `HTTP/11`).
 */
function versionError(err: NodeJS.ErrnoException, carriedIn: Buffer | undefined): GatewayError {
  const m = REQUEST_LINE.exec(offendingLine(err, carriedIn) ?? "");
  if (m !== null && !(m[1] === "1" && (m[2] === "0" || m[2] === "1")))
    return unsupportedVersion(`${m[1]}.${m[2]}`);
  const reason = "reason" in err && typeof err.reason === "string" ? `: ${err.reason}` : "";
  return new GatewayError(
    "malformed_request",
    `the request line's HTTP version is malformed (${err.code ?? "parse error"}${reason})`,
  );
}

function unsupportedVersion(version: string): GatewayError {
  return new GatewayError(
    "http_version_not_supported",
    `HTTP/${version} is not supported; send HTTP/1.1 (or HTTP/1.0)`,
  );
}

/**
 * Whether the line `bytes[start, end)` (without its LF) may end with a request line: a request line
 * starts at a line start or right after a body, so only its end is known. It ends with a protocol
 * token (` HTTP/1.1`, ` RTSP/1.0`, ...) or, without a version, with ` <target>` after an upper-case
 * method (Node's parser knows no other).
 */
function mayEndWithRequestLine(bytes: Buffer, start: number, end: number): boolean {
  let e = end;
  if (e > start && bytes[e - 1] === 0x0d) e--;
  if (e - start < 3) return false;
  const from = Math.max(start, e - MAX_LINE);
  const at = lastSpace(bytes, from, e);
  if (at <= from || at === e - 1) return false;
  // ` TOKEN/...`: a protocol and version, well formed or not (the slash within 7 bytes).
  let slash = -1;
  for (let k = at + 1; k < Math.min(e, at + 8); k++) {
    if (bytes[k] === 0x2f) {
      slash = k;
      break;
    }
  }
  if (slash > at + 1) {
    let letters = true;
    for (let k = at + 1; k < slash; k++) {
      const b = bytes[k]!;
      if (b < 0x41 || b > 0x5a) letters = false;
    }
    if (letters) return true;
  }
  // No version: `METHOD <target>`, the method's last character an upper-case letter.
  const before = bytes[at - 1]!;
  return before >= 0x41 && before <= 0x5a;
}

/**
 * The last space in `bytes[from, end)`, or -1. Most lines read here are header lines of a few dozen
 * bytes: a loop over them costs less than a view and a native search; a long line (a body's) gets
 * the native search, bounded by its view.
 */
function lastSpace(bytes: Buffer, from: number, end: number): number {
  if (end - from > SHORT_LINE) {
    const i = bytes.subarray(from, end).lastIndexOf(0x20);
    return i === -1 ? -1 : from + i;
  }
  for (let i = end - 1; i >= from; i--) if (bytes[i] === 0x20) return i;
  return -1;
}

/** Lines up to this long are searched by a loop in JavaScript (see lastSpace). */
const SHORT_LINE = 128;

/**
 * Reads a chunk's lines before Node's parser does, keeping those that may end with a request line
 * (a line split over reads is put back together from the last CARRY bytes before the read).
 * Bounded: one scan for LF over the bytes, a copy of at most CARRY bytes per read, at most
 * MAX_LINE characters of lines kept per connection.
 */
function readLines(conn: Connection, chunk: Buffer): void {
  const carry = conn.carry;
  conn.carriedIn = carry;
  conn.carry = undefined;
  let start = 0;
  for (;;) {
    const lf = chunk.indexOf(0x0a, start);
    if (lf === -1) break;
    if (start === 0 && carry !== undefined) {
      const line = Buffer.concat([carry, chunk.subarray(0, lf)]);
      if (mayEndWithRequestLine(line, 0, line.length)) keepLine(conn, line, 0, line.length);
    } else if (mayEndWithRequestLine(chunk, start, lf)) {
      keepLine(conn, chunk, start, lf);
    }
    start = lf + 1;
  }
  if (start === chunk.length) return;
  // The line goes on in the next read: keep its last bytes.
  const rest = chunk.length - start;
  if (start === 0 && carry !== undefined && rest < CARRY) {
    const keep = Math.min(carry.length, CARRY - rest);
    conn.carry = Buffer.concat([carry.subarray(carry.length - keep), chunk]);
  } else {
    conn.carry = Buffer.from(chunk.subarray(Math.max(start, chunk.length - CARRY)));
  }
}

/**
 * Keeps a line that may end with a request line: at most MAX_LINE characters per connection in
 * all (the oldest lines go first), so what a body holds costs no more than one long request line.
 */
function keepLine(conn: Connection, bytes: Buffer, start: number, end: number): void {
  const line = bytes.toString("latin1", Math.max(start, end - MAX_LINE), end);
  conn.lines.push(line);
  conn.lineChars += line.length;
  while (conn.lineChars > MAX_LINE) conn.lineChars -= conn.lines.shift()!.length;
}

/**
 * What follows the request target on this request's own line: `http` (` HTTP/`), `none` (the line
 * ends: no version at all), `other` (another protocol, e.g. ` RTSP/1.0`, which Node's parser also
 * accepts), or undefined when the line was not seen (the parser's version stands then). The line
 * and every line before it are used up.
 */
function protocolOf(conn: Connection, req: IncomingMessage): "http" | "none" | "other" | undefined {
  const head = `${req.method} ${req.url}`;
  const lines = conn.lines;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    for (let at = line.lastIndexOf(head); at !== -1; at = at === 0 ? -1 : line.lastIndexOf(head, at - 1)) {
      let rest = line.slice(at + head.length);
      if (rest.endsWith("\r")) rest = rest.slice(0, -1);
      if (rest !== "" && (rest[0] !== " " || rest.indexOf(" ", 1) !== -1)) continue;
      for (const used of lines.splice(0, i + 1)) conn.lineChars -= used.length;
      if (rest === "") return "none";
      return rest.startsWith(" HTTP/") ? "http" : "other";
    }
  }
  return undefined;
}

/**
 * The answer for a request Node's parser let through that the gateway does not serve: another
 * HTTP version (505), a line without a version or naming another protocol (400), or
 * `Transfer-Encoding` on HTTP/1.0 (400: RFC 9112 6.1 calls it faulty framing). Undefined: serve it.
 */
function refusal(req: IncomingMessage, conn: Connection | undefined): GatewayError | undefined {
  const protocol = conn === undefined ? undefined : protocolOf(conn, req);
  const major = req.httpVersionMajor;
  const minor = req.httpVersionMinor;
  if (major !== 1 || (minor !== 0 && minor !== 1)) {
    // Node's parser reads a line without a version as HTTP/0.9.
    if (protocol === "none") {
      return new GatewayError(
        "malformed_request",
        "the request line has no HTTP version (HTTP/0.9 simple requests are not served); send HTTP/1.1",
      );
    }
    if (protocol === "other") {
      return new GatewayError("malformed_request", "the request line's protocol is not HTTP; send HTTP/1.1");
    }
    return unsupportedVersion(`${major}.${minor}`);
  }
  if (protocol === "other") {
    return new GatewayError("malformed_request", "the request line's protocol is not HTTP; send HTTP/1.1");
  }
  if (minor === 0 && req.headers["transfer-encoding"] !== undefined) {
    return new GatewayError(
      "unsupported_transfer_encoding",
      "Transfer-Encoding on an HTTP/1.0 request is faulty framing (RFC 9112 6.1); send a Content-Length",
    );
  }
  return undefined;
}

/**
 * Maps Node's parser errors to the gateway's answers; `carriedIn` is the start of the line the read
 * in error began with, when an earlier read held it.
 */
export function clientError(err: NodeJS.ErrnoException, carriedIn?: Buffer | undefined): GatewayError {
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return new GatewayError("request_headers_too_large");
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new GatewayError("request_header_timeout");
    case "HPE_INVALID_VERSION":
      return versionError(err, carriedIn);
    default: {
      const reason = "reason" in err && typeof err.reason === "string" ? `: ${err.reason}` : "";
      return new GatewayError(
        "malformed_request",
        `the request could not be parsed (${err.code ?? "parse error"}${reason})`,
      );
    }
  }
}

interface GuardCounters {
  /** Called with the answer's status for every answer written here (metrics). */
  answered(status: number): void;
}

interface GuardOptions {
  /**
   * At the connection cap, close the oldest connection that has not proven a credential
   * (markProven) to make room for the new one, instead of refusing the new one; refuse only when
   * every open connection has proven one (the admin listener: idle sockets cannot lock it).
   */
  evictUnproven?: boolean | undefined;
}

/**
 * Installs the client-side guards on a server and serves its requests with `handler`, which gets
 * only the requests the gateway serves (see the file's comment).
 */
export function guardServer(
  server: Server,
  limits: ClientLimits,
  logger: Logger | undefined,
  counters: GuardCounters,
  handler: RequestListener,
  options: GuardOptions = {},
): void {
  // No header count limit: Node would silently drop headers past it (Content-Length included, so
  // a body would be read as the next request). The 16 KiB header size limit bounds the count.
  server.maxHeadersCount = 0;
  const open = new Set<Connection>();
  server.on("connection", (socket: Socket) => {
    const conn: Connection = {
      socket,
      openedAt: performance.now(),
      proven: false,
      closing: false,
      lines: [],
      lineChars: 0,
      carry: undefined,
      carriedIn: undefined,
    };
    open.add(conn);
    socket.once("close", () => open.delete(conn));
    if (open.size > limits.maxConnections) {
      const victim = options.evictUnproven ? oldestUnproven(open, conn) : undefined;
      if (victim === undefined) {
        open.delete(conn);
        counters.answered(503);
        logger?.warn(
          { open: open.size + 1, max: limits.maxConnections },
          "client connection refused: too many connections",
        );
        writeRaw(
          socket,
          new GatewayError(
            "too_many_connections",
            `the gateway has ${limits.maxConnections} client connections open; retry later`,
          ),
        );
        return;
      }
      // It had its time to show a credential and did not: it makes room for the new one.
      open.delete(victim);
      victim.socket.destroy();
      logger?.warn(
        { max: limits.maxConnections, ageMs: Math.round(conn.openedAt - victim.openedAt) },
        "connection cap reached: closed the oldest connection without a valid credential",
      );
    }
    connections.set(socket, conn);
    // Each read, seen before Node's parser sees it (a prepended 'data' listener also hands the
    // socket's reads to JavaScript): a request's version is checked against its own request line.
    socket.prependListener("data", (chunk: Buffer) => readLines(conn, chunk));
  });

  /**
   * Whether the handler gets this request: false when the connection already answered for good (the
   * request is dropped unread) or when the request is refused here (answered, then closed).
   */
  const admit = (req: IncomingMessage, res: ServerResponse): boolean => {
    const socket = req.socket;
    const conn = connections.get(socket);
    if (answeredEarly.has(socket) || conn?.closing === true) {
      // Pipelined behind an answer that closes the connection: never served, answered or counted.
      // Its own answer would never be read; the connection closes after the answer before it.
      if (conn !== undefined) protocolOf(conn, req);
      return false;
    }
    const refused = refusal(req, conn);
    if (refused !== undefined) {
      counters.answered(refused.status);
      closeAfterAnswer(req, res);
      sendError(res, refused, { "x-request-id": requestIdFor(req.headers["x-request-id"]) });
      return false;
    }
    return true;
  };
  /** After the handler took a request: an answer that closes the connection ends what it serves. */
  const served = (req: IncomingMessage, res: ServerResponse): void => {
    if (res.shouldKeepAlive) return;
    const conn = connections.get(req.socket);
    if (conn !== undefined) conn.closing = true;
  };

  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    if (!admit(req, res)) return;
    // HTTP/1.0 without keep-alive, or `Connection: close`: the client's last request (RFC 9112 9.6).
    served(req, res);
    handler(req, res);
    served(req, res);
  });
  // `Expect: 100-continue`: the same checks before the client is told to send its body.
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    if (!admit(req, res)) return;
    served(req, res);
    res.writeContinue();
    handler(req, res);
    served(req, res);
  });

  server.on("clientError", (err: NodeJS.ErrnoException, socket: Socket) => {
    // A connection reset or a timeout on an idle keep-alive connection needs no answer.
    if (err.code === "ECONNRESET" || !socket.writable) {
      socket.destroy();
      return;
    }
    // A response is in progress on this socket, or one went out early: one answer per request.
    // Let that answer finish (Node flushes it on the next tick), then close.
    const inProgress = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (inProgress !== undefined && inProgress !== null) {
      inProgress.shouldKeepAlive = false;
      // The request's own body broke its framing while the gateway reads it: tell the reader,
      // which answers 400 on this response.
      const req = inProgress.req;
      if (!inProgress.headersSent && req !== undefined && !req.complete) req.emit(FRAMING_ERROR, err);
      if (inProgress.writableFinished) socket.destroySoon();
      else inProgress.once("finish", () => socket.destroySoon());
      return;
    }
    if (answeredEarly.has(socket) || connections.get(socket)?.closing === true) {
      socket.destroySoon();
      return;
    }
    const error = clientError(err, connections.get(socket)?.carriedIn);
    counters.answered(error.status);
    writeRaw(socket, error);
  });

  // `Expect` other than 100-continue: Node would answer a bare 417; answer it the gateway's way.
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    if (!admit(req, res)) return;
    counters.answered(417);
    closeAfterAnswer(req, res);
    sendError(
      res,
      new GatewayError(
        "expectation_failed",
        `Expect ${JSON.stringify(String(req.headers.expect).slice(0, 64))} is not supported (only 100-continue)`,
      ),
      { "x-request-id": requestIdFor(req.headers["x-request-id"]) },
    );
  });

  // CONNECT (a tunnel request) is not something an inference gateway does.
  server.on("connect", (_req: IncomingMessage, socket: Socket) => {
    counters.answered(405);
    writeRaw(
      socket,
      new GatewayError("method_not_allowed", "CONNECT is not supported", {
        headers: { allow: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS" },
      }),
    );
  });
}

/** The oldest open connection that has proven no credential, other than `newest`. */
function oldestUnproven(open: ReadonlySet<Connection>, newest: Connection): Connection | undefined {
  let oldest: Connection | undefined;
  for (const c of open) {
    if (c === newest || c.proven) continue;
    if (oldest === undefined || c.openedAt < oldest.openedAt) oldest = c;
  }
  return oldest;
}

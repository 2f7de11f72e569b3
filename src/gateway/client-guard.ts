/**
 * The client side's edges: timeouts, the connection cap, Node's own parse errors, CONNECT, and
 * "answer, then close" for requests rejected before their body was read.
 *
 * Every answer, including the ones Node's HTTP parser makes up (400 for a malformed request, 431
 * for headers too large, 408 for headers that took too long), carries the gateway's JSON error body
 * and `X-SMG-Error-Code`, and a connection gets at most one answer per request.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "pino";
import { GatewayError, rawErrorResponse, sendError } from "./http-errors.js";
import { requestIdFor } from "./request-id.js";

export interface ClientLimits {
  /** Time a client has to send its request line and headers. */
  headersTimeoutSecs: number;
  /** Longest silence while a request body is arriving. */
  bodyIdleTimeoutSecs: number;
  /** Idle time of a keep-alive connection between two requests. */
  keepAliveTimeoutSecs: number;
  /** Open client connections; past it a new connection gets 503 and is closed. */
  maxConnections: number;
}

export const DEFAULT_CLIENT_LIMITS: ClientLimits = {
  headersTimeoutSecs: 10,
  bodyIdleTimeoutSecs: 30,
  keepAliveTimeoutSecs: 65,
  maxConnections: 8192,
};

/** Whole-request receipt bound (headers and body), far above any honest upload. */
const REQUEST_RECEIPT_TIMEOUT_MS = 300_000;
/** After an early answer, at most this much of the unread body is drained before closing. */
const LINGER_BYTES = 64 * 1024;
const LINGER_MS = 2000;

/** Node's createServer options for these limits. */
export function serverTimeouts(limits: ClientLimits) {
  const headersTimeout = Math.max(1, Math.round(limits.headersTimeoutSecs * 1000));
  return {
    headersTimeout,
    requestTimeout: Math.max(REQUEST_RECEIPT_TIMEOUT_MS, headersTimeout),
    keepAliveTimeout: Math.max(1, Math.round(limits.keepAliveTimeoutSecs * 1000)),
    // How often Node checks the two timeouts above: often enough to hold them within ~25%.
    connectionsCheckingInterval: Math.max(250, Math.min(1000, Math.floor(headersTimeout / 4))),
    // The gateway checks Host itself, so the answer has its JSON body.
    requireHostHeader: false,
  };
}

/** Event on an IncomingMessage whose body failed to parse (see body.ts). */
export const FRAMING_ERROR = "sluice:framing-error";

/** Sockets that already got an answer to a request whose body was never read. */
const answeredEarly = new WeakSet<Socket>();

/**
 * Marks an answer that goes out before the request body was read: the connection closes after it
 * (the rest of the body is not worth reading, and the framing may be broken), reading at most
 * LINGER_BYTES for LINGER_MS so the client sees the answer instead of a reset.
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

/** Maps Node's parser errors to the gateway's answers. */
export function clientError(err: NodeJS.ErrnoException): GatewayError {
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return new GatewayError("request_headers_too_large");
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new GatewayError("request_header_timeout");
    case "HPE_INVALID_VERSION":
      return new GatewayError("http_version_not_supported");
    default: {
      const reason = "reason" in err && typeof err.reason === "string" ? `: ${err.reason}` : "";
      return new GatewayError(
        "malformed_request",
        `the request could not be parsed (${err.code ?? "parse error"}${reason})`,
      );
    }
  }
}

export interface GuardCounters {
  /** Called with the answer's status for every answer written here (metrics). */
  answered(status: number): void;
}

/** Installs the client-side guards on the data-plane server. */
export function guardServer(
  server: Server,
  limits: ClientLimits,
  logger: Logger | undefined,
  counters: GuardCounters,
): void {
  // No header count limit: Node would silently drop headers past it (Content-Length included, so
  // a body would be read as the next request). The 16 KiB header size limit bounds the count.
  server.maxHeadersCount = 0;
  let open = 0;
  server.on("connection", (socket: Socket) => {
    open++;
    socket.once("close", () => open--);
    if (open > limits.maxConnections) {
      counters.answered(503);
      logger?.warn({ open, max: limits.maxConnections }, "client connection refused: too many connections");
      writeRaw(
        socket,
        new GatewayError(
          "too_many_connections",
          `the gateway has ${limits.maxConnections} client connections open; retry later`,
        ),
      );
    }
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
    if (answeredEarly.has(socket)) {
      socket.destroySoon();
      return;
    }
    const error = clientError(err);
    counters.answered(error.status);
    writeRaw(socket, error);
  });

  // `Expect` other than 100-continue: Node would answer a bare 417; answer it the gateway's way.
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
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

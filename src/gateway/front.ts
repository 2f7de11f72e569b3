/**
 * The data-plane listener: the HTTP server behind the client guard (http/client-guard.ts), which
 * hands each request to the gateway's own paths or to the lifecycle under one lease, counts the
 * requests not finished yet, and drains them on SIGTERM (docs/gateway.md, "Shutting down").
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { newRequestId, requestIdFor } from "../contracts/request-id.js";
import {
  type ClientLimits,
  DEFAULT_CLIENT_LIMITS,
  guardServer,
  serverTimeouts,
} from "./http/client-guard.js";
import { pathOf } from "./http/request-checks.js";
import type { GatewayOptions } from "./options.js";
import { type OwnPathSources, serveOwnPath } from "./own-paths.js";
import { Lease, type LeaseContext } from "./request/lease.js";
import { type LifecycleContext, runLifecycle } from "./request/lifecycle.js";
import type { ShutdownList } from "./shutdown.js";

interface Front {
  readonly url: string;
  readonly port: number;
  /** Resolves when every request received so far has finished, or after `ms`. */
  drain(ms: number): Promise<void>;
}

export function clientLimitsOf(options: GatewayOptions): ClientLimits {
  return { ...DEFAULT_CLIENT_LIMITS, ...options.clientLimits };
}

export async function startFront(
  ownPaths: OwnPathSources,
  lifecycle: LifecycleContext,
  leases: LeaseContext,
  stops: ShutdownList,
): Promise<Front> {
  const { options, metrics, fleet } = ownPaths;
  const { logger } = options;
  // Requests on the lifecycle that have not finished, for the drain on SIGTERM.
  let open = 0;
  let draining = false;
  let drained: (() => void) | undefined;
  const onRequestClosed = () => {
    open--;
    if (draining) {
      // A keep-alive connection whose answer just ended is idle now: close it, or the client
      // would send its next request to a gateway that is going away.
      setImmediate(() => server.closeIdleConnections());
      if (open === 0) drained?.();
    }
  };

  function handle(req: IncomingMessage, res: ServerResponse): void {
    // The gateway's own id (unique: it keys the budget hold and the ledger row), and the
    // correlation id the answer echoes (the client's own when usable, else the gateway's).
    const sluiceRequestId = newRequestId();
    const requestId = requestIdFor(req.headers["x-request-id"], sluiceRequestId);
    // While draining every answer says Connection: close, so clients reconnect elsewhere.
    if (draining) res.shouldKeepAlive = false;
    if (
      (req.method === "GET" || req.method === "HEAD") &&
      serveOwnPath(ownPaths, pathOf(req.url ?? "/"), req, res, requestId, draining)
    ) {
      return;
    }
    open++;
    res.once("close", onRequestClosed);
    if (res.socket === null) closeWithItsConnection(req, res);
    void runLifecycle(lifecycle, new Lease(leases, req, res, requestId, sluiceRequestId), req);
  }

  const limits = clientLimitsOf(options);
  const server: Server = createServer(serverTimeouts(limits));
  guardServer(server, limits, logger, { answered: (status) => metrics.countHttpStatus(status) }, handle);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  stops.add(
    "data-plane listener",
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  const port = (server.address() as AddressInfo).port;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  logger.info(
    { port, host: options.host, mode: fleet.admission.mode, capacity: fleet.capacity.capacity },
    "sluice gateway listening",
  );

  return {
    url: `http://${host}:${port}`,
    port,
    async drain(ms) {
      draining = true;
      server.close();
      server.closeIdleConnections();
      if (open === 0) return;
      logger.info({ requests: open, timeoutMs: ms }, "draining: waiting for requests in flight and queued");
      let timer: NodeJS.Timeout | undefined;
      const finished = await Promise.race([
        new Promise<boolean>((resolve) => {
          drained = () => resolve(true);
        }),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), ms);
        }),
      ]);
      clearTimeout(timer);
      if (finished) logger.info("drained: every request finished");
      else
        logger.warn({ requests: open }, `drain timed out after ${ms} ms: cutting the requests still running`);
    },
  };
}

/**
 * A pipelined request's answer waits, without a socket, for the answers before it; if the client
 * leaves meanwhile Node never closes it. Close it with its connection, so its lease sees the client
 * gone (the worker's work is cut, nothing is charged for an answer nobody reads) and the drain
 * stops counting it.
 */
function closeWithItsConnection(req: IncomingMessage, res: ServerResponse): void {
  const socket = req.socket;
  const gone = () => {
    if (res.socket === null && !res.writableFinished) res.emit("close");
  };
  socket.once("close", gone);
  res.once("close", () => socket.off("close", gone));
}

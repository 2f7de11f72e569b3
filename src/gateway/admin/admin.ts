/**
 * The admin API, on its own listener (`--admin-port`, off by default) so clients of the data plane
 * can never reach it. Every call needs `Authorization: Bearer <token>`, compared in constant time.
 *
 *   PUT    /api/v1/capacity {"max_in_flight": N, "model"?: M}   pin capacity live (of M's pool)
 *   DELETE /api/v1/capacity[?model=M]              (that pool) back to discovered capacity
 *   DELETE /api/v1/capacity                        back to discovered capacity
 *   GET    /api/v1/status                          per-class and per-tenant snapshot
 *   POST   /api/v1/reload                          re-read the policy files (also on SIGHUP)
 *   GET    /api/v1/dashboard/snapshot              the live dashboard's numbers, once
 *   GET    /api/v1/dashboard/events                the same as server-sent events, about every second
 *
 * The dashboard page itself (`GET /dashboard` and its assets under `/dashboard/`) needs no token: it
 * holds no data, asks for the token and sends it with every data call (docs/dashboard.md).
 *
 * Whoever can reach the listener cannot lock the operators out of it: a connection gets 5 s to send
 * its request headers, a request without the valid token gets 401 and its connection is closed, and
 * at the cap (64 connections) the oldest connection that has not sent the valid token is closed to
 * make room for a new one. Only connections that proved the token are never closed for another.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { GatewayError, toGatewayError } from "../../contracts/gateway-error.js";
import { readBody } from "../http/body.js";
import {
  type ClientLimits,
  closeAfterAnswer,
  DEFAULT_CLIENT_LIMITS,
  guardServer,
  markProven,
  serverTimeouts,
} from "../http/client-guard.js";
import { sendError, sendJson } from "../http/http-errors.js";
import type { AdminDashboard } from "./dashboard-port.js";

export interface AdminHandlers {
  /** Pins (or unpins) the capacity of `model`'s pool, else of the only pool. */
  pinCapacity(capacity: number | undefined, model: string | undefined): unknown;
  status(): unknown;
  reload(): Promise<unknown>;
  /** The live dashboard's data; without it the admin listener serves no dashboard. */
  dashboard?: AdminDashboard | undefined;
}

export interface AdminServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** The admin listener's client limits: few connections, and little time to show the token. */
export const ADMIN_CLIENT_LIMITS: ClientLimits = {
  ...DEFAULT_CLIENT_LIMITS,
  headersTimeoutSecs: 5,
  bodyIdleTimeoutSecs: 10,
  bodyTimeoutSecs: 10,
  maxConnections: 64,
};

/** Largest admin request body (`PUT /api/v1/capacity`). */
const ADMIN_MAX_BODY = 64 * 1024;

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

export async function startAdminServer(options: {
  host: string;
  port: number;
  token: string;
  handlers: AdminHandlers;
  /** Overrides of ADMIN_CLIENT_LIMITS (tests). */
  limits?: Partial<ClientLimits> | undefined;
}): Promise<AdminServer> {
  const limits: ClientLimits = { ...ADMIN_CLIENT_LIMITS, ...options.limits };
  // Comparing fixed-length digests keeps the comparison constant-time whatever the token length.
  const expected = digest(options.token);
  const authorized = (req: IncomingMessage) => {
    const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization?.trim() ?? "");
    return m !== null && timingSafeEqual(digest(m[1]!), expected);
  };

  const dashboard = options.handlers.dashboard;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const path = (req.url ?? "/").split("?")[0]!;
      if (dashboard?.isPagePath(path)) return await dashboard.servePage(req, res, path);
      if (!authorized(req)) {
        // Answered, then closed: a connection that has not shown the token keeps no place here.
        closeAfterAnswer(req, res);
        throw new GatewayError(
          "invalid_admin_token",
          "the admin API needs Authorization: Bearer <admin token>",
        );
      }
      markProven(req.socket);
      if (path === "/api/v1/capacity" && req.method === "PUT") {
        const body = await readBody(
          req,
          ADMIN_MAX_BODY,
          limits.bodyIdleTimeoutSecs * 1000,
          limits.bodyTimeoutSecs * 1000,
        );
        let doc: unknown;
        try {
          doc = JSON.parse(body.toString("utf8"));
        } catch {
          throw new GatewayError("invalid_json", 'the body must be JSON: {"max_in_flight": N}');
        }
        const n = (doc as { max_in_flight?: unknown } | null)?.max_in_flight;
        if (typeof n !== "number" || !Number.isInteger(n) || n < 0) {
          throw new GatewayError("invalid_capacity", "max_in_flight must be an integer >= 0");
        }
        const model = (doc as { model?: unknown }).model;
        if (model !== undefined && (typeof model !== "string" || model === "")) {
          throw new GatewayError("invalid_capacity", "model must be a model name", { param: "model" });
        }
        return sendJson(res, 200, options.handlers.pinCapacity(n, model));
      }
      if (path === "/api/v1/capacity" && req.method === "DELETE") {
        req.resume();
        const model = new URLSearchParams((req.url ?? "").split("?")[1] ?? "").get("model");
        return sendJson(res, 200, options.handlers.pinCapacity(undefined, model ?? undefined));
      }
      if (path === "/api/v1/status" && req.method === "GET")
        return sendJson(res, 200, options.handlers.status());
      if (path === "/api/v1/reload" && req.method === "POST") {
        req.resume();
        return sendJson(res, 200, await options.handlers.reload());
      }
      if (dashboard !== undefined && req.method === "GET") {
        if (path === "/api/v1/dashboard/snapshot") {
          req.resume();
          return sendJson(res, 200, await dashboard.snapshot(), { "cache-control": "no-store" });
        }
        if (path === "/api/v1/dashboard/events") return dashboard.events(req, res);
      }
      req.resume();
      throw new GatewayError("not_found", `no admin route ${req.method} ${path}`);
    } catch (err) {
      sendError(res, toGatewayError(err));
    }
  }

  const server: Server = createServer(serverTimeouts(limits));
  guardServer(server, limits, undefined, { answered: () => {} }, (req, res) => void handle(req, res), {
    evictUnproven: true,
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${options.host.includes(":") ? `[${options.host}]` : options.host}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

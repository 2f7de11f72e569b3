/**
 * The gateway's own GET paths: /metrics, /health, /readiness and /v1/models. Every other request
 * runs the lifecycle (request/lifecycle.ts).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { GatewayError, toGatewayError } from "../contracts/gateway-error.js";
import type { SluiceMetrics } from "../metrics/index.js";
import { closeAfterAnswer } from "./http/client-guard.js";
import { sendError, sendJson } from "./http/http-errors.js";
import { checkRequest } from "./http/request-checks.js";
import type { LivePolicy } from "./live-policy.js";
import type { GatewayOptions } from "./options.js";
import type { Fleet } from "./start-pools.js";
import { readiness } from "./status.js";

export interface OwnPathSources {
  readonly options: GatewayOptions;
  readonly fleet: Fleet;
  readonly policy: LivePolicy;
  readonly metrics: SluiceMetrics;
}

const OWN_PATHS = new Set(["/metrics", "/health", "/readiness", "/v1/models"]);

/** Answers `path` when it is one of the gateway's own; false when it is not (nothing was sent). */
export function serveOwnPath(
  sources: OwnPathSources,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
  requestId: string,
  draining: boolean,
): boolean {
  if (!OWN_PATHS.has(path)) return false;
  // The gateway's own paths read no body: one sent anyway is not read, so close after the
  // answer (its framing may be broken, and a second answer must never follow).
  if (
    req.headers["transfer-encoding"] !== undefined ||
    (req.headers["content-length"] !== undefined && req.headers["content-length"] !== "0")
  ) {
    closeAfterAnswer(req, res);
  }
  const headers = { "x-request-id": requestId };
  if (path === "/metrics") void serveMetrics(sources, res, requestId);
  else if (path === "/v1/models") serveModels(sources, req, res, requestId);
  else if (path === "/health") sendJson(res, 200, { status: "ok" }, headers);
  else {
    const answer = readiness(sources.fleet, draining);
    sendJson(res, answer.status, answer.body, headers);
  }
  return true;
}

/**
 * `GET /v1/models`: the union of the pools' models, in OpenAI's list shape; authenticated like
 * any data-plane request, and only the models the tenant's allowlist lets it use.
 */
function serveModels(
  { fleet, policy }: OwnPathSources,
  req: IncomingMessage,
  res: ServerResponse,
  requestId: string,
): void {
  try {
    try {
      checkRequest(req);
    } catch (err) {
      // The request line or framing is at fault, as on any other path: answer, then close.
      closeAfterAnswer(req, res);
      throw err;
    }
    const tenant = policy.tenants.resolve(req.headers);
    const allowed = policy.tenantPolicies.get(tenant)?.models;
    const data = fleet.pools.servedModels
      .filter((id) => allowed === undefined || allowed.includes(id))
      .map((id) => ({ id, object: "model", created: 0, owned_by: "sluice" }));
    sendJson(res, 200, { object: "list", data }, { "x-request-id": requestId });
  } catch (err) {
    sendError(res, toGatewayError(err), { "x-request-id": requestId });
  }
}

async function serveMetrics(
  { metrics, options }: OwnPathSources,
  res: ServerResponse,
  requestId: string,
): Promise<void> {
  try {
    const text = await metrics.metricsText();
    res.writeHead(200, {
      "content-type": metrics.contentType,
      "content-length": Buffer.byteLength(text),
      "x-request-id": requestId,
    });
    res.end(text);
  } catch (err) {
    options.logger.error({ err }, "metrics collection failed");
    sendError(res, new GatewayError("metrics_failed"), { "x-request-id": requestId });
  }
}

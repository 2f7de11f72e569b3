/**
 * The mock worker's HTTP server (plain node:http): routing, body reading, failure injection,
 * and the info endpoints a gateway polls. Inference itself is a Job in the Batcher.
 */

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Job } from "./job.js";
import { type MockWorker, type MockWorkerOptions, type MockWorkerStats, resolveOptions } from "./options.js";
import { type Endpoint, errorBody, parseInferenceRequest, RequestError, responseFormat } from "./protocol.js";
import { Batcher, type Timing } from "./simulation.js";

/** Bodies beyond this are answered 413; a mock has no use for more. */
const MAX_BODY_BYTES = 64 * 1024 * 1024;

const INFERENCE_ROUTES: Readonly<Record<string, Endpoint>> = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "completion",
  "/generate": "generate",
};

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A non-negative number from a header, or the fallback when absent or malformed. */
function headerMs(req: IncomingMessage, name: string, fallback: number): number {
  const raw = headerValue(req, name);
  if (raw === undefined || raw.trim() === "") return fallback;
  const v = Number(raw);
  return Number.isFinite(v) && v >= 0 ? v : fallback;
}

/** Resolves to the raw body, or null when it is too large; rejects when the client goes away. */
function readBody(req: IncomingMessage): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on("end", () => {
      if (size > MAX_BODY_BYTES) resolve(null);
      else
        resolve(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8"));
    });
    req.on("error", reject);
    // A no-op after 'end'; before it, the client disconnected mid-upload.
    req.on("close", () => reject(new Error("request closed before its body was complete")));
  });
}

export function startMockWorker(opts?: MockWorkerOptions): Promise<MockWorker> {
  const o = resolveOptions(opts);
  const batcher = new Batcher(o.maxRunningRequests, o.batchSlowdown);
  const baseTiming: Timing = { ttftMs: o.ttftMs, tokenDelayMs: o.tokenDelayMs };
  let healthy = o.healthy;
  let totalRequests = 0;
  let seq = 0;
  let lastRequestHeaders: Record<string, string | string[] | undefined> | undefined;
  let lastRequestBody: string | undefined;

  function serverInfo(): Record<string, unknown> {
    const info: Record<string, unknown> = {
      model_path: o.model,
      tokenizer_path: o.model,
      served_model_name: o.model,
      version: "sluice-mock",
    };
    if (o.reportCapacity) info["max_running_requests"] = o.maxRunningRequests;
    return info;
  }

  function handleInfo(path: string, res: ServerResponse): boolean {
    switch (path) {
      case "/health":
      case "/health_generate":
        if (healthy) sendText(res, 200, "OK");
        else sendText(res, 503, "unhealthy");
        return true;
      case "/get_server_info":
        sendJson(res, 200, serverInfo());
        return true;
      case "/get_model_info":
        sendJson(res, 200, { model_path: o.model, tokenizer_path: o.model, is_generation: true });
        return true;
      case "/v1/models":
        sendJson(res, 200, {
          object: "list",
          data: [{ id: o.model, object: "model", created: 0, owned_by: "sluice-mock" }],
        });
        return true;
      default:
        return false;
    }
  }

  async function handleInference(
    endpoint: Endpoint,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    totalRequests++;
    // Recorded only for inference requests, so a gateway's health polling cannot overwrite them.
    lastRequestHeaders = { ...req.headers };
    let raw: string | null;
    try {
      raw = await readBody(req);
    } catch {
      return; // the client left mid-upload; nothing to answer
    }
    if (raw === null) {
      res.setHeader("connection", "close");
      sendJson(res, 413, errorBody("request body too large", "invalid_request_error"));
      return;
    }
    lastRequestBody = raw;
    if (res.destroyed) return;

    const fail = headerValue(req, "x-mock-fail")?.trim().toLowerCase();
    let hang = false;
    if (fail !== undefined && fail !== "") {
      if (fail === "reset") {
        req.socket.destroy();
        return;
      }
      if (fail === "hang") hang = true;
      else if (/^[45]\d\d$/.test(fail)) {
        const status = Number(fail);
        sendJson(res, status, errorBody(`mock failure ${status} (x-mock-fail)`, "server_error"));
        return;
      } else {
        sendJson(res, 400, errorBody(`unknown x-mock-fail value: ${fail}`, "invalid_request_error"));
        return;
      }
    }

    let parsedBody: unknown;
    try {
      parsedBody = JSON.parse(raw);
    } catch (err) {
      sendJson(
        res,
        400,
        errorBody(`invalid JSON body: ${(err as Error).message}`, "invalid_request_error", "invalid_json"),
      );
      return;
    }
    let request: ReturnType<typeof parseInferenceRequest>;
    try {
      request = parseInferenceRequest(endpoint, parsedBody, o.defaultMaxTokens);
    } catch (err) {
      if (!(err instanceof RequestError)) throw err;
      sendJson(res, 400, errorBody(err.message, "invalid_request_error"));
      return;
    }
    const timing: Timing = {
      ttftMs: headerMs(req, "x-mock-ttft-ms", baseTiming.ttftMs),
      tokenDelayMs: headerMs(req, "x-mock-token-delay-ms", baseTiming.tokenDelayMs),
    };
    const format = responseFormat(request, ++seq, o.model);
    new Job(res, batcher, request, format, timing, hang).begin();
  }

  const server = createServer((req, res) => {
    const url = req.url ?? "/";
    const q = url.indexOf("?");
    const path = q === -1 ? url : url.slice(0, q);
    if (req.method === "POST") {
      const endpoint = INFERENCE_ROUTES[path];
      if (endpoint !== undefined) {
        handleInference(endpoint, req, res).catch((err: unknown) => {
          if (!res.headersSent) sendJson(res, 500, errorBody(String(err), "server_error"));
          else res.destroy();
        });
        return;
      }
    } else if ((req.method === "GET" || req.method === "HEAD") && handleInfo(path, res)) {
      return;
    }
    sendJson(res, 404, errorBody(`no route for ${req.method} ${path}`, "invalid_request_error", "not_found"));
  });
  // Outlive typical client idle timeouts (undici 4 s) so pooled connections are reused, not raced.
  server.keepAliveTimeout = 65_000;

  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, o.host, () => {
      server.off("error", reject);
      const port = (server.address() as AddressInfo).port;
      const host = o.host.includes(":") ? `[${o.host}]` : o.host;
      let closing: Promise<void> | undefined;
      resolve({
        url: `http://${host}:${port}`,
        port,
        setHealthy(value: boolean) {
          healthy = value;
        },
        stats(): MockWorkerStats {
          const stats: MockWorkerStats = {
            running: batcher.runningCount,
            waiting: batcher.waitingCount,
            completed: batcher.completed,
            aborted: batcher.aborted,
            totalRequests,
            peakRunning: batcher.peakRunning,
          };
          if (lastRequestHeaders !== undefined) stats.lastRequestHeaders = lastRequestHeaders;
          if (lastRequestBody !== undefined) stats.lastRequestBody = lastRequestBody;
          return stats;
        },
        close() {
          closing ??= new Promise<void>((done) => {
            server.close(() => done());
            // Destroying every socket also fires each response's 'close', a no-op after abortAll().
            server.closeAllConnections();
            // Socket 'close' events come later; settle the counters now so stats() after close() is final.
            batcher.abortAll();
          });
          return closing;
        },
      });
    });
  });
}

/**
 * The mock worker's HTTP server (plain node:http): routing, body reading, failure injection,
 * and the info endpoints a gateway polls. Inference itself is a Job in the Batcher.
 *
 * Failure injection, per request, with the `x-mock-fail` header on an inference request (applied
 * once its body has been read):
 * - `400`..`599`: that status with an OpenAI-style JSON error body;
 * - `reset`: destroy the connection before any byte of the answer;
 * - `hang`: take a running slot and never answer (until the client leaves);
 * - `garbage`: write bytes that are not HTTP, then close the connection;
 * - `bad-json`: 200 with `content-type: application/json` and a truncated, invalid JSON body;
 * - `bad-length`: 200 whose Content-Length is larger than the body sent, then close;
 * - `die-mid-stream`: answer a few tokens (`x-mock-die-after-tokens`, default 2), then close the
 *   connection: a streamed answer is cut between events, a non-streamed one halfway through its body.
 * Any other value is answered 400. Other per-request hooks: `x-mock-ttft-ms`, `x-mock-token-delay-ms`
 * (timing), `x-mock-output-tokens` and `x-mock-prompt-tokens` (the answer's real lengths).
 *
 * Test endpoints: `GET /mock/stats` (the counters as JSON) and `GET /mock/received` (the log of
 * received requests). A lying `/get_server_info` is the `reportedCapacity` option.
 *
 * With `prefixCacheTokens`, a prefix cache (prefix-cache.ts): each inference request's prompt is
 * looked up when it arrives, its time to first token grows by `prefillMsPerToken` per prompt token
 * not found, and its usage reports the tokens found (`prompt_tokens_details.cached_tokens`).
 *
 * With an `engine`, the worker also serves that engine's own signals (vllm-signals.ts,
 * sglang-signals.ts) and bounds its running set by a KV cache (kv-cache.ts): requests wait at the
 * engine when their prompt does not fit, and are preempted and recomputed when a running one's
 * growth does not.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { EngineStats } from "./engine-stats.js";
import type { EngineView } from "./engine-view.js";
import { Job, type JobFault } from "./job.js";
import { KvCache } from "./kv-cache.js";
import {
  type KvCounters,
  type MockWorker,
  type MockWorkerOptions,
  type MockWorkerStats,
  resolveOptions,
} from "./options.js";
import { blockKeys, PrefixCache, promptText } from "./prefix-cache.js";
import {
  type Endpoint,
  errorBody,
  type InferenceRequest,
  parseInferenceRequest,
  RequestError,
  responseFormat,
} from "./protocol.js";
import { SGLANG_HISTOGRAM_BOUNDS, sglangMetrics, sglangSchedulerInfo } from "./sglang-signals.js";
import { Batcher, type Timing } from "./simulation.js";
import { type ReceivedRequest, RequestTracker } from "./tracking.js";
import { VLLM_HISTOGRAM_BOUNDS, vllmMetrics, vllmModels } from "./vllm-signals.js";

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

function sendText(
  res: ServerResponse,
  status: number,
  text: string,
  contentType = "text/plain; charset=utf-8",
): void {
  res.writeHead(status, {
    "content-type": contentType,
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}

/** Failure modes handled by the server before any generation starts. */
const EARLY_FAULTS = new Set(["reset", "garbage", "bad-json", "bad-length"]);

/** Answers one of EARLY_FAULTS. */
function answerFault(fault: string, req: IncomingMessage, res: ServerResponse): void {
  const socket = req.socket;
  switch (fault) {
    case "reset":
      socket.destroy();
      return;
    case "garbage":
      // Not an HTTP status line: a client's parser must fail on it.
      socket.end("\x00\x01\x02 garbage, not HTTP \xff\r\n\r\n{]", () => socket.destroy());
      return;
    case "bad-json": {
      const body = '{"id":"chatcmpl-mock-bad","object":"chat.completion","choices":[{"index":0,"message":{';
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    case "bad-length": {
      const body = '{"id":"chatcmpl-mock-short","object":"chat.completion","choices":[]}';
      res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body) + 64,
      });
      res.write(body, () => socket.destroy());
      return;
    }
  }
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

function headerCount(req: IncomingMessage, name: string): number | undefined {
  const raw = headerValue(req, name);
  if (raw === undefined || raw.trim() === "") return undefined;
  const v = Number(raw);
  return Number.isInteger(v) && v >= 0 ? v : undefined;
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
  const kv = o.kvTokens === undefined ? undefined : new KvCache(o.kvTokens, o.kvBlockSize);
  const batcher = new Batcher(o.maxRunningRequests, o.batchSlowdown, o.knee, o.kneeSlowdown, kv);
  let engineStats = new EngineStats(o.engine === "sglang" ? SGLANG_HISTOGRAM_BOUNDS : VLLM_HISTOGRAM_BOUNDS);
  // Only an engine's /metrics reads these; a plain worker (the benchmarks') skips the bookkeeping.
  const recordFinished =
    o.engine === undefined ? undefined : (r: Parameters<EngineStats["record"]>[0]) => engineStats.record(r);
  const tracker = new RequestTracker(o.maxRunningRequests, o.receivedLogSize);
  const baseTiming: Timing = { ttftMs: o.ttftMs, tokenDelayMs: o.tokenDelayMs };
  const prefixCache = o.prefixCacheTokens > 0 ? new PrefixCache(o.prefixCacheTokens) : undefined;
  let healthy = o.healthy;
  let reportedCapacity: unknown = o.reportedCapacity;
  let totalRequests = 0;
  let clientErrors = 0;
  let servedModels = [...o.servedModels];
  let requestsByModel: Record<string, number> = {};
  let restarts = 0;
  let seq = 0;
  let lastRequestHeaders: Record<string, string | string[] | undefined> | undefined;
  let lastRequestBody: string | undefined;

  function serverInfo(): Record<string, unknown> {
    const info: Record<string, unknown> = {
      model_path: o.model,
      tokenizer_path: o.model,
      served_model_name: o.model,
      version: "sluice-mock",
      context_length: o.contextLength,
    };
    // SGLang lists its server arguments here, this one among them.
    if (o.reportStreamInterval) info["stream_interval"] = o.streamInterval;
    if (o.reportCapacity) {
      info["max_running_requests"] = reportedCapacity === undefined ? o.maxRunningRequests : reportedCapacity;
    }
    const view = engineView();
    if (o.engine === "sglang" && view !== undefined) Object.assign(info, sglangSchedulerInfo(view));
    return info;
  }

  /** The state an engine's signals read; undefined without a KV model. */
  function engineView(): EngineView | undefined {
    if (kv === undefined) return undefined;
    const cache = prefixCache?.counters();
    return {
      model: servedModels[0] ?? o.model,
      running: batcher.runningCount,
      waiting: batcher.waitingCount,
      kv,
      maxRunningRequests: o.maxRunningRequests,
      contextLength: o.contextLength,
      preemptions: batcher.preemptions,
      aborted: batcher.aborted,
      stats: engineStats,
      prefixHitRate:
        cache === undefined || cache.promptTokens === 0 ? 0 : cache.cachedTokens / cache.promptTokens,
    };
  }

  function kvCounters(cache: KvCache): KvCounters {
    return {
      capacityTokens: cache.capacityTokens,
      blockSize: cache.blockSize,
      totalBlocks: cache.totalBlocks,
      usedBlocks: cache.usedBlocks,
      usedTokens: cache.usedTokens,
      preemptions: batcher.preemptions,
    };
  }

  /** `GET /metrics` in the engine's own names; undefined when the worker imitates none. */
  function engineMetrics(): string | undefined {
    const view = engineView();
    if (view === undefined || o.engine === undefined) return undefined;
    return o.engine === "vllm" ? vllmMetrics(view) : sglangMetrics(view);
  }

  function counters(): MockWorkerStats {
    return {
      requestsByModel: { ...requestsByModel },
      maxRunningRequests: o.maxRunningRequests,
      running: batcher.runningCount,
      waiting: batcher.waitingCount,
      completed: batcher.completed,
      aborted: batcher.aborted,
      totalRequests,
      peakRunning: batcher.peakRunning,
      ...tracker.counters(),
      received: tracker.receivedCount,
      clientErrors,
      restarts,
      ...(prefixCache !== undefined ? { prefixCache: prefixCache.counters() } : {}),
      ...(kv !== undefined ? { kv: kvCounters(kv) } : {}),
    };
  }

  function handleInfo(path: string, res: ServerResponse): boolean {
    switch (path) {
      case "/health":
      case "/health_generate":
        if (healthy) sendText(res, 200, "OK");
        else sendText(res, 503, "unhealthy");
        return true;
      case "/get_server_info":
        // vLLM has no such route (nor /get_model_info): the generic 404.
        if (o.engine === "vllm") return false;
        sendJson(res, 200, serverInfo());
        return true;
      case "/get_model_info":
        if (o.engine === "vllm") return false;
        sendJson(res, 200, { model_path: o.model, tokenizer_path: o.model, is_generation: true });
        return true;
      case "/metrics": {
        const text = engineMetrics();
        if (text === undefined) return false;
        sendText(res, 200, text, "text/plain; version=0.0.4; charset=utf-8");
        return true;
      }
      case "/v1/models":
        if (o.engine === "vllm") {
          sendJson(res, 200, vllmModels(servedModels, o.contextLength));
          return true;
        }
        if (!o.modelsEndpoint) {
          sendJson(res, 404, errorBody("no such route: /v1/models", "invalid_request_error"));
          return true;
        }
        sendJson(res, 200, {
          object: "list",
          data: servedModels.map((id) => ({ id, object: "model", created: 0, owned_by: "sluice-mock" })),
        });
        return true;
      case "/mock/stats":
        sendJson(res, 200, counters());
        return true;
      case "/mock/received":
        sendJson(res, 200, tracker.received());
        return true;
      default:
        return false;
    }
  }

  async function handleInference(
    endpoint: Endpoint,
    req: IncomingMessage,
    res: ServerResponse,
    entry: ReceivedRequest,
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
    entry.bodyBytes = raw === null ? undefined : Buffer.byteLength(raw);
    if (raw === null) {
      res.setHeader("connection", "close");
      sendJson(res, 413, errorBody("request body too large", "invalid_request_error"));
      return;
    }
    lastRequestBody = raw;
    if (res.destroyed) return;

    const fail = headerValue(req, "x-mock-fail")?.trim().toLowerCase();
    let fault: JobFault | undefined;
    if (fail !== undefined && fail !== "") {
      if (EARLY_FAULTS.has(fail)) {
        answerFault(fail, req, res);
        return;
      }
      if (fail === "hang") fault = { kind: "hang" };
      else if (fail === "die-mid-stream") {
        fault = { kind: "die-mid-stream", afterTokens: headerCount(req, "x-mock-die-after-tokens") ?? 2 };
      } else if (/^[45]\d\d$/.test(fail)) {
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
    const named = (parsedBody as { model?: unknown } | null)?.model;
    const modelName = typeof named === "string" ? named : "";
    requestsByModel[modelName] = (requestsByModel[modelName] ?? 0) + 1;
    if (o.strictModels && !servedModels.includes(modelName)) {
      sendJson(
        res,
        404,
        errorBody(`The model \`${modelName}\` does not exist.`, "NotFoundError", "model_not_found"),
      );
      return;
    }
    let request: InferenceRequest;
    try {
      request = parseInferenceRequest(endpoint, parsedBody, o.defaultMaxTokens);
      if (!o.reportUsage) request = { ...request, includeUsage: false, reportUsage: false };
    } catch (err) {
      if (!(err instanceof RequestError)) throw err;
      sendJson(res, 400, errorBody(err.message, "invalid_request_error"));
      return;
    }
    // Like vLLM and SGLang: a request that cannot fit the context is refused, not run forever.
    if (request.promptTokens + request.maxTokens > o.contextLength) {
      sendJson(
        res,
        400,
        errorBody(
          `This model's maximum context length is ${o.contextLength} tokens. However, you requested ` +
            `${request.promptTokens + request.maxTokens} tokens (${request.promptTokens} in the messages, ` +
            `${request.maxTokens} in the completion).`,
          "invalid_request_error",
          "context_length_exceeded",
        ),
      );
      return;
    }
    const timing: Timing = {
      ttftMs: headerMs(req, "x-mock-ttft-ms", baseTiming.ttftMs),
      tokenDelayMs: headerMs(req, "x-mock-token-delay-ms", baseTiming.tokenDelayMs),
    };
    // Test hooks: the answer's real length, independent of what the client asked for, so tests can
    // make a gateway's estimate overshoot (x-mock-output-tokens) or undershoot (x-mock-prompt-tokens).
    const outputTokens = headerCount(req, "x-mock-output-tokens");
    const promptTokensOverride = headerCount(req, "x-mock-prompt-tokens");
    if (outputTokens !== undefined || promptTokensOverride !== undefined) {
      request = {
        ...request,
        ...(outputTokens !== undefined
          ? { maxTokens: outputTokens, capped: request.capped && outputTokens >= request.maxTokens }
          : {}),
        ...(promptTokensOverride !== undefined ? { promptTokens: promptTokensOverride } : {}),
      };
    }
    if (prefixCache !== undefined) {
      // Prefill only what the cache does not hold: the TTFT grows with the uncached tokens.
      const cached = prefixCache.serve(blockKeys(promptText(parsedBody)), request.promptTokens);
      request = { ...request, cachedTokens: cached };
      timing.ttftMs += o.prefillMsPerToken * (request.promptTokens - cached);
    }
    const format = responseFormat(request, ++seq, o.model);
    new Job(res, batcher, request, format, timing, o.streamInterval, fault, recordFinished).begin();
  }

  function logReceived(req: IncomingMessage, url: string, inference: boolean): ReceivedRequest | undefined {
    const id = headerValue(req, "x-fuzz-id") ?? headerValue(req, "x-request-id");
    if (id === undefined && !inference) return undefined;
    const headerNames: string[] = [];
    for (let k = 0; k < req.rawHeaders.length && headerNames.length < 64; k += 2) {
      headerNames.push(req.rawHeaders[k]!.toLowerCase());
    }
    const entry: ReceivedRequest = {
      id,
      method: req.method ?? "",
      path: url,
      at: Date.now(),
      headerNames,
      authorization: headerValue(req, "authorization"),
      bodyBytes: undefined,
    };
    tracker.record(entry);
    return entry;
  }

  function onRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? "/";
    const q = url.indexOf("?");
    const path = q === -1 ? url : url.slice(0, q);
    const endpoint = req.method === "POST" ? INFERENCE_ROUTES[path] : undefined;
    const entry = logReceived(req, url, endpoint !== undefined);
    if (endpoint !== undefined) {
      // Open from now until the answer's last byte is handed over (end(): the engine is done with
      // it, as a real engine frees the sequence when it emits the last token) or the client is
      // gone ('close' fires at once when the socket dies, also before any byte was written).
      // Not 'finish': it waits for the kernel's write callback, which can come after the gateway
      // already read the last byte and sent the next request, and would count both as open.
      const close = tracker.opened();
      const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
      res.end = ((...args: unknown[]) => {
        close();
        return end(...args);
      }) as ServerResponse["end"];
      res.once("close", close);
      handleInference(endpoint, req, res, entry!).catch((err: unknown) => {
        if (!res.headersSent) sendJson(res, 500, errorBody(String(err), "server_error"));
        else res.destroy();
      });
      return;
    }
    if (entry !== undefined) {
      // Not an inference request, but tagged: note its body size once it has arrived.
      let bytes = 0;
      req.on("data", (chunk: Buffer) => {
        bytes += chunk.length;
      });
      req.once("end", () => {
        entry.bodyBytes = bytes;
      });
    }
    if ((req.method === "GET" || req.method === "HEAD") && handleInfo(path, res)) return;
    sendJson(res, 404, errorBody(`no route for ${req.method} ${path}`, "invalid_request_error", "not_found"));
  }

  function onClientError(err: NodeJS.ErrnoException, socket: Socket): void {
    // Only what the parser refused counts; a connection reset (a client giving up) is no error.
    if (err.code?.startsWith("HPE_")) clientErrors++;
    // What Node does by itself: answer a parse error, unless an answer is already under way.
    const inProgress = (socket as Socket & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
    if (socket.writable && err.code?.startsWith("HPE_") && !inProgress?.headersSent) {
      const status =
        err.code === "HPE_HEADER_OVERFLOW" ? "431 Request Header Fields Too Large" : "400 Bad Request";
      socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
      socket.destroySoon();
      return;
    }
    socket.destroy();
  }

  function newServer(): Server {
    const server = createServer({ maxHeaderSize: o.maxHeaderSize }, onRequest);
    // Outlive typical client idle timeouts (undici 4 s) so pooled connections are reused, not raced.
    server.keepAliveTimeout = 65_000;
    server.on("clientError", onClientError);
    return server;
  }

  function listen(server: Server, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, o.host, () => {
        server.off("error", reject);
        resolve((server.address() as AddressInfo).port);
      });
    });
  }

  /** Destroys every connection, aborts all work and closes the listener. */
  function shutDown(server: Server): Promise<void> {
    return new Promise<void>((done) => {
      server.close(() => done());
      // Destroying every socket also fires each response's 'close', a no-op after abortAll().
      server.closeAllConnections();
      // Socket 'close' events come later; settle the counters now so stats() after close() is final.
      batcher.abortAll();
    });
  }

  let server = newServer();
  return listen(server, o.port).then((port) => {
    const host = o.host.includes(":") ? `[${o.host}]` : o.host;
    let closing: Promise<void> | undefined;
    let restarting: Promise<void> | undefined;
    const worker: MockWorker = {
      url: `http://${host}:${port}`,
      port,
      setHealthy(value: boolean) {
        healthy = value;
      },
      setReportedCapacity(value: unknown) {
        reportedCapacity = value;
      },
      peekCachedTokens(body: unknown): number {
        return prefixCache === undefined ? 0 : prefixCache.peek(blockKeys(promptText(body)));
      },
      setServedModels(models: string[]) {
        servedModels = [...models];
      },
      stats(): MockWorkerStats {
        const stats = counters();
        if (lastRequestHeaders !== undefined) stats.lastRequestHeaders = lastRequestHeaders;
        if (lastRequestBody !== undefined) stats.lastRequestBody = lastRequestBody;
        return stats;
      },
      received: () => tracker.received(),
      clearReceived: () => tracker.clearReceived(),
      resetStats() {
        batcher.resetCounters();
        engineStats = engineStats.fresh();
        prefixCache?.resetCounters();
        totalRequests = 0;
        clientErrors = 0;
        requestsByModel = {};
        tracker.reset();
      },
      restart({ downMs = 0 } = {}) {
        if (closing !== undefined) return Promise.reject(new Error("the mock worker is closed"));
        restarting ??= (async () => {
          try {
            await shutDown(server);
            // A restarted engine starts with an empty KV cache.
            prefixCache?.clear();
            if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
            if (closing !== undefined) return;
            server = newServer();
            await listen(server, port);
            restarts++;
          } finally {
            restarting = undefined;
          }
        })();
        return restarting;
      },
      close() {
        // Synchronous when no restart is under way, so stats() right after close() is final.
        closing ??=
          restarting === undefined
            ? shutDown(server)
            : restarting.catch(() => {}).then(() => shutDown(server));
        return closing;
      },
    };
    return worker;
  });
}

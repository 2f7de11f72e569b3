/**
 * The gateway: a node:http server that turns each request into acquire -> forward -> release.
 * Its own paths are /metrics, /health and /readiness; every other path goes to a worker.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { AdmissionError } from "../core/errors.js";
import { createMetrics, type SluiceMetrics } from "../metrics/index.js";
import { type Admission, type AdmissionTicket, createAdmission } from "./admission.js";
import { readBody } from "./body.js";
import { estimateRequest } from "./cost.js";
import { GatewayError, sendError, specFromError } from "./http-errors.js";
import type { GatewayOptions } from "./options.js";
import { forward, upstreamFailure } from "./proxy.js";
import { TenantResolver } from "./tenants.js";
import { WorkerPool } from "./workers.js";

export interface Gateway {
  readonly url: string;
  readonly port: number;
  readonly admission: Admission;
  readonly workers: WorkerPool;
  readonly metrics: SluiceMetrics;
  close(): Promise<void>;
}

const PRIORITY_HEADER = "x-smg-priority";

export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const { logger } = options;
  const tenants = new TenantResolver(options);
  const metrics = createMetrics({ tenantMetricTopN: options.priorityScheduler.tenantMetricTopN });
  const fallbackCapacity =
    options.legacy.maxConcurrentRequests > 0 ? options.legacy.maxConcurrentRequests : 1024;

  let admission: Admission | undefined;
  const workers = new WorkerPool({
    workers: options.workers,
    policy: options.policy,
    health: options.health,
    fallbackCapacity,
    logger,
    onCapacityChange: (capacity) => admission?.setCapacity(capacity),
  });
  // The admission mode is decided after the first discovery, on the capacity it found.
  await workers.discover();
  admission = await createAdmission({
    enabled: options.priorityScheduler.enabled,
    defaultMaxClass: options.priorityScheduler.defaultMaxClass,
    configPath: options.priorityScheduler.configPath,
    capacity: workers.capacity,
    legacy: options.legacy,
    observer: metrics.observer,
    clock: options.clock,
    logger,
  });
  const active = admission;
  workers.start();
  metrics.bindScheduler(() => active.scheduler?.snapshot());
  metrics.bindCapacity(() => workers.capacity);
  metrics.bindAdmissionMode(() => active.mode);
  metrics.bindWorkersHealthy(() => workers.healthyCount);

  const timeoutMs = options.requestTimeoutSecs * 1000;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? "/";
    if (req.method === "GET" || req.method === "HEAD") {
      if (url === "/metrics") return serveMetrics(res);
      if (url === "/health") return sendJson(res, 200, { status: "ok" });
      if (url === "/readiness") {
        const ready = workers.healthyCount > 0;
        return sendJson(res, ready ? 200 : 503, {
          status: ready ? "ready" : "not_ready",
          admission_mode: active.mode,
          healthy_workers: workers.healthyCount,
          capacity: workers.capacity,
        });
      }
    }

    // Client gone -> leave the queue, or abort the upstream request; either way the slot is freed.
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort();
    };
    res.on("close", onClose);

    let ticket: AdmissionTicket | undefined;
    try {
      const tenant = tenants.resolve(req.headers);
      const body = await readBody(req, options.maxPayloadSize);
      const estimate = estimateRequest(body, req.headers["content-type"]);
      const priority = req.headers[PRIORITY_HEADER];
      ticket = await active.acquire({
        priority: Array.isArray(priority) ? priority[0] : priority,
        tenant,
        cost: estimate.cost,
        signal: abort.signal,
      });
      const worker = workers.pick();
      if (worker === undefined) {
        throw new GatewayError(503, "no_healthy_workers", "no healthy worker is available", {
          "retry-after": "1",
        });
      }
      let preempted = false;
      ticket.onPreempt(() => {
        preempted = true;
        abort.abort();
      });
      worker.inflight++;
      try {
        const result = await forward({
          req,
          res,
          body,
          worker,
          signal: abort.signal,
          timeoutMs,
          markFirstByte: () => ticket!.markFirstByte(),
          extraHeaders: {
            "x-sluice-admission": ticket.admission,
            "x-sluice-queue-wait-ms": String(Math.round(ticket.queueWaitMs)),
          },
        });
        if (result.outcome === "preempted") throw preemptedError(ticket);
        metrics.httpRequests.inc({ status: String(result.status) });
      } catch (err) {
        if (preempted && !res.headersSent) throw preemptedError(ticket);
        if (err instanceof GatewayError || err instanceof AdmissionError) throw err;
        if (abort.signal.aborted)
          throw new GatewayError(499, "client_closed_request", "the client went away");
        const failure = upstreamFailure(err);
        metrics.upstreamErrors.inc({ kind: failure.kind });
        logger.warn(
          { worker: worker.url, err: (err as Error).message, kind: failure.kind },
          "upstream request failed",
        );
        throw failure.error;
      } finally {
        worker.inflight--;
      }
    } catch (err) {
      const spec = specFromError(err);
      metrics.httpRequests.inc({ status: String(spec.status) });
      if (spec.status === 499 || res.destroyed) {
        if (!res.destroyed) res.destroy();
        return;
      }
      if (spec.status >= 500 && !(err instanceof GatewayError) && !(err instanceof AdmissionError)) {
        logger.error({ err }, "unexpected gateway error");
      }
      sendError(res, spec);
    } finally {
      res.off("close", onClose);
      ticket?.release();
    }
  }

  function preemptedError(ticket: AdmissionTicket): Error {
    const permit = ticket as { preemptionError?: () => Error };
    return permit.preemptionError?.() ?? new GatewayError(503, "scheduler_preempted", "preempted");
  }

  async function serveMetrics(res: ServerResponse): Promise<void> {
    try {
      const text = await metrics.metricsText();
      res.writeHead(200, { "content-type": metrics.contentType, "content-length": Buffer.byteLength(text) });
      res.end(text);
    } catch (err) {
      logger.error({ err }, "metrics collection failed");
      sendError(res, { status: 500, code: "metrics_failed", message: "metrics collection failed" });
    }
  }

  const server: Server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
    void handle(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  logger.info(
    { port, host: options.host, mode: active.mode, capacity: workers.capacity },
    "sluice gateway listening",
  );

  return {
    url: `http://${host}:${port}`,
    port,
    admission: active,
    workers,
    metrics,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await workers.close();
    },
  };
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Gateway lifecycle and the in-flight failure paths that are not admission outcomes: a start that
 * fails must not leave the worker pool probing, close() stops everything, a client gone before the
 * first byte aborts the upstream request, and a worker dying mid-stream cuts the client's stream.
 */
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { request } from "undici";
import { DEFAULT_HEALTH, type GatewayOptions } from "../../src/gateway/options.js";
import { startGateway } from "../../src/gateway/server.js";
import { startMockWorker } from "../../src/mock-worker/index.js";
import {
  assertOk,
  captureLogger,
  chatBody,
  closedPort,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const INTERVAL_MS = 20;

function options(
  workerUrl: string,
  port: number,
  logger: GatewayOptions["logger"],
  clock: ManualClock,
): GatewayOptions {
  return {
    workers: [{ url: workerUrl }],
    host: "127.0.0.1",
    port,
    policy: "round_robin",
    priorityScheduler: { enabled: false, defaultMaxClass: "default", tenantMetricTopN: 32 },
    legacy: { maxConcurrentRequests: -1, queueSize: 10, queueTimeoutSecs: 10 },
    apiKeys: [],
    requireAuth: false,
    maxPayloadSize: 1 << 20,
    requestTimeoutSecs: 10,
    health: {
      ...DEFAULT_HEALTH,
      intervalSecs: INTERVAL_MS / 1000,
      timeoutSecs: 1,
      failureThreshold: 1,
      successThreshold: 1,
    },
    logger,
    clock,
  };
}

/**
 * Ten health intervals on the gateway's clock. Probe rounds are armed on it, so nothing armed means
 * nothing can probe; the advance would start any round that was.
 */
function quietPeriod(clock: ManualClock): void {
  assert.equal(clock.pendingTimers(), 0, "nothing is armed to probe the worker");
  clock.advance(10 * INTERVAL_MS);
}

describe("gateway lifecycle", () => {
  test("a start that fails (port taken) closes the worker pool: no health probing afterwards", async (t) => {
    const worker = await startMockWorker({});
    t.after(() => worker.close());
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
    const { port } = blocker.address() as { port: number };

    const { logger, lines } = captureLogger();
    const clock = new ManualClock();
    await assert.rejects(startGateway(options(worker.url, port, logger, clock)), { code: "EADDRINUSE" });
    const logged = lines.length;
    worker.setHealthy(false);
    quietPeriod(clock);
    assert.deepEqual(
      lines.slice(logged).map((l) => l.msg),
      [],
      "nothing probes the worker after the failed start",
    );
  });

  test("a start whose admin listener fails closes the data-plane listener and the worker pool", async (t) => {
    const worker = await startMockWorker({});
    t.after(() => worker.close());
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
    const adminPort = (blocker.address() as { port: number }).port;
    const dataPort = await closedPort();

    const { logger, lines } = captureLogger();
    const clock = new ManualClock();
    const failing = {
      ...options(worker.url, dataPort, logger, clock),
      admin: { host: "127.0.0.1", port: adminPort, token: "t" },
    };
    await assert.rejects(startGateway(failing), { code: "EADDRINUSE" });
    const logged = lines.length;
    worker.setHealthy(false);
    quietPeriod(clock);
    assert.deepEqual(
      lines.slice(logged).map((l) => l.msg),
      [],
      "nothing probes the worker after the failed start",
    );
    // The data-plane port was released.
    const probe = createServer();
    await new Promise<void>((resolve, reject) => {
      probe.once("error", reject);
      probe.listen(dataPort, "127.0.0.1", resolve);
    });
    await new Promise<void>((resolve) => probe.close(() => resolve()));
  });

  test("close() stops health probing and frees the port", async (t) => {
    const worker = await startMockWorker({});
    t.after(() => worker.close());
    const { logger, lines } = captureLogger();
    const clock = new ManualClock();
    const gateway = await startGateway(options(worker.url, 0, logger, clock));
    worker.setHealthy(false);
    clock.advance(INTERVAL_MS);
    await waitFor(() => lines.some((l) => l.msg === "worker unhealthy"), "the health checks run");
    await gateway.close();
    const logged = lines.length;
    worker.setHealthy(true);
    quietPeriod(clock);
    assert.deepEqual(
      lines.slice(logged).map((l) => l.msg),
      [],
      "no probe after close",
    );
    const again = await startGateway(options(worker.url, gateway.port, logger, clock));
    await again.close();
  });
});

describe("gateway in-flight failures", () => {
  test("a client gone before the first byte aborts the upstream request and frees its slot", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const worker = fleet.workers[0]!;
    const held = fleet.hold({}, { "x-mock-ttft-ms": "5000" });
    await waitFor(() => worker.stats().running === 1, "the request reached the worker");
    assert.equal(fleet.snapshot().inflight, 1);
    await held.cancel();
    await waitFor(() => worker.stats().aborted === 1 && worker.stats().running === 0, "upstream aborted");
    await waitFor(() => fleet.snapshot().inflight === 0, "slot freed");
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_http_requests_total", { status: "499" }), 1);
    assert.equal(
      metric(s, "smg_scheduler_admit_total", { class: "default", outcome: "client_cancelled" }),
      0,
    );
  });

  test("a worker dying mid-stream cuts the client's stream (no clean end) and frees the slot", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      health: { intervalSecs: 3600 },
    });
    const res = await request(`${fleet.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-mock-ttft-ms": "0", "x-mock-token-delay-ms": "30" },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 200 })),
    });
    assert.equal(res.statusCode, 200);
    let text = "";
    await assert.rejects(async () => {
      for await (const chunk of res.body) {
        text += (chunk as Buffer).toString("utf8");
        if (text.length > 0 && fleet.workers[0]!.stats().running === 1) void fleet.workers[0]!.close();
      }
    });
    assert.ok(!text.includes("[DONE]"), "the stream did not end cleanly");
    await waitFor(() => fleet.snapshot().inflight === 0, "slot freed");
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_upstream_errors_total", { kind: "reset" }), 1);
  });

  test("legacy: a client gone while queued leaves the queue", async (t) => {
    const fleet = await startFleet(t, {
      priorityScheduler: { enabled: false },
      legacy: { maxConcurrentRequests: 1, queueSize: 5, queueTimeoutSecs: 60 },
    });
    const legacy = {
      get inflight() {
        return fleet.gateway.admission.snapshot().inflight;
      },
      get queued() {
        return fleet.gateway.admission.snapshot().queued;
      },
    };
    const held = fleet.hold({}, { "x-mock-ttft-ms": "5000" });
    await waitFor(() => legacy.inflight === 1, "slot taken");
    const queued = fleet.hold();
    await waitFor(() => legacy.queued === 1, "queued");
    await queued.cancel();
    await waitFor(() => legacy.queued === 0, "left the queue", { timeoutMs: 1000, intervalMs: 1 });
    assert.equal(metric(await fleet.scrape(), "sluice_http_requests_total", { status: "499" }), 1);
    await held.cancel();
    await waitFor(() => legacy.inflight === 0, "slot freed");
    assertOk(await fleet.chat());
  });
});

/**
 * Circuit breakers through the gateway, with real workers on loopback and the gateway on a manual
 * clock (the cooldown is a timer on it): a worker refusing connections leaves rotation and its
 * capacity leaves the fleet's; it comes back half-open after the cooldown and closed after a good
 * trial. A worker answering 500s opens after N consecutive failures, a failed trial reopens it.
 * The health checks and the breaker report the same thing (status, /metrics).
 */
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, type TestContext, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import type { BreakerOptions } from "../../src/routing/options.js";
import {
  type AdminStatus,
  type Fleet,
  HEALTH_INTERVAL_MS,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const BREAKER: BreakerOptions = {
  failures: 3,
  errorRatio: 0,
  windowSecs: 60,
  minRequests: 20,
  cooldownSecs: 30,
  halfOpenRequests: 1,
};

interface WorkerStatus {
  url: string;
  healthy: boolean;
  circuit: string;
  capacity: number;
}

async function workerStatus(fleet: Fleet, url: string): Promise<WorkerStatus> {
  const status: AdminStatus = await fleet.status();
  return (status.workers as WorkerStatus[]).find((w) => w.url === url)!;
}

async function circuitMetric(fleet: Fleet, url: string): Promise<number | undefined> {
  return metric(await fleet.scrape(), "sluice_worker_circuit_state", { worker: url });
}

/** A worker that answers its health checks and capacity, and 500 (or 200 once fixed) to inference. */
async function brokenWorker(t: TestContext): Promise<{ url: string; fixed: boolean; served: number }> {
  const state = { url: "", fixed: false, served: 0 };
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const json = (status: number, body: unknown) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(body));
      };
      if (req.method === "GET" && req.url === "/health") return json(200, {});
      if (req.method === "GET" && req.url === "/get_server_info")
        return json(200, { max_running_requests: 4 });
      if (req.method === "GET" && req.url === "/v1/models") {
        return json(200, { object: "list", data: [{ id: "mock-llm", object: "model" }] });
      }
      if (req.method === "GET") return json(404, {});
      state.served++;
      if (!state.fixed) return json(500, { error: { message: "broken", type: "server_error", code: null } });
      json(200, {
        id: "x",
        object: "chat.completion",
        choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() =>
    new Promise<void>((resolve) => server.close(() => resolve())).then(() => server.closeAllConnections()),
  );
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}

describe("circuit breakers through the gateway", () => {
  test("a worker refusing connections leaves rotation and the capacity; back half-open after the cooldown, closed after a good trial", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4 }, { maxRunningRequests: 4 }],
      schedulerYaml: smallSchedulerYaml(),
      adminToken: "admin-token",
      gateway: { clock, breaker: BREAKER },
    });
    const [a, b] = fleet.workers as [(typeof fleet.workers)[0], (typeof fleet.workers)[0]];
    const pool = fleet.gateway.workers;
    assert.equal(pool.discoveredCapacity, 8);
    assert.equal(await circuitMetric(fleet, b.url), 0);

    // b goes down (connections refused) for a while.
    const back = b.restart({ downMs: 1500 });
    const bWorker = pool.workers.find((w) => w.url === b.url)!;
    await waitFor(() => bWorker.pool.stats.connected === 0, "pooled connections to b dropped");
    // Round robin: one of the next two requests meets the refusal (502, or served elsewhere once
    // the request is retried); the circuit opens at once.
    await fleet.chat();
    await fleet.chat();
    assert.equal(bWorker.breaker.state, "open");
    assert.equal(await circuitMetric(fleet, b.url), 1);
    const down = await workerStatus(fleet, b.url);
    assert.equal(down.healthy, false, "an open circuit is reported unhealthy");
    assert.equal(down.circuit, "open");
    assert.equal(pool.discoveredCapacity, 4, "its capacity left the fleet's");

    const aBefore = a.stats().totalRequests;
    for (let i = 0; i < 6; i++) assert.equal((await fleet.chat()).status, 200);
    assert.equal(a.stats().totalRequests - aBefore, 6, "every request goes to the other worker");

    await back; // b listens again
    clock.advance(BREAKER.cooldownSecs * 1000);
    assert.equal(bWorker.breaker.state, "half_open");
    await waitFor(() => pool.discoveredCapacity === 5, "half-open: its one trial request counts");
    assert.equal(await circuitMetric(fleet, b.url), 2);
    assert.equal((await workerStatus(fleet, b.url)).healthy, true);

    const bBefore = b.stats().totalRequests;
    for (let i = 0; i < 4; i++) assert.equal((await fleet.chat()).status, 200);
    assert.ok(b.stats().totalRequests > bBefore, "a trial request went to b");
    assert.equal(bWorker.breaker.state, "closed", "one success closed it");
    assert.equal(pool.discoveredCapacity, 8);
    assert.equal(await circuitMetric(fleet, b.url), 0);
  });

  test("N consecutive failures open the circuit; a failed trial reopens it; a good one closes it", async (t) => {
    const clock = new ManualClock();
    const broken = await brokenWorker(t);
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4 }],
      extraWorkers: [{ url: broken.url }],
      schedulerYaml: smallSchedulerYaml(),
      gateway: { clock, breaker: BREAKER },
    });
    const pool = fleet.gateway.workers;
    const bad = pool.workers.find((w) => w.url === broken.url)!;
    assert.equal(bad.breaker.state, "closed");

    const statuses: number[] = [];
    for (let i = 0; i < 20 && broken.served < 3; i++) statuses.push((await fleet.chat()).status);
    assert.equal(statuses.filter((s) => s === 500).length, 3, "the worker's own 500s pass through");
    assert.equal(bad.breaker.state, "open");
    assert.equal(bad.breaker.openReason, "failures");
    assert.equal(pool.discoveredCapacity, 4);
    for (let i = 0; i < 5; i++) assert.equal((await fleet.chat()).status, 200);
    assert.equal(broken.served, 3, "no request reaches an open circuit");

    // Half-open: one trial, still broken: open again for another cooldown.
    clock.advance(BREAKER.cooldownSecs * 1000);
    assert.equal(bad.breaker.state, "half_open");
    for (let i = 0; i < 10 && broken.served < 4; i++) await fleet.chat();
    assert.equal(broken.served, 4, "one trial request");
    assert.equal(bad.breaker.state, "open");
    assert.equal(bad.breaker.openReason, "trial_failed");

    broken.fixed = true;
    clock.advance(BREAKER.cooldownSecs * 1000);
    for (let i = 0; i < 10 && broken.served < 5; i++) assert.equal((await fleet.chat()).status, 200);
    assert.equal(broken.served, 5, "one trial request");
    assert.equal(bad.breaker.state, "closed");
    assert.equal(pool.discoveredCapacity, 8);
  });

  test("health checks and the breaker agree: a worker the checks take out is open, and closed when they put it back", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4 }, { maxRunningRequests: 6 }],
      schedulerYaml: smallSchedulerYaml(),
      adminToken: "admin-token",
      gateway: { clock, breaker: BREAKER },
    });
    const w = fleet.workers[1]!;
    w.setHealthy(false);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(
      async () => (await circuitMetric(fleet, w.url)) === 1,
      "the failed check opened the circuit",
    );
    let s = await workerStatus(fleet, w.url);
    assert.deepEqual([s.healthy, s.circuit], [false, "open"]);
    assert.equal(metric(await fleet.scrape(), "sluice_workers_healthy"), 1);
    // No cooldown ends a hold by the health checks.
    clock.advance(BREAKER.cooldownSecs * 1000 + 1);
    assert.equal(await circuitMetric(fleet, w.url), 1);

    w.setHealthy(true);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(async () => (await circuitMetric(fleet, w.url)) === 0, "the passing check closed it");
    s = await workerStatus(fleet, w.url);
    assert.deepEqual([s.healthy, s.circuit], [true, "closed"]);
    assert.equal(fleet.gateway.workers.discoveredCapacity, 10);
  });
});

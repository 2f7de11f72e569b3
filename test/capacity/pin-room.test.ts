/**
 * A capacity pin is the capacity the operator wants at the workers (issue 35, finding 13). A pin
 * above the workers' reports lifts each worker's room in proportion (ceil(its report x pin / their
 * sum)), so every request the scheduler admits under the pin reaches a worker; before, routing
 * still held each worker to its report and the rest waited, admitted and uncounted, for a worker.
 * And no admitted request waits for a worker without a bound (5 s), a metric
 * (`sluice_pool_room_waiting`, `sluice_pool_room_waits_total`) and a documented answer (503
 * `worker_room_timeout`). Real HTTP, mock workers.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ROOM_WAIT_MS } from "../../src/gateway/fleet/workers.js";
import {
  assertError,
  assertOk,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const SLOW = { "x-mock-ttft-ms": "800" };

describe("a pin above the workers' reported capacity", () => {
  test("worker reports 1, pin 4: four concurrent requests all reach the worker at once", async (t) => {
    // The worker runs 8 at a time but reports 1 (the operator knows better, and pins).
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 8, reportedCapacity: 1 }],
      schedulerYaml: smallSchedulerYaml(),
      adminToken: "pin-token",
    });
    assert.equal(fleet.gateway.capacity.capacity, 1);
    const pin = await fleet.admin("PUT", "/api/v1/capacity", { max_in_flight: 4 });
    assert.equal(pin.status, 200, pin.text);
    assert.deepEqual(JSON.parse(pin.text), { capacity: 4, pinned: 4 });

    const started = performance.now();
    const held = [0, 1, 2, 3].map(() => fleet.hold({ max_tokens: 2 }, SLOW));
    await waitFor(() => fleet.workers[0]!.stats().open === 4, "all four open at the worker", {
      timeoutMs: 1500,
    });
    assert.equal(fleet.snapshot().inflight, 4);
    assert.equal(fleet.gateway.workers.workers[0]!.inflight, 4);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_pool_room_waiting", { model: "mock-llm" }), 0, "nothing waits");
    const replies = await Promise.all(held.map((h) => h.result));
    for (const r of replies) assertOk(r);
    const lastEnd = Math.max(...replies.map((r) => (r instanceof Error ? 0 : r.endedAt)));
    assert.ok(
      lastEnd - started < 2500,
      `all four in one service time (${(lastEnd - started).toFixed(0)} ms)`,
    );
    assert.equal(fleet.workers[0]!.stats().openPeak, 4);
    const after = await fleet.scrape();
    assert.equal(
      metric(after, "sluice_pool_room_waits_total", { model: "mock-llm", outcome: "dispatched" }) ?? 0,
      0,
      "none had to wait for a worker",
    );
  });

  test("adaptive capacity: the pin lifts the adaptive limits and the rooms alike", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 8, reportedCapacity: 1 }],
      schedulerYaml: smallSchedulerYaml(),
      adminToken: "pin-token",
      gateway: { capacity: { mode: "adaptive", minCapacity: 1 } },
    });
    assert.equal((await fleet.admin("PUT", "/api/v1/capacity", { max_in_flight: 4 })).status, 200);
    const worker = fleet.gateway.workers.workers[0]!;
    assert.equal(worker.adaptiveLimit, undefined, "the adaptive limit stands down under the pin");
    assert.equal(worker.room, 4);
    const held = [0, 1, 2, 3].map(() => fleet.hold({ max_tokens: 2 }, SLOW));
    await waitFor(() => fleet.workers[0]!.stats().open === 4, "all four open at the worker", {
      timeoutMs: 1500,
    });
    for (const r of await Promise.all(held.map((h) => h.result))) assertOk(r);
    assert.equal((await fleet.admin("DELETE", "/api/v1/capacity")).status, 200);
    assert.ok(worker.room <= 1, "unpinned: the report (and the adaptive limit) again");
  });

  test("two workers reporting 1 and 3, pin 8: rooms 2 and 6, all eight run at once", async (t) => {
    const fleet = await startFleet(t, {
      workers: [
        { maxRunningRequests: 8, reportedCapacity: 1 },
        { maxRunningRequests: 8, reportedCapacity: 3 },
      ],
      schedulerYaml: smallSchedulerYaml(),
      adminToken: "pin-token",
    });
    assert.equal(fleet.gateway.capacity.capacity, 4);
    assert.equal((await fleet.admin("PUT", "/api/v1/capacity", { max_in_flight: 8 })).status, 200);
    const [a, b] = fleet.gateway.workers.workers;
    assert.equal(a!.room, 2);
    assert.equal(b!.room, 6);
    const held = Array.from({ length: 8 }, () => fleet.hold({ max_tokens: 2 }, SLOW));
    await waitFor(
      () => fleet.workers[0]!.stats().open + fleet.workers[1]!.stats().open === 8,
      "all eight open at the workers",
      { timeoutMs: 1500 },
    );
    assert.ok(fleet.workers[0]!.stats().open <= 2, "worker a within its share of the pin");
    assert.ok(fleet.workers[1]!.stats().open <= 6, "worker b within its share");
    for (const r of await Promise.all(held.map((h) => h.result))) assertOk(r);

    // A pin under the reports leaves the rooms at the reports: admission bounds the total.
    assert.equal((await fleet.admin("PUT", "/api/v1/capacity", { max_in_flight: 2 })).status, 200);
    assert.equal(a!.room, 1);
    assert.equal(b!.room, 3);
    // Unpinned: the reports again.
    assert.equal((await fleet.admin("DELETE", "/api/v1/capacity")).status, 200);
    assert.equal(a!.room, 1);
    assert.equal(b!.room, 3);
  });

  test("unpinned, a worker reporting 1 runs one: the rest wait in the scheduler's queue, where they show", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 8, reportedCapacity: 1 }],
      schedulerYaml: smallSchedulerYaml(),
      adminToken: "pin-token",
    });
    const held = [0, 1, 2].map(() => fleet.hold({ max_tokens: 2 }, { "x-mock-ttft-ms": "300" }));
    await waitFor(() => fleet.snapshot().queued === 2, "two queued");
    assert.equal(fleet.workers[0]!.stats().open, 1);
    for (const r of await Promise.all(held.map((h) => h.result))) assertOk(r);
    assert.equal(fleet.workers[0]!.stats().openPeak, 1);
  });
});

describe("an admitted request that finds every worker of its pool full", () => {
  // One pool of capacity 4: worker a (room 1) serves the base model and its adapter, worker b
  // (room 3) the base model only. Adapter requests are admitted by the pool's capacity, but only a
  // can run them: the second one waits for a worker.
  const BASE = "base-model";
  const ADAPTER = "base-model-sql";
  async function mixedFleet(t: Parameters<typeof startFleet>[0]) {
    return startFleet(t, {
      workers: [
        { maxRunningRequests: 1, model: BASE, servedModels: [BASE, ADAPTER] },
        { maxRunningRequests: 3, model: BASE, servedModels: [BASE] },
      ],
      schedulerYaml: smallSchedulerYaml(),
    });
  }

  test("waits, counted in sluice_pool_room_waiting, and is dispatched when the worker frees", async (t) => {
    const fleet = await mixedFleet(t);
    assert.equal(fleet.gateway.capacity.capacity, 4);
    const first = fleet.hold({ model: ADAPTER, max_tokens: 2 }, { "x-mock-ttft-ms": "600" });
    await waitFor(() => fleet.workers[0]!.stats().open === 1, "the first runs on a");
    const second = fleet.hold({ model: ADAPTER, max_tokens: 2 }, { "x-mock-ttft-ms": "10" });
    await waitFor(
      async () => metric(await fleet.scrape(), "sluice_pool_room_waiting", { model: BASE }) === 1,
      "the second waits for a worker, and the metric shows it",
    );
    assert.equal(fleet.snapshot().inflight, 2, "admitted");
    assertOk(await first.result);
    assertOk(await second.result);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_pool_room_waiting", { model: BASE }), 0);
    assert.equal(metric(s, "sluice_pool_room_waits_total", { model: BASE, outcome: "dispatched" }), 1);
    assert.equal(fleet.workers[0]!.stats().openPeak, 1, "never over its capacity");
  });

  test(`past ${ROOM_WAIT_MS / 1000} s: 503 worker_room_timeout, counted; the worker never goes over its capacity`, {
    timeout: 30_000,
  }, async (t) => {
    const fleet = await mixedFleet(t);
    const first = fleet.hold(
      { model: ADAPTER, max_tokens: 2 },
      { "x-mock-ttft-ms": String(ROOM_WAIT_MS + 2000) },
    );
    await waitFor(() => fleet.workers[0]!.stats().open === 1, "the first runs on a");
    const waitedFrom = performance.now();
    const second = await fleet.chat({ model: ADAPTER, max_tokens: 2 });
    const waited = performance.now() - waitedFrom;
    assertError(second, 503, "worker_room_timeout");
    assert.equal(second.headers["retry-after"], "1");
    assert.ok(
      waited >= ROOM_WAIT_MS - 50 && waited < ROOM_WAIT_MS + 2000,
      `answered after ${waited.toFixed(0)} ms`,
    );
    assert.equal(fleet.workers[0]!.stats().openPeak, 1, "not sent over the worker's capacity");
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_pool_room_waits_total", { model: BASE, outcome: "timeout" }), 1);
    assert.equal(metric(s, "sluice_pool_room_waiting", { model: BASE }), 0);
    const record = fleet.outcomes.find((o) => o.errorCode === "worker_room_timeout");
    assert.equal(record?.outcome, "timeout");
    assert.equal(record?.status, 503);
    assert.equal(fleet.snapshot().inflight, 1, "its slot came back");
    assertOk(await first.result);
  });

  test("a client that leaves while it waits: counted as cancelled, its slot back", async (t) => {
    const fleet = await mixedFleet(t);
    const first = fleet.hold({ model: ADAPTER, max_tokens: 2 }, { "x-mock-ttft-ms": "1500" });
    await waitFor(() => fleet.workers[0]!.stats().open === 1, "the first runs on a");
    const second = fleet.hold({ model: ADAPTER, max_tokens: 2 });
    await waitFor(
      async () => metric(await fleet.scrape(), "sluice_pool_room_waiting", { model: BASE }) === 1,
      "the second waits",
    );
    await second.cancel();
    await waitFor(
      async () =>
        metric(await fleet.scrape(), "sluice_pool_room_waits_total", {
          model: BASE,
          outcome: "cancelled",
        }) === 1,
      "counted as cancelled",
    );
    await waitFor(() => fleet.snapshot().inflight === 1, "its slot came back");
    assertOk(await first.result);
  });
});

/**
 * Capacity in KV tokens in the gateway's worker pool (src/gateway/fleet/workers.ts), without HTTP:
 * a pool's mean footprint derives each worker's room from its KV budget (bounded by max_running,
 * narrowed by foreign load), the pool hears when its capacity moved, routing places a request where
 * it fits, and a worker without a KV size counts requests. The pool runs on a ManualClock that
 * nothing advances: no probe or scrape runs.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { pino } from "pino";
import { EngineSignalReader } from "../../src/gateway/fleet/engine-signals.js";
import { type Worker, WorkerGroup, WorkerPool } from "../../src/gateway/fleet/workers.js";

function kvPool(kvTokens: Array<number | undefined>): {
  pool: WorkerPool;
  group: WorkerGroup;
  moved: number[];
} {
  const pool = new WorkerPool({
    workers: kvTokens.map((_, i) => ({ url: `http://127.0.0.1:${9100 + i}` })),
    policy: "round_robin",
    health: {
      intervalSecs: 60,
      timeoutSecs: 1,
      failureThreshold: 1,
      successThreshold: 1,
      endpoint: "/health",
    },
    fallbackCapacity: 1,
    logger: pino({ level: "silent" }),
    clock: new ManualClock(),
  });
  pool.respectCapacity = true;
  pool.workers.forEach((w, i) => {
    w.healthy = true;
    w.reportedCapacity = 16;
    w.kvCapacityTokens = kvTokens[i];
  });
  const group = new WorkerGroup();
  group.kv = { unit: "kv_tokens", targetUtilization: 0.9 };
  group.setMembers(pool.workers);
  const moved: number[] = [];
  group.capacityMoved = () => moved.push(group.capacity);
  return { pool, group, moved };
}

function take(pool: WorkerPool, group: WorkerGroup, footprint: number): Worker {
  const w = pool.tryAcquire(group, undefined, undefined, footprint);
  assert.ok(w, "a worker with room");
  w.footprintTokens += footprint;
  return w;
}

describe("KV-token rooms in the worker pool", () => {
  test("rooms follow the pool's mean footprint; the pool hears each move", () => {
    const { group, moved } = kvPool([20_000, 10_000]);
    // No request yet: max_running.
    assert.equal(group.capacity, 32);
    group.observeFootprint(3000);
    // 18000 / 3000 = 6 and 9000 / 3000 = 3.
    assert.deepEqual(
      group.members.map((w) => w.room),
      [6, 3],
    );
    assert.deepEqual(moved, [9]);
    // Short prompts: the mean comes down, the rooms grow back to max_running.
    for (let i = 0; i < 200; i++) group.observeFootprint(200);
    assert.deepEqual(
      group.members.map((w) => w.room),
      [16, 16],
    );
    assert.equal(moved.at(-1), 32);
    // Foreign load (5 requests of other clients at the last scrape) narrows the room as under requests.
    const w = group.members[0]!;
    w.engineLoad.record(
      {
        maxRunning: 16,
        maxRunningSource: "vllm_default",
        kvCapacityTokens: 20_000,
        running: 5,
        waiting: 0,
        kvUtilization: 0.2,
      },
      0,
      { requestsBefore: 0, requestsAfter: 0, promptTokensBefore: 0, promptTokensAfter: 0 },
    );
    assert.equal(w.room, 11);
    assert.equal(w.budgetTokens, 18_000);
  });

  test("routing places a request where it fits; none fits: the most KV left", () => {
    const { pool, group } = kvPool([10_000, 10_000]);
    group.observeFootprint(1000);
    const [a, b] = pool.workers as [Worker, Worker];
    a.footprintTokens = 8000;
    // 3000 more fits b only (budget 9000), whatever round robin would say.
    for (let i = 0; i < 3; i++) {
      const w = pool.tryAcquire(group, undefined, undefined, 3000);
      assert.equal(w, b);
      pool.release(w!);
    }
    b.footprintTokens = 8500;
    // Fits neither: a has 1000 left, b 500.
    const w = pool.tryAcquire(group, undefined, undefined, 3000);
    assert.equal(w, a);
    pool.release(w!);
  });

  test("admitted up to the derived count, the footprints stay within the budget", () => {
    const { pool, group } = kvPool([30_000]);
    group.observeFootprint(4000);
    const w = pool.workers[0]!;
    assert.equal(w.room, 6, "27000 / 4000");
    for (let i = 0; i < 6; i++) take(pool, group, 4000);
    assert.equal(w.inflight, 6);
    assert.ok(w.footprintTokens <= w.budgetTokens!);
    assert.equal(
      pool.tryAcquire(group, undefined, undefined, 4000),
      null,
      "full: the request waits for room",
    );
  });

  test("a worker whose engine reports no KV size counts requests", () => {
    const { group } = kvPool([10_000, undefined]);
    group.observeFootprint(5000);
    const [a, b] = group.members as [Worker, Worker];
    assert.equal(a.capacityUnit, "kv_tokens");
    assert.equal(a.room, 1, "9000 / 5000");
    assert.equal(b.capacityUnit, "requests");
    assert.equal(b.budgetTokens, undefined);
    assert.equal(b.room, 16);
    assert.equal(group.capacity, 17);
  });

  test("a pool counting requests ignores footprints", () => {
    const { pool, group } = kvPool([10_000]);
    group.kv = { unit: "requests", targetUtilization: 0.9 };
    group.observeFootprint(5000);
    assert.equal(pool.workers[0]!.room, 16);
    assert.equal(pool.workers[0]!.capacityUnit, "requests");
  });
});

describe("KV size without a /metrics reading", () => {
  test("SGLang without --enable-metrics: max_total_num_tokens from /get_server_info makes the budget", async () => {
    const { pool, group } = kvPool([undefined]);
    const w = pool.workers[0]!;
    w.sglangInfo = { maxRunningRequests: 16, maxTotalNumTokens: 50_000 };
    const reader = new EngineSignalReader({
      settings: { engine: "auto", scrapeIntervalMs: 0, scrapeTimeoutMs: 1000 },
      workers: pool.workers,
      logger: pino({ level: "silent" }),
      clock: new ManualClock(),
      get: async () => ({ status: 404, body: "not found" }),
      changed: () => {},
    });
    await reader.recognise(w);
    assert.equal(w.engine, "sglang");
    assert.equal(w.scrapesMetrics, false);
    assert.equal(w.kvCapacityTokens, 50_000);
    assert.equal(w.capacityUnit, "kv_tokens");
    group.observeFootprint(5000);
    assert.equal(w.room, 9, "45000 / 5000");
    // Back as a plain OpenAI server: the old KV size goes with the old engine.
    w.sglangInfo = undefined;
    await reader.recognise(w);
    assert.equal(w.engine, "openai");
    assert.equal(w.kvCapacityTokens, undefined);
    assert.equal(w.capacityUnit, "requests");
  });
});

/**
 * Capacity in KV tokens over real HTTP (docs/capacity.md, "Capacity in KV tokens"): a gateway in
 * front of `mock-worker --engine vllm` reads the KV capacity from the engine's own signals with no
 * configuration and, under `capacity_unit: kv_tokens`, admits by footprint: long prompts get fewer
 * requests at the worker at once, and the engine (the mock's own running/waiting counts) does not
 * queue, where counting requests sends it more than its KV holds. A worker whose engine reports no
 * KV capacity counts requests, and the log says so once.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import type { CapacityUnit } from "../../src/capacity/kv-budget.js";
import {
  type Held,
  LEVEL_WARN,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const ADMIN = "kv-token";
/** 1024 blocks of 16 tokens. */
const KV_TOKENS = 16_384;
/** ~3000 prompt tokens (the mock and the gateway both count characters / 4). */
const LONG_PROMPT = "word ".repeat(2400);

interface WorkerKvStatus {
  url: string;
  capacity: number;
  capacity_unit: string;
  room: number;
  kv_footprint_tokens: number;
  kv_budget_tokens: number | null;
  engine_signals: { kv_capacity_tokens: number | null } | null;
}

async function startKvFleet(
  t: Parameters<typeof startFleet>[0],
  unit: CapacityUnit,
  engine = "vllm" as const,
) {
  return startFleet(t, {
    workers: [{ engine, maxRunningRequests: 64, kvTokens: KV_TOKENS, contextLength: 4096 }],
    // No reservations: the test counts what one class gets (docs/capacity.md says how floors map).
    schedulerYaml: smallSchedulerYaml(),
    adminToken: ADMIN,
    gateway: {
      clock: new ManualClock(),
      engineSignals: { scrapeIntervalMs: 2000 },
      kvCapacity: { fleet: { unit, targetUtilization: 0.9 }, pools: {} },
    },
  });
}

/** Holds `n` long-prompt requests open at the worker (their first token is a minute away). */
function holdLong(fleet: Awaited<ReturnType<typeof startKvFleet>>, n: number): Held[] {
  return Array.from({ length: n }, () =>
    fleet.hold(
      { messages: [{ role: "user", content: LONG_PROMPT }], max_tokens: 16 },
      { "x-mock-ttft-ms": "60000" },
    ),
  );
}

describe("capacity in KV tokens over real HTTP", () => {
  test("kv_tokens: KV capacity discovered with no config; long prompts admitted by footprint, no queue at the engine", async (t) => {
    const fleet = await startKvFleet(t, "kv_tokens");
    const worker = fleet.workers[0]!;
    let w = ((await fleet.status()).workers as WorkerKvStatus[])[0]!;
    assert.equal(w.engine_signals?.kv_capacity_tokens, KV_TOKENS, "read from vllm:cache_config_info");
    assert.equal(w.capacity_unit, "kv_tokens");
    assert.equal(w.kv_budget_tokens, Math.floor(KV_TOKENS * 0.9));
    // Before any request the room is the engine's max sequences (vLLM's default 256).
    assert.equal(fleet.gateway.capacity.capacity, 256);

    const held = holdLong(fleet, 8);
    t.after(() => Promise.all(held.map((h) => h.cancel())));
    // Footprint ~3016 (prompt ~3000 + the 16 output tokens its max_tokens allows): 14745 / 3016 = 4.
    await waitFor(() => worker.stats().open === 4, "four long requests at the worker");
    await waitFor(async () => (await fleet.status()).queued === 4, "the other four queued in sluice");
    const s = worker.stats();
    assert.equal(s.running, 4);
    assert.equal(s.waiting, 0, "the engine does not queue: the KV holds every request sluice sent");
    assert.equal(s.kv?.preemptions, 0);
    assert.equal(fleet.gateway.capacity.capacity, 4);

    w = ((await fleet.status()).workers as WorkerKvStatus[])[0]!;
    assert.equal(w.room, 4);
    assert.ok(
      w.kv_footprint_tokens > 4 * 3000 && w.kv_footprint_tokens <= w.kv_budget_tokens!,
      `footprint ${w.kv_footprint_tokens} within the budget ${w.kv_budget_tokens}`,
    );
    const pool = ((await fleet.status()).pools as Record<string, Record<string, unknown>>)["mock-llm"]!;
    assert.equal(pool.capacity_unit, "kv_tokens");
    assert.equal(pool.kv_target_utilization, 0.9);
    assert.ok((pool.mean_footprint_tokens as number) > 3000);

    const scrape = await fleet.scrape();
    const labels = { worker: worker.url, pool: "mock-llm" };
    assert.equal(metric(scrape, "sluice_worker_kv_footprint_tokens", labels), w.kv_footprint_tokens);
    assert.equal(metric(scrape, "sluice_worker_kv_budget_tokens", labels), w.kv_budget_tokens);

    // One leaves: the next queued one takes its place, still four at the worker, none waiting there.
    await held[0]!.cancel();
    await waitFor(async () => (await fleet.status()).queued === 3, "one more admitted");
    assert.equal(worker.stats().open, 4);
    assert.equal(worker.stats().waiting, 0);
  });

  test("requests: the same load is all sent to the engine, which queues what its KV cannot hold", async (t) => {
    const fleet = await startKvFleet(t, "requests");
    const worker = fleet.workers[0]!;
    const w = ((await fleet.status()).workers as WorkerKvStatus[])[0]!;
    assert.equal(w.capacity_unit, "requests");
    assert.equal(w.kv_budget_tokens, null);
    const held = holdLong(fleet, 8);
    t.after(() => Promise.all(held.map((h) => h.cancel())));
    await waitFor(() => worker.stats().open === 8, "all eight at the worker");
    // 1024 blocks hold five prompts of ~188 blocks: three wait inside the engine, outside priority order.
    await waitFor(() => worker.stats().waiting === 3, "three waiting at the engine");
    assert.equal(worker.stats().running, 5);
  });

  test("kv_tokens with an engine that reports no KV capacity: counts requests, one WARN", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 6 }],
      adminToken: ADMIN,
      gateway: {
        clock: new ManualClock(),
        engineSignals: { scrapeIntervalMs: 2000 },
        kvCapacity: { fleet: { unit: "kv_tokens", targetUtilization: 0.9 }, pools: {} },
      },
    });
    const w = ((await fleet.status()).workers as WorkerKvStatus[])[0]!;
    assert.equal(w.capacity_unit, "requests");
    assert.equal(w.kv_budget_tokens, null);
    assert.equal(fleet.gateway.capacity.capacity, 6);
    for (let i = 0; i < 3; i++) assert.equal((await fleet.chat({ max_tokens: 4 })).status, 200);
    assert.equal(fleet.gateway.capacity.capacity, 6, "the footprints do not move a requests worker's room");
    const warns = fleet.logs.filter(
      (l) => l.level === LEVEL_WARN && String(l.msg).includes("reports no KV capacity"),
    );
    assert.equal(warns.length, 1, "said once");
    assert.equal(warns[0]!.worker, fleet.workers[0]!.url);
  });

  test("a pool's own capacity_unit; a reserved floor stays a floor of requests", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ engine: "vllm", maxRunningRequests: 64, kvTokens: KV_TOKENS, contextLength: 4096 }],
      schedulerYaml: smallSchedulerYaml({ classes: { interactive: { reserved_floor: 1 } } }),
      adminToken: ADMIN,
      gateway: {
        clock: new ManualClock(),
        engineSignals: { scrapeIntervalMs: 2000 },
        // The fleet counts requests; this pool counts KV tokens.
        kvCapacity: {
          fleet: { unit: "requests", targetUtilization: 0.9 },
          pools: { "mock-llm": { unit: "kv_tokens" } },
        },
      },
    });
    const worker = fleet.workers[0]!;
    const held = holdLong(fleet, 8);
    t.after(() => Promise.all(held.map((h) => h.cancel())));
    // Capacity 4 (the KV budget over the long footprints), one of it held for interactive: default gets 3.
    await waitFor(() => worker.stats().open === 3, "three default requests at the worker");
    await waitFor(async () => (await fleet.status()).queued === 5, "five default requests queued in sluice");
    assert.equal(fleet.gateway.capacity.capacity, 4);
    assert.equal(fleet.snapshot().classes.interactive.reserved, 1);
    // An interactive request takes the reserved slot at once, and its small footprint fits the KV.
    const reply = await fleet.chat({ max_tokens: 4 }, { "x-smg-priority": "interactive" });
    assert.equal(reply.status, 200, reply.text);
    assert.equal(reply.headers["x-sluice-admission"], "fast", "admitted without queueing");
    assert.equal(worker.stats().waiting, 0);
  });
});

/**
 * Engine signals over real HTTP (docs/capacity.md): a gateway in front of the mock worker speaking
 * vLLM or SGLang recognises the engine with no configuration, takes its capacity from the engine's
 * own numbers, narrows a worker's room by what other clients hold at it, never overshoots while its
 * scrapes are stale, and keeps today's behaviour (one WARN) when /metrics is absent or garbage.
 * Scrapes run on a ManualClock: a test decides when the next one happens.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { request } from "undici";
import type { MockWorker } from "../../src/mock-worker/index.js";
import { redisOrSkip, statePrefix } from "../admission/services.js";
import { LEVEL_WARN, metric, startFleet, waitFor } from "../helpers/harness.js";

const SCRAPE_MS = 2000;
const ADMIN = "engine-token";

interface EngineSignalsStatus {
  max_running: number | null;
  max_running_source: string | null;
  kv_capacity_tokens: number | null;
  running: number | null;
  waiting: number | null;
  kv_utilization: number | null;
  foreign: number | null;
  estimated_open: number | null;
  estimated_kv_utilization: number | null;
  age_seconds: number | null;
  scrapes: number;
  failed_scrapes: number;
  problem: string | null;
}

interface WorkerStatus {
  url: string;
  capacity: number;
  engine: string | null;
  engine_setting: string;
  engine_signals: EngineSignalsStatus | null;
}

async function workerStatus(fleet: { status(): Promise<Record<string, unknown>> }): Promise<WorkerStatus> {
  const status = await fleet.status();
  return (status.workers as WorkerStatus[])[0]!;
}

/** Scrape rounds done so far (succeeded or failed). */
async function rounds(fleet: { status(): Promise<Record<string, unknown>> }): Promise<number> {
  const s = (await workerStatus(fleet)).engine_signals;
  return (s?.scrapes ?? 0) + (s?.failed_scrapes ?? 0);
}

/** Advances the clock one interval and waits for that scrape's outcome. */
async function nextScrape(fleet: { status(): Promise<Record<string, unknown>> }, clock: ManualClock) {
  const before = await rounds(fleet);
  clock.advance(SCRAPE_MS);
  await waitFor(async () => (await rounds(fleet)) > before, "the next scrape's outcome");
}

/** A request straight to the worker (another client), held open until `abort`. */
function direct(worker: MockWorker): { abort(): void; done: Promise<unknown> } {
  const controller = new AbortController();
  const done = request(`${worker.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-mock-ttft-ms": "60000" },
    body: JSON.stringify({ model: "mock-llm", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
    signal: controller.signal,
  })
    .then((r) => r.body.text())
    .catch(() => undefined);
  return { abort: () => controller.abort(), done };
}

describe("engine signals over real HTTP", () => {
  test("vLLM with no config: recognised, max sequences and KV capacity from its own signals", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ engine: "vllm" }],
      adminToken: ADMIN,
      gateway: { clock, engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const kv = fleet.workers[0]!.stats().kv!;
    const w = await workerStatus(fleet);
    assert.equal(w.engine, "vllm");
    assert.equal(w.engine_setting, "auto");
    // vLLM exports no max_num_seqs: its default (256, the mock's too), not the blind 64.
    assert.equal(w.capacity, 256);
    assert.equal(w.engine_signals?.max_running_source, "vllm_default");
    assert.equal(w.engine_signals?.kv_capacity_tokens, kv.blockSize * kv.totalBlocks);
    assert.equal(fleet.gateway.capacity.capacity, 256);
    assert.ok(
      fleet.logs.some((l) => l.msg === "worker engine: vllm" && l.worker === fleet.workers[0]!.url),
      "the log says what was recognised",
    );

    const scrape = await fleet.scrape();
    const labels = { worker: fleet.workers[0]!.url, pool: "mock-llm" };
    assert.equal(metric(scrape, "sluice_worker_engine_running", labels), 0);
    assert.equal(metric(scrape, "sluice_worker_engine_waiting", labels), 0);
    assert.equal(metric(scrape, "sluice_worker_kv_utilization", labels), 0);
    assert.equal(metric(scrape, "sluice_worker_kv_capacity_tokens", labels), kv.blockSize * kv.totalBlocks);
    assert.equal(metric(scrape, "sluice_worker_scrape_age_seconds", labels), 0);
    clock.advance(500);
    const later = await fleet.scrape();
    assert.equal(metric(later, "sluice_worker_scrape_age_seconds", labels), 0.5);
  });

  test("vLLM whose KV holds fewer blocks than its default sequences: capacity = KV blocks", async (t) => {
    // 20 blocks of 16 tokens: no more than 20 sequences can hold a block each.
    const fleet = await startFleet(t, {
      workers: [{ engine: "vllm", maxRunningRequests: 32, kvTokens: 320, contextLength: 256 }],
      adminToken: ADMIN,
      gateway: { clock: new ManualClock(), engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const w = await workerStatus(fleet);
    assert.equal(w.capacity, 20);
    assert.equal(w.engine_signals?.max_running_source, "vllm_default_kv_blocks");
    assert.equal(w.engine_signals?.kv_capacity_tokens, 320);
  });

  test("SGLang with no config: capacity = max_running_requests, as before; KV = max_total_num_tokens", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ engine: "sglang", maxRunningRequests: 12, kvTokens: 4096, contextLength: 1024 }],
      adminToken: ADMIN,
      gateway: { clock: new ManualClock(), engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const w = await workerStatus(fleet);
    assert.equal(w.engine, "sglang");
    assert.equal(w.capacity, 12);
    assert.equal(w.engine_signals?.max_running_source, "max_running_requests");
    assert.equal(w.engine_signals?.kv_capacity_tokens, 4096);
    assert.equal(fleet.gateway.capacity.capacity, 12);
  });

  test("stale scrapes (50 arrivals between two): never more than capacity open, reconverges at the next scrape", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ engine: "vllm", maxRunningRequests: 8, kvTokens: 8 * 16 * 64, contextLength: 1024 }],
      workerCapacity: [8],
      adminToken: ADMIN,
      gateway: { clock, engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const worker = fleet.workers[0]!;
    // Another client holds 3 requests at the engine; the next scrape sees them.
    const others = [direct(worker), direct(worker), direct(worker)];
    await waitFor(() => worker.stats().running === 3, "three foreign requests running");
    await nextScrape(fleet, clock);
    let w = await workerStatus(fleet);
    assert.equal(w.engine_signals?.foreign, 3);
    assert.equal(fleet.gateway.capacity.capacity, 5, "8 less the 3 others hold");
    worker.resetStats();

    // 50 arrivals while the reading stays as it is (no scrape: the clock does not move).
    const replies = await Promise.all(
      Array.from({ length: 50 }, () => fleet.chat({ max_tokens: 4 }, { "x-mock-ttft-ms": "20" })),
    );
    for (const r of replies) assert.equal(r.status, 200, r.text);
    assert.ok(worker.stats().openPeak <= 8, `open at the worker peaked at ${worker.stats().openPeak} > 8`);
    assert.equal(worker.stats().overCapacitySpells, 0);
    assert.equal((await workerStatus(fleet)).engine_signals?.scrapes, 2, "no scrape during the arrivals");

    // The others leave: the stale reading still counts them until the next scrape.
    for (const o of others) o.abort();
    await Promise.all(others.map((o) => o.done));
    await waitFor(() => worker.stats().open === 0, "the others gone from the worker");
    w = await workerStatus(fleet);
    assert.equal(w.engine_signals?.foreign, 3, "stale until the next scrape");
    assert.equal(w.engine_signals?.estimated_open, 3);
    await nextScrape(fleet, clock);
    w = await workerStatus(fleet);
    assert.equal(w.engine_signals?.foreign, 0);
    assert.equal(w.engine_signals?.estimated_open, worker.stats().open, "the estimate meets the engine");
    assert.equal(fleet.gateway.capacity.capacity, 8);
  });

  test("between scrapes the KV estimate moves with the gateway's own prompts, and meets the engine again", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ engine: "sglang", maxRunningRequests: 8, kvTokens: 100_000, contextLength: 4096 }],
      adminToken: ADMIN,
      gateway: { clock, engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const prompt = "tok ".repeat(2000);
    const held = [0, 1].map(() =>
      fleet.hold(
        { messages: [{ role: "user", content: prompt }], max_tokens: 4 },
        { "x-mock-ttft-ms": "60000" },
      ),
    );
    await waitFor(() => fleet.workers[0]!.stats().open === 2, "both open at the worker");
    let s = (await workerStatus(fleet)).engine_signals!;
    // The last scrape (at startup) saw an empty cache: the two prompts are the gateway's estimate alone.
    const perRequest = s.estimated_kv_utilization! / 2;
    assert.ok(
      perRequest > 0.015 && perRequest < 0.03,
      `one prompt ~2000 tokens of 100000, got ${perRequest}`,
    );
    assert.equal(s.kv_utilization, 0);
    // The same estimate is a gauge beside the scrape's own.
    const gauges = await fleet.scrape();
    const labels = { worker: fleet.workers[0]!.url, pool: "mock-llm" };
    assert.equal(metric(gauges, "sluice_worker_kv_utilization", labels), 0);
    const gauged = metric(gauges, "sluice_worker_kv_utilization_estimated", labels)!;
    assert.ok(Math.abs(gauged - s.estimated_kv_utilization!) < 1e-4, `gauge ${gauged} = status`);
    await held[0]!.cancel();
    // The gateway sees the client go a moment after the cancel returns.
    await waitFor(() => fleet.workers[0]!.stats().open === 1, "one open at the worker");
    await waitFor(async () => {
      s = (await workerStatus(fleet)).engine_signals!;
      return Math.abs(s.estimated_kv_utilization! - perRequest) < 1e-9;
    }, "the estimate: one prompt left");
    await nextScrape(fleet, clock);
    s = (await workerStatus(fleet)).engine_signals!;
    const kv = fleet.workers[0]!.stats().kv!;
    assert.equal(s.kv_utilization, kv.usedTokens / kv.capacityTokens, "the engine's own number");
    assert.equal(s.estimated_kv_utilization, Number(s.kv_utilization!.toFixed(4)), "estimate = scrape");
    await held[1]!.cancel();
  });

  test("with shared state, foreign load is shown but not subtracted (the shared admission counts replicas)", async (t) => {
    const url = await redisOrSkip(t);
    if (url === undefined) return;
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ engine: "vllm", maxRunningRequests: 8, kvTokens: 8 * 16 * 64, contextLength: 1024 }],
      workerCapacity: [8],
      adminToken: ADMIN,
      gateway: {
        clock,
        engineSignals: { scrapeIntervalMs: SCRAPE_MS },
        state: { url, keyPrefix: statePrefix(t), replicaId: "engine-a", failMode: "local", leaseTtlSecs: 5 },
      },
    });
    const worker = fleet.workers[0]!;
    const others = [direct(worker), direct(worker)];
    t.after(async () => {
      for (const o of others) o.abort();
      await Promise.all(others.map((o) => o.done));
    });
    await waitFor(() => worker.stats().running === 2, "two requests of another replica running");
    await nextScrape(fleet, clock);
    const w = await workerStatus(fleet);
    assert.equal(w.engine_signals?.running, 2);
    assert.equal(w.engine_signals?.foreign, 0);
    assert.equal(fleet.gateway.capacity.capacity, 8);
  });

  test("engine vllm configured but /metrics absent: capacity as before, one WARN naming the worker", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 10 }],
      adminToken: ADMIN,
      gateway: { clock, engineSignals: { engine: "vllm", scrapeIntervalMs: SCRAPE_MS } },
    });
    const url = fleet.workers[0]!.url;
    for (let i = 0; i < 3; i++) await nextScrape(fleet, clock);
    const w = await workerStatus(fleet);
    assert.equal(w.engine_signals?.failed_scrapes, 4, "one at recognition, three rounds");
    assert.equal(w.engine, "vllm");
    assert.equal(w.capacity, 10, "/get_server_info's max_running_requests, as today");
    assert.match(w.engine_signals?.problem ?? "", /\/metrics: answered 404/);
    const warns = fleet.logs.filter((l) => l.level === LEVEL_WARN && l.worker === url);
    assert.equal(warns.length, 1, JSON.stringify(warns));
    assert.match(String(warns[0]!.msg), /answered 404/);
  });

  test("auto, a worker whose /metrics is garbage: capacity as before, one WARN naming the worker and the problem", async (t) => {
    const server = await fakeWorker(t, {
      metrics: "<html><body>metrics are elsewhere</body></html>",
      serverInfo: { max_running_requests: 7, served_model_name: "m" },
    });
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [],
      extraWorkers: [{ url: server.url }],
      adminToken: ADMIN,
      gateway: { clock, engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const w = await workerStatus(fleet);
    assert.equal(w.engine, "sglang", "recognised by /get_server_info");
    assert.equal(w.capacity, 7);
    assert.match(w.engine_signals?.problem ?? "", /not Prometheus text \(line 1/);
    for (let i = 0; i < 3; i++) clock.advance(SCRAPE_MS);
    const warns = fleet.logs.filter((l) => l.level === LEVEL_WARN && l.worker === server.url);
    assert.equal(warns.length, 1, JSON.stringify(warns));
    assert.match(String(warns[0]!.msg), /not Prometheus text/);
    assert.equal(server.metricsRequests(), 1, "auto does not scrape a /metrics it could not read");
  });

  test("auto, /v1/models like vLLM's but no vllm: series: recognised as vLLM, capacity 64 as before, one WARN", async (t) => {
    const server = await fakeWorker(t, { metrics: undefined, serverInfo: undefined, maxModelLen: 8192 });
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [],
      extraWorkers: [{ url: server.url }],
      adminToken: ADMIN,
      gateway: { clock, engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const w = await workerStatus(fleet);
    assert.equal(w.engine, "vllm");
    assert.equal(w.capacity, 64);
    const warns = fleet.logs.filter((l) => l.level === LEVEL_WARN && l.worker === server.url);
    assert.equal(warns.length, 1, JSON.stringify(warns));
    assert.match(String(warns[0]!.msg), /no vllm: series/);
    clock.advance(SCRAPE_MS);
    assert.equal(server.metricsRequests(), 1, "not scraped: it has nothing to read");
  });

  test("auto, SGLang without --enable-metrics (/metrics 404): sglang, capacity from /get_server_info, no WARN, no scrapes", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 9 }],
      adminToken: ADMIN,
      gateway: { clock, engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const w = await workerStatus(fleet);
    assert.equal(w.engine, "sglang");
    assert.equal(w.capacity, 9);
    assert.equal(w.engine_signals, null);
    assert.ok(fleet.logs.some((l) => l.msg === "worker engine: sglang" && l.load_signals === false));
    assert.equal(fleet.logs.filter((l) => l.level === LEVEL_WARN).length, 0);
  });

  test("auto, a plain OpenAI-compatible worker: engine openai, no scrapes, capacity 64 as before", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ reportCapacity: false }],
      adminToken: ADMIN,
      gateway: { clock: new ManualClock(), engineSignals: { scrapeIntervalMs: SCRAPE_MS } },
    });
    const w = await workerStatus(fleet);
    assert.equal(w.engine, "openai");
    assert.equal(w.capacity, 64);
    assert.equal(w.engine_signals, null);
    assert.equal(fleet.logs.filter((l) => l.level === LEVEL_WARN).length, 0);
  });
});

interface FakeWorker {
  /** The /metrics body (200), or undefined for 404. */
  metrics: string | undefined;
  /** The /get_server_info document, or undefined for 404. */
  serverInfo: Record<string, unknown> | undefined;
  /** `max_model_len` in the /v1/models card, if any. */
  maxModelLen?: number;
}

/** A bare worker answering what `spec` says: the shapes the mock worker does not take. */
async function fakeWorker(
  t: { after(fn: () => Promise<void>): void },
  spec: FakeWorker,
): Promise<{ url: string; metricsRequests(): number }> {
  let metrics = 0;
  const server: Server = createServer((req, res) => {
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.url === "/health") return json(200, {});
    if (req.url === "/get_server_info") {
      return spec.serverInfo === undefined ? json(404, {}) : json(200, spec.serverInfo);
    }
    if (req.url === "/v1/models") {
      const card = {
        id: "m",
        object: "model",
        ...(spec.maxModelLen ? { max_model_len: spec.maxModelLen } : {}),
      };
      return json(200, { object: "list", data: [card] });
    }
    if (req.url === "/metrics") {
      metrics++;
      if (spec.metrics === undefined) return json(404, {});
      res.writeHead(200, { "content-type": "text/html" });
      res.end(spec.metrics);
      return;
    }
    json(404, {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, metricsRequests: () => metrics };
}

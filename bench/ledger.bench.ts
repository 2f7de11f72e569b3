/**
 * Ledger throughput: `npm run bench:ledger -- [--rows N] [--pg-rows N] [--gateway]`.
 *
 * 1. Rows/s through the writer (the gateway's path: record() into the bounded buffer, batches
 *    written in the background) into a DuckDB file in a temp dir and into PostgreSQL (DATABASE_URL,
 *    default postgres://postgres@127.0.0.1:5432/test, in a schema of its own, dropped afterwards).
 *    The producer records as fast as the buffer takes rows, so this is the sink's sustained rate;
 *    the event-loop utilization shows what the main thread spent (row building included).
 *    Then the sink alone (pre-built rows, batches of 5,000 written back to back).
 * 2. Memory with the sink down (PostgreSQL on a closed port): a million records, heap after GC
 *    stays at the buffer's bound, the rest counted as dropped.
 * 3. With --gateway: a gateway at its maximum load (autocannon, 32 connections, one mock worker, all
 *    in this process) with the ledger off, on DuckDB and on PostgreSQL, alternated 3 times, 5 s each.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import autocannon from "autocannon";
import pg from "pg";
import { pino } from "pino";
import { Registry } from "prom-client";
import type { OutcomeRecord } from "../src/contracts/outcome.js";
import { DEFAULT_HEALTH } from "../src/gateway/options.js";
import { startGateway } from "../src/gateway/server.js";
import { DuckDbSink } from "../src/ledger/duckdb.js";
import { PostgresSink } from "../src/ledger/postgres.js";
import { type LedgerRow, toLedgerRow } from "../src/ledger/row.js";
import type { LedgerSink } from "../src/ledger/sink.js";
import { type LedgerOptions, LedgerWriter } from "../src/ledger/writer.js";
import { startMockWorker } from "../src/mock-worker/index.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const logger = pino({ level: "warn" });

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
}

let seq = 0;
const base = Date.now();
function outcome(): OutcomeRecord {
  seq++;
  const queued = seq % 3 === 0;
  return {
    tsMs: base + Math.floor(seq / 50),
    requestId: `0123456789ab-${seq.toString(36)}`,
    tenantId: `auth:tenant-${seq % 20}`,
    model: "llama-3-8b",
    requestedClass: "default",
    effectiveClass: seq % 7 === 0 ? "bulk" : "default",
    admission: queued ? "queued" : "fast",
    outcome: "ok",
    status: 200,
    errorCode: undefined,
    queueWaitMs: queued ? (seq % 200) + 0.5 : 0,
    ttftMs: 42.5,
    durationMs: 812.25,
    estimatedTokens: 300,
    inputTokens: 100,
    outputTokens: 200,
    costUsd: 0.000_07,
    worker: "http://10.0.0.1:8000",
  };
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function throughput(name: string, sink: LedgerSink, rows: number): Promise<void> {
  const writer = new LedgerWriter(sink, { rollupIntervalMs: 3_600_000 }, logger, new Registry());
  writer.start();
  await writer.flush();
  // The records exist before the clock starts: what is timed is record() and the sink.
  const records = Array.from({ length: rows }, outcome);
  const elu0 = performance.eventLoopUtilization();
  const t0 = performance.now();
  let recordMs = 0;
  const room = 10_000;
  for (let i = 0; i < rows; ) {
    const stats = writer.stats();
    const free = room - stats.buffered;
    if (free <= 0) {
      await sleep(1);
      continue;
    }
    const n = Math.min(free, rows - i, 2_000);
    const r0 = performance.now();
    for (let k = 0; k < n; k++) writer.record(records[i + k]!);
    recordMs += performance.now() - r0;
    i += n;
    await tick();
  }
  await writer.flush();
  const secs = (performance.now() - t0) / 1000;
  const elu = performance.eventLoopUtilization(elu0);
  const stats = writer.stats();
  const t1 = performance.now();
  await writer.close();
  const closeMs = performance.now() - t1;
  process.stdout.write(
    `${name.padEnd(10)} ${stats.written.toLocaleString("en-US").padStart(9)} rows in ${secs.toFixed(2)} s: ` +
      `${Math.round(stats.written / secs).toLocaleString("en-US")} rows/s, event loop ${(elu.utilization * 100).toFixed(0)}% busy ` +
      `(record() ${((recordMs * 1000) / rows).toFixed(2)} µs a row), ` +
      `dropped ${stats.dropped}, close (with rollups) ${closeMs.toFixed(0)} ms\n`,
  );
}

/** The sink alone: pre-built rows in batches of `batch`, written one after the other. */
async function rawSink(name: string, sink: LedgerSink, rows: number, batch: number): Promise<void> {
  await sink.open();
  const batches: LedgerRow[][] = [];
  for (let i = 0; i < rows; i += batch) {
    batches.push(Array.from({ length: Math.min(batch, rows - i) }, () => toLedgerRow(outcome(), "bench:1")));
  }
  const t0 = performance.now();
  for (const b of batches) await sink.write(b, false);
  const secs = (performance.now() - t0) / 1000;
  await sink.close();
  process.stdout.write(
    `${name.padEnd(10)} sink.write alone, batches of ${batch}: ${Math.round(rows / secs).toLocaleString("en-US")} rows/s\n`,
  );
}

async function memoryBound(records: number): Promise<void> {
  // A port that refuses connections: PostgreSQL is down for the whole run.
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  const sink = new PostgresSink(`postgres://postgres@127.0.0.1:${port}/test`, { connectTimeoutMs: 500 });
  // Its warnings (no ledger, rows dropped) are the expected ones: not printed.
  const writer = new LedgerWriter(sink, { closeTimeoutMs: 500 }, pino({ level: "silent" }), new Registry());
  writer.start();
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  for (let i = 0; i < records; i++) {
    writer.record(outcome());
    if (i % 10_000 === 0) await tick();
  }
  gc?.();
  const heap1 = process.memoryUsage().heapUsed;
  const stats = writer.stats();
  await writer.close();
  process.stdout.write(
    `sink down: ${records.toLocaleString("en-US")} records, ${stats.buffered} buffered, ` +
      `${stats.dropped.toLocaleString("en-US")} dropped, heap ${((heap1 - heap0) / 1e6).toFixed(1)} MB ` +
      `above the start${gc ? "" : " (run with --expose-gc for a heap after GC)"}\n`,
  );
}

async function gatewayRun(
  label: string,
  workerUrl: string,
  ledger: LedgerOptions | undefined,
): Promise<void> {
  const gateway = await startGateway({
    workers: [{ url: workerUrl }],
    host: "127.0.0.1",
    port: 0,
    policy: "round_robin",
    priorityScheduler: { enabled: true, defaultMaxClass: "default", tenantMetricTopN: 32 },
    legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
    apiKeys: [],
    requireAuth: false,
    maxPayloadSize: 1 << 20,
    requestTimeoutSecs: 30,
    health: { ...DEFAULT_HEALTH, intervalSecs: 600 },
    logger,
    ledger,
  });
  try {
    await gateway.ledger?.flush();
    const body = JSON.stringify({
      model: "mock-llm", // the mock worker's model: anything else is 404 model_not_found
      messages: [{ role: "user", content: "hello there" }],
      max_tokens: 4,
    });
    const cpu0 = process.cpuUsage();
    const result = await autocannon({
      url: `${gateway.url}/v1/chat/completions`,
      method: "POST",
      body,
      headers: { "content-type": "application/json" },
      connections: 32,
      duration: 5,
    });
    const cpu = process.cpuUsage(cpu0);
    process.stdout.write(
      `gateway, ledger ${label.padEnd(8)} ${Math.round(result.requests.average).toLocaleString("en-US").padStart(6)} req/s, ` +
        `p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms, process CPU ${((cpu.user + cpu.system) / 1e6).toFixed(2)} s, ` +
        `non-2xx ${result.non2xx}${gateway.ledger ? `, dropped ${gateway.ledger.stats().dropped}` : ""}\n`,
    );
    // A run of error answers measures nothing: fail rather than print it as a throughput.
    if (result.non2xx > 0 || result.errors > 0) {
      throw new Error(`ledger ${label}: ${result.non2xx} non-2xx answers and ${result.errors} errors`);
    }
  } finally {
    await gateway.close();
  }
}

async function gatewayOverhead(pgUrl: string | undefined): Promise<void> {
  const worker = await startMockWorker({
    ttftMs: 0,
    tokenDelayMs: 0,
    batchSlowdown: 0,
    maxRunningRequests: 512,
  });
  const dir = await mkdtemp(join(tmpdir(), "sluice-ledger-bench-"));
  try {
    for (let i = 0; i < 3; i++) {
      await gatewayRun("off", worker.url, undefined);
      await gatewayRun("duckdb", worker.url, {
        target: { kind: "duckdb", path: join(dir, `gw${i}.duckdb`) },
      });
      if (pgUrl !== undefined)
        await gatewayRun("postgres", worker.url, { target: { kind: "postgres", url: pgUrl } });
    }
  } finally {
    await worker.close();
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const rows = arg("--rows", 500_000);
  const pgRows = arg("--pg-rows", 300_000);
  process.stdout.write(`ledger bench on node ${process.version}\n`);
  const dir = await mkdtemp(join(tmpdir(), "sluice-ledger-bench-"));
  try {
    await throughput("duckdb", new DuckDbSink(join(dir, "bench.duckdb")), rows);
    await rawSink("duckdb", new DuckDbSink(join(dir, "raw.duckdb")), rows, 5_000);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const schema = `sluice_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  let pgUrl: string | undefined;
  try {
    await admin.connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    const url = new URL(DATABASE_URL);
    url.searchParams.set("options", `-c search_path=${schema}`);
    pgUrl = url.toString();
  } catch (err) {
    process.stdout.write(`postgres: skipped (${(err as Error).message || String(err)})\n`);
  }
  try {
    if (pgUrl !== undefined) {
      await throughput("postgres", new PostgresSink(pgUrl), pgRows);
      await admin.query(`TRUNCATE ${schema}.usage`);
      await rawSink("postgres", new PostgresSink(pgUrl), pgRows, 5_000);
    }
    await memoryBound(1_000_000);
    if (process.argv.includes("--gateway")) await gatewayOverhead(pgUrl);
  } finally {
    if (pgUrl !== undefined) await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
    await admin.end().catch(() => {});
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});

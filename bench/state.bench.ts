/**
 * What shared state costs: `node --import tsx bench/state.bench.ts [--seconds S]` (REDIS_URL,
 * default redis://127.0.0.1:6379; a key prefix of its own, removed afterwards).
 *
 * 1. Admission cost, Redis mode against in-process: the same request (fast path, then release)
 *    through the core scheduler and through the Redis backend. Added latency of the admission
 *    (p50/p99), round trips per request (counted by the backend's own metrics), and admissions/s
 *    of one replica with 64 requests in flight at once.
 * 2. Throughput of 1 against 3 replicas: `sluice` processes over one fast mock worker (capacity
 *    4096, so admission, not the worker, is what is measured), autocannon on each replica for the
 *    same time; plus one replica without Redis, for reference.
 *
 * Targets (issue 13): one round trip on the fast path, at most two per request, p99 added < 1 ms
 * on loopback.
 */
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { realClock } from "@sluice/scheduler/core/clock.js";
import { resolveClassSettings } from "@sluice/scheduler/core/config.js";
import { createScheduler } from "@sluice/scheduler/core/engine.js";
import autocannon from "autocannon";
import { Redis } from "ioredis";
import { pino } from "pino";
import { Registry } from "prom-client";
import { RedisAdmissionBackend } from "../src/admission/redis/backend.js";
import { RedisFleet } from "../src/admission/redis/fleet.js";
import { startMockWorker } from "../src/mock-worker/index.js";
import { listeningPort, startCli } from "../test/helpers/cli-process.js";
import { smallSchedulerYaml } from "../test/helpers/harness.js";
import { describeMachine, machine } from "./lib/report.js";
import { fmtFixed, fmtInt } from "./lib/stats.js";

const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const args = process.argv.slice(2);
const SECONDS = Number(args[args.indexOf("--seconds") + 1] ?? 5) || 5;
const PREFIX = `sluice-bench-${process.pid}:`;
const ZERO_RESERVATIONS = resolveClassSettings({
  system: { reserved_floor: 0, reserved_per_slot: 0 },
  interactive: { reserved_floor: 0, reserved_per_slot: 0 },
  default: { reserved_floor: 0, reserved_per_slot: 0 },
  bulk: { reserved_floor: 0, reserved_per_slot: 0 },
});

function percentile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

async function dropKeys(): Promise<void> {
  const client = new Redis(REDIS_URL);
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${PREFIX}*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await client.del(...keys);
  } while (cursor !== "0");
  client.disconnect();
}

interface AdmissionFigures {
  inProcessP50Us: number;
  inProcessP99Us: number;
  redisP50Us: number;
  redisP99Us: number;
  releaseP50Us: number;
  releaseP99Us: number;
  tripsPerRequest: number;
  admitTripsPerRequest: number;
  admissionsPerSec: number;
  inProcessPerSec: number;
}

async function admissionCost(): Promise<AdmissionFigures> {
  const n = 20_000;
  // In process: the core scheduler, fast path then release.
  const scheduler = createScheduler({ capacity: 1000, classes: ZERO_RESERVATIONS });
  const inProcess = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const permit = await scheduler.acquire({ tenant: "auth:bench", cost: 20 });
    inProcess[i] = performance.now() - t0;
    permit.release();
  }
  inProcess.sort();
  let t0 = performance.now();
  let done = 0;
  while (performance.now() - t0 < 1000) {
    const permit = await scheduler.acquire({ tenant: "auth:bench", cost: 20 });
    permit.release();
    done++;
  }
  const inProcessPerSec = done / ((performance.now() - t0) / 1000);

  // Redis: the same through the shared backend.
  const registry = new Registry();
  const logger = pino({ level: "warn" });
  const fleet = new RedisFleet(
    { url: REDIS_URL, keyPrefix: PREFIX, replicaId: "bench", failMode: "local", leaseTtlSecs: 10 },
    logger,
    registry,
  );
  await fleet.start();
  const backend = new RedisAdmissionBackend({
    fleet,
    classes: ZERO_RESERVATIONS,
    tenantPolicies: new Map(),
    defaultMaxClass: "system",
    capacity: 1000,
    clock: realClock,
    logger,
  });
  await backend.start();
  const trips = { admit: 0, release: 0, other: 0 };
  const releases: number[] = [];
  const metrics = fleet.metrics!;
  const original = metrics.roundTrip.bind(metrics);
  metrics.roundTrip = (op, seconds) => {
    if (op === "admit") trips.admit++;
    else if (op === "release") {
      trips.release++;
      releases.push(seconds * 1000);
    } else trips.other++;
    original(op, seconds);
  };
  const redis = new Float64Array(n);
  // Warm up (scripts loaded, connections hot).
  for (let i = 0; i < 500; i++)
    (
      await backend.acquire({ priority: undefined, tenant: "auth:bench", cost: 20, signal: undefined })
    ).release();
  trips.admit = trips.release = trips.other = 0;
  releases.length = 0;
  for (let i = 0; i < n; i++) {
    const s0 = performance.now();
    const slot = await backend.acquire({
      priority: undefined,
      tenant: "auth:bench",
      cost: 20,
      signal: undefined,
    });
    redis[i] = performance.now() - s0;
    slot.settle(18);
    slot.release();
    // Let the release go out before the next admission (one request at a time).
    await new Promise((resolve) => setImmediate(resolve));
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
  redis.sort();
  const tripsPerRequest = (trips.admit + trips.release) / n;
  const admitTripsPerRequest = trips.admit / n;
  const rel = Float64Array.from(releases).sort();

  // Admissions per second with 64 requests in flight at once (auto-pipelined).
  t0 = performance.now();
  done = 0;
  const until = t0 + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (performance.now() < until) {
        const slot = await backend.acquire({
          priority: undefined,
          tenant: "auth:bench",
          cost: 20,
          signal: undefined,
        });
        slot.release();
        done++;
      }
    }),
  );
  const admissionsPerSec = done / ((performance.now() - t0) / 1000);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await backend.close();
  await fleet.close();
  return {
    inProcessP50Us: percentile(inProcess, 0.5) * 1000,
    inProcessP99Us: percentile(inProcess, 0.99) * 1000,
    redisP50Us: percentile(redis, 0.5) * 1000,
    redisP99Us: percentile(redis, 0.99) * 1000,
    releaseP50Us: percentile(rel, 0.5) * 1000,
    releaseP99Us: percentile(rel, 0.99) * 1000,
    tripsPerRequest,
    admitTripsPerRequest,
    admissionsPerSec,
    inProcessPerSec,
  };
}

/**
 * Wake-up latency: two replicas (two fleets in this process) over capacity 1; A holds the slot, B's
 * request queues, A releases: from A's release to B's admission (release script, dispatch, publish,
 * B's subscriber).
 */
async function wakeLatency(): Promise<{ p50Ms: number; p99Ms: number }> {
  const logger = pino({ level: "warn" });
  const make = async (id: string) => {
    const fleet = new RedisFleet(
      { url: REDIS_URL, keyPrefix: `${PREFIX}wake:`, replicaId: id, failMode: "local", leaseTtlSecs: 10 },
      logger,
    );
    await fleet.start();
    const backend = new RedisAdmissionBackend({
      fleet,
      classes: ZERO_RESERVATIONS,
      tenantPolicies: new Map(),
      defaultMaxClass: "system",
      capacity: 1,
      clock: realClock,
      logger,
    });
    await backend.start();
    return { fleet, backend };
  };
  const a = await make("wake-a");
  const b = await make("wake-b");
  const request = { priority: undefined, tenant: "auth:bench", cost: 20, signal: undefined };
  const samples = new Float64Array(300);
  for (let i = 0; i < samples.length; i++) {
    const held = await a.backend.acquire(request);
    let releasedAt = 0;
    const waiting = b.backend.acquire(request).then((slot) => {
      samples[i] = performance.now() - releasedAt;
      return slot;
    });
    // B's admit script has answered "queued" by now (a round trip is well under 20 ms).
    await new Promise((resolve) => setTimeout(resolve, 20));
    releasedAt = performance.now();
    held.release();
    (await waiting).release();
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  samples.sort();
  for (const r of [a, b]) {
    await r.backend.close();
    await r.fleet.close();
  }
  return { p50Ms: percentile(samples, 0.5), p99Ms: percentile(samples, 0.99) };
}

async function replicaThroughput(): Promise<{
  inProcess: number;
  one: number;
  three: number;
  errors: number;
}> {
  const worker = await startMockWorker({
    maxRunningRequests: 4096,
    ttftMs: 0,
    tokenDelayMs: 0,
    batchSlowdown: 0,
    receivedLogSize: 0,
  });
  const dir = await mkdtemp(join(tmpdir(), "sluice-state-bench-"));
  const yaml = join(dir, "priority.yaml");
  await writeFile(yaml, smallSchedulerYaml());
  const base = [
    "--worker-urls",
    worker.url,
    "--port",
    "0",
    "--ledger",
    "off",
    "--log-level",
    "warn",
    "--priority-scheduler-enabled",
    "--priority-scheduler-config",
    yaml,
  ];
  const start = async (n: number, shared: boolean) => {
    const children = Array.from({ length: n }, () =>
      startCli([
        ...base,
        ...(shared ? ["--state-url", REDIS_URL, "--state-key-prefix", PREFIX] : []),
        "--log-level",
        "info",
      ]),
    );
    const ports = await Promise.all(children.map((c) => listeningPort(c.child, c.out)));
    return { children, ports };
  };
  const body = JSON.stringify({
    model: "mock-llm",
    messages: [{ role: "user", content: "hello there" }],
    max_tokens: 1,
  });
  const load = async (ports: number[]): Promise<{ rps: number; errors: number }> => {
    const results = await Promise.all(
      ports.map((port) =>
        autocannon({
          url: `http://127.0.0.1:${port}/v1/chat/completions`,
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
          connections: Math.ceil(48 / ports.length),
          duration: SECONDS,
        }),
      ),
    );
    let rps = 0;
    let errors = 0;
    for (const r of results) {
      rps += r["2xx"] / SECONDS;
      errors += r.errors + r.non2xx;
    }
    return { rps, errors };
  };
  const stop = async (children: Array<ReturnType<typeof startCli>>) => {
    for (const c of children) c.child.kill("SIGKILL");
    await Promise.all(children.map((c) => (c.child.exitCode === null ? once(c.child, "exit") : undefined)));
  };
  const solo = await start(1, false);
  const inProcess = await load(solo.ports);
  await stop(solo.children);
  const one = await start(1, true);
  const oneRun = await load(one.ports);
  await stop(one.children);
  const three = await start(3, true);
  const threeRun = await load(three.ports);
  await stop(three.children);
  await worker.close();
  await rm(dir, { recursive: true, force: true });
  return {
    inProcess: inProcess.rps,
    one: oneRun.rps,
    three: threeRun.rps,
    errors: inProcess.errors + oneRun.errors + threeRun.errors,
  };
}

async function main(): Promise<void> {
  process.stdout.write(
    `state bench on ${describeMachine(machine())}, Redis ${REDIS_URL}, ${SECONDS} s runs\n\n`,
  );
  try {
    const a = await admissionCost();
    const rows: Array<[string, string, string]> = [
      ["admission p50, in process", `${fmtFixed(a.inProcessP50Us, 2)} us`, ""],
      ["admission p99, in process", `${fmtFixed(a.inProcessP99Us, 2)} us`, ""],
      ["admission p50, Redis (one round trip)", `${fmtFixed(a.redisP50Us, 1)} us`, ""],
      ["admission p99, Redis", `${fmtFixed(a.redisP99Us, 1)} us`, ""],
      ["added p50", `${fmtFixed(a.redisP50Us - a.inProcessP50Us, 1)} us`, ""],
      ["added p99", `${fmtFixed(a.redisP99Us - a.inProcessP99Us, 1)} us`, "< 1000 us"],
      [
        "release round trip p50 / p99 (off the request's path)",
        `${fmtFixed(a.releaseP50Us, 1)} / ${fmtFixed(a.releaseP99Us, 1)} us`,
        "",
      ],
      ["round trips per request (admit + release)", fmtFixed(a.tripsPerRequest, 3), "<= 2"],
      ["round trips on the fast path (admit)", fmtFixed(a.admitTripsPerRequest, 3), "1"],
      ["admissions/s, one replica, 64 in flight (Redis)", fmtInt(a.admissionsPerSec), ""],
      ["admissions/s, in process, one at a time", fmtInt(a.inProcessPerSec), ""],
    ];
    for (const [m, v, target] of rows) process.stdout.write(`${m.padEnd(58)} ${v.padStart(16)}  ${target}\n`);
    const w = await wakeLatency();
    process.stdout.write(
      `${"wake-up: slot freed on A -> waiter on B admitted, p50 / p99".padEnd(58)} ${`${fmtFixed(w.p50Ms, 2)} / ${fmtFixed(w.p99Ms, 2)} ms`.padStart(16)}  < 5 ms\n`,
    );
    process.stdout.write(
      "\nthroughput through the gateway (HTTP, mock worker of capacity 4096, 48 connections in all):\n",
    );
    const r = await replicaThroughput();
    process.stdout.write(
      `${"1 replica, in process (no Redis)".padEnd(58)} ${fmtInt(r.inProcess).padStart(10)} req/s\n`,
    );
    process.stdout.write(`${"1 replica, Redis".padEnd(58)} ${fmtInt(r.one).padStart(10)} req/s\n`);
    process.stdout.write(`${"3 replicas, Redis (sum)".padEnd(58)} ${fmtInt(r.three).padStart(10)} req/s\n`);
    process.stdout.write(
      `${"failures (errors + non-2xx) over all runs".padEnd(58)} ${String(r.errors).padStart(10)}\n`,
    );
  } finally {
    await dropKeys();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);

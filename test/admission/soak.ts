/**
 * The soak in Redis mode: three gateways (in this process, so their state can be read) sharing one
 * Redis, in front of two mock workers of capacity 4, under an open-loop load of twice the fleet's
 * capacity: mixed classes and tenants, streams, 10% of clients aborting at random moments (while
 * queued, before the first byte, mid-stream), preemptions across replicas.
 *
 * checkStateSoak() lists what must hold at the end: no lease and no ticket left in Redis, no lease
 * held by any replica, no request in flight or queued at any gateway or open at any worker; the
 * time the workers ran above the fleet's capacity at most 0.5% of the run (an abort and the next
 * admission can cross within an event-loop turn, as in the in-process soak); no 500; heap after GC
 * within 10% (+2 MiB) of the mark taken at 1/5 of the run.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { mulberry32 } from "@sluice/scheduler/core/random.js";
import { pino } from "pino";
import { Agent, request } from "undici";
import { DEFAULT_HEALTH } from "../../src/gateway/options.js";
import { type Gateway, startGateway } from "../../src/gateway/server.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { type MockWorker, startMockWorker } from "../../src/mock-worker/index.js";
import { metric, parseScrape, smallSchedulerYaml } from "../helpers/harness.js";

export interface StateSoakOptions {
  durationMs: number;
  seed: number;
  redisUrl: string;
  prefix: string;
  /** A file path for the priority YAML. */
  yamlPath: string;
  log?: (line: string) => void;
}

export interface StateSoakReport {
  runMs: number;
  sent: number;
  outcomes: Map<string, number>;
  capacity: number;
  overCapacityMs: number;
  leftInRedis: { leases: number; tickets: number };
  leftAtGateways: { leases: number; inflight: number; queued: number };
  openAtWorkers: number;
  heapMarkMb: number;
  heapEndMb: number;
}

const TENANTS = ["ops", "chat", "etl"];
const MIX = [
  { cls: "system", share: 0.05, tenant: 0 },
  { cls: "interactive", share: 0.3, tenant: 1 },
  { cls: "default", share: 0.25, tenant: 1 },
  { cls: "bulk", share: 0.4, tenant: 2 },
];

/** A full collection, with or without --expose-gc (as test/soak/soak.ts does). */
function gcFunction(): () => void {
  const existing = (globalThis as { gc?: () => void }).gc;
  if (existing) return existing;
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}

function heapMb(): number {
  const gc = gcFunction();
  gc();
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
}

export async function runStateSoak(o: StateSoakOptions): Promise<StateSoakReport> {
  const random = mulberry32(o.seed);
  const log = o.log ?? (() => {});
  const { writeFile } = await import("node:fs/promises");
  await writeFile(
    o.yamlPath,
    smallSchedulerYaml({
      classes: {
        system: { queue_timeout_secs: 5, can_preempt: true },
        interactive: { queue_timeout_secs: 5, can_preempt: true },
        default: { queue_timeout_secs: 6 },
        bulk: { queue_size: 64, queue_timeout_secs: 8 },
      },
    }),
  );
  const workers: MockWorker[] = await Promise.all(
    [0, 1].map(() =>
      startMockWorker({ maxRunningRequests: 4, ttftMs: 20, tokenDelayMs: 3, receivedLogSize: 0 }),
    ),
  );
  const capacity = 8;
  const logger = pino({ level: "error" });
  const gateways: Gateway[] = [];
  for (let i = 0; i < 3; i++) {
    gateways.push(
      await startGateway({
        workers: workers.map((w) => ({ url: w.url })),
        host: "127.0.0.1",
        port: 0,
        policy: "power_of_two",
        priorityScheduler: {
          enabled: true,
          defaultMaxClass: "system",
          configPath: o.yamlPath,
          tenantMetricTopN: 8,
        },
        legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
        apiKeys: TENANTS.map((t) => ({ sha256: sha256Hex(`sk-soak-${t}`), tenant: t })),
        trustedTenantHeader: null,
        requireAuth: true,
        maxPayloadSize: 1024 * 1024,
        requestTimeoutSecs: 30,
        health: { ...DEFAULT_HEALTH, intervalSecs: 60 },
        state: {
          url: o.redisUrl,
          keyPrefix: o.prefix,
          replicaId: `soak-${i}`,
          failMode: "local",
          leaseTtlSecs: 4,
        },
        logger,
      }),
    );
  }
  const agent = new Agent({ connections: 1024, keepAliveTimeout: 2000 });
  const outcomes = new Map<string, number>();
  const bump = (k: string) => outcomes.set(k, (outcomes.get(k) ?? 0) + 1);
  // Over-capacity time at the workers, sampled every millisecond.
  let overMs = 0;
  let last = performance.now();
  const sampler = setInterval(() => {
    const now = performance.now();
    let open = 0;
    for (const w of workers) open += w.stats().open;
    if (open > capacity) overMs += now - last;
    last = now;
  }, 1);

  // ~2x capacity: a request holds a slot ~20 + 16 x 3 ms = ~70 ms.
  const ratePerSec = (2 * capacity) / 0.07;
  const started = performance.now();
  let sent = 0;
  let heapMark = 0;
  const pending = new Set<Promise<void>>();
  const one = async () => {
    const pick = random();
    let acc = 0;
    const mix =
      MIX.find((m) => {
        acc += m.share;
        return acc >= pick;
      }) ?? MIX[3]!;
    const stream = random() < 0.5;
    const abortAt = random() < 0.1 ? random() * 300 : undefined;
    const ac = new AbortController();
    const timer = abortAt === undefined ? undefined : setTimeout(() => ac.abort(), abortAt);
    const gateway = gateways[Math.floor(random() * gateways.length)]!;
    try {
      const res = await request(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer sk-soak-${TENANTS[mix.tenant]}`,
          "x-smg-priority": mix.cls,
        },
        body: JSON.stringify({
          model: "mock-llm",
          messages: [{ role: "user", content: "soak ".repeat(1 + Math.floor(random() * 20)) }],
          max_tokens: 8 + Math.floor(random() * 16),
          stream,
        }),
        signal: ac.signal,
        dispatcher: agent,
      });
      await res.body.text();
      bump(res.statusCode === 200 ? "200" : `${res.statusCode} ${res.headers["x-smg-error-code"] ?? ""}`);
    } catch {
      bump(ac.signal.aborted ? "aborted" : "transport error");
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
  };
  let nextLog = 10_000;
  while (performance.now() - started < o.durationMs) {
    const p = one().finally(() => pending.delete(p));
    pending.add(p);
    sent++;
    const elapsed = performance.now() - started;
    if (heapMark === 0 && elapsed >= o.durationMs / 5) heapMark = heapMb();
    if (elapsed >= nextLog) {
      log(
        `${(elapsed / 1000).toFixed(0)} s: ${sent} sent, ${pending.size} open, ${JSON.stringify([...outcomes])}`,
      );
      nextLog += 10_000;
    }
    await new Promise((resolve) => setTimeout(resolve, (-Math.log(1 - random()) * 1000) / ratePerSec));
  }
  await Promise.all(pending);
  const runMs = performance.now() - started;
  clearInterval(sampler);
  // The drain: releases are one round trip each; give them a moment, then read everything.
  const { Redis } = await import("ioredis");
  const { StateKeys } = await import("../../src/admission/redis/keys.js");
  const client = new Redis(o.redisUrl);
  const base = new StateKeys(o.prefix).base;
  const count = async (pattern: string) => {
    let n = 0;
    for (const key of await client.keys(`${base}${pattern}`)) n += await client.zcard(key);
    return n;
  };
  let leftInRedis = { leases: 0, tickets: 0 };
  let leftAtGateways = { leases: 0, inflight: 0, queued: 0 };
  for (let i = 0; i < 100; i++) {
    leftInRedis = { leases: await count("pool:*:leases"), tickets: await count("pool:*:q[0-3]") };
    leftAtGateways = { leases: 0, inflight: 0, queued: 0 };
    for (const g of gateways) {
      const scrape = parseScrape(await g.metrics.metricsText());
      leftAtGateways.leases += metric(scrape, "sluice_state_leases") ?? 0;
      const status = g.status() as { inflight: number; queued: number };
      leftAtGateways.inflight += status.inflight;
      leftAtGateways.queued += status.queued;
    }
    // A replica's in-flight and queued figures are the fleet's as of its last script: the next
    // heartbeat (every TTL / 4) brings them up to date.
    const left = leftInRedis.leases + leftInRedis.tickets + leftAtGateways.leases;
    if (left + leftAtGateways.inflight + leftAtGateways.queued === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const openAtWorkers = workers.reduce((n, w) => n + w.stats().open, 0);
  const heapEnd = heapMb();
  client.disconnect();
  await agent.destroy();
  for (const g of gateways) await g.close();
  await Promise.all(workers.map((w) => w.close()));
  return {
    runMs,
    sent,
    outcomes,
    capacity,
    overCapacityMs: overMs,
    leftInRedis,
    leftAtGateways,
    openAtWorkers,
    heapMarkMb: heapMark,
    heapEndMb: heapEnd,
  };
}

export function checkStateSoak(r: StateSoakReport): string[] {
  const failures: string[] = [];
  if (r.leftInRedis.leases !== 0) failures.push(`${r.leftInRedis.leases} leases left in Redis`);
  if (r.leftInRedis.tickets !== 0) failures.push(`${r.leftInRedis.tickets} tickets left in Redis`);
  if (r.leftAtGateways.leases !== 0) failures.push(`${r.leftAtGateways.leases} leases held by the replicas`);
  if (r.leftAtGateways.inflight !== 0 || r.leftAtGateways.queued !== 0)
    failures.push(
      `gateways report ${r.leftAtGateways.inflight} in flight, ${r.leftAtGateways.queued} queued`,
    );
  if (r.openAtWorkers !== 0) failures.push(`${r.openAtWorkers} requests still open at the workers`);
  if (r.overCapacityMs > 0.005 * r.runMs)
    failures.push(`above capacity ${r.overCapacityMs.toFixed(0)} ms of ${r.runMs.toFixed(0)} ms (> 0.5%)`);
  for (const [k, n] of r.outcomes)
    if (k.startsWith("5") && k !== "503 scheduler_preempted") failures.push(`${n} x ${k}`);
  if ((r.outcomes.get("transport error") ?? 0) > 0)
    failures.push(`${r.outcomes.get("transport error")} transport errors`);
  if (r.heapMarkMb > 0 && r.heapEndMb > r.heapMarkMb * 1.1 + 2)
    failures.push(
      `heap ${r.heapEndMb.toFixed(1)} MiB at the end against ${r.heapMarkMb.toFixed(1)} MiB at the mark`,
    );
  return failures;
}

export function formatStateSoak(r: StateSoakReport): string {
  return [
    `run ${(r.runMs / 1000).toFixed(1)} s, ${r.sent} requests, capacity ${r.capacity}`,
    `outcomes: ${[...r.outcomes].map(([k, n]) => `${k} ${n}`).join(", ")}`,
    `above capacity at the workers: ${r.overCapacityMs.toFixed(1)} ms (${((100 * r.overCapacityMs) / r.runMs).toFixed(3)}%)`,
    `left: Redis ${r.leftInRedis.leases} leases, ${r.leftInRedis.tickets} tickets; replicas ${r.leftAtGateways.leases} leases, ${r.leftAtGateways.inflight} in flight, ${r.leftAtGateways.queued} queued; workers ${r.openAtWorkers} open`,
    `heap after GC: ${r.heapMarkMb.toFixed(1)} MiB at the mark, ${r.heapEndMb.toFixed(1)} MiB at the end`,
  ].join("\n");
}

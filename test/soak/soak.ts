/**
 * The soak: a real gateway (priority scheduler, five tenants with API keys, power-of-two worker
 * choice) in front of two mock workers of max_running_requests 8, under an open-loop (Poisson) load
 * of 3x what the fleet can serve, mixed classes and tenants, 10% of clients aborting at random
 * moments (while queued, before their first byte, mid-stream), preemptions (system and
 * interactive arrivals while bulk is in flight), and one worker killed and restarted midway.
 *
 * The gateway and the load generator run in this process, so the gateway's admission state, its
 * sockets and the heap can be read directly; the workers run in a child process
 * (test/soak/worker-host.ts), so what they count is not skewed by this process's load. Memory stays
 * constant in the load generator (counters and fixed histograms, no per-request records), so heap
 * growth is the gateway's.
 *
 * checkSoak() lists what a correct gateway must satisfy at the end:
 * - in-flight and queued 0, in the scheduler, in /metrics, and per worker in the pool;
 * - no request open at any worker; no client connection left at the gateway; no timer left over;
 * - heap and RSS after GC within 10% of the mark taken 5 minutes in (1/5 of a shorter run), both at
 *   the end of the load and after the drain (each mark the least of five samples 400 ms apart);
 * - from the workers' side: time above capacity at any worker at most 0.5% of the run;
 * - no 500, and no 502/504 (nor a 503 other than a preemption) outside the restart window;
 * - a valid request is still answered 200.
 */
import { type ChildProcess, fork } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import { pino } from "pino";
import { Agent, request } from "undici";
import { DEFAULT_HEALTH } from "../../src/gateway/options.js";
import { type Gateway, startGateway } from "../../src/gateway/server.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import type { MockWorkerOptions, MockWorkerStats } from "../../src/mock-worker/index.js";
import { admissionState, poolInflight, preemptions } from "../fuzz/gateway-state.js";
import { metric, parseScrape, smallSchedulerYaml } from "../helpers/harness.js";

export interface SoakOptions {
  durationMs: number;
  seed: number;
  /** Offered load over what the fleet can serve, default 3. */
  overload?: number;
  /** Fraction of clients that abort, default 0.1. */
  abortFraction?: number;
  /** max_running_requests of each of the two workers, default 8. */
  workerCapacity?: number;
  /** Restart worker 1 at this fraction of the run (default 0.5); null = never. */
  restartAt?: number | null;
  /** How long the restarted worker stays down, default 1000 ms. */
  restartDownMs?: number;
  /** The memory mark's place in the run (a fraction): default 1/5, at most 5 minutes in. */
  markAt?: number;
  /** Progress lines (every ~10 s); default none. */
  log?: (line: string) => void;
}

interface Mix {
  cls: "system" | "interactive" | "default" | "bulk";
  share: number;
  tenants: number[];
  stream: number;
  tokens: [number, number];
}

const TENANTS = [
  { name: "ops", key: "soak-ops", maxClass: "system", weight: 1 },
  { name: "chat", key: "soak-chat", maxClass: "interactive", weight: 4 },
  { name: "analytics", key: "soak-analytics", maxClass: "default", weight: 2 },
  { name: "etl", key: "soak-etl", maxClass: "bulk", weight: 1 },
  { name: "backfill", key: "soak-backfill", maxClass: "bulk", weight: 2 },
];

// Classes asked for; etl sometimes asks above its ceiling (clamped to bulk).
const MIX: Mix[] = [
  { cls: "system", share: 0.05, tenants: [0], stream: 0, tokens: [4, 16] },
  { cls: "interactive", share: 0.25, tenants: [1, 1, 1, 3], stream: 1, tokens: [8, 48] },
  { cls: "default", share: 0.3, tenants: [2, 2, 1], stream: 0.3, tokens: [16, 64] },
  { cls: "bulk", share: 0.4, tenants: [3, 4], stream: 0.5, tokens: [32, 96] },
];

const TTFT_MS = 30;
const TOKEN_DELAY_MS = 5;
const BATCH_SLOWDOWN = 0.02;

/** Latencies in 1 ms buckets up to 120 s: constant memory whatever the run's length. */
class Histogram {
  private readonly buckets = new Uint32Array(120_001);
  count = 0;
  add(ms: number): void {
    this.buckets[Math.min(120_000, Math.max(0, Math.round(ms)))]!++;
    this.count++;
  }
  quantile(q: number): number {
    if (this.count === 0) return Number.NaN;
    const rank = Math.ceil(q * this.count);
    let seen = 0;
    for (let i = 0; i < this.buckets.length; i++) {
      seen += this.buckets[i]!;
      if (seen >= rank) return i;
    }
    return 120_000;
  }
}

export interface MemoryMark {
  atMs: number;
  rssMb: number;
  heapUsedMb: number;
}

export interface WorkerReport {
  url: string;
  stats: MockWorkerStats;
  overCapacityFraction: number;
}

export interface SoakReport {
  options: Required<Omit<SoakOptions, "log" | "restartAt">> & { restartAt: number | null };
  runMs: number;
  sent: number;
  shedByGenerator: number;
  /** Outcomes: HTTP status (with the error code for gateway errors), or what happened instead. */
  outcomes: Map<string, number>;
  /** Outcomes of 5xx/errors outside the restart window (not attributable). */
  unattributed: Map<string, number>;
  /** When each unattributed outcome was first and last seen (ms into the run, at its answer). */
  unattributedTimes: Map<string, { firstMs: number; lastMs: number }>;
  aborts: { queued: number; beforeFirstByte: number; midStream: number; planned: number };
  preemptions: { scheduler: number; clients503: number };
  latency: Record<
    string,
    { ttfbP50: number; ttfbP99: number; totalP50: number; totalP99: number; n: number }
  >;
  restart: { startMs: number; endMs: number } | undefined;
  marks: {
    mark: MemoryMark | undefined;
    endOfLoad: MemoryMark | undefined;
    afterDrain: MemoryMark | undefined;
  };
  end: {
    schedulerInflight: number;
    schedulerQueued: number;
    metricsInflight: number | undefined;
    metricsQueued: number | undefined;
    poolInflight: number[];
    gatewayClientSockets: number;
    /** Gateway-to-worker sockets still referenced (undici unreferences idle pooled ones). */
    busyUpstreamSockets: number;
    timersBaseline: number;
    timersAfter: number;
    drainMs: number;
    unsettledClients: number;
    probeStatus: number | string;
  };
  workers: WorkerReport[];
  capacity: number;
  rate: number;
}

function gcFunction(): () => void {
  const existing = (globalThis as { gc?: () => void }).gc;
  if (existing) return existing;
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}

/**
 * A memory mark under load: the least of five samples after GC taken 400 ms apart from `fromMs`
 * (heap and RSS each), so the requests that happen to be in flight at one instant do not decide it.
 */
class MarkWindow {
  private readonly samples: MemoryMark[] = [];
  constructor(private readonly fromMs: number) {}
  /** Takes the sample that is due at `t` (ms into the run), if any. */
  tick(t: number, gc: () => void, startedAt: number): void {
    if (this.samples.length < 5 && t >= this.fromMs + 400 * this.samples.length) {
      this.samples.push(memoryMark(gc, startedAt));
    }
  }
  get mark(): MemoryMark | undefined {
    if (this.samples.length === 0) return undefined;
    return {
      atMs: this.samples[0]!.atMs,
      rssMb: Math.min(...this.samples.map((m) => m.rssMb)),
      heapUsedMb: Math.min(...this.samples.map((m) => m.heapUsedMb)),
    };
  }
}

function memoryMark(gc: () => void, startedAt: number): MemoryMark {
  gc();
  gc();
  const m = process.memoryUsage();
  return {
    atMs: performance.now() - startedAt,
    rssMb: m.rss / 2 ** 20,
    heapUsedMb: m.heapUsed / 2 ** 20,
  };
}

function activeSockets(): Socket[] {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  return handles.filter(
    (h): h is Socket =>
      typeof h === "object" &&
      h !== null &&
      "remotePort" in h &&
      (h as Socket).constructor?.name === "Socket",
  );
}

function timerCount(): number {
  return process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
}

function bump(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

async function waitUntil(cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await cond()) return true;
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Mock workers in a child process (test/soak/worker-host.ts), driven over IPC. */
class RemoteWorkers {
  private seq = 0;
  private readonly waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  private constructor(
    private readonly child: ChildProcess,
    readonly list: Array<{ url: string; port: number }>,
  ) {
    child.on("message", (m: { id?: number; result?: unknown; error?: string }) => {
      if (m.id === undefined) return;
      const w = this.waiting.get(m.id);
      this.waiting.delete(m.id);
      if (m.error !== undefined) w?.reject(new Error(m.error));
      else w?.resolve(m.result);
    });
    child.on("exit", () => {
      for (const w of this.waiting.values()) w.reject(new Error("the worker process exited"));
      this.waiting.clear();
    });
  }

  static start(options: MockWorkerOptions[]): Promise<RemoteWorkers> {
    const child = fork(fileURLToPath(new URL("./worker-host.ts", import.meta.url)), [], {
      execArgv: ["--import", "tsx"],
      env: { ...process.env, SLUICE_SOAK_WORKERS: JSON.stringify(options) },
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill();
        reject(new Error("the worker process did not start in 20 s"));
      }, 20_000);
      const onExit = (code: number | null) => {
        clearTimeout(timer);
        reject(new Error(`the worker process exited with ${code}`));
      };
      child.once("exit", onExit);
      child.once("message", (m: { type?: string; workers?: Array<{ url: string; port: number }> }) => {
        clearTimeout(timer);
        child.off("exit", onExit);
        if (m.type === "ready" && m.workers) resolve(new RemoteWorkers(child, m.workers));
        else reject(new Error(`unexpected first message from the worker process: ${JSON.stringify(m)}`));
      });
    });
  }

  private call(cmd: string, extra: Record<string, unknown> = {}): Promise<unknown> {
    const id = ++this.seq;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.child.send({ id, cmd, ...extra });
    });
  }

  stats(): Promise<MockWorkerStats[]> {
    return this.call("stats") as Promise<MockWorkerStats[]>;
  }

  restart(index: number, downMs: number): Promise<void> {
    return this.call("restart", { index, downMs }) as Promise<void>;
  }

  async close(): Promise<void> {
    await Promise.race([
      this.call("close"),
      new Promise((resolve) => setTimeout(resolve, 5000).unref()),
    ]).catch(() => {});
    if (this.child.exitCode === null) this.child.kill();
  }
}

export async function runSoak(opts: SoakOptions): Promise<SoakReport> {
  const o = {
    durationMs: opts.durationMs,
    seed: opts.seed,
    overload: opts.overload ?? 3,
    abortFraction: opts.abortFraction ?? 0.1,
    workerCapacity: opts.workerCapacity ?? 8,
    restartAt: opts.restartAt === undefined ? 0.5 : opts.restartAt,
    restartDownMs: opts.restartDownMs ?? 1000,
    // The 5-minute mark of a 30-minute run; 1/5 of a shorter one.
    markAt: opts.markAt ?? Math.min(0.2, 300_000 / opts.durationMs),
  };
  const log = opts.log ?? (() => {});
  const random = prng(o.seed);
  const gc = gcFunction();

  const workerOptions: MockWorkerOptions = {
    maxRunningRequests: o.workerCapacity,
    ttftMs: TTFT_MS,
    tokenDelayMs: TOKEN_DELAY_MS,
    batchSlowdown: BATCH_SLOWDOWN,
    receivedLogSize: 0,
  };
  const remote = await RemoteWorkers.start([workerOptions, workerOptions]);
  const workers = remote.list;
  const dir = await mkdtemp(join(tmpdir(), "sluice-soak-"));
  const yamlPath = join(dir, "priority.yaml");
  await writeFile(
    yamlPath,
    smallSchedulerYaml({
      classes: {
        // system preempts on arrival (the contract's reference behaviour), interactive after a
        // short wait target: both preemption paths run under the soak.
        system: {
          reserved_floor: 1,
          queue_size: 32,
          queue_timeout_secs: 5,
          can_preempt: true,
          preempt_after_secs: 0,
        },
        interactive: {
          reserved_floor: 2,
          queue_size: 64,
          queue_timeout_secs: 5,
          can_preempt: true,
          preempt_after_secs: 0.05,
        },
        default: { queue_size: 64, queue_timeout_secs: 8 },
        bulk: { queue_size: 128, queue_timeout_secs: 15 },
      },
      tenant_policies: Object.fromEntries(
        TENANTS.map((t) => [`auth:${t.name}`, { max_class: t.maxClass, weight: t.weight }]),
      ),
    }),
  );
  const errors: string[] = [];
  // Warnings (workers leaving and joining the pool) by message, with when they were first and last seen.
  const warnings = new Map<string, { count: number; firstMs: number; lastMs: number }>();
  let loadStartedAt = performance.now();
  const logger = pino(
    { level: "warn" },
    {
      write(line: string) {
        const entry = JSON.parse(line) as { level: number; msg?: string; worker?: string };
        if (entry.level >= 50) {
          if (errors.length < 20) errors.push(line);
          return;
        }
        const key = `${entry.msg ?? "?"}${entry.worker ? ` (${entry.worker})` : ""}`;
        const at = performance.now() - loadStartedAt;
        const w = warnings.get(key);
        if (w === undefined) {
          if (warnings.size < 50) warnings.set(key, { count: 1, firstMs: at, lastMs: at });
        } else {
          w.count++;
          w.lastMs = at;
        }
      },
    },
  );
  const gateway: Gateway = await startGateway({
    workers: workers.map((w) => ({ url: w.url })),
    host: "127.0.0.1",
    port: 0,
    policy: "power_of_two",
    priorityScheduler: {
      enabled: true,
      defaultMaxClass: "default",
      configPath: yamlPath,
      tenantMetricTopN: 32,
    },
    legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
    apiKeys: TENANTS.map((t) => ({ sha256: sha256Hex(t.key), tenant: t.name })),
    trustedTenantHeader: null,
    requireAuth: true,
    maxPayloadSize: 1024 * 1024,
    requestTimeoutSecs: 30,
    // Quick to notice the restart (a refused connection takes a worker out at once; one good probe
    // brings it back), tolerant of a loaded machine (two failed 2 s probes before a worker leaves).
    health: {
      ...DEFAULT_HEALTH,
      intervalSecs: 0.5,
      timeoutSecs: 2,
      failureThreshold: 2,
      successThreshold: 1,
    },
    logger,
  });
  if (gateway.admission.mode !== "scheduler") {
    await gateway.close();
    await remote.close();
    throw new Error(`soak: expected scheduler mode, got ${gateway.admission.mode}: ${errors.join("")}`);
  }

  const capacity = 2 * o.workerCapacity;
  let meanTokens = 0;
  for (const m of MIX) meanTokens += m.share * ((m.tokens[0] + m.tokens[1]) / 2);
  // Service time at a full batch: ttft + tokens x delay, both slowed by the batch.
  const meanServiceMs =
    (TTFT_MS + meanTokens * TOKEN_DELAY_MS) * (1 + BATCH_SLOWDOWN * (o.workerCapacity - 1));
  const rate = (o.overload * capacity) / (meanServiceMs / 1000);

  const agent = new Agent({ connections: 2048, pipelining: 1, keepAliveTimeout: 2000 });
  const outcomes = new Map<string, number>();
  const unattributed = new Map<string, number>();
  const unattributedTimes = new Map<string, { firstMs: number; lastMs: number }>();
  const aborts = { queued: 0, beforeFirstByte: 0, midStream: 0, planned: 0 };
  let clients503 = 0;
  const ttfb = new Map<string, Histogram>();
  const total = new Map<string, Histogram>();
  for (const m of MIX) {
    ttfb.set(m.cls, new Histogram());
    total.set(m.cls, new Histogram());
  }
  let restart: { startMs: number; endMs: number } | undefined;
  const startedAt = performance.now();
  loadStartedAt = startedAt;
  const now = () => performance.now() - startedAt;
  const inRestartWindow = (t0: number, t1: number) =>
    restart !== undefined && t1 >= restart.startMs && t0 <= restart.endMs + 2000;

  let inflightClients = 0;
  let sent = 0;
  let shed = 0;
  const MAX_CLIENTS = 1500;

  async function one(mix: Mix): Promise<void> {
    const tenant = TENANTS[mix.tenants[Math.floor(random() * mix.tenants.length)]!]!;
    const stream = random() < mix.stream;
    const maxTokens = mix.tokens[0] + Math.floor(random() * (mix.tokens[1] - mix.tokens[0] + 1));
    // Abort plans: while queued (soon after sending), before the first byte (later), mid-stream.
    let plan: "none" | "early" | "late" | "mid-stream" = "none";
    if (random() < o.abortFraction) {
      const r = random();
      plan = r < 0.34 ? "early" : r < 0.67 || !stream ? "late" : "mid-stream";
      aborts.planned++;
    }
    const abortAfterMs = plan === "early" ? random() * 200 : plan === "late" ? 100 + random() * 900 : 0;
    const abortAfterChunks = 1 + Math.floor(random() * 6);
    const body = JSON.stringify({
      model: "mock-llm",
      messages: [{ role: "user", content: "soak ".repeat(1 + Math.floor(random() * 40)) }],
      max_tokens: maxTokens,
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    });
    const ac = new AbortController();
    const t0 = now();
    let headersAt: number | undefined;
    let timer: NodeJS.Timeout | undefined;
    if (abortAfterMs > 0) timer = setTimeout(() => ac.abort(), abortAfterMs);
    let outcome: string;
    try {
      const res = await request(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${tenant.key}`,
          "x-smg-priority": mix.cls,
        },
        body,
        signal: ac.signal,
        dispatcher: agent,
        headersTimeout: 60_000,
        bodyTimeout: 60_000,
      });
      headersAt = now();
      if (res.statusCode === 200) {
        let chunks = 0;
        let tail = "";
        for await (const chunk of res.body) {
          chunks++;
          tail = (tail + (chunk as Buffer).toString("latin1")).slice(-64);
          if (plan === "mid-stream" && chunks >= abortAfterChunks) ac.abort();
        }
        outcome = stream && !tail.includes("[DONE]") ? "200 (stream cut)" : "200";
        ttfb.get(mix.cls)!.add(headersAt - t0);
        total.get(mix.cls)!.add(now() - t0);
      } else {
        const code = res.headers["x-smg-error-code"];
        await res.body.dump();
        outcome = `${res.statusCode} ${typeof code === "string" ? code : "(no code)"}`;
        if (code === "scheduler_preempted") clients503++;
      }
    } catch (err) {
      if (ac.signal.aborted) {
        outcome = "client abort";
        if (headersAt !== undefined) aborts.midStream++;
        else if (plan === "early") aborts.queued++;
        else aborts.beforeFirstByte++;
      } else outcome = `error ${(err as { code?: string }).code ?? (err as Error).message}`;
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
    bump(outcomes, outcome);
    const attributable =
      outcome === "200" ||
      outcome === "client abort" ||
      /^(429|408) /.test(outcome) ||
      outcome === "503 scheduler_preempted" ||
      inRestartWindow(t0, now());
    if (!attributable) {
      bump(unattributed, outcome);
      const at = now();
      const seen = unattributedTimes.get(outcome);
      if (seen === undefined) unattributedTimes.set(outcome, { firstMs: at, lastMs: at });
      else seen.lastMs = at;
    }
  }

  // --- the load ---
  const baselineTimers = timerCount();
  const pending = new Set<Promise<void>>();
  let nextArrival = 0;
  let lastLog = 0;
  const restartAtMs = o.restartAt === null ? Number.POSITIVE_INFINITY : o.restartAt * o.durationMs;
  const markWindow = new MarkWindow(o.markAt * o.durationMs);
  // The end-of-load mark's samples end before the load does.
  const endWindow = new MarkWindow(Math.max(o.markAt * o.durationMs + 2500, o.durationMs - 2500));
  let restartPromise: Promise<void> | undefined;
  while (now() < o.durationMs) {
    const t = now();
    while (nextArrival <= t) {
      nextArrival += -Math.log(1 - random()) * (1000 / rate);
      if (inflightClients >= MAX_CLIENTS) {
        shed++;
        continue;
      }
      let r = random();
      let mix = MIX[MIX.length - 1]!;
      for (const m of MIX) {
        if (r < m.share) {
          mix = m;
          break;
        }
        r -= m.share;
      }
      sent++;
      inflightClients++;
      const p = one(mix).finally(() => {
        inflightClients--;
        pending.delete(p);
      });
      pending.add(p);
    }
    markWindow.tick(t, gc, startedAt);
    endWindow.tick(t, gc, startedAt);
    if (restartPromise === undefined && t >= restartAtMs) {
      const startMs = now();
      restartPromise = remote.restart(1, o.restartDownMs).then(() => {
        restart = { startMs, endMs: now() };
      });
      restart = { startMs, endMs: startMs + o.restartDownMs + 1000 };
    }
    if (t - lastLog >= 10_000) {
      lastLog = t;
      const s = admissionState(gateway);
      const open = await remote.stats().then(
        (list) => list.map((w) => w.open).join("/"),
        () => "?",
      );
      log(
        `${(t / 1000).toFixed(0)} s: sent ${sent}, clients ${inflightClients}, in flight ${s.inflight}, queued ${s.queued}, capacity ${s.capacity}, open at the workers ${open}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const mark = markWindow.mark;
  const endOfLoad = endWindow.mark;
  const runMs = now();
  await restartPromise;

  // --- drain: every client settles (queue timeouts are at most 15 s) ---
  const drainStarted = performance.now();
  await Promise.race([
    Promise.allSettled([...pending]),
    // A guard only: unreferenced, so it does not keep the process alive once everything settled.
    new Promise((resolve) => setTimeout(resolve, 45_000).unref()),
  ]);
  const unsettledClients = pending.size;
  await agent.close().catch(() => agent.destroy());
  await waitUntil(async () => {
    const s = admissionState(gateway);
    return s.inflight === 0 && s.queued === 0 && (await remote.stats()).every((w) => w.open === 0);
  }, 10_000);
  const drainMs = performance.now() - drainStarted;
  const gatewayPort = gateway.port;
  const workerPorts = new Set(workers.map((w) => w.port));
  await waitUntil(
    () => activeSockets().every((s) => s.localPort !== gatewayPort && s.remotePort !== gatewayPort),
    5000,
  );

  // A valid request after the storm.
  let probeStatus: number | string;
  const probeAgent = new Agent({ connections: 1 });
  try {
    const res = await request(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${TENANTS[1]!.key}` },
      body: JSON.stringify({ model: "mock-llm", messages: [{ role: "user", content: "x" }], max_tokens: 2 }),
      dispatcher: probeAgent,
      headersTimeout: 10_000,
      bodyTimeout: 10_000,
    });
    await res.body.dump();
    probeStatus = res.statusCode;
  } catch (err) {
    probeStatus = (err as Error).message;
  }
  await probeAgent.destroy();
  await waitUntil(
    () => activeSockets().every((s) => s.localPort !== gatewayPort && s.remotePort !== gatewayPort),
    5000,
  );

  const snapshot = admissionState(gateway);
  let metricsInflight: number | undefined;
  let metricsQueued: number | undefined;
  try {
    const scrape = parseScrape(await (await request(`${gateway.url}/metrics`, { reset: true })).body.text());
    metricsInflight = 0;
    metricsQueued = 0;
    for (const cls of ["system", "interactive", "default", "bulk"]) {
      metricsInflight += metric(scrape, "smg_scheduler_inflight", { class: cls }) ?? 0;
      metricsQueued += metric(scrape, "smg_scheduler_queue_depth", { class: cls }) ?? 0;
    }
  } catch {
    // left undefined: the check reports it
  }
  await waitUntil(
    () => activeSockets().every((s) => s.localPort !== gatewayPort && s.remotePort !== gatewayPort),
    5000,
  );
  // The health checks probe the workers twice a second (/health, then /v1/models for the model
  // pools): a probe in flight is a busy socket for a few ms. A socket held by a request is busy for
  // good, so wait for the probes, not past a leak.
  await waitUntil(() => activeSockets().every((s) => !workerPorts.has(s.remotePort ?? -1)), 5000);
  const sockets = activeSockets();
  const gatewayClientSockets = sockets.filter(
    (s) => s.localPort === gatewayPort || s.remotePort === gatewayPort,
  ).length;
  const busyUpstreamSockets = sockets.filter((s) => workerPorts.has(s.remotePort ?? -1)).length;
  const afterDrain = memoryMark(gc, startedAt);
  const timersAfter = timerCount();
  const schedulerPreemptions = preemptions(gateway);

  const latency: SoakReport["latency"] = {};
  for (const m of MIX) {
    const a = ttfb.get(m.cls)!;
    const b = total.get(m.cls)!;
    latency[m.cls] = {
      ttfbP50: a.quantile(0.5),
      ttfbP99: a.quantile(0.99),
      totalP50: b.quantile(0.5),
      totalP99: b.quantile(0.99),
      n: b.count,
    };
  }
  const workerReports = (await remote.stats()).map((stats, i) => ({
    url: workers[i]!.url,
    stats,
    overCapacityFraction: stats.overCapacityMs / runMs,
  }));
  const report: SoakReport = {
    options: o,
    runMs,
    sent,
    shedByGenerator: shed,
    outcomes,
    unattributed,
    unattributedTimes,
    aborts,
    preemptions: { scheduler: schedulerPreemptions, clients503 },
    latency,
    restart,
    marks: { mark, endOfLoad, afterDrain },
    end: {
      schedulerInflight: snapshot.inflight,
      schedulerQueued: snapshot.queued,
      metricsInflight,
      metricsQueued,
      poolInflight: poolInflight(gateway),
      gatewayClientSockets,
      busyUpstreamSockets,
      timersBaseline: baselineTimers,
      timersAfter,
      drainMs,
      unsettledClients,
      probeStatus,
    },
    workers: workerReports,
    capacity,
    rate,
  };
  await gateway.close();
  await remote.close();
  await rm(dir, { recursive: true, force: true });
  if (errors.length > 0)
    log(`gateway ERROR lines (first ${errors.length}): ${errors.slice(0, 3).join("").slice(0, 1200)}`);
  for (const [msg, w] of warnings) {
    log(
      `gateway WARN ${w.count}x "${msg}" from ${(w.firstMs / 1000).toFixed(1)} s to ${(w.lastMs / 1000).toFixed(1)} s`,
    );
  }
  return report;
}

/** What a correct gateway satisfies at the end of a soak; an empty list means it passed. */
/**
 * `rss: false` skips the RSS comparison (heap after GC is still checked): on Node 24 and 26, V8
 * keeps freed pages mapped for a while, so RSS over a 60-second run grows with a flat heap (seen:
 * +36% RSS on Node 24 with heap within 10%). The 30-minute soak and Node 20 check both.
 */
export function checkSoak(r: SoakReport, options: { rss?: boolean } = {}): string[] {
  const failures: string[] = [];
  const e = r.end;
  if (e.unsettledClients > 0)
    failures.push(`${e.unsettledClients} client requests never settled (45 s after the load)`);
  if (e.schedulerInflight !== 0 || e.schedulerQueued !== 0) {
    failures.push(
      `scheduler in-flight ${e.schedulerInflight}, queued ${e.schedulerQueued} at the end (want 0, 0)`,
    );
  }
  if (e.metricsInflight !== 0 || e.metricsQueued !== 0) {
    failures.push(
      `/metrics in-flight ${e.metricsInflight}, queue depth ${e.metricsQueued} at the end (want 0, 0)`,
    );
  }
  if (e.poolInflight.some((n) => n !== 0))
    failures.push(`worker pool in-flight ${e.poolInflight.join("/")} (want 0)`);
  for (const w of r.workers) {
    if (w.stats.open !== 0) failures.push(`${w.url}: ${w.stats.open} requests still open at the worker`);
    if (w.overCapacityFraction > 0.005) {
      failures.push(
        `${w.url}: above its capacity (${w.stats.maxRunningRequests}) for ${w.stats.overCapacityMs.toFixed(0)} ms = ` +
          `${(100 * w.overCapacityFraction).toFixed(2)}% of the run (max 0.5%), in ${w.stats.overCapacitySpells} spells, ` +
          `longest ${w.stats.longestOverCapacityMs.toFixed(0)} ms, up to ${w.stats.openPeak} open`,
      );
    }
  }
  if (e.gatewayClientSockets !== 0)
    failures.push(`${e.gatewayClientSockets} client sockets still open at the gateway`);
  if (e.busyUpstreamSockets !== 0)
    failures.push(`${e.busyUpstreamSockets} gateway-to-worker sockets still busy`);
  if (e.timersAfter > e.timersBaseline + 5) {
    failures.push(
      `${e.timersAfter} timers after the drain, ${e.timersBaseline} before the load (leaked timers)`,
    );
  }
  const { mark, endOfLoad, afterDrain } = r.marks;
  if (mark === undefined || endOfLoad === undefined || afterDrain === undefined) {
    failures.push("memory marks missing");
  } else {
    for (const [name, m] of [
      ["end of load", endOfLoad],
      ["after the drain", afterDrain],
    ] as const) {
      if (m.heapUsedMb > mark.heapUsedMb * 1.1) {
        failures.push(
          `heap after GC ${m.heapUsedMb.toFixed(1)} MB at the ${name}, > 110% of ${mark.heapUsedMb.toFixed(1)} MB at the mark`,
        );
      }
      if (options.rss !== false && m.rssMb > mark.rssMb * 1.1) {
        failures.push(
          `RSS ${m.rssMb.toFixed(1)} MB at the ${name}, > 110% of ${mark.rssMb.toFixed(1)} MB at the mark`,
        );
      }
    }
  }
  for (const [outcome, n] of r.unattributed) {
    const t = r.unattributedTimes.get(outcome);
    const when = t ? ` (from ${(t.firstMs / 1000).toFixed(1)} s to ${(t.lastMs / 1000).toFixed(1)} s)` : "";
    failures.push(`${n}x ${outcome} outside the restart window${when}`);
  }
  if (e.probeStatus !== 200) failures.push(`a valid request after the soak got ${e.probeStatus}`);
  if (r.preemptions.scheduler === 0) failures.push("no preemption happened (the load did not exercise it)");
  return failures;
}

/** A human summary of a soak. */
export function formatSoak(r: SoakReport): string {
  const out: string[] = [];
  const secs = r.runMs / 1000;
  out.push(
    `soak: seed ${r.options.seed}, ${secs.toFixed(0)} s at ${r.options.overload}x overload ` +
      `(capacity ${r.capacity}, ${r.rate.toFixed(0)} arrivals/s offered), ${r.sent} requests ` +
      `(${(r.sent / secs).toFixed(0)}/s), ${r.shedByGenerator} shed by the generator`,
  );
  const served = (r.outcomes.get("200") ?? 0) / secs;
  out.push(
    `served ${served.toFixed(1)} answers 200/s: the offered load was ${(r.sent / secs / served).toFixed(1)}x what was served`,
  );
  out.push("outcomes:");
  for (const [k, v] of [...r.outcomes].sort((a, b) => b[1] - a[1])) {
    out.push(`  ${k.padEnd(36)} ${String(v).padStart(8)}  ${((100 * v) / r.sent).toFixed(1)}%`);
  }
  out.push(
    `client aborts: ${r.aborts.planned} planned; while queued ${r.aborts.queued}, before the first byte ${r.aborts.beforeFirstByte}, mid-stream ${r.aborts.midStream}`,
  );
  out.push(
    `preemptions: ${r.preemptions.scheduler} by the scheduler, ${r.preemptions.clients503} 503 scheduler_preempted seen by clients`,
  );
  out.push("latency of 200s, ms (time to headers / total): class  p50  p99");
  for (const [cls, l] of Object.entries(r.latency)) {
    out.push(
      `  ${cls.padEnd(12)} n=${String(l.n).padEnd(7)} headers ${l.ttfbP50} / ${l.ttfbP99}   total ${l.totalP50} / ${l.totalP99}`,
    );
  }
  const m = r.marks;
  const fmt = (x: MemoryMark | undefined) =>
    x
      ? `RSS ${x.rssMb.toFixed(1)} MB, heap ${x.heapUsedMb.toFixed(1)} MB at ${(x.atMs / 1000).toFixed(0)} s`
      : "-";
  out.push(
    `memory after GC: mark ${fmt(m.mark)}; end of load ${fmt(m.endOfLoad)}; after drain ${fmt(m.afterDrain)}`,
  );
  if (r.restart) {
    out.push(
      `worker restart: down at ${(r.restart.startMs / 1000).toFixed(1)} s, back at ${(r.restart.endMs / 1000).toFixed(1)} s`,
    );
  }
  for (const w of r.workers) {
    const s = w.stats;
    out.push(
      `worker ${w.url}: completed ${s.completed}, aborted ${s.aborted}, open peak ${s.openPeak} (capacity ${s.maxRunningRequests}), ` +
        `over capacity ${s.overCapacityMs.toFixed(0)} ms = ${(100 * w.overCapacityFraction).toFixed(3)}% in ${s.overCapacitySpells} spells ` +
        `(longest ${s.longestOverCapacityMs.toFixed(0)} ms; by length <1/<5/<20/<100/more ms: ` +
        `${Object.values(s.overCapacitySpellLengths).join("/")}), restarts ${s.restarts}`,
    );
  }
  const e = r.end;
  out.push(
    `end: scheduler in-flight ${e.schedulerInflight} queued ${e.schedulerQueued}; /metrics ${e.metricsInflight}/${e.metricsQueued}; ` +
      `pool in-flight ${e.poolInflight.join("/")}; gateway client sockets ${e.gatewayClientSockets}; busy upstream sockets ${e.busyUpstreamSockets}; ` +
      `timers ${e.timersBaseline} -> ${e.timersAfter}; drain ${(e.drainMs / 1000).toFixed(1)} s; probe ${e.probeStatus}`,
  );
  return out.join("\n");
}

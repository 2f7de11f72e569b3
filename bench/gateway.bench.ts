/**
 * Gateway bench (`npm run bench:gateway`), on loopback, against a mock worker that answers at once. It
 * reaches the mock (a) directly, (b) through the bare Node proxy (node:http + undici `pool.dispatch`,
 * bench/gateway/bare-proxy.ts), (c) through the naive bare proxy (`pool.request` + `.pipe`, an extra row),
 * (d) through sluice with the priority scheduler, (e) through sluice with legacy admission, and (f) through
 * nginx when it is installed. Every system under test is its own process.
 *
 * The workload (bench/gateway/workload.ts) is the targets' configuration: four tenants known by their API
 * keys (`api_keys` in sluice's --config, `require_auth`), and requests that cycle through the four
 * `x-smg-priority` classes and the four tenants. Every target gets the same bytes.
 *
 * - Non-streaming: small chat requests (max_tokens 1), autocannon in this process (bench/gateway/load.ts).
 *   Runs are interleaved and repeated, and medians are reported. Then the bare proxy and sluice (scheduler)
 *   are loaded at half the bare proxy's maximum rate, for p99.
 * - Streaming: 64-token SSE streams, loaded by the undici client in bench/gateway/stream-load.ts, which
 *   measures time to first byte. Maximum load for direct, the bare proxy, sluice (scheduler) and nginx,
 *   then half the bare proxy's maximum for the bare proxy and sluice.
 * - With --cpu-prof: after the measured runs, fresh bare-proxy and sluice (scheduler) processes run under
 *   --cpu-prof at maximum load, one per workload, and their top frames go into the section.
 * Prints tables and rewrites the gateway section of BENCHMARKS.md.
 *
 * Knobs (argv wins over env):
 *   --duration S        BENCH_GATEWAY_DURATION       seconds per measured run (10)
 *   --connections N     BENCH_GATEWAY_CONNECTIONS    connections of the load client (50)
 *   --rounds N          BENCH_GATEWAY_ROUNDS         runs per contender, interleaved (3)
 *   --warmup S          BENCH_GATEWAY_WARMUP         warm-up seconds per target and workload (3)
 *   --no-write          BENCH_GATEWAY_NO_WRITE=1     leave BENCHMARKS.md alone
 *   --output FILE       BENCH_GATEWAY_OUTPUT         write the section into FILE instead of BENCHMARKS.md
 *   --bare-variants     BENCH_GATEWAY_BARE_VARIANTS=1  also run the bare proxy's pool.stream variant, and
 *                                                    the variants in the streaming runs too
 *   --cpu-prof DIR      BENCH_GATEWAY_CPU_PROF       profile the bare proxy and sluice (scheduler) in
 *                                                    extra runs (one folder per process and workload in
 *                                                    DIR) and put their top frames into the section; read
 *                                                    one in full with
 *                                                    node --import tsx bench/gateway/profile-summary.ts DIR/sluice-scheduler-stream
 *   --node LINE         SLUICE_NODE                  re-run the bench (and so every Node process it starts) on
 *                                                    that pinned Node line: 24, an exact version or system
 *                                                    (scripts/node-line.sh installs it into .tools/ when missing)
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { request } from "undici";
import { runOnSelectedNode } from "../scripts/node-line.js";
import {
  type Child,
  cpuSeconds,
  freePort,
  installCleanup,
  spawnChild,
  stopAll,
  waitReady,
} from "./gateway/children.js";
import { type RunResult, runLoad } from "./gateway/load.js";
import { findNginx, startNginx } from "./gateway/nginx.js";
import { compactSummary, loadProfile } from "./gateway/profile-summary.js";
import {
  describeMachine,
  fmtMs,
  fmtRatio,
  fmtRps,
  markdownTable,
  median,
  type Table,
  textTable,
  writeGatewaySection,
} from "./gateway/report.js";
import { runStreamLoad, type StreamRunResult } from "./gateway/stream-load.js";
import {
  CLASSES,
  gatewayConfigYaml,
  priorityYaml,
  REQUEST_BODY,
  REQUEST_PATH,
  type RequestVariant,
  requestVariants,
  STREAM_BODY,
  STREAM_TOKENS,
  TENANTS,
} from "./gateway/workload.js";

runOnSelectedNode();

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CLI = join(ROOT, "src/cli/main.ts");
const BARE_PROXY = join(ROOT, "bench/gateway/bare-proxy.ts");
const BENCHMARKS_MD = join(ROOT, "BENCHMARKS.md");
const WORKER_CAPACITY = 4096;
const THROUGHPUT_TARGET = 0.9;
const P99_TARGET_MS = 0.5;
const TTFB_TARGET_MS = 0.5;
const STRETCH_BARE = 1.0;
const STRETCH_NGINX = 0.5;
const PROFILE_TOP = 10;

const VARIANTS = requestVariants(REQUEST_BODY);
const STREAM_VARIANTS = requestVariants(STREAM_BODY);

interface Settings {
  durationS: number;
  connections: number;
  rounds: number;
  warmupS: number;
  write: boolean;
  /** The markdown file whose gateway section is rewritten. */
  output: string;
  bareVariants: boolean;
  cpuProfDir: string | undefined;
}

function settings(): Settings {
  const { values } = parseArgs({
    options: {
      duration: { type: "string" },
      connections: { type: "string" },
      rounds: { type: "string" },
      warmup: { type: "string" },
      "no-write": { type: "boolean" },
      output: { type: "string" },
      "bare-variants": { type: "boolean" },
      "cpu-prof": { type: "string" },
      node: { type: "string" }, // handled by runOnSelectedNode()
    },
  });
  const num = (flag: string | undefined, env: string, fallback: number, integer: boolean) => {
    const raw = flag ?? process.env[env];
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
      throw new Error(
        `${env} / --${env.slice(14).toLowerCase()} must be a positive ${integer ? "integer" : "number"}`,
      );
    }
    return n;
  };
  const prof = values["cpu-prof"] ?? process.env.BENCH_GATEWAY_CPU_PROF;
  return {
    durationS: num(values.duration, "BENCH_GATEWAY_DURATION", 10, true),
    connections: num(values.connections, "BENCH_GATEWAY_CONNECTIONS", 50, true),
    rounds: num(values.rounds, "BENCH_GATEWAY_ROUNDS", 3, true),
    warmupS: num(values.warmup, "BENCH_GATEWAY_WARMUP", 3, true),
    write: !(values["no-write"] ?? process.env.BENCH_GATEWAY_NO_WRITE === "1"),
    output: resolve(values.output ?? (process.env.BENCH_GATEWAY_OUTPUT || BENCHMARKS_MD)),
    bareVariants: values["bare-variants"] ?? process.env.BENCH_GATEWAY_BARE_VARIANTS === "1",
    cpuProfDir: prof === undefined || prof === "" ? undefined : resolve(prof),
  };
}

type Key = "direct" | "bare" | "bareStream" | "barePipe" | "sluiceOn" | "sluiceOff" | "nginx";

interface Target {
  key: Key;
  label: string;
  /** Where the non-streaming requests go. */
  url: string;
  /** Where the streaming requests go (nginx has a listener with buffering off). */
  streamUrl: string;
  child: Child;
  /** The proxy's process (undefined for direct). */
  proxyPid: number | undefined;
}

/** CPU time the proxy and the upstream spent per answered request during a run. */
interface Cpu {
  proxyCpuUs: number;
  upstreamCpuUs: number;
}

type Measured = RunResult & Cpu;
type StreamMeasured = StreamRunResult & Cpu;

const LABELS: Record<Key, string> = {
  direct: "direct (mock worker)",
  bare: "bare proxy (node:http + undici dispatch)",
  bareStream: "bare proxy, pool.stream variant",
  barePipe: "naive bare proxy (undici request + .pipe)",
  sluiceOn: "sluice, scheduler enabled",
  sluiceOff: "sluice, scheduler disabled (legacy)",
  nginx: "nginx proxy_pass",
};

/**
 * A Node child under tsx. Profiled children write into DIR/<name>/ with Node's default file names:
 * tsx's loader runs on a worker thread that writes its own (small) profile; the main thread's is the big one.
 */
function nodeChild(name: string, script: string, args: string[], profDir?: string): Child {
  const prof = profDir === undefined ? [] : ["--cpu-prof", "--cpu-prof-dir", join(profDir, name)];
  return spawnChild(name, process.execPath, [...prof, "--import", "tsx", script, ...args], ROOT);
}

async function getText(url: string): Promise<string> {
  const res = await request(url);
  return res.body.text();
}

function post(url: string, variant: RequestVariant | undefined, body: string) {
  return request(url + REQUEST_PATH, {
    method: "POST",
    headers: variant?.headers ?? { "content-type": "application/json" },
    body,
  });
}

const isSluice = (key: Key) => key === "sluiceOn" || key === "sluiceOff";

/**
 * Real requests through the target, one of each (tenant, class) pair: 200 with a chat completion, and
 * sluice's admission header; one stream, with every event; and, for sluice, that a request without a
 * key is refused (authentication is on).
 */
async function checkTarget(target: Target, streamEvents: number | undefined): Promise<number> {
  const fail = (what: string) => new Error(`${target.label}: ${what}`);
  for (const v of VARIANTS) {
    const res = await post(target.url, v, v.body);
    const text = await res.body.text();
    if (res.statusCode !== 200 || !text.includes("chat.completion")) {
      throw fail(`expected a 200 chat completion, got ${res.statusCode}: ${text.slice(0, 200)}`);
    }
    if (isSluice(target.key) && res.headers["x-sluice-admission"] !== "fast") {
      throw fail(`expected x-sluice-admission: fast, got ${String(res.headers["x-sluice-admission"])}`);
    }
  }
  const v = STREAM_VARIANTS[0]!;
  const res = await post(target.streamUrl, v, v.body);
  const text = await res.body.text();
  const events = text.split("\n\n").filter((e) => e.startsWith("data: ")).length;
  if (res.statusCode !== 200 || !text.endsWith("data: [DONE]\n\n") || text.includes('"usage"')) {
    throw fail(
      `expected a 200 stream ending in [DONE] without usage, got ${res.statusCode}: ${text.slice(-200)}`,
    );
  }
  if (streamEvents !== undefined && events !== streamEvents) {
    throw fail(`expected ${streamEvents} stream events (as sent directly), got ${events}`);
  }
  if (isSluice(target.key)) {
    const anonymous = await post(target.url, undefined, REQUEST_BODY);
    await anonymous.body.dump();
    if (anonymous.statusCode !== 401)
      throw fail(`expected 401 without an API key, got ${anonymous.statusCode}`);
  }
  return events;
}

/** After the warm-up: sluice admitted requests in all four classes, for all four tenants. */
async function checkSpread(target: Target, scheduler: boolean): Promise<void> {
  const metrics = await getText(`${target.url}/metrics`);
  const missing: string[] = [];
  if (scheduler) {
    for (const c of CLASSES) {
      const m = new RegExp(
        `^smg_scheduler_admit_total\\{class="${c}",outcome="admitted"\\} (\\d+)`,
        "m",
      ).exec(metrics);
      if (m === null || Number(m[1]) === 0) missing.push(`class ${c}`);
    }
  }
  for (const t of TENANTS) {
    if (!metrics.includes(`sluice_tenant_tokens_total{tenant="auth:${t.name}"`))
      missing.push(`tenant ${t.name}`);
  }
  if (missing.length > 0) throw new Error(`${target.label}: nothing admitted for ${missing.join(", ")}`);
}

function assertAlive(target: Target): void {
  const { proc } = target.child;
  if (proc.exitCode !== null || proc.signalCode !== null) {
    throw new Error(`${target.label} exited during the bench:\n${target.child.output()}`);
  }
}

const fmtUs = (n: number) => (Number.isNaN(n) ? "-" : n.toFixed(0));
const fmtDelta = (n: number) => (Number.isNaN(n) ? "-" : `${n >= 0 ? "+" : ""}${fmtMs(n)} ms`);

function line(label: string, r: Measured | StreamMeasured): string {
  const failures = r.failures > 0 ? `, ${r.failures} failures` : "";
  const cpu = Number.isNaN(r.proxyCpuUs) ? "" : `, proxy CPU ${fmtUs(r.proxyCpuUs)} us/req`;
  const ttfb =
    "ttfbP50Ms" in r ? `, TTFB p50 ${fmtMs(r.ttfbP50Ms)} ms, p99 ${fmtMs(r.ttfbP99Ms)} ms, total` : "";
  return `${label}: ${fmtRps(r.rps)} req/s${ttfb} p50 ${fmtMs(r.p50Ms)} ms, p99 ${fmtMs(r.p99Ms)} ms${cpu}${failures}`;
}

/** One load run against `target`, with the CPU its proxy and the upstream used, per request. */
async function measure<R extends RunResult>(
  target: Target,
  upstreamPid: number | undefined,
  run: () => Promise<R>,
): Promise<R & Cpu> {
  const before = [cpuSeconds(target.proxyPid), cpuSeconds(upstreamPid)];
  const r = await run();
  const after = [cpuSeconds(target.proxyPid), cpuSeconds(upstreamPid)];
  assertAlive(target);
  const perRequest = (i: number) =>
    before[i] === undefined || after[i] === undefined || r.requests === 0
      ? Number.NaN
      : ((after[i]! - before[i]!) * 1e6) / r.requests;
  return { ...r, proxyCpuUs: perRequest(0), upstreamCpuUs: perRequest(1) };
}

interface Summary {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  minRps: number;
  maxRps: number;
  minP99Ms: number;
  maxP99Ms: number;
  proxyCpuUs: number;
  upstreamCpuUs: number;
  failures: number;
}

interface StreamSummary extends Summary {
  ttfbP50Ms: number;
  ttfbP99Ms: number;
  minTtfbP99Ms: number;
  maxTtfbP99Ms: number;
}

function summarize(runs: Measured[]): Summary {
  return {
    rps: median(runs.map((r) => r.rps)),
    p50Ms: median(runs.map((r) => r.p50Ms)),
    p99Ms: median(runs.map((r) => r.p99Ms)),
    minRps: Math.min(...runs.map((r) => r.rps)),
    maxRps: Math.max(...runs.map((r) => r.rps)),
    minP99Ms: Math.min(...runs.map((r) => r.p99Ms)),
    maxP99Ms: Math.max(...runs.map((r) => r.p99Ms)),
    proxyCpuUs: median(runs.map((r) => r.proxyCpuUs)),
    upstreamCpuUs: median(runs.map((r) => r.upstreamCpuUs)),
    failures: runs.reduce((n, r) => n + r.failures, 0),
  };
}

function summarizeStream(runs: StreamMeasured[]): StreamSummary {
  return {
    ...summarize(runs),
    ttfbP50Ms: median(runs.map((r) => r.ttfbP50Ms)),
    ttfbP99Ms: median(runs.map((r) => r.ttfbP99Ms)),
    minTtfbP99Ms: Math.min(...runs.map((r) => r.ttfbP99Ms)),
    maxTtfbP99Ms: Math.max(...runs.map((r) => r.ttfbP99Ms)),
  };
}

/**
 * Runs `run` for every target, `rounds` times, interleaved: the order rotates each round, so that no
 * contender always follows the same one.
 */
async function interleaved<R>(
  title: string,
  targets: Target[],
  rounds: number,
  run: (t: Target) => Promise<R>,
  describe: (t: Target, r: R) => string,
): Promise<Map<Key, R[]>> {
  console.log(`\n${title}`);
  const runs = new Map<Key, R[]>(targets.map((t) => [t.key, []]));
  for (let round = 0; round < rounds; round++) {
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
    for (const t of order) {
      const r = await run(t);
      runs.get(t.key)!.push(r);
      console.log(`  [${round + 1}/${rounds}] ${describe(t, r)}`);
    }
  }
  return runs;
}

async function main(): Promise<void> {
  const s = settings();
  const tmp = mkdtempSync(join(os.tmpdir(), "sluice-gateway-bench-"));
  installCleanup(() => rmSync(tmp, { recursive: true, force: true }));
  if (s.cpuProfDir !== undefined) mkdirSync(s.cpuProfDir, { recursive: true });
  const nginx = findNginx();
  const machine = describeMachine(nginx?.version);
  const date = new Date().toISOString().slice(0, 10);
  const started = Date.now();
  // Before any child starts: how busy the machine already is (others' work shares the cores).
  const loadBefore = os.loadavg()[0]!.toFixed(2);
  console.log(`gateway bench ${date}: ${machine}; 1-min load average before the run ${loadBefore}`);
  console.log(
    `${s.connections} connections, ${s.durationS} s per run, ${s.rounds} interleaved runs per contender, ` +
      `${s.warmupS} s warm-up${s.cpuProfDir !== undefined ? `, CPU profiles into ${s.cpuProfDir}` : ""}`,
  );
  if (nginx === undefined) console.log("nginx not found (PATH, NGINX_BIN): skipping the nginx reference");

  // (a) the upstream: a mock worker that answers at once.
  const upstreamPort = await freePort();
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  const workerArgs = [
    "mock-worker",
    "--port",
    String(upstreamPort),
    "--ttft-ms",
    "0",
    "--token-delay-ms",
    "0",
    "--max-running-requests",
    String(WORKER_CAPACITY),
  ];
  const worker = nodeChild("mock-worker", CLI, workerArgs);
  await waitReady(worker, `${upstreamUrl}/health`);
  const upstreamPid = worker.proc.pid;
  const targets: Target[] = [
    {
      key: "direct",
      label: LABELS.direct,
      url: upstreamUrl,
      streamUrl: upstreamUrl,
      child: worker,
      proxyPid: undefined,
    },
  ];

  // (b)-(f) the proxies, each in its own process.
  const yamlPath = join(tmp, "priority.yaml");
  writeFileSync(yamlPath, priorityYaml());
  const configPath = join(tmp, "gateway.yaml");
  writeFileSync(configPath, gatewayConfigYaml());
  const sluiceArgs = (port: number) => [
    "--worker-urls",
    upstreamUrl,
    "--port",
    String(port),
    "--log-level",
    "warn",
    "--config",
    configPath,
    // Like for like with the bare proxy; `npm run bench:ledger -- --gateway` measures the ledger's cost.
    "--ledger",
    "off",
  ];
  const sluiceOnArgs = (port: number) => [
    ...sluiceArgs(port),
    "--priority-scheduler-enabled",
    "--priority-scheduler-config",
    yamlPath,
  ];
  const bareArgs = (port: number, mode: string) => [upstreamUrl, String(port), mode];
  const starts: Array<{ key: Key; start: (port: number, streamPort: number) => Child; ready: string }> = [
    {
      key: "bare",
      start: (port) => nodeChild("bare-proxy", BARE_PROXY, bareArgs(port, "dispatch")),
      ready: "/health",
    },
    ...(s.bareVariants
      ? [
          {
            key: "bareStream" as const,
            start: (port: number) => nodeChild("bare-proxy-stream", BARE_PROXY, bareArgs(port, "stream")),
            ready: "/health",
          },
        ]
      : []),
    {
      key: "barePipe",
      start: (port) => nodeChild("bare-proxy-pipe", BARE_PROXY, bareArgs(port, "pipe")),
      ready: "/health",
    },
    {
      key: "sluiceOn",
      start: (port) => nodeChild("sluice-scheduler", CLI, sluiceOnArgs(port)),
      ready: "/readiness",
    },
    {
      key: "sluiceOff",
      start: (port) =>
        nodeChild("sluice-legacy", CLI, [...sluiceArgs(port), "--max-concurrent-requests", "-1"]),
      ready: "/readiness",
    },
  ];
  if (nginx !== undefined) {
    starts.push({
      key: "nginx",
      start: (port, streamPort) => startNginx(nginx, tmp, port, streamPort, new URL(upstreamUrl)),
      ready: "/health",
    });
  }
  const proxies = await Promise.all(
    starts.map(async ({ key, start, ready }) => {
      const port = await freePort();
      const streamPort = key === "nginx" ? await freePort() : port;
      const child = start(port, streamPort);
      const target: Target = {
        key,
        label: LABELS[key],
        url: `http://127.0.0.1:${port}`,
        streamUrl: `http://127.0.0.1:${streamPort}`,
        child,
        proxyPid: child.proc.pid,
      };
      return { target, ready: waitReady(target.child, target.url + ready) };
    }),
  );
  await Promise.all(proxies.map((p) => p.ready));
  targets.push(...proxies.map((p) => p.target));
  const byKey = (key: Key) => targets.find((t) => t.key === key);

  for (const [key, mode] of [
    ["sluiceOn", "scheduler"],
    ["sluiceOff", "legacy"],
  ] as const) {
    const info = JSON.parse(await getText(`${byKey(key)!.url}/readiness`)) as Record<string, unknown>;
    if (info.admission_mode !== mode || info.capacity !== WORKER_CAPACITY) {
      throw new Error(
        `${LABELS[key]}: expected mode ${mode}, capacity ${WORKER_CAPACITY}; got ${JSON.stringify(info)}`,
      );
    }
  }
  const streamEvents = await checkTarget(targets[0]!, undefined);
  for (const t of targets.slice(1)) await checkTarget(t, streamEvents);

  const streamKeys: Key[] = s.bareVariants
    ? ["direct", "bare", "bareStream", "barePipe", "sluiceOn", "nginx"]
    : ["direct", "bare", "sluiceOn", "nginx"];
  const streamTargets = targets.filter((t) => streamKeys.includes(t.key));
  const load = (t: Target, rate?: number) =>
    measure(t, upstreamPid, () =>
      runLoad(t.url, { connections: s.connections, durationS: s.durationS, rate, variants: VARIANTS }),
    );
  const streamLoad = (t: Target, rate?: number) =>
    measure(t, upstreamPid, () =>
      runStreamLoad(t.streamUrl, {
        connections: s.connections,
        durationS: s.durationS,
        rate,
        variants: STREAM_VARIANTS,
      }),
    );

  console.log("\nwarm-up");
  for (const t of targets) {
    const r = await measure(t, upstreamPid, () =>
      runLoad(t.url, { connections: s.connections, durationS: s.warmupS, variants: VARIANTS }),
    );
    console.log(`  ${line(t.label, r)}`);
  }
  for (const t of streamTargets) {
    const r = await measure(t, upstreamPid, () =>
      runStreamLoad(t.streamUrl, {
        connections: s.connections,
        durationS: s.warmupS,
        variants: STREAM_VARIANTS,
      }),
    );
    console.log(`  ${line(`${t.label}, streaming`, r)}`);
  }
  await checkSpread(byKey("sluiceOn")!, true);
  await checkSpread(byKey("sluiceOff")!, false);

  // Non-streaming.
  const maxRuns = await interleaved(
    "maximum throughput, non-streaming (interleaved)",
    targets,
    s.rounds,
    (t) => load(t),
    (t, r) => line(t.label, r),
  );
  const max = new Map<Key, Summary>([...maxRuns].map(([k, runs]) => [k, summarize(runs)]));
  const bare = max.get("bare")!;
  const direct = max.get("direct")!;
  const rate = Math.round(bare.rps / 2);
  const fixedTargets = [byKey("bare")!, byKey("sluiceOn")!];
  const fixedRuns = await interleaved(
    `fixed rate, non-streaming: ${fmtRps(rate)} req/s (half the bare proxy's median maximum), interleaved`,
    fixedTargets,
    s.rounds,
    (t) => load(t, rate),
    (t, r) => line(t.label, r),
  );
  const fixed = new Map<Key, Summary>([...fixedRuns].map(([k, runs]) => [k, summarize(runs)]));

  // Streaming.
  const streamMaxRuns = await interleaved(
    `maximum throughput, ${STREAM_TOKENS}-token streams (interleaved)`,
    streamTargets,
    s.rounds,
    (t) => streamLoad(t),
    (t, r) => line(t.label, r),
  );
  const streamMax = new Map<Key, StreamSummary>(
    [...streamMaxRuns].map(([k, runs]) => [k, summarizeStream(runs)]),
  );
  const streamBare = streamMax.get("bare")!;
  const streamDirect = streamMax.get("direct")!;
  const streamRate = Math.round(streamBare.rps / 2);
  const streamFixedRuns = await interleaved(
    `fixed rate, streams: ${fmtRps(streamRate)} streams/s (half the bare proxy's median maximum), interleaved`,
    fixedTargets,
    s.rounds,
    (t) => streamLoad(t, streamRate),
    (t, r) => line(t.label, r),
  );
  const streamFixed = new Map<Key, StreamSummary>(
    [...streamFixedRuns].map(([k, runs]) => [k, summarizeStream(runs)]),
  );
  const loadAfter = os.loadavg()[0]!.toFixed(2);

  // Profiles, in processes of their own, so that the measured runs above are not slowed by profiling.
  const profiles: Array<{ title: string; text: string }> = [];
  if (s.cpuProfDir !== undefined) {
    console.log(`\nCPU profiles into ${s.cpuProfDir}`);
    const jobs = [
      {
        name: "bare-proxy",
        label: LABELS.bare,
        script: BARE_PROXY,
        args: (p: number) => bareArgs(p, "dispatch"),
      },
      { name: "sluice-scheduler", label: LABELS.sluiceOn, script: CLI, args: sluiceOnArgs },
    ];
    for (const streaming of [false, true]) {
      for (const job of jobs) {
        const name = `${job.name}-${streaming ? "stream" : "nonstream"}`;
        const dir = join(s.cpuProfDir, name);
        rmSync(dir, { recursive: true, force: true });
        const port = await freePort();
        const spawnedAt = performance.now();
        const child = nodeChild(name, job.script, job.args(port), s.cpuProfDir);
        const url = `http://127.0.0.1:${port}`;
        await waitReady(child, url + (job.name === "bare-proxy" ? "/health" : "/readiness"));
        const target: Target = {
          key: job.name === "bare-proxy" ? "bare" : "sluiceOn",
          label: job.label,
          url,
          streamUrl: url,
          child,
          proxyPid: child.proc.pid,
        };
        const loadOnce = (durationS: number) =>
          measure(target, upstreamPid, () =>
            streaming
              ? runStreamLoad(url, { connections: s.connections, durationS, variants: STREAM_VARIANTS })
              : runLoad(url, { connections: s.connections, durationS, variants: VARIANTS }),
          );
        await loadOnce(s.warmupS);
        // The summary leaves out the startup (module loading) and the warm-up (JIT): only the run counts.
        const skipMs = Math.round(performance.now() - spawnedAt);
        const r = await loadOnce(s.durationS);
        console.log(`  ${line(`${name} (profiled)`, r)}`);
        await child.stop();
        const { file, profile } = loadProfile(dir);
        const text = compactSummary(profile, PROFILE_TOP, skipMs);
        console.log(`  ${file} (first ${skipMs} ms left out)\n${text.replace(/^/gm, "    ")}`);
        profiles.push({
          title:
            `${job.label}, ${streaming ? `${STREAM_TOKENS}-token streams` : "non-streaming"}, ` +
            `${s.durationS} s at maximum load after a ${s.warmupS} s warm-up (${fmtRps(r.rps)} req/s while profiled)`,
          text,
        });
      }
    }
  }

  // Tables.
  const maxTable: Table = {
    header: [
      "Target",
      "req/s",
      "p50 ms",
      "p99 ms",
      "vs bare proxy",
      "vs direct",
      "req/s range",
      "proxy CPU us/req",
      "upstream CPU us/req",
      "errors",
    ],
    rows: targets.map((t) => {
      const m = max.get(t.key)!;
      return [
        t.label,
        fmtRps(m.rps),
        fmtMs(m.p50Ms),
        fmtMs(m.p99Ms),
        fmtRatio(m.rps / bare.rps),
        fmtRatio(m.rps / direct.rps),
        `${fmtRps(m.minRps)}-${fmtRps(m.maxRps)}`,
        fmtUs(m.proxyCpuUs),
        fmtUs(m.upstreamCpuUs),
        String(m.failures),
      ];
    }),
  };
  const fixedTable = (summaries: Map<Key, Summary>, offered: number): Table => ({
    header: [
      "Target",
      "offered req/s",
      "achieved req/s",
      "p50 ms",
      "p99 ms",
      "p99 range ms",
      "proxy CPU us/req",
      "errors",
    ],
    rows: fixedTargets.map((t) => {
      const f = summaries.get(t.key)!;
      return [
        t.label,
        fmtRps(offered),
        fmtRps(f.rps),
        fmtMs(f.p50Ms),
        fmtMs(f.p99Ms),
        `${fmtMs(f.minP99Ms)}-${fmtMs(f.maxP99Ms)}`,
        fmtUs(f.proxyCpuUs),
        String(f.failures),
      ];
    }),
  });
  const streamTable = (summaries: Map<Key, StreamSummary>, shown: Target[], offered?: number): Table => ({
    header: [
      "Target",
      ...(offered === undefined ? ["streams/s", "vs bare proxy", "vs direct"] : ["offered/s", "achieved/s"]),
      "TTFB p50 ms",
      "TTFB p99 ms",
      "TTFB p99 range ms",
      "total p50 ms",
      "total p99 ms",
      "proxy CPU us/stream",
      "errors",
    ],
    rows: shown.map((t) => {
      const m = summaries.get(t.key)!;
      return [
        t.label,
        ...(offered === undefined
          ? [fmtRps(m.rps), fmtRatio(m.rps / streamBare.rps), fmtRatio(m.rps / streamDirect.rps)]
          : [fmtRps(offered), fmtRps(m.rps)]),
        fmtMs(m.ttfbP50Ms),
        fmtMs(m.ttfbP99Ms),
        `${fmtMs(m.minTtfbP99Ms)}-${fmtMs(m.maxTtfbP99Ms)}`,
        fmtMs(m.p50Ms),
        fmtMs(m.p99Ms),
        fmtUs(m.proxyCpuUs),
        String(m.failures),
      ];
    }),
  });
  const streamMaxTable = streamTable(streamMax, streamTargets);
  const streamFixedTable = streamTable(streamFixed, fixedTargets, streamRate);

  const sluiceMax = max.get("sluiceOn")!;
  const ratio = sluiceMax.rps / bare.rps;
  const p99Delta = fixed.get("sluiceOn")!.p99Ms - fixed.get("bare")!.p99Ms;
  const streamRatio = streamMax.get("sluiceOn")!.rps / streamBare.rps;
  const ttfbP50Delta = streamFixed.get("sluiceOn")!.ttfbP50Ms - streamFixed.get("bare")!.ttfbP50Ms;
  const ttfbP99Delta = streamFixed.get("sluiceOn")!.ttfbP99Ms - streamFixed.get("bare")!.ttfbP99Ms;
  const nginxMax = max.get("nginx");
  const nginxRatio = nginxMax === undefined ? Number.NaN : sluiceMax.rps / nginxMax.rps;
  const yes = (ok: boolean) => (ok ? "yes" : "no");
  const targetTable: Table = {
    header: ["Target", "Goal", "Measured", "Met"],
    rows: [
      [
        "throughput, non-streaming: sluice (scheduler) / bare proxy",
        `>= ${THROUGHPUT_TARGET.toFixed(2)}x`,
        fmtRatio(ratio),
        yes(ratio >= THROUGHPUT_TARGET),
      ],
      [
        `p99 at half load (${fmtRps(rate)} req/s), non-streaming: sluice (scheduler) - bare proxy`,
        `<= ${P99_TARGET_MS} ms`,
        fmtDelta(p99Delta),
        yes(p99Delta <= P99_TARGET_MS),
      ],
      [
        `throughput, ${STREAM_TOKENS}-token streams: sluice (scheduler) / bare proxy`,
        `>= ${THROUGHPUT_TARGET.toFixed(2)}x`,
        fmtRatio(streamRatio),
        yes(streamRatio >= THROUGHPUT_TARGET),
      ],
      [
        `TTFB p50 at half load (${fmtRps(streamRate)} streams/s): sluice (scheduler) - bare proxy`,
        `<= ${TTFB_TARGET_MS} ms`,
        fmtDelta(ttfbP50Delta),
        yes(ttfbP50Delta <= TTFB_TARGET_MS),
      ],
      [
        `TTFB p99 at half load (${fmtRps(streamRate)} streams/s): sluice (scheduler) - bare proxy`,
        `<= ${TTFB_TARGET_MS} ms`,
        fmtDelta(ttfbP99Delta),
        yes(ttfbP99Delta <= TTFB_TARGET_MS),
      ],
      [
        "stretch: throughput, non-streaming: sluice (scheduler) / bare proxy",
        `>= ${STRETCH_BARE.toFixed(2)}x`,
        fmtRatio(ratio),
        yes(ratio >= STRETCH_BARE),
      ],
      [
        "stretch: throughput, non-streaming: sluice (scheduler) / nginx",
        `>= ${STRETCH_NGINX.toFixed(2)}x`,
        nginxMax === undefined ? "n/a (no nginx)" : fmtRatio(nginxRatio),
        nginxMax === undefined ? "n/a" : yes(nginxRatio >= STRETCH_NGINX),
      ],
      [
        "(for reference) proxy CPU per request, non-streaming: sluice (scheduler) / bare proxy",
        "-",
        fmtRatio(sluiceMax.proxyCpuUs / bare.proxyCpuUs),
        "-",
      ],
      [
        "(for reference) proxy CPU per stream: sluice (scheduler) / bare proxy",
        "-",
        fmtRatio(streamMax.get("sluiceOn")!.proxyCpuUs / streamBare.proxyCpuUs),
        "-",
      ],
    ],
  };

  const maxTitle = `Maximum throughput, non-streaming (median of ${s.rounds} x ${s.durationS} s, ${s.connections} connections)`;
  const fixedTitle = `Fixed rate of ${fmtRps(rate)} req/s, non-streaming (half the bare proxy's maximum), median of ${s.rounds} x ${s.durationS} s`;
  const streamMaxTitle = `Maximum throughput, ${STREAM_TOKENS}-token streams (median of ${s.rounds} x ${s.durationS} s, ${s.connections} connections)`;
  const streamFixedTitle = `Fixed rate of ${fmtRps(streamRate)} streams/s (half the bare proxy's maximum), median of ${s.rounds} x ${s.durationS} s`;
  console.log(`\n${maxTitle}`);
  console.log(textTable(maxTable));
  console.log(`\n${fixedTitle}`);
  console.log(textTable(fixedTable(fixed, rate)));
  console.log(`\n${streamMaxTitle}`);
  console.log(textTable(streamMaxTable));
  console.log(`\n${streamFixedTitle}`);
  console.log(textTable(streamFixedTable));
  console.log("\ntargets");
  console.log(textTable(targetTable));

  const workload =
    `Workload, the same bytes to every target: requests cycle through the 16 pairs of ${TENANTS.length} tenants ` +
    `and the ${CLASSES.length} classes (\`x-smg-priority\`: ${CLASSES.join(", ")}), each tenant sending its own ` +
    "`Authorization: Bearer` key. sluice runs with a `--config` listing the keys' SHA-256 in `api_keys` with " +
    "`require_auth: true` (so every request is authenticated; a request without a key is checked to get 401), " +
    `and, with the scheduler, a policy per tenant allowing every class with weights ${TENANTS.map((t) => t.weight).join(", ")} ` +
    "and small reservations (system 4, interactive 8 slots). After the warm-up the bench checks sluice's metrics: " +
    "requests were admitted in all four classes and for all four tenants. The upstream is a mock worker that " +
    `answers at once (no time to first token, no delay between tokens, capacity ${WORKER_CAPACITY}, so admission ` +
    "never queues); every system under test runs in its own process.";
  const method =
    `Non-streaming: autocannon (${s.connections} connections, pipelining 1, ${s.durationS} s per run) in the bench ` +
    `process sends \`POST ${REQUEST_PATH}\` with a ${REQUEST_BODY.length}-byte JSON body (max_tokens 1). After a ` +
    `warm-up per target, runs are interleaved in rotation, ${s.rounds} per contender, and the tables show medians. ` +
    "Latency is each response's own time, without coordinated-omission correction. The fixed-rate runs use " +
    "autocannon's `overallRate` split over one single-connection instance per connection, started staggered " +
    "across a second: autocannon spends each connection's per-second quota at once, so a single instance " +
    "would send the load in one saturating burst per second.";
  const streamMethod =
    `Streaming: \`stream: true\`, max_tokens ${STREAM_TOKENS} (a ${STREAM_BODY.length}-byte body, without ` +
    `\`stream_options\`, so sluice asks the worker for usage and strips that event again); the worker answers ` +
    `${streamEvents} SSE events, each its own chunk of the chunked body. autocannon does not measure time to ` +
    "first byte, so these runs use the bench's own loopback client (bench/gateway/stream-load.ts): an undici " +
    `Pool of ${s.connections} connections in the bench process, \`pool.dispatch\` with a minimal handler. TTFB is ` +
    "the time from dispatching a request to the first byte of its body (sluice holds the status line until " +
    "then, so the first body byte is what every target is compared on); total is the time to the end of the " +
    "body; a stream counts when it is a 200 ending in `data: [DONE]`. Maximum load is a closed loop " +
    `(${s.connections} streams in flight); the fixed rate is an open loop on a 1 ms timer (requests due in the ` +
    "same millisecond go together), times taken from the dispatch, not corrected for coordinated omission.";
  const notes = [
    `The load generator shares the ${os.cpus().length} cores with the upstream and the proxy, so compare proxies ` +
      "with the bare proxy (same parts, no scheduling), not with direct. Other work on the machine shows up as " +
      "spread between runs (the range columns), mostly in p99.",
    "Bare proxy: node:http server, undici Pool (256 connections, sluice's pool options), `pool.dispatch` with a " +
      "minimal handler writing the worker's status, headers and body chunks straight into the ServerResponse " +
      "with backpressure; header hygiene equal to sluice's (hop-by-hop, `Proxy-*`, `Host`, `Content-Length`, " +
      "`Expect` and `Authorization` dropped); a client leaving aborts the upstream request. The naive row is the " +
      "bench's former reference, `pool.request` then `body.pipe(res)`." +
      (s.bareVariants
        ? " The pool.stream row returns the ServerResponse from `pool.stream()`'s factory."
        : ""),
    "CPU us/req: user + system CPU time of the proxy's process (nginx: master and worker) and of the upstream " +
      "during the run, from /proc, divided by the answered requests; the least noise-sensitive cost measure here.",
    "sluice legacy runs with `--max-concurrent-requests -1` and the same `--config` (tenants by API key).",
    "sluice and the bare proxies run from TypeScript under tsx (`node --import tsx`), as the mock worker does; " +
      "the shipped `bin/sluice.js` runs tsc's output instead. tsx's esbuild adds a `__name` call per closure " +
      "created, 1-2% of either proxy's busy time in the profiles.",
    nginx === undefined
      ? "nginx was not installed: no C reference row, and the stretch target against nginx is n/a."
      : 'nginx: one worker process, upstream `keepalive 64`, `proxy_http_version 1.1`, `Connection ""`, ' +
        "access log off, `keepalive_requests` raised so neither side recycles connections mid-run; the " +
        "streaming runs use a second listener with `proxy_buffering off`, as SSE is proxied.",
  ];
  const minutes = ((Date.now() - started) / 60_000).toFixed(0);
  const section = [
    "## Gateway (`npm run bench:gateway`)",
    "",
    `Date: ${date}. Machine: ${machine}. 1-min load average before the run: ${loadBefore}, after the measured ` +
      `runs: ${loadAfter} (whole bench ${minutes} min).`,
    "",
    workload,
    "",
    method,
    "",
    streamMethod,
    "",
    "Targets:",
    "",
    markdownTable(targetTable),
    "",
    `${maxTitle}:`,
    "",
    markdownTable(maxTable),
    "",
    `${fixedTitle}:`,
    "",
    markdownTable(fixedTable(fixed, rate)),
    "",
    `${streamMaxTitle}:`,
    "",
    markdownTable(streamMaxTable),
    "",
    `${streamFixedTitle}:`,
    "",
    markdownTable(streamFixedTable),
    "",
    ...notes.map((n) => `- ${n}`),
  ];
  if (profiles.length > 0) {
    section.push(
      "",
      "CPU profiles (`--cpu-prof`): after the measured runs, a fresh process of each proxy ran under " +
        "`node --cpu-prof` at maximum load, one per workload (the measured runs above were not profiled). " +
        "The summaries leave out the process's startup and the warm-up, so they show the steady state. " +
        "Self time is a frame's own; inclusive time adds everything it called. Percentages are of the " +
        "process's busy (non-idle) time; `writev` is the socket writes' system calls. The full profiles: " +
        "`node --import tsx bench/gateway/profile-summary.ts DIR/<process> [top] [skip-ms]`.",
    );
    for (const p of profiles) section.push("", `${p.title}:`, "", "```text", p.text, "```");
  }
  const text = section.join("\n");

  if (s.write) {
    writeGatewaySection(s.output, text);
    console.log(`\nwrote the gateway section of ${s.output}`);
  } else {
    console.log(`\n${s.output} left alone (--no-write)`);
  }
}

main().then(
  async () => {
    await stopAll();
    process.exit(0);
  },
  async (err: unknown) => {
    process.stderr.write(
      `gateway bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    await stopAll();
    process.exit(1);
  },
);

/**
 * Gateway bench (`npm run bench:gateway`): autocannon on loopback, small non-streaming chat requests
 * (max_tokens 1) against a mock worker that answers at once, (a) directly, (b) through a bare Node proxy
 * (node:http + undici Pool, bench/gateway/bare-proxy.ts), (c) through sluice with the priority scheduler,
 * (d) through sluice with legacy admission, (e) through nginx when installed. Each system under test is
 * its own process; autocannon runs in this one. Runs are interleaved and repeated, medians reported; then
 * the bare proxy and sluice (scheduler) are loaded at half the bare proxy's maximum rate.
 * Prints tables and rewrites the gateway section of BENCHMARKS.md.
 *
 * Knobs (argv wins over env):
 *   --duration S        BENCH_GATEWAY_DURATION     seconds per measured run (10)
 *   --connections N     BENCH_GATEWAY_CONNECTIONS  autocannon connections (50)
 *   --rounds N          BENCH_GATEWAY_ROUNDS       runs per contender, interleaved (3)
 *   --warmup S          BENCH_GATEWAY_WARMUP       warm-up seconds per target (3)
 *   --no-write          BENCH_GATEWAY_NO_WRITE=1   leave BENCHMARKS.md alone
 *   --cpu-prof DIR      BENCH_GATEWAY_CPU_PROF     run the Node proxies with --cpu-prof into DIR
 *                                                  (one folder per proxy; summarize one with
 *                                                  node --import tsx bench/gateway/profile-summary.ts DIR/sluice-scheduler)
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { request } from "undici";
import {
  type Child,
  cpuSeconds,
  freePort,
  installCleanup,
  spawnChild,
  stopAll,
  waitReady,
} from "./gateway/children.js";
import { type LoadOptions, REQUEST_BODY, REQUEST_PATH, type RunResult, runLoad } from "./gateway/load.js";
import { findNginx, startNginx } from "./gateway/nginx.js";
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

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CLI = join(ROOT, "src/cli/main.ts");
const BARE_PROXY = join(ROOT, "bench/gateway/bare-proxy.ts");
const BENCHMARKS_MD = join(ROOT, "BENCHMARKS.md");
const WORKER_CAPACITY = 4096;
const THROUGHPUT_TARGET = 0.9;
const P99_TARGET_MS = 1;

// Small reservations that fit the 4096 slots; the bench's requests are all `default` class.
const PRIORITY_YAML = `classes:
  system: { reserved_floor: 4, reserved_per_slot: 0 }
  interactive: { reserved_floor: 8, reserved_per_slot: 0 }
  default: { reserved_floor: 0, reserved_per_slot: 0 }
  bulk: { reserved_floor: 0, reserved_per_slot: 0 }
`;

interface Settings {
  durationS: number;
  connections: number;
  rounds: number;
  warmupS: number;
  write: boolean;
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
      "cpu-prof": { type: "string" },
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
    cpuProfDir: prof === undefined || prof === "" ? undefined : resolve(prof),
  };
}

type Key = "direct" | "bare" | "sluiceOn" | "sluiceOff" | "nginx";

interface Target {
  key: Key;
  label: string;
  url: string;
  child: Child;
  /** The proxy's process (undefined for direct). */
  proxyPid: number | undefined;
}

/** A run, with the CPU time the proxy and the upstream spent per answered request. */
interface Measured extends RunResult {
  proxyCpuUs: number;
  upstreamCpuUs: number;
}

const LABELS: Record<Key, string> = {
  direct: "direct (mock worker)",
  bare: "bare proxy (node:http + undici)",
  sluiceOn: "sluice, scheduler enabled",
  sluiceOff: "sluice, scheduler disabled (legacy)",
  nginx: "nginx proxy_pass",
};

/**
 * A Node child under tsx. Profiled children write into DIR/<name>/ with Node's default file names:
 * tsx's loader runs on a worker thread that writes its own (small) profile; the main thread's is the big one.
 */
function nodeChild(name: string, script: string, args: string[], profDir: string | undefined): Child {
  const prof = profDir === undefined ? [] : ["--cpu-prof", "--cpu-prof-dir", join(profDir, name)];
  return spawnChild(name, process.execPath, [...prof, "--import", "tsx", script, ...args], ROOT);
}

async function getJson(url: string): Promise<Record<string, unknown>> {
  const res = await request(url);
  return (await res.body.json()) as Record<string, unknown>;
}

/** One real request through the target: 200 with a chat completion, and sluice's admission header. */
async function checkTarget(target: Target): Promise<void> {
  const res = await request(target.url + REQUEST_PATH, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: REQUEST_BODY,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200 || !text.includes("chat.completion")) {
    throw new Error(
      `${target.label}: expected a 200 chat completion, got ${res.statusCode}: ${text.slice(0, 200)}`,
    );
  }
  if (target.key.startsWith("sluice") && res.headers["x-sluice-admission"] !== "fast") {
    throw new Error(
      `${target.label}: expected x-sluice-admission: fast, got ${String(res.headers["x-sluice-admission"])}`,
    );
  }
}

function assertAlive(target: Target): void {
  const { proc } = target.child;
  if (proc.exitCode !== null || proc.signalCode !== null) {
    throw new Error(`${target.label} exited during the bench:\n${target.child.output()}`);
  }
}

function line(label: string, r: Measured): string {
  const failures = r.failures > 0 ? `, ${r.failures} failures` : "";
  const cpu = Number.isNaN(r.proxyCpuUs) ? "" : `, proxy CPU ${fmtUs(r.proxyCpuUs)} us/req`;
  return `${label}: ${fmtRps(r.rps)} req/s, p50 ${fmtMs(r.p50Ms)} ms, p99 ${fmtMs(r.p99Ms)} ms${cpu}${failures}`;
}

const fmtUs = (n: number) => (Number.isNaN(n) ? "-" : n.toFixed(0));

/** One load run against `target`, with the CPU its proxy and the upstream used, per request. */
async function measure(
  target: Target,
  upstreamPid: number | undefined,
  load: LoadOptions,
): Promise<Measured> {
  const before = [cpuSeconds(target.proxyPid), cpuSeconds(upstreamPid)];
  const r = await runLoad(target.url, load);
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

async function main(): Promise<void> {
  const s = settings();
  const tmp = mkdtempSync(join(os.tmpdir(), "sluice-gateway-bench-"));
  installCleanup(() => rmSync(tmp, { recursive: true, force: true }));
  if (s.cpuProfDir !== undefined) mkdirSync(s.cpuProfDir, { recursive: true });
  const nginx = findNginx();
  const machine = describeMachine(nginx?.version);
  const date = new Date().toISOString().slice(0, 10);
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
  ];
  const capacityArgs = ["--max-running-requests", String(WORKER_CAPACITY)];
  const worker = nodeChild("mock-worker", CLI, [...workerArgs, ...capacityArgs], undefined);
  await waitReady(worker, `${upstreamUrl}/health`);
  const targets: Target[] = [
    { key: "direct", label: LABELS.direct, url: upstreamUrl, child: worker, proxyPid: undefined },
  ];

  // (b)-(e) the proxies, each in its own process.
  const yamlPath = join(tmp, "priority.yaml");
  writeFileSync(yamlPath, PRIORITY_YAML);
  const sluiceArgs = (port: number) => [
    "--worker-urls",
    upstreamUrl,
    "--port",
    String(port),
    "--log-level",
    "warn",
  ];
  const starts: Array<{ key: Key; port: number; start: (port: number) => Child; ready: string }> = [
    {
      key: "bare",
      port: await freePort(),
      start: (port) => nodeChild("bare-proxy", BARE_PROXY, [upstreamUrl, String(port)], s.cpuProfDir),
      ready: "/health",
    },
    {
      key: "sluiceOn",
      port: await freePort(),
      start: (port) =>
        nodeChild(
          "sluice-scheduler",
          CLI,
          [...sluiceArgs(port), "--priority-scheduler-enabled", "--priority-scheduler-config", yamlPath],
          s.cpuProfDir,
        ),
      ready: "/readiness",
    },
    {
      key: "sluiceOff",
      port: await freePort(),
      start: (port) =>
        nodeChild(
          "sluice-legacy",
          CLI,
          [...sluiceArgs(port), "--max-concurrent-requests", "-1"],
          s.cpuProfDir,
        ),
      ready: "/readiness",
    },
  ];
  if (nginx !== undefined) {
    starts.push({
      key: "nginx",
      port: await freePort(),
      start: (port) => startNginx(nginx, tmp, port, new URL(upstreamUrl)),
      ready: "/health",
    });
  }
  const proxies = starts.map(({ key, port, start, ready }) => {
    const child = start(port);
    const target: Target = {
      key,
      label: LABELS[key],
      url: `http://127.0.0.1:${port}`,
      child,
      proxyPid: child.proc.pid,
    };
    return { target, ready: waitReady(target.child, target.url + ready) };
  });
  await Promise.all(proxies.map((p) => p.ready));
  targets.push(...proxies.map((p) => p.target));
  const byKey = (key: Key) => targets.find((t) => t.key === key);

  for (const [key, mode] of [
    ["sluiceOn", "scheduler"],
    ["sluiceOff", "legacy"],
  ] as const) {
    const info = await getJson(`${byKey(key)!.url}/readiness`);
    if (info.admission_mode !== mode || info.capacity !== WORKER_CAPACITY) {
      throw new Error(
        `${LABELS[key]}: expected mode ${mode}, capacity ${WORKER_CAPACITY}; got ${JSON.stringify(info)}`,
      );
    }
  }
  for (const t of targets) await checkTarget(t);

  console.log("\nwarm-up");
  for (const t of targets) {
    const r = await measure(t, worker.proc.pid, { connections: s.connections, durationS: s.warmupS });
    console.log(`  ${line(t.label, r)}`);
  }

  console.log("\nmaximum throughput (interleaved)");
  const maxRuns = new Map<Key, Measured[]>(targets.map((t) => [t.key, []]));
  for (let round = 0; round < s.rounds; round++) {
    // Rotate the order each round, so no contender always follows the same one.
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
    for (const t of order) {
      const r = await measure(t, worker.proc.pid, { connections: s.connections, durationS: s.durationS });
      maxRuns.get(t.key)!.push(r);
      console.log(`  [${round + 1}/${s.rounds}] ${line(t.label, r)}`);
    }
  }
  const max = new Map<Key, Summary>([...maxRuns].map(([k, runs]) => [k, summarize(runs)]));
  const bare = max.get("bare")!;
  const direct = max.get("direct")!;

  const rate = Math.round(bare.rps / 2);
  console.log(`\nfixed rate: ${fmtRps(rate)} req/s (half the bare proxy's median maximum), interleaved`);
  const fixedKeys: Key[] = ["bare", "sluiceOn"];
  const fixedRuns = new Map<Key, Measured[]>(fixedKeys.map((k) => [k, []]));
  for (let round = 0; round < s.rounds; round++) {
    const order = round % 2 === 0 ? fixedKeys : [...fixedKeys].reverse();
    for (const key of order) {
      const t = byKey(key)!;
      const r = await measure(t, worker.proc.pid, {
        connections: s.connections,
        durationS: s.durationS,
        rate,
      });
      fixedRuns.get(key)!.push(r);
      console.log(`  [${round + 1}/${s.rounds}] ${line(t.label, r)}`);
    }
  }
  const fixed = new Map<Key, Summary>([...fixedRuns].map(([k, runs]) => [k, summarize(runs)]));

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
  const fixedTable: Table = {
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
    rows: fixedKeys.map((key) => {
      const f = fixed.get(key)!;
      const p99Range = `${fmtMs(f.minP99Ms)}-${fmtMs(f.maxP99Ms)}`;
      return [
        LABELS[key],
        fmtRps(rate),
        fmtRps(f.rps),
        fmtMs(f.p50Ms),
        fmtMs(f.p99Ms),
        p99Range,
        fmtUs(f.proxyCpuUs),
        String(f.failures),
      ];
    }),
  };
  const ratio = max.get("sluiceOn")!.rps / bare.rps;
  const p99Delta = fixed.get("sluiceOn")!.p99Ms - fixed.get("bare")!.p99Ms;
  const yes = (ok: boolean) => (ok ? "yes" : "no");
  const targetTable: Table = {
    header: ["Target", "Goal", "Measured", "Met"],
    rows: [
      [
        "throughput, sluice (scheduler) / bare proxy",
        `>= ${THROUGHPUT_TARGET.toFixed(2)}x`,
        fmtRatio(ratio),
        yes(ratio >= THROUGHPUT_TARGET),
      ],
      [
        `p99 at ${fmtRps(rate)} req/s, sluice (scheduler) - bare proxy`,
        `<= ${P99_TARGET_MS} ms`,
        `${p99Delta >= 0 ? "+" : ""}${fmtMs(p99Delta)} ms`,
        yes(p99Delta <= P99_TARGET_MS),
      ],
      [
        "(for reference) proxy CPU per request, sluice (scheduler) / bare proxy",
        "-",
        fmtRatio(max.get("sluiceOn")!.proxyCpuUs / bare.proxyCpuUs),
        "-",
      ],
    ],
  };

  console.log(`\nmaximum throughput, median of ${s.rounds} x ${s.durationS} s, ${s.connections} connections`);
  console.log(textTable(maxTable));
  console.log(`\nfixed rate ${fmtRps(rate)} req/s, median of ${s.rounds} x ${s.durationS} s`);
  console.log(textTable(fixedTable));
  console.log("\ntargets");
  console.log(textTable(targetTable));

  const method =
    `autocannon (${s.connections} connections, pipelining 1, ${s.durationS} s per run) in the bench process sends ` +
    `\`POST ${REQUEST_PATH}\` with a ${REQUEST_BODY.length}-byte JSON body (max_tokens 1, non-streaming) on loopback ` +
    `to a mock worker that answers at once (capacity ${WORKER_CAPACITY}, so admission never queues), directly and ` +
    "through each proxy, every system under test in its own process; after a warm-up per target, runs are " +
    `interleaved in rotation, ${s.rounds} per contender, and the tables show medians. Latency is each response's ` +
    "own time, sub-millisecond, without coordinated-omission correction. The fixed-rate runs use autocannon's " +
    "`overallRate` split over one single-connection instance per connection, started staggered across a second: " +
    "autocannon spends each connection's per-second quota at once, so a single instance would send the load in " +
    "one saturating burst per second.";
  const notes = [
    `The load generator shares the ${os.cpus().length} cores with the upstream and the proxy, so compare proxies ` +
      "with the bare proxy (same parts, no scheduling), not with direct. Other work on the machine shows up as " +
      "spread between runs (the range columns), mostly in p99.",
    "CPU us/req: user + system CPU time of the proxy's process (nginx: master and worker) and of the upstream " +
      "during the run, from /proc, divided by the answered requests; the least noise-sensitive cost measure here.",
    "The sluice scheduler run uses small reservations (system 4, interactive 8 slots) and sends every request as " +
      "`default`; legacy runs with `--max-concurrent-requests -1`.",
    nginx === undefined
      ? "nginx was not installed: no C reference row."
      : 'nginx: one worker process, upstream `keepalive 64`, `proxy_http_version 1.1`, `Connection ""`, ' +
        "access log off, `keepalive_requests` raised so neither side recycles connections mid-run.",
  ];
  if (s.cpuProfDir !== undefined)
    notes.push("These runs were CPU-profiled (`--cpu-prof`), which slows the Node proxies.");
  const section = [
    "## Gateway (`npm run bench:gateway`)",
    "",
    `Date: ${date}. Machine: ${machine}. 1-min load average before the run: ${loadBefore}.`,
    "",
    method,
    "",
    `Maximum throughput (median of ${s.rounds} x ${s.durationS} s, ${s.connections} connections):`,
    "",
    markdownTable(maxTable),
    "",
    `Fixed rate of ${fmtRps(rate)} req/s (half the bare proxy's maximum), median of ${s.rounds} x ${s.durationS} s:`,
    "",
    markdownTable(fixedTable),
    "",
    "Targets:",
    "",
    markdownTable(targetTable),
    "",
    ...notes.map((n) => `- ${n}`),
  ].join("\n");

  if (s.write && s.cpuProfDir === undefined) {
    writeGatewaySection(BENCHMARKS_MD, section);
    console.log(`\nwrote the gateway section of ${BENCHMARKS_MD}`);
  } else {
    console.log(`\nBENCHMARKS.md left alone (${s.write ? "profiled run" : "--no-write"})`);
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

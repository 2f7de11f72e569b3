/**
 * `sluice demo`: a two-model fleet of mock workers (DEMO_WORKERS: two for a small fast model, one
 * for a big slow one: two model pools), the gateway with the priority scheduler, a DuckDB usage
 * ledger and the admin dashboard, and a mixed-priority load from five tenants. A per-class table
 * (demo-table.ts) redraws every second (in place on a terminal, plain lines otherwise); at the end
 * the demo prints the `sluice report` of what it just ran, read back from the ledger.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { CLASSES_HIGH_TO_LOW, type PriorityClass } from "@sluice/scheduler/core/class.js";
import { Command } from "commander";
import { pino } from "pino";
import { Agent, request } from "undici";
import { startGatewayWithDashboard } from "../dashboard/gateway-with-dashboard.js";
import { sha256Hex } from "../gateway/tenancy/tenants.js";
import { formatResult } from "../ledger/format.js";
import { openLedgerReader } from "../ledger/query.js";
import { buildReport, REPORT_DECIMALS, REPORT_NOTES, reportTable } from "../ledger/report.js";
import { startMockWorker } from "../mock-worker/index.js";
import { type DemoClassLine, type DemoPoolLines, frameText, renderDemoTable } from "./demo-table.js";

const SMALL_MODEL = "llama-3-8b";
const BIG_MODEL = "llama-3-70b";

interface Stream {
  tenant: string;
  key: string;
  model: string;
  priority: PriorityClass;
  concurrency: number;
  maxTokens: number;
  thinkMs: number;
  stream: boolean;
}

// A chat app wants interactive latency, an ETL job floods bulk, analytics runs at default,
// and the control plane sends a trickle of system calls.
const STREAMS: Stream[] = [
  {
    tenant: "ops",
    key: "demo-ops",
    model: SMALL_MODEL,
    priority: "system",
    concurrency: 1,
    maxTokens: 4,
    thinkMs: 400,
    stream: false,
  },
  {
    tenant: "chat-app",
    key: "demo-chat",
    model: SMALL_MODEL,
    priority: "interactive",
    concurrency: 6,
    maxTokens: 24,
    thinkMs: 60,
    stream: true,
  },
  {
    tenant: "analytics",
    key: "demo-analytics",
    model: SMALL_MODEL,
    priority: "default",
    concurrency: 10,
    maxTokens: 48,
    thinkMs: 0,
    stream: false,
  },
  {
    tenant: "batch-etl",
    key: "demo-batch",
    model: SMALL_MODEL,
    priority: "bulk",
    concurrency: 40,
    maxTokens: 64,
    thinkMs: 0,
    stream: false,
  },
  // A research team floods the big model: its own pool queues, the small model's users never notice.
  {
    tenant: "research",
    key: "demo-research",
    model: BIG_MODEL,
    priority: "default",
    concurrency: 12,
    maxTokens: 32,
    thinkMs: 0,
    stream: false,
  },
];

const PRIORITY_YAML = `# Small fleet (2 workers x 8 slots): reservations sized to fit 16 slots.
classes:
  system:      {reserved_floor: 1, queue_size: 16, queue_timeout_secs: 10, starvation_threshold_secs: 2, can_preempt: true}
  interactive: {reserved_floor: 4, reserved_per_slot: 0, queue_size: 64, queue_timeout_secs: 10, starvation_threshold_secs: 2, can_preempt: true}
  default:     {reserved_floor: 0, reserved_per_slot: 0.1, queue_size: 64, queue_timeout_secs: 20, starvation_threshold_secs: 5, can_preempt: false}
  bulk:        {reserved_floor: 0, queue_size: 32, queue_timeout_secs: 30, starvation_threshold_secs: 8, can_preempt: false}
tenant_policies:
  "auth:ops":       {max_class: system}
  "auth:chat-app":  {max_class: interactive, weight: 2}
  "auth:analytics": {max_class: default, tokens_per_minute: 30000}
  "auth:batch-etl": {max_class: bulk, budget_cost_usd: 1.5, budget_period: day}
  "auth:research":  {max_class: default}
`;

// USD per million tokens, so the ledger and the dashboard show costs and batch-etl meets its budget.
const PRICING = {
  [SMALL_MODEL]: { input_per_mtok: 50, output_per_mtok: 150 },
  [BIG_MODEL]: { input_per_mtok: 400, output_per_mtok: 1200 },
};

/** The fleet the demo starts: two fast workers for the small model, one slow for the big one. */
export const DEMO_WORKERS = [
  { model: SMALL_MODEL, maxRunningRequests: 8, ttftMs: 40, tokenDelayMs: 6 },
  { model: SMALL_MODEL, maxRunningRequests: 8, ttftMs: 40, tokenDelayMs: 6 },
  { model: BIG_MODEL, maxRunningRequests: 4, ttftMs: 150, tokenDelayMs: 25 },
] as const;

/** What `sluice demo --help` says it starts, from DEMO_WORKERS and STREAMS so it cannot drift. */
function demoDescription(): string {
  const models = [...new Set(DEMO_WORKERS.map((w) => w.model))];
  const perModel = models
    .map((m) => `${DEMO_WORKERS.filter((w) => w.model === m).length} for ${m}`)
    .join(", ");
  const tenants = new Set(STREAMS.map((s) => s.tenant)).size;
  return (
    `${DEMO_WORKERS.length} mock workers (${perModel}: one model pool each), the gateway with the ` +
    `priority scheduler, a DuckDB usage ledger and the admin dashboard, under a mixed-priority load ` +
    `from ${tenants} tenants for --duration-secs; a live per-class table, then the sluice report of the run`
  );
}

interface ClassStats {
  /** Requests answered 200 to the end. */
  completed: number;
  /** Answers other than 200, by error code. */
  refused: Map<string, number>;
  waits: number[];
}

function percentile(sorted: number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** How long a polite client waits after a refusal: the Retry-After it got, within [0.1 s, 5 s]. */
function backoffMs(retryAfter: string | string[] | undefined): number {
  const secs = Number(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter);
  return Number.isFinite(secs) && secs > 0 ? Math.min(5000, secs * 1000) : 100;
}

export async function runDemo(argv: string[]): Promise<void> {
  const opts = new Command("sluice demo")
    .description(demoDescription())
    .option("--duration-secs <secs>", "how long the load runs", (v) => Number(v), 60)
    .option("--port <port>", "gateway port (0 = any free port)", (v) => Number(v), 0)
    .option("--admin-port <port>", "admin API and dashboard port (0 = any free port)", (v) => Number(v), 0)
    .option(
      "--ledger <path>",
      "the DuckDB ledger file (replaced at start; query it afterwards with sluice ledger query --ledger duckdb:PATH)",
      "sluice-demo.duckdb",
    )
    .parse(argv, { from: "user" })
    .opts<{ durationSecs: number; port: number; adminPort: number; ledger: string }>();
  if (!(opts.durationSecs > 0)) throw new Error("--duration-secs must be > 0");

  const dir = await mkdtemp(join(tmpdir(), "sluice-demo-"));
  const priorityPath = join(dir, "priority.yaml");
  await writeFile(priorityPath, PRIORITY_YAML);
  const ledgerPath = resolve(opts.ledger);
  // A fresh ledger each run, so the report at the end is this run's.
  await Promise.all([rm(ledgerPath, { force: true }), rm(`${ledgerPath}.wal`, { force: true })]);
  const adminToken = randomBytes(12).toString("hex");
  const workers = await Promise.all(DEMO_WORKERS.map((w) => startMockWorker({ ...w, strictModels: true })));
  const gateway = await startGatewayWithDashboard({
    workers: workers.map((w) => ({ url: w.url })),
    host: "127.0.0.1",
    port: opts.port,
    policy: "power_of_two",
    priorityScheduler: {
      enabled: true,
      defaultMaxClass: "default",
      configPath: priorityPath,
      tenantMetricTopN: 32,
    },
    legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
    apiKeys: STREAMS.map((s) => ({ sha256: sha256Hex(s.key), tenant: s.tenant })),
    requireAuth: true,
    maxPayloadSize: 1 << 20,
    requestTimeoutSecs: 60,
    pricing: PRICING,
    // The big model's pool has 4 slots: reservations sized for it (the priority YAML's fit 16).
    pools: {
      [BIG_MODEL]: {
        interactive: { reserved_floor: 1 },
        default: { reserved_floor: 0, reserved_per_slot: 0 },
      },
    },
    health: {
      intervalSecs: 1,
      timeoutSecs: 1,
      failureThreshold: 3,
      successThreshold: 1,
      endpoint: "/health",
    },
    admin: { host: "127.0.0.1", port: opts.adminPort, token: adminToken },
    ledger: { target: { kind: "duckdb", path: ledgerPath }, retentionDays: 30 },
    logger: pino({ level: "warn" }, pino.destination(2)),
  });
  const scheduler = gateway.admission;
  const adminUrl = gateway.adminServer?.url ?? "";
  process.stdout.write(
    `sluice demo: gateway ${gateway.url} -> workers ${workers.map((w) => w.url).join(", ")} ` +
      `(capacity ${gateway.capacity.capacity}); running ${opts.durationSecs} s (Ctrl-C ends it early)\n` +
      `  dashboard: ${adminUrl}/dashboard   admin token: ${adminToken}\n` +
      `  metrics:   ${gateway.url}/metrics\n` +
      `  ledger:    ${ledgerPath} (DuckDB)\n\n`,
  );

  // Per model and class, as the client sees it.
  const stats = new Map<string, ClassStats>();
  const statsOf = (model: string, cls: PriorityClass): ClassStats => {
    const key = `${model}/${cls}`;
    let st = stats.get(key);
    if (st === undefined) {
      st = { completed: 0, refused: new Map(), waits: [] };
      stats.set(key, st);
    }
    return st;
  };
  const dispatcher = new Agent({ connections: 128 });
  const started = Date.now();
  const deadline = started + opts.durationSecs * 1000;
  let stopping = false;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  async function loop(s: Stream, id: number): Promise<void> {
    const body = JSON.stringify({
      model: s.model,
      messages: [
        { role: "user", content: `request from ${s.tenant} #${id}: summarise the quarterly report` },
      ],
      max_tokens: s.maxTokens,
      stream: s.stream,
      ...(s.stream ? { stream_options: { include_usage: true } } : {}),
    });
    while (!stopping && Date.now() < deadline) {
      const st = statsOf(s.model, s.priority);
      try {
        const res = await request(`${gateway.url}/v1/chat/completions`, {
          method: "POST",
          dispatcher,
          headers: {
            "content-type": "application/json",
            authorization: `Bearer ${s.key}`,
            "x-smg-priority": s.priority,
          },
          body,
        });
        await res.body.text();
        if (res.statusCode === 200) {
          st.completed++;
          st.waits.push(Number(res.headers["x-sluice-queue-wait-ms"] ?? 0));
        } else {
          const code = String(res.headers["x-smg-error-code"] ?? res.statusCode);
          st.refused.set(code, (st.refused.get(code) ?? 0) + 1);
          await sleep(backoffMs(res.headers["retry-after"])); // back off like a polite client
        }
      } catch {
        const key = "connection_error";
        st.refused.set(key, (st.refused.get(key) ?? 0) + 1);
        await sleep(100);
      }
      if (s.thinkMs > 0) await sleep(s.thinkMs);
    }
  }

  // On a terminal the table redraws in place; piped, each second prints plain lines.
  const tty = process.stdout.isTTY === true;
  let drawnLines = 0;
  const print = () => {
    const snap = scheduler.snapshot();
    if (snap.classes === null) return;
    const pools: DemoPoolLines[] = [];
    for (const pool of gateway.pools.all) {
      const ps = pool.admission.snapshot();
      if (ps.classes === null) continue;
      const classes: DemoClassLine[] = [];
      for (const cls of CLASSES_HIGH_TO_LOW) {
        const st = statsOf(pool.name, cls);
        const c = ps.classes[cls];
        if (st.completed + st.refused.size + c.inflight + c.queued === 0) continue;
        const sorted = [...st.waits].sort((a, b) => a - b);
        classes.push({
          cls,
          completed: st.completed,
          running: c.inflight,
          queued: c.queued,
          refused: st.refused,
          waitP50Ms: percentile(sorted, 50),
          waitP99Ms: percentile(sorted, 99),
        });
      }
      pools.push({
        name: pool.name,
        capacity: ps.capacity,
        running: ps.inflight,
        queued: ps.queued,
        classes,
      });
    }
    const lines = renderDemoTable(
      {
        elapsedSecs: (Date.now() - started) / 1000,
        fleet: { capacity: snap.capacity, running: snap.inflight, queued: snap.queued },
        pools,
      },
      process.stdout.columns ?? 80,
    );
    process.stdout.write(frameText(lines, drawnLines, tty));
    drawnLines = lines.length;
  };
  const ticker = setInterval(print, 1000);
  const onSignal = () => {
    stopping = true;
  };
  process.once("SIGINT", onSignal);

  const loops = STREAMS.flatMap((s) => Array.from({ length: s.concurrency }, (_, i) => loop(s, i)));
  await Promise.all(loops);
  clearInterval(ticker);
  print();
  const c = scheduler.counters();
  if (c !== undefined)
    process.stdout.write(
      `\ndone: preemptions ${Object.values(c.preemptions).reduce((n, by) => n + Object.values(by).reduce((a, b) => a + b, 0), 0)}, ` +
        `starvation promotions ${Object.values(c.starvationPromotions).reduce((a, b) => a + b, 0)}\n`,
    );
  process.off("SIGINT", onSignal);
  await dispatcher.close();
  // Closing the gateway writes the ledger's last rows; then the report reads them back.
  await gateway.close();
  await Promise.all(workers.map((w) => w.close()));
  await rm(dir, { recursive: true, force: true });

  const reader = await openLedgerReader({ kind: "duckdb", path: ledgerPath }, { snapshot: false });
  try {
    const report = await buildReport(reader, started);
    process.stdout.write(
      `\nsluice report --since ${Math.ceil((Date.now() - started) / 1000)}s --ledger duckdb:${opts.ledger}\n` +
        formatResult(reportTable(report), "table", { decimals: REPORT_DECIMALS }) +
        `${REPORT_NOTES.join("\n")}\n`,
    );
  } finally {
    await reader.close();
  }
}

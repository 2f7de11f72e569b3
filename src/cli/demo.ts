/**
 * `sluice demo`: two mock workers, the gateway with the priority scheduler, and a mixed-priority
 * load from four tenants, with a per-class table (admitted, queued, rejected, p50/p99 wait)
 * printed every second while it runs.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { pino } from "pino";
import { Agent, request } from "undici";
import { CLASSES_HIGH_TO_LOW, type PriorityClass } from "../core/class.js";
import { startGateway } from "../gateway/server.js";
import { sha256Hex } from "../gateway/tenants.js";
import { startMockWorker } from "../mock-worker/index.js";

interface Stream {
  tenant: string;
  key: string;
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
    priority: "system",
    concurrency: 1,
    maxTokens: 4,
    thinkMs: 400,
    stream: false,
  },
  {
    tenant: "chat-app",
    key: "demo-chat",
    priority: "interactive",
    concurrency: 6,
    maxTokens: 24,
    thinkMs: 60,
    stream: true,
  },
  {
    tenant: "analytics",
    key: "demo-analytics",
    priority: "default",
    concurrency: 10,
    maxTokens: 48,
    thinkMs: 0,
    stream: false,
  },
  {
    tenant: "batch-etl",
    key: "demo-batch",
    priority: "bulk",
    concurrency: 40,
    maxTokens: 64,
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
  "auth:analytics": {max_class: default}
  "auth:batch-etl": {max_class: bulk}
`;

interface ClassStats {
  admitted: number;
  rejected: Map<string, number>;
  waits: number[];
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function runDemo(argv: string[]): Promise<void> {
  const opts = new Command("sluice demo")
    .description("two mock workers, the gateway with the priority scheduler, and a mixed-priority load")
    .option("--duration-secs <secs>", "how long the load runs", (v) => Number(v), 20)
    .option("--port <port>", "gateway port (0 = any free port)", (v) => Number(v), 0)
    .parse(argv, { from: "user" })
    .opts<{ durationSecs: number; port: number }>();
  if (!(opts.durationSecs > 0)) throw new Error("--duration-secs must be > 0");

  const dir = await mkdtemp(join(tmpdir(), "sluice-demo-"));
  const priorityPath = join(dir, "priority.yaml");
  await writeFile(priorityPath, PRIORITY_YAML);
  const workers = await Promise.all([
    startMockWorker({ maxRunningRequests: 8, ttftMs: 40, tokenDelayMs: 6 }),
    startMockWorker({ maxRunningRequests: 8, ttftMs: 40, tokenDelayMs: 6 }),
  ]);
  const gateway = await startGateway({
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
    health: {
      intervalSecs: 1,
      timeoutSecs: 1,
      failureThreshold: 3,
      successThreshold: 1,
      endpoint: "/health",
    },
    logger: pino({ level: "warn" }, pino.destination(2)),
  });
  const scheduler = gateway.admission;
  process.stdout.write(
    `sluice demo: gateway ${gateway.url} -> workers ${workers.map((w) => w.url).join(", ")} ` +
      `(capacity ${gateway.capacity.capacity}); metrics at ${gateway.url}/metrics; running ${opts.durationSecs}s\n`,
  );

  const stats = new Map<PriorityClass, ClassStats>(
    CLASSES_HIGH_TO_LOW.map((c) => [c, { admitted: 0, rejected: new Map(), waits: [] }]),
  );
  const dispatcher = new Agent({ connections: 128 });
  const deadline = Date.now() + opts.durationSecs * 1000;
  let stopping = false;

  async function loop(s: Stream, id: number): Promise<void> {
    const body = JSON.stringify({
      model: "mock-llm",
      messages: [
        { role: "user", content: `request from ${s.tenant} #${id}: summarise the quarterly report` },
      ],
      max_tokens: s.maxTokens,
      stream: s.stream,
    });
    while (!stopping && Date.now() < deadline) {
      const st = stats.get(s.priority)!;
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
          st.admitted++;
          st.waits.push(Number(res.headers["x-sluice-queue-wait-ms"] ?? 0));
        } else {
          const code = String(res.headers["x-smg-error-code"] ?? res.statusCode);
          st.rejected.set(code, (st.rejected.get(code) ?? 0) + 1);
          await new Promise((r) => setTimeout(r, 100)); // back off like a polite client
        }
      } catch {
        const key = "connection_error";
        st.rejected.set(key, (st.rejected.get(key) ?? 0) + 1);
      }
      if (s.thinkMs > 0) await new Promise((r) => setTimeout(r, s.thinkMs));
    }
  }

  const started = Date.now();
  const print = () => {
    const snap = scheduler.snapshot();
    if (snap.classes === null) return;
    const rows = [
      `t=${((Date.now() - started) / 1000).toFixed(0).padStart(3)}s  capacity ${snap.capacity}  in flight ${snap.inflight}  queued ${snap.queued}`,
      "class        admitted  in-flight  queued  rejected (by code)                     p50 wait   p99 wait",
    ];
    for (const cls of CLASSES_HIGH_TO_LOW) {
      const st = stats.get(cls)!;
      const sorted = [...st.waits].sort((a, b) => a - b);
      const rejected = [...st.rejected].map(([k, v]) => `${k}=${v}`).join(" ") || "-";
      const c = snap.classes[cls];
      rows.push(
        `${cls.padEnd(12)} ${String(st.admitted).padStart(8)}  ${String(c.inflight).padStart(9)}  ${String(c.queued).padStart(6)}  ` +
          `${rejected.padEnd(38)} ${`${percentile(sorted, 50)} ms`.padStart(8)} ${`${percentile(sorted, 99)} ms`.padStart(10)}`,
      );
    }
    process.stdout.write(`${rows.join("\n")}\n\n`);
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
      `done: preemptions ${Object.values(c.preemptions).reduce((n, by) => n + Object.values(by).reduce((a, b) => a + b, 0), 0)}, ` +
        `starvation promotions ${Object.values(c.starvationPromotions).reduce((a, b) => a + b, 0)}\n`,
    );
  process.off("SIGINT", onSignal);
  await dispatcher.close();
  await gateway.close();
  await Promise.all(workers.map((w) => w.close()));
  await rm(dir, { recursive: true, force: true });
}

// Per-request CPU cost of tracing off, traces only (--otlp-metrics off) and traces with GenAI metrics: N non-streaming chat requests through an in-process
// gateway over loopback (16 concurrent), CPU time from process.cpuUsage(). The mock worker, the
// client and a minimal OTLP sink (drains the body, answers 200) share the process: the worker's and
// the client's cost is the same in both modes, the sink's counts against tracing. Run by hand:
// N=3000 ROUNDS=3 node --import tsx bench/tracing-cost.ts (not a test: no timing in tests).
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { Agent, request } from "undici";
import { DEFAULT_HEALTH } from "../src/gateway/options.js";
import { startGateway } from "../src/gateway/server.js";
import { startMockWorker } from "../src/mock-worker/index.js";

const N = Number(process.env.N ?? 3000);
const CONC = 16;
const sink = createServer((req, res) => {
  req.resume();
  req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
});
await new Promise<void>((r) => sink.listen(0, "127.0.0.1", r));
const endpoint = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;
const worker = await startMockWorker({ ttftMs: 0, tokenDelayMs: 0, batchSlowdown: 0 });
const body = JSON.stringify({
  model: "mock-llm",
  messages: [{ role: "user", content: "hello there" }],
  max_tokens: 4,
});

async function run(otlp: string | undefined, metrics: boolean): Promise<{ cpuUs: number; wallMs: number }> {
  const gw = await startGateway({
    workers: [{ url: worker.url, capacity: 64 }],
    host: "127.0.0.1",
    port: 0,
    policy: "round_robin",
    priorityScheduler: { enabled: false, defaultMaxClass: "system", tenantMetricTopN: 32 },
    legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
    apiKeys: [],
    trustedTenantHeader: null,
    requireAuth: false,
    maxPayloadSize: 1 << 20,
    requestTimeoutSecs: 30,
    health: { ...DEFAULT_HEALTH, intervalSecs: 600 },
    logger: pino({ level: "silent" }),
    otlpEndpoint: otlp,
    otlpMetrics: metrics,
  });
  const agent = new Agent({ connections: CONC });
  const one = async () => {
    const res = await request(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      body,
      headers: {
        "content-type": "application/json",
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      },
      dispatcher: agent,
    });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
  };
  // Warm-up.
  for (let i = 0; i < 300; i++) await one();
  let next = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CONC }, async () => {
      while (next++ < N) await one();
    }),
  );
  const c = process.cpuUsage(c0);
  const wallMs = performance.now() - t0;
  await gw.close(); // on: the last batch is flushed here (not counted)
  await agent.destroy();
  return { cpuUs: c.user + c.system, wallMs };
}

const results: Record<string, number[]> = { off: [], traces: [], on: [] };
for (let round = 0; round < Number(process.env.ROUNDS ?? 3); round++) {
  for (const mode of ["off", "traces", "on"] as const) {
    const r = await run(mode === "off" ? undefined : endpoint, mode === "on");
    results[mode]!.push(r.cpuUs / N);
    console.log(
      `${mode} round ${round}: ${(r.cpuUs / N).toFixed(1)} us CPU/request, ${((N / r.wallMs) * 1000).toFixed(0)} req/s`,
    );
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const off = median(results.off!);
const traces = median(results.traces!);
const on = median(results.on!);
console.log(
  `median: off ${off.toFixed(1)} us, traces ${traces.toFixed(1)} us, traces + GenAI metrics ${on.toFixed(1)} us; tracing adds ${(traces - off).toFixed(1)} us/request, metrics ${(on - traces).toFixed(1)} more`,
);
await worker.close();
sink.close();

/**
 * Keyed shedding under overload, over real HTTP with every part its own process (issue 35, item 14):
 * `sluice mock-worker --knee 12` behind `sluice --capacity-mode adaptive` with
 * `keyed_shedding: {header: x-session-id, classes: [default], target_delay_ms: 1000}`, prioritized
 * shedding at its default and a 5 s queue timeout for the default class. N sessions each send R
 * requests a second (open loop: a session does not wait for its answers), for D seconds.
 *
 * Prints: served per second (against the knee's), shed share, other answers by code, requests not
 * answered within 20 s, answers later than the queue timeout + 1 s, and the session windows (2 s
 * each) whose answers were mixed (some served, some not). Once a second it samples the capacity
 * limit, the keyed percentage and the prioritizer's threshold from /metrics (with --trace).
 *
 *   node --import tsx bench/keyed-shedding.ts [--duration 25] [--warmup 0] [--sessions 40] [--rate 4]
 *     [--max-tokens 28] [--max-running 256] [--stream] [--trace] [--no-keyed] [--no-prioritized]
 *     [--tpot-slo-ms 10]  (the adaptive controller's TPOT guard: without it, a worker that runs all it
 *     is sent, slowly, is held only by its engine's signals; docs/adaptive.md, rule 5)
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Agent, request } from "undici";
import { freePort, installCleanup, spawnChild, stopAll, waitReady } from "./gateway/children.js";

const { values: args } = parseArgs({
  options: {
    duration: { type: "string", default: "25" },
    warmup: { type: "string", default: "0" },
    sessions: { type: "string", default: "40" },
    rate: { type: "string", default: "4" },
    "max-tokens": { type: "string", default: "28" },
    knee: { type: "string", default: "12" },
    "max-running": { type: "string", default: "256" },
    stream: { type: "boolean", default: false },
    "no-reservations": { type: "boolean", default: false },
    trace: { type: "boolean", default: false },
    "no-keyed": { type: "boolean", default: false },
    "no-prioritized": { type: "boolean", default: false },
    "tpot-slo-ms": { type: "string" },
  },
});

const WARMUP_S = Number(args.warmup);
const DURATION_S = Number(args.duration);
const SESSIONS = Number(args.sessions);
const RATE = Number(args.rate);
const MAX_TOKENS = Number(args["max-tokens"]);
const QUEUE_TIMEOUT_S = 5;
const ANSWER_DEADLINE_MS = 20_000;
const SESSION_WINDOW_MS = 2000;

const root = resolve(fileURLToPath(import.meta.url), "../..");
const main = join(root, "src/cli/main.ts");

interface Result {
  session: number;
  sentAt: number;
  status: number | "none";
  code?: string;
  latencyMs: number;
}

async function run(): Promise<void> {
  installCleanup(() => {});
  const dir = mkdtempSync(join(tmpdir(), "sluice-keyed-"));
  const workerPort = await freePort();
  const gatewayPort = await freePort();
  const worker = spawnChild("mock-worker", process.execPath, [
    "--import",
    "tsx",
    main,
    "mock-worker",
    "--port",
    String(workerPort),
    "--knee",
    String(args.knee),
    "--max-running-requests",
    String(args["max-running"]),
  ]);
  await waitReady(worker, `http://127.0.0.1:${workerPort}/health`);
  const priority = join(dir, "priority.yaml");
  const zero = args["no-reservations"] ? "reserved_floor: 0, reserved_per_slot: 0, " : "";
  writeFileSync(
    priority,
    [
      "classes:",
      `  system: {${zero}queue_timeout_secs: 30}`,
      `  interactive: {${zero}queue_timeout_secs: 30}`,
      `  default: {${zero}queue_timeout_secs: ${QUEUE_TIMEOUT_S}}`,
      "",
    ].join("\n"),
  );
  const config = join(dir, "gateway.yaml");
  const lines = [
    `worker_urls: ["http://127.0.0.1:${workerPort}"]`,
    `port: ${gatewayPort}`,
    "priority_scheduler_enabled: true",
    `priority_scheduler_config: ${priority}`,
    "capacity_mode: adaptive",
    ...(args["tpot-slo-ms"] !== undefined ? [`tpot_slo_ms: ${Number(args["tpot-slo-ms"])}`] : []),
    "ledger: off",
    "log_level: warn",
  ];
  if (!args["no-keyed"])
    lines.push("keyed_shedding: {header: x-session-id, classes: [default], target_delay_ms: 1000}");
  if (args["no-prioritized"]) lines.push("load_shedding: false");
  writeFileSync(config, `${lines.join("\n")}\n`);
  const gateway = spawnChild("sluice", process.execPath, ["--import", "tsx", main, "--config", config]);
  const base = `http://127.0.0.1:${gatewayPort}`;
  await waitReady(gateway, `${base}/health`);

  const agent = new Agent({ connections: 4096, pipelining: 0, keepAliveTimeout: 30_000 });
  const results: Result[] = [];
  const pending: Promise<void>[] = [];
  const start = performance.now();
  const body = JSON.stringify({
    model: "mock-llm",
    messages: [{ role: "user", content: "hello there" }],
    max_tokens: MAX_TOKENS,
    ...(args.stream ? { stream: true } : {}),
  });
  const send = (session: number): void => {
    const sentAt = performance.now();
    const signal = AbortSignal.timeout(ANSWER_DEADLINE_MS);
    pending.push(
      request(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-session-id": `session-${session}` },
        body,
        signal,
        dispatcher: agent,
      })
        .then(async (res) => {
          const text = await res.body.text();
          let code: string | undefined;
          if (res.statusCode !== 200) {
            try {
              code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
            } catch {
              code = undefined;
            }
          }
          results.push({
            session,
            sentAt: sentAt - start,
            status: res.statusCode,
            ...(code !== undefined ? { code } : {}),
            latencyMs: performance.now() - sentAt,
          });
        })
        .catch(() => {
          results.push({ session, sentAt: sentAt - start, status: "none", latencyMs: ANSWER_DEADLINE_MS });
        }),
    );
  };
  const trace: string[] = [];
  const sampler = setInterval(() => {
    if (!args.trace) return;
    const at = ((performance.now() - start) / 1000).toFixed(0);
    const stats = request(`http://127.0.0.1:${workerPort}/mock/stats`)
      .then((r) => r.body.json() as Promise<{ running: number; waiting: number }>)
      .catch(() => ({ running: -1, waiting: -1 }));
    void request(`${base}/metrics`)
      .then((r) => r.body.text())
      .then(async (text) => {
        const w = await stats;
        const pick = (name: string) => text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m"))?.[1];
        trace.push(
          `${at}s limit ${pick("sluice_capacity_limit")} keyed% ${Number(pick("sluice_keyed_admission_percent")).toFixed(1)} threshold ${pick("sluice_shed_threshold_level")} predicted ${Number(pick("sluice_shed_predicted_queue_wait_seconds")).toFixed(1)} worker running ${w.running} waiting ${w.waiting}`,
        );
      })
      .catch(() => {});
  }, 1000);
  // Each session sends every 1/RATE s, the sessions' phases spread over that interval.
  const intervalMs = 1000 / RATE;
  const timers: NodeJS.Timeout[] = [];
  await new Promise<void>((done) => {
    let ended = 0;
    for (let s = 0; s < SESSIONS; s++) {
      const offset = (s * intervalMs) / SESSIONS;
      let n = 0;
      const tick = () => {
        const due = offset + n * intervalMs;
        if (due >= (WARMUP_S + DURATION_S) * 1000) {
          if (++ended === SESSIONS) done();
          return;
        }
        send(s);
        n++;
        const next = offset + n * intervalMs - (performance.now() - start);
        timers.push(setTimeout(tick, Math.max(0, next)));
      };
      timers.push(setTimeout(tick, offset));
    }
  });
  await Promise.all(pending);
  clearInterval(sampler);
  await agent.close();
  await stopAll();
  rmSync(dir, { recursive: true, force: true });
  report(
    results
      .filter((r) => r.sentAt >= WARMUP_S * 1000)
      .map((r) => ({ ...r, sentAt: r.sentAt - WARMUP_S * 1000 })),
    trace,
  );
}

function range(ms: number[]): string {
  if (ms.length === 0) return "-";
  return `${(Math.min(...ms) / 1000).toFixed(1)}-${(Math.max(...ms) / 1000).toFixed(1)}`;
}

function report(results: Result[], trace: string[]): void {
  const total = results.length;
  const served = results.filter((r) => r.status === 200).length;
  const shed = results.filter((r) => r.code === "load_shed").length;
  const none = results.filter((r) => r.status === "none").length;
  const late = results.filter((r) => r.status !== "none" && r.latencyMs > QUEUE_TIMEOUT_S * 1000 + 1000);
  const byCode = new Map<string, number>();
  for (const r of results) {
    if (r.status === 200 || r.code === "load_shed") continue;
    const key = `${r.status} ${r.code ?? ""}`;
    byCode.set(key, (byCode.get(key) ?? 0) + 1);
  }
  const windows = new Map<string, { served: number; other: number }>();
  for (const r of results) {
    const key = `${r.session}:${Math.floor(r.sentAt / SESSION_WINDOW_MS)}`;
    const w = windows.get(key) ?? { served: 0, other: 0 };
    if (r.status === 200) w.served++;
    else w.other++;
    windows.set(key, w);
  }
  const mixed = [...windows.values()].filter((w) => w.served > 0 && w.other > 0).length;
  const servedLatencies = results
    .filter((r) => r.status === 200)
    .map((r) => r.latencyMs)
    .sort((a, b) => a - b);
  const q = (p: number) =>
    servedLatencies[Math.min(servedLatencies.length - 1, Math.floor(p * servedLatencies.length))];
  if (trace.length > 0) console.log(trace.join("\n"));
  console.log(
    [
      `${SESSIONS} sessions x ${RATE}/s for ${DURATION_S} s${WARMUP_S > 0 ? ` after ${WARMUP_S} s` : ""}, max_tokens ${MAX_TOKENS}${args.stream ? ", streamed" : ""}${args["no-keyed"] ? ", no keyed" : ""}${args["no-prioritized"] ? ", no prioritized" : ""}`,
      `requests ${total}; served ${served} (${(served / DURATION_S).toFixed(1)}/s); shed ${shed} (${((100 * shed) / total).toFixed(1)}%)`,
      `other answers: ${[...byCode].map(([k, n]) => `${k} x${n}`).join(", ") || "none"}`,
      `no answer within ${ANSWER_DEADLINE_MS / 1000} s: ${none} (${((100 * none) / total).toFixed(1)}%); answered after ${QUEUE_TIMEOUT_S + 1} s: ${late.length}`,
      `answered after ${QUEUE_TIMEOUT_S + 1} s: ${late.filter((r) => r.status === 200).length} served, sent ${range(late.map((r) => r.sentAt))} s into the run`,
      `served latency p50 ${q(0.5)?.toFixed(0)} ms, p99 ${q(0.99)?.toFixed(0)} ms, max ${servedLatencies.at(-1)?.toFixed(0)} ms`,
      `session windows (${SESSION_WINDOW_MS / 1000} s): ${windows.size}, mixed ${mixed}`,
    ].join("\n"),
  );
}

await run();

/**
 * Gateway test harness: real HTTP on loopback. Starts mock workers and a gateway on port 0 with a
 * pino logger that writes into an array, writes a priority-scheduler YAML to a temp dir when asked,
 * and always closes everything (t.after). Polling helpers wait for conditions instead of sleeping.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import type { IncomingHttpHeaders } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import parsePrometheusTextFormat, { type GatewayPromFamily } from "parse-prometheus-text-format";
import { type Logger, pino } from "pino";
import { Agent, request } from "undici";
import { stringify as stringifyYaml } from "yaml";
import type { PriorityClass } from "../../src/core/class.js";
import type { SchedulerSnapshot } from "../../src/core/events.js";
import { DEFAULT_HEALTH, type GatewayOptions, type WorkerSpec } from "../../src/gateway/options.js";
import type { OutcomeRecord } from "../../src/gateway/outcome.js";
import { type Gateway, startGateway } from "../../src/gateway/server.js";
import { type MockWorker, type MockWorkerOptions, startMockWorker } from "../../src/mock-worker/index.js";

// --- polling ---------------------------------------------------------------------------------

/** Polls `cond` every `intervalMs` until it holds; fails after `timeoutMs` naming `what`. */
export async function waitFor(
  cond: () => boolean | Promise<boolean>,
  what: string,
  { timeoutMs = 3000, intervalMs = 5 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** A loopback port nothing listens on (it was just bound and released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

// --- logs --------------------------------------------------------------------------------------

export interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export const LEVEL_ERROR = 50;
export const LEVEL_WARN = 40;

/** A pino logger whose JSON lines land, parsed, in `lines`. */
export function captureLogger(): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = pino(
    { level: "debug" },
    {
      write(line: string) {
        lines.push(JSON.parse(line) as LogLine);
      },
    },
  );
  return { logger, lines };
}

// --- priority-scheduler YAML ---------------------------------------------------------------------

export interface ClassYaml {
  reserved_floor?: number;
  reserved_per_slot?: number;
  queue_size?: number;
  queue_timeout_secs?: number;
  starvation_threshold_secs?: number;
  can_preempt?: boolean;
}

export interface SchedulerYamlSpec {
  classes?: Partial<Record<PriorityClass, ClassYaml>> & Record<string, ClassYaml>;
  tenant_policies?: Record<string, { max_class?: string; weight?: number }>;
}

const NO_RESERVATIONS: ClassYaml = { reserved_floor: 0, reserved_per_slot: 0 };

/**
 * A scheduler YAML where no class reserves anything (so capacity 1 works), with per-class overrides
 * merged on top. The built-in defaults need capacity >= 171.
 */
export function smallSchedulerYaml(spec: SchedulerYamlSpec = {}): string {
  const classes: Record<string, ClassYaml> = {};
  for (const cls of ["system", "interactive", "default", "bulk"]) classes[cls] = { ...NO_RESERVATIONS };
  for (const [cls, overrides] of Object.entries(spec.classes ?? {}))
    classes[cls] = { ...classes[cls], ...overrides };
  const doc: Record<string, unknown> = { classes };
  if (spec.tenant_policies !== undefined) doc.tenant_policies = spec.tenant_policies;
  return stringifyYaml(doc);
}

export async function writeTempFile(t: TestContext, name: string, text: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "sluice-gw-test-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, name);
  await writeFile(file, text);
  return file;
}

// --- the fleet ---------------------------------------------------------------------------------

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

export interface SendOptions {
  method?: string;
  headers?: Record<string, string>;
  /** An object is sent as JSON; a string or Buffer as is. */
  body?: unknown;
  signal?: AbortSignal;
}

export interface Fleet {
  readonly gateway: Gateway;
  readonly workers: MockWorker[];
  readonly logs: LogLine[];
  readonly url: string;
  /** Every outcome record the gateway emitted, in order. */
  readonly outcomes: OutcomeRecord[];
  /** The scheduler snapshot (fails when the gateway is in legacy mode). */
  snapshot(): SchedulerSnapshot;
  /** One request to the gateway, body read to the end. */
  send(path: string, options?: SendOptions): Promise<Reply>;
  /** POST /v1/chat/completions with `chatBody(body)`. */
  chat(
    body?: Record<string, unknown>,
    headers?: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<Reply>;
  /** A request started now and aborted by `cancel()`; `result` never rejects. */
  hold(body?: Record<string, unknown>, headers?: Record<string, string>): Held;
  scrape(): Promise<Scrape>;
}

export interface Held {
  readonly result: Promise<Reply | Error>;
  cancel(): Promise<void>;
}

export interface FleetOptions {
  workers?: MockWorkerOptions[];
  /** Extra worker specs (e.g. a URL nothing listens on). */
  extraWorkers?: WorkerSpec[];
  /** Per-worker capacity override, by index into `workers`. */
  workerCapacity?: Array<number | undefined>;
  /** Priority-scheduler YAML text (written to a temp file); undefined = no file (built-in defaults). */
  schedulerYaml?: string | undefined;
  priorityScheduler?: Partial<GatewayOptions["priorityScheduler"]>;
  legacy?: Partial<GatewayOptions["legacy"]>;
  health?: Partial<GatewayOptions["health"]>;
  gateway?: Partial<Omit<GatewayOptions, "priorityScheduler" | "legacy" | "health" | "workers" | "logger">>;
}

/** Fast mock defaults: answers in a few ms unless a request asks otherwise. */
export const FAST_WORKER: MockWorkerOptions = { ttftMs: 2, tokenDelayMs: 1, batchSlowdown: 0 };

export function chatBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: "mock-llm", messages: [{ role: "user", content: "hello there" }], max_tokens: 4, ...extra };
}

export async function sendTo(
  base: string,
  path: string,
  options: SendOptions = {},
  dispatcher?: Agent,
): Promise<Reply> {
  const headers: Record<string, string> = { ...options.headers };
  let body: string | Buffer | undefined;
  if (typeof options.body === "string" || Buffer.isBuffer(options.body)) body = options.body;
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await request(`${base}${path}`, {
    method: (options.method ?? (body === undefined ? "GET" : "POST")) as "GET",
    headers,
    body,
    signal: options.signal,
    ...(dispatcher ? { dispatcher } : {}),
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

export async function startFleet(t: TestContext, options: FleetOptions = {}): Promise<Fleet> {
  const workers: MockWorker[] = [];
  let gateway: Gateway | undefined;
  const agent = new Agent({ keepAliveTimeout: 1000, connections: 64 });
  const pending = new Set<Held>();
  t.after(async () => {
    await Promise.all([...pending].map((h) => h.cancel()));
    await gateway?.close();
    await Promise.all(workers.map((w) => w.close()));
    await agent.destroy();
  });

  for (const opts of options.workers ?? [{}])
    workers.push(await startMockWorker({ ...FAST_WORKER, ...opts }));
  const configPath =
    options.schedulerYaml === undefined
      ? undefined
      : await writeTempFile(t, "priority.yaml", options.schedulerYaml);
  const { logger, lines } = captureLogger();
  const outcomes: OutcomeRecord[] = [];
  const specs: WorkerSpec[] = workers.map((w, i) => ({ url: w.url, capacity: options.workerCapacity?.[i] }));
  specs.push(...(options.extraWorkers ?? []));
  gateway = await startGateway(
    {
      workers: specs,
      host: "127.0.0.1",
      port: 0,
      policy: "round_robin",
      priorityScheduler: {
        enabled: true,
        defaultMaxClass: "system",
        configPath,
        tenantMetricTopN: 32,
        ...options.priorityScheduler,
      },
      legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60, ...options.legacy },
      apiKeys: [],
      trustedTenantHeader: null,
      requireAuth: false,
      maxPayloadSize: 1024 * 1024,
      requestTimeoutSecs: 30,
      health: {
        ...DEFAULT_HEALTH,
        intervalSecs: 0.05,
        timeoutSecs: 1,
        failureThreshold: 1,
        successThreshold: 1,
        ...options.health,
      },
      logger,
      ...options.gateway,
    },
    { record: (o) => outcomes.push(o) },
  );
  const gw = gateway;

  const send = (path: string, o?: SendOptions) => sendTo(gw.url, path, o, agent);
  const chat = (body?: Record<string, unknown>, headers?: Record<string, string>, signal?: AbortSignal) =>
    send("/v1/chat/completions", {
      method: "POST",
      body: chatBody(body),
      ...(headers ? { headers } : {}),
      ...(signal ? { signal } : {}),
    });

  return {
    gateway: gw,
    workers,
    logs: lines,
    url: gw.url,
    outcomes,
    snapshot() {
      const snapshot = gw.admission.snapshot();
      const classes = snapshot.classes;
      assert.ok(
        classes !== null,
        `expected scheduler mode, got ${gw.admission.mode} (${gw.admission.fallbackReason})`,
      );
      return { ...snapshot, classes };
    },
    send,
    chat,
    hold(body, headers) {
      const controller = new AbortController();
      const result = chat(body, headers, controller.signal).catch((err: unknown) => err as Error);
      const held: Held = {
        result,
        async cancel() {
          controller.abort();
          await result;
          pending.delete(held);
        },
      };
      pending.add(held);
      return held;
    },
    async scrape() {
      const reply = await send("/metrics");
      assert.equal(reply.status, 200);
      return parseScrape(reply.text);
    },
  };
}

// --- assertions --------------------------------------------------------------------------------

/** A gateway-made error: status, X-SMG-Error-Code, and exactly `{"error":{"message","type","code"}}`. */
export function assertGatewayError(
  reply: Reply | Error,
  status: number,
  code: string,
): asserts reply is Reply {
  assert.ok(
    !(reply instanceof Error),
    `expected a ${status} reply, got ${reply instanceof Error ? reply.message : ""}`,
  );
  assert.equal(reply.status, status, `status (body: ${reply.text})`);
  assert.equal(reply.headers["x-smg-error-code"], code);
  assert.match(String(reply.headers["content-type"]), /application\/json/);
  const body = JSON.parse(reply.text) as { error: Record<string, unknown> };
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.deepEqual(Object.keys(body.error).sort(), ["code", "message", "type"]);
  assert.equal(body.error.code, code);
  assert.equal(typeof body.error.message, "string");
  assert.ok((body.error.message as string).length > 0);
  assert.equal(typeof body.error.type, "string");
}

export function assertOk(reply: Reply | Error): asserts reply is Reply {
  assert.ok(
    !(reply instanceof Error),
    `expected a reply, got ${reply instanceof Error ? reply.message : ""}`,
  );
  assert.equal(reply.status, 200, `status (body: ${reply.text})`);
}

// --- metrics -------------------------------------------------------------------------------------

export interface Scrape {
  readonly text: string;
  readonly families: ReadonlyMap<string, GatewayPromFamily>;
  /** Samples by sample name; histograms as `<name>_bucket`, `<name>_sum`, `<name>_count`. */
  readonly samples: ReadonlyMap<string, ReadonlyArray<{ labels: Record<string, string>; value: number }>>;
}

const parseProm = parsePrometheusTextFormat as (text: string) => GatewayPromFamily[];

/**
 * The parser keeps only one bucket map per histogram family (other labels dropped), so samples are
 * read from a second parse in which histograms are declared untyped: their lines come back whole.
 */
export function parseScrape(text: string): Scrape {
  const families = new Map(parseProm(text).map((f) => [f.name, f] as const));
  const samples = new Map<string, Array<{ labels: Record<string, string>; value: number }>>();
  for (const family of parseProm(text.replace(/^(# TYPE \S+) histogram$/gm, "$1 untyped"))) {
    const list = samples.get(family.name) ?? [];
    for (const m of family.metrics) list.push({ labels: m.labels ?? {}, value: Number(m.value) });
    samples.set(family.name, list);
  }
  return { text, families, samples };
}

/** The value of the series with exactly these labels (undefined when absent). */
export function metric(s: Scrape, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = Object.entries(labels);
  return s.samples
    .get(name)
    ?.find((m) => Object.keys(m.labels).length === want.length && want.every(([k, v]) => m.labels[k] === v))
    ?.value;
}

/** Sorted label names across a family's samples (`le` left out for histograms). */
export function labelNames(s: Scrape, name: string): string[] {
  const family = s.families.get(name);
  const sampleName = family?.type === "HISTOGRAM" ? `${name}_count` : name;
  const names = new Set<string>();
  for (const m of s.samples.get(sampleName) ?? []) for (const key of Object.keys(m.labels)) names.add(key);
  return [...names].sort();
}

// --- SSE ---------------------------------------------------------------------------------------

/** Replaces the per-response parts of a mock answer (id, created) so two answers compare equal. */
export function normalizeIds(text: string): string {
  return text.replace(/"id":"[^"]*"/g, '"id":"ID"').replace(/"created":\d+/g, '"created":0');
}

/** The `data:` payloads of an SSE body, in order. */
export function sseData(text: string): string[] {
  return text
    .split("\n\n")
    .filter((frame) => frame.length > 0)
    .map((frame) => {
      assert.ok(frame.startsWith("data: "), `bad SSE frame: ${frame}`);
      return frame.slice("data: ".length);
    });
}

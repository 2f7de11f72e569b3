/**
 * The gateway test harness: real HTTP on loopback. Mock workers and a gateway on port 0 with a pino
 * logger that writes into an array, the priority YAML in a temp dir (rewritable for reloads), API keys
 * per tenant, an optional admin listener, one /metrics parser, and bounded polling instead of sleeps.
 * Everything a fleet starts is closed in t.after.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import type { IncomingHttpHeaders } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { SchedulerSnapshot } from "@sluice/scheduler/core/events.js";
import parsePrometheusTextFormat, { type PrometheusFamily } from "parse-prometheus-text-format";
import { type Logger, pino } from "pino";
import { Agent, request } from "undici";
import { stringify as stringifyYaml } from "yaml";
import type { OutcomeRecord } from "../../src/contracts/outcome.js";
import type { Dashboard } from "../../src/dashboard/dashboard.js";
import { startGatewayWithDashboard } from "../../src/dashboard/gateway-with-dashboard.js";
import { DEFAULT_HEALTH, type GatewayOptions, type WorkerSpec } from "../../src/gateway/options.js";
import type { Gateway } from "../../src/gateway/server.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import type { SluiceMetrics } from "../../src/metrics/index.js";
import { type MockWorker, type MockWorkerOptions, startMockWorker } from "../../src/mock-worker/index.js";

// --- polling -------------------------------------------------------------------------------------

/** Polls `cond` every `intervalMs` until it holds; fails after `timeoutMs` naming `what`. */
export async function waitFor(
  cond: () => boolean | Promise<boolean>,
  what: string,
  { timeoutMs = 5000, intervalMs = 5 }: { timeoutMs?: number; intervalMs?: number } = {},
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

// --- logs ----------------------------------------------------------------------------------------

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

// --- tenants and keys ----------------------------------------------------------------------------

/** The bearer key of a test tenant (the gateway only ever sees its SHA-256). */
export function keyOf(tenant: string): string {
  return `sk-tenancy-${tenant}-0123456789`;
}

export function authFor(tenant: string): Record<string, string> {
  return { authorization: `Bearer ${keyOf(tenant)}` };
}

// --- priority-scheduler YAML ---------------------------------------------------------------------

export type Doc = Record<string, unknown>;

export interface ClassYaml {
  reserved_floor?: number;
  reserved_per_slot?: number;
  queue_size?: number;
  queue_timeout_secs?: number;
  starvation_threshold_secs?: number;
  can_preempt?: boolean;
  preempt_after_secs?: number;
  starvation_max_share?: number;
}

export interface SchedulerYamlSpec {
  classes?: Partial<Record<PriorityClass, ClassYaml>> & Record<string, ClassYaml>;
  /** Tenant policies as the YAML spells them (max_class, weight, budgets, windows, ...). */
  tenant_policies?: Record<string, Doc>;
}

/**
 * A scheduler document where no class reserves anything (so capacity 1 works; the built-in defaults
 * need capacity >= 171), with per-class overrides merged on top.
 */
export function schedulerDoc(spec: SchedulerYamlSpec = {}): Doc {
  const classes: Record<string, ClassYaml> = {};
  for (const cls of ["system", "interactive", "default", "bulk"]) {
    classes[cls] = { reserved_floor: 0, reserved_per_slot: 0 };
  }
  for (const [cls, overrides] of Object.entries(spec.classes ?? {})) {
    classes[cls] = { ...classes[cls], ...overrides };
  }
  const doc: Doc = { classes };
  if (spec.tenant_policies !== undefined) doc.tenant_policies = spec.tenant_policies;
  return doc;
}

/** `schedulerDoc` as YAML text. */
export function smallSchedulerYaml(spec: SchedulerYamlSpec = {}): string {
  return stringifyYaml(schedulerDoc(spec));
}

export async function writeTempFile(t: TestContext, name: string, text: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "sluice-test-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, name);
  await writeFile(file, text);
  return file;
}

// --- HTTP ----------------------------------------------------------------------------------------

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  /** When the reply's body was fully read (performance.now()). */
  endedAt: number;
}

export interface SendOptions {
  method?: string;
  headers?: Record<string, string>;
  /** An object is sent as JSON; a string or Buffer as is. */
  body?: unknown;
  signal?: AbortSignal;
}

/** One request, body read to the end. */
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
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, endedAt: performance.now() };
}

/** The prompt every test sends: 11 characters, so both the gateway and the mock count 3 prompt tokens. */
export const PROMPT = "hello there";
export const PROMPT_TOKENS = 3;

export function chatBody(extra: Doc = {}): Doc {
  return { model: "mock-llm", messages: [{ role: "user", content: PROMPT }], max_tokens: 4, ...extra };
}

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
      assert.ok(frame.startsWith("data: "), `bad SSE frame: ${JSON.stringify(frame)}`);
      return frame.slice("data: ".length);
    });
}

/** The `data:` payloads of an SSE body, parsed (the final `[DONE]` stays a string). */
export function sseEvents(text: string): Array<Record<string, unknown> | "[DONE]"> {
  return sseData(text).map((data) => (data === "[DONE]" ? "[DONE]" : (JSON.parse(data) as Doc)));
}

// --- the fleet -----------------------------------------------------------------------------------

export interface FleetOptions {
  workers?: MockWorkerOptions[];
  /** Extra worker specs (e.g. a URL nothing listens on). */
  extraWorkers?: WorkerSpec[];
  /** Per-worker capacity override, by index into `workers`. */
  workerCapacity?: Array<number | undefined>;
  /** Per-worker configured models (`workers[].models`), by index into `workers`. */
  workerModels?: Array<string[] | undefined>;
  /**
   * The priority YAML, a document or text, written to `<dir>/priority.yaml` (rewritable with
   * `writeYaml`); undefined = no file (built-in defaults).
   */
  schedulerYaml?: Doc | string | undefined;
  /** Tenants that get an API key (`keyOf(name)`, tenant key `auth:<name>`); `gateway.apiKeys` replaces them. */
  tenants?: string[];
  /** Start the admin listener with this token. */
  adminToken?: string;
  priorityScheduler?: Partial<GatewayOptions["priorityScheduler"]>;
  legacy?: Partial<GatewayOptions["legacy"]>;
  health?: Partial<GatewayOptions["health"]>;
  /** Any other gateway option (requireAuth, pricing, clock, apiKeys, ...). */
  gateway?: Partial<Omit<GatewayOptions, "priorityScheduler" | "legacy" | "health" | "workers" | "logger">>;
}

export interface Held {
  readonly result: Promise<Reply | Error>;
  cancel(): Promise<void>;
}

export interface TenantStatus {
  inflight: number;
  queued: number;
  budget_remaining: Record<string, number>;
}

export interface AdminStatus {
  admission_mode: string;
  capacity: number;
  discovered_capacity: number;
  pinned_capacity: number | null;
  inflight: number;
  queued: number;
  classes: SchedulerSnapshot["classes"] | null;
  tenants: Record<string, TenantStatus>;
  [key: string]: unknown;
}

export interface Fleet {
  /** Started as the CLI starts it: with the dashboard on the admin listener. */
  readonly gateway: Gateway<Dashboard>;
  readonly workers: MockWorker[];
  readonly logs: LogLine[];
  readonly url: string;
  /** Every outcome record the gateway emitted, in order. */
  readonly outcomes: OutcomeRecord[];
  /** The fleet's temp dir (removed afterwards). */
  readonly dir: string;
  /** The priority YAML's path (undefined when none was given). */
  readonly yamlPath: string | undefined;
  /** Rewrites the priority YAML (a document, or raw text). */
  writeYaml(doc: Doc | string): Promise<void>;
  /** The scheduler snapshot (fails when the gateway is in legacy mode). */
  snapshot(): SchedulerSnapshot;
  send(path: string, options?: SendOptions): Promise<Reply>;
  /** POST /v1/chat/completions with `chatBody(body)`. */
  chat(body?: Doc, headers?: Record<string, string>, signal?: AbortSignal): Promise<Reply>;
  /** `chat` with `tenant`'s API key (undefined = no key). */
  chatAs(
    tenant: string | undefined,
    body?: Doc,
    headers?: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<Reply>;
  /** A chat request started now that runs until it ends or `cancel()`; `result` never rejects. */
  hold(body?: Doc, headers?: Record<string, string>): Held;
  holdAs(tenant: string | undefined, body?: Doc, headers?: Record<string, string>): Held;
  /**
   * A request to the admin listener, with `Authorization: Bearer <the admin token>` unless
   * `authorization` gives the whole header value (null = no header).
   */
  admin(method: string, path: string, body?: unknown, authorization?: string | null): Promise<Reply>;
  status(): Promise<AdminStatus>;
  scrape(): Promise<Scrape>;
}

/** Fast mock defaults: answers in a few ms unless a request asks otherwise. */
export const FAST_WORKER: MockWorkerOptions = { ttftMs: 2, tokenDelayMs: 1, batchSlowdown: 0 };

/**
 * The harness's health-check interval: longer than any test, so probes run only when a test's
 * ManualClock is advanced by it (no probe traffic or capacity flips otherwise). One probe flips.
 */
export const HEALTH_INTERVAL_MS = 60_000;

export async function startFleet(t: TestContext, options: FleetOptions = {}): Promise<Fleet> {
  const workers: MockWorker[] = [];
  const pending = new Set<Held>();
  // Enough connections for the floods of the fairness tests.
  const agent = new Agent({ keepAliveTimeout: 1000, connections: 1024 });
  const dir = await mkdtemp(join(tmpdir(), "sluice-fleet-"));
  let gateway: Gateway<Dashboard> | undefined;
  t.after(async () => {
    await Promise.all([...pending].map((h) => h.cancel()));
    await gateway?.close();
    await Promise.all(workers.map((w) => w.close()));
    await agent.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  for (const w of options.workers ?? [{}]) workers.push(await startMockWorker({ ...FAST_WORKER, ...w }));
  const yamlPath = options.schedulerYaml === undefined ? undefined : join(dir, "priority.yaml");
  const writeYaml = async (doc: Doc | string) => {
    assert.ok(yamlPath, "the fleet has no priority YAML");
    await writeFile(yamlPath, typeof doc === "string" ? doc : stringifyYaml(doc));
  };
  if (options.schedulerYaml !== undefined) await writeYaml(options.schedulerYaml);

  const { logger, lines } = captureLogger();
  const outcomes: OutcomeRecord[] = [];
  const specs: WorkerSpec[] = workers.map((w, i) => ({
    url: w.url,
    capacity: options.workerCapacity?.[i],
    models: options.workerModels?.[i],
  }));
  specs.push(...(options.extraWorkers ?? []));
  const adminToken = options.adminToken;
  gateway = await startGatewayWithDashboard(
    {
      workers: specs,
      host: "127.0.0.1",
      port: 0,
      policy: "round_robin",
      priorityScheduler: {
        enabled: true,
        defaultMaxClass: "system",
        configPath: yamlPath,
        tenantMetricTopN: 32,
        ...options.priorityScheduler,
      },
      legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60, ...options.legacy },
      apiKeys: (options.tenants ?? []).map((name) => ({ sha256: sha256Hex(keyOf(name)), tenant: name })),
      trustedTenantHeader: null,
      requireAuth: false,
      maxPayloadSize: 1024 * 1024,
      requestTimeoutSecs: 30,
      health: {
        ...DEFAULT_HEALTH,
        intervalSecs: HEALTH_INTERVAL_MS / 1000,
        timeoutSecs: 1,
        failureThreshold: 1,
        successThreshold: 1,
        ...options.health,
      },
      admin: adminToken === undefined ? undefined : { host: "127.0.0.1", port: 0, token: adminToken },
      logger,
      ...options.gateway,
    },
    { record: (o) => outcomes.push(o) },
  );
  const gw = gateway;

  const send = (path: string, o?: SendOptions) => sendTo(gw.url, path, o, agent);
  const chatAs = (
    tenant: string | undefined,
    body?: Doc,
    headers?: Record<string, string>,
    signal?: AbortSignal,
  ) =>
    send("/v1/chat/completions", {
      method: "POST",
      body: chatBody(body),
      headers: { ...(tenant === undefined ? {} : authFor(tenant)), ...headers },
      ...(signal ? { signal } : {}),
    });
  const holdAs = (tenant: string | undefined, body?: Doc, headers?: Record<string, string>): Held => {
    const controller = new AbortController();
    const result = chatAs(tenant, body, headers, controller.signal).catch((err: unknown) => err as Error);
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
  };
  const admin = (method: string, path: string, body?: unknown, authorization?: string | null) => {
    assert.ok(gw.adminServer, "the fleet has no admin listener");
    const value = authorization === undefined ? `Bearer ${adminToken}` : authorization;
    const headers: Record<string, string> = value === null ? {} : { authorization: value };
    return sendTo(gw.adminServer.url, path, { method, body, headers }, agent);
  };

  return {
    gateway: gw,
    workers,
    logs: lines,
    url: gw.url,
    outcomes,
    dir,
    yamlPath,
    writeYaml,
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
    chat: (body, headers, signal) => chatAs(undefined, body, headers, signal),
    chatAs,
    hold: (body, headers) => holdAs(undefined, body, headers),
    holdAs,
    admin,
    async status() {
      const reply = await admin("GET", "/api/v1/status");
      assert.equal(reply.status, 200, reply.text);
      return JSON.parse(reply.text) as AdminStatus;
    },
    async scrape() {
      const reply = await send("/metrics");
      assert.equal(reply.status, 200);
      return parseScrape(reply.text);
    },
  };
}

// --- assertions ----------------------------------------------------------------------------------

/**
 * A gateway-made error: status, X-SMG-Error-Code and exactly `{"error":{"message","type","code"}}`
 * (plus `param` when a request field is at fault)
 * (and the `type`, when given). Returns the message.
 */
export function assertError(
  reply: Pick<Reply, "status" | "headers" | "text"> | Error,
  status: number,
  code: string,
  type?: string,
): string {
  assert.ok(
    !(reply instanceof Error),
    `expected a ${status} reply, got ${reply instanceof Error ? reply.message : ""}`,
  );
  assert.equal(reply.status, status, `status (body: ${reply.text})`);
  assert.equal(reply.headers["x-smg-error-code"], code);
  assert.match(String(reply.headers["content-type"]), /^application\/json/);
  const body = JSON.parse(reply.text) as { error: Record<string, unknown> };
  assert.deepEqual(Object.keys(body), ["error"]);
  // `param` only when a request field is at fault (OpenAI's shape).
  const keys = Object.keys(body.error).sort();
  assert.deepEqual(
    keys.filter((k) => k !== "param"),
    ["code", "message", "type"],
  );
  if (keys.includes("param")) assert.equal(typeof body.error.param, "string");
  assert.equal(body.error.code, code);
  if (type !== undefined) assert.equal(body.error.type, type);
  assert.equal(typeof body.error.type, "string");
  assert.equal(typeof body.error.message, "string");
  assert.ok((body.error.message as string).length > 0);
  return body.error.message as string;
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
  /** Families by name, as the exposition declares them (name, HELP, TYPE). */
  readonly families: ReadonlyMap<string, PrometheusFamily>;
  /** Every sample by sample name (histograms as `<name>_bucket`, `<name>_sum`, `<name>_count`). */
  readonly samples: ReadonlyMap<string, ReadonlyArray<{ labels: Record<string, string>; value: number }>>;
}

/**
 * Parses an exposition with parse-prometheus-text-format. That parser keeps one bucket map per
 * histogram family (other labels dropped), so samples come from a second parse in which histograms
 * are declared untyped: their `_bucket`, `_sum` and `_count` lines then come back whole.
 */
export function parseScrape(text: string): Scrape {
  const families = new Map(parsePrometheusTextFormat(text).map((f) => [f.name, f] as const));
  const samples = new Map<string, Array<{ labels: Record<string, string>; value: number }>>();
  for (const family of parsePrometheusTextFormat(text.replace(/^(# TYPE \S+) histogram$/gm, "$1 untyped"))) {
    const list = samples.get(family.name) ?? [];
    for (const m of family.metrics) list.push({ labels: m.labels ?? {}, value: Number(m.value) });
    samples.set(family.name, list);
  }
  return { text, families, samples };
}

/** Scrapes a SluiceMetrics registry directly (no gateway). */
export async function scrape(metrics: SluiceMetrics): Promise<Scrape> {
  return parseScrape(await metrics.metricsText());
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

/** Distinct values of one label across a family's samples, sorted. */
export function labelValues(s: Scrape, name: string, label: string): string[] {
  const values = new Set<string>();
  for (const m of s.samples.get(name) ?? []) {
    const v = m.labels[label];
    if (v !== undefined) values.add(v);
  }
  return [...values].sort();
}

// --- statistics ----------------------------------------------------------------------------------

/** p-quantile (0..1) by nearest rank. */
export function quantile(values: number[], p: number): number {
  assert.ok(values.length > 0, "quantile of nothing");
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

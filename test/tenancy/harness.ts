/**
 * Tenancy test harness (self-contained; nothing here comes from test/gateway): real HTTP on loopback.
 * Mock workers and a gateway on port 0 with a pino logger that writes into an array, the priority YAML
 * written to a temp dir (rewritable for reloads), API keys per tenant, an optional admin listener, and
 * bounded polling instead of sleeps. Everything is closed in t.after.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import type { IncomingHttpHeaders } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { type Logger, pino } from "pino";
import { Agent, request } from "undici";
import { stringify as stringifyYaml } from "yaml";
import type { Clock } from "../../src/core/clock.js";
import type { Pricing } from "../../src/core/config.js";
import type { SchedulerSnapshot } from "../../src/core/events.js";
import { DEFAULT_HEALTH, type GatewayOptions } from "../../src/gateway/options.js";
import { type Gateway, startGateway } from "../../src/gateway/server.js";
import { sha256Hex } from "../../src/gateway/tenants.js";
import { type MockWorker, type MockWorkerOptions, startMockWorker } from "../../src/mock-worker/index.js";

// --- polling -------------------------------------------------------------------------------------

/** Polls `cond` until it holds; fails after `timeoutMs` naming `what`. */
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

// --- logs ----------------------------------------------------------------------------------------

export interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

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

// --- priority YAML -------------------------------------------------------------------------------

export type Doc = Record<string, unknown>;

/** Every class without reservations (so a capacity of 1 works), with per-class overrides on top. */
export function schedulerDoc(
  spec: { classes?: Record<string, Doc>; tenant_policies?: Record<string, Doc> } = {},
): Doc {
  const classes: Record<string, Doc> = {};
  for (const cls of ["system", "interactive", "default", "bulk"]) {
    classes[cls] = { reserved_floor: 0, reserved_per_slot: 0, ...spec.classes?.[cls] };
  }
  const doc: Doc = { classes };
  if (spec.tenant_policies !== undefined) doc.tenant_policies = spec.tenant_policies;
  return doc;
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
  /** An object is sent as JSON; a string as is. */
  body?: unknown;
  signal?: AbortSignal;
}

export async function sendTo(base: string, path: string, o: SendOptions, dispatcher: Agent): Promise<Reply> {
  const headers: Record<string, string> = { ...o.headers };
  let body: string | undefined;
  if (typeof o.body === "string") body = o.body;
  else if (o.body !== undefined) {
    body = JSON.stringify(o.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await request(`${base}${path}`, {
    method: (o.method ?? (body === undefined ? "GET" : "POST")) as "GET",
    headers,
    body,
    signal: o.signal,
    dispatcher,
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

// --- the stack -----------------------------------------------------------------------------------

export interface StackOptions {
  workers?: MockWorkerOptions[];
  /** The priority YAML document (written to a temp file); undefined = no file. */
  scheduler?: Doc;
  /** Tenants that get an API key (tenant key `auth:<name>`). */
  tenants?: string[];
  requireAuth?: boolean;
  pricing?: Pricing;
  clock?: Clock;
  /** Start the admin listener with this token. */
  adminToken?: string;
  gateway?: Partial<GatewayOptions>;
}

export interface Stack {
  readonly gateway: Gateway;
  readonly workers: MockWorker[];
  readonly logs: LogLine[];
  readonly url: string;
  /** The priority YAML's path (undefined when none was given). */
  readonly yamlPath: string | undefined;
  readonly dir: string;
  /** Rewrites the priority YAML (a document, or raw text). */
  writeYaml(doc: Doc | string): Promise<void>;
  send(path: string, o?: SendOptions): Promise<Reply>;
  /** POST /v1/chat/completions as `tenant` (undefined = no key). */
  chat(
    tenant: string | undefined,
    body?: Doc,
    headers?: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<Reply>;
  /** A request that runs until it ends or `cancel()`; `result` never rejects. */
  hold(tenant: string | undefined, body?: Doc, headers?: Record<string, string>): Held;
  /**
   * A request to the admin listener, with `Authorization: Bearer <the admin token>` unless
   * `authorization` gives the whole header value (null = no header).
   */
  admin(method: string, path: string, body?: unknown, authorization?: string | null): Promise<Reply>;
  status(): Promise<AdminStatus>;
  snapshot(): SchedulerSnapshot;
  scrape(): Promise<Samples>;
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

/** Fast mock defaults: a few ms per answer unless a request asks otherwise. */
export const FAST_WORKER: MockWorkerOptions = { ttftMs: 2, tokenDelayMs: 1, batchSlowdown: 0 };

export async function startStack(t: TestContext, o: StackOptions = {}): Promise<Stack> {
  const workers: MockWorker[] = [];
  const pending = new Set<Held>();
  const agent = new Agent({ keepAliveTimeout: 2000, connections: 1024 });
  const dir = await mkdtemp(join(tmpdir(), "sluice-tenancy-"));
  let gateway: Gateway | undefined;
  t.after(async () => {
    await Promise.all([...pending].map((h) => h.cancel()));
    await gateway?.close();
    await Promise.all(workers.map((w) => w.close()));
    await agent.close().catch(() => agent.destroy());
    await rm(dir, { recursive: true, force: true });
  });

  for (const w of o.workers ?? [{}]) workers.push(await startMockWorker({ ...FAST_WORKER, ...w }));
  const yamlPath = o.scheduler === undefined ? undefined : join(dir, "priority.yaml");
  const writeYaml = async (doc: Doc | string) => {
    assert.ok(yamlPath, "the stack has no priority YAML");
    await writeFile(yamlPath, typeof doc === "string" ? doc : stringifyYaml(doc));
  };
  if (o.scheduler !== undefined) await writeYaml(o.scheduler);

  const { logger, lines } = captureLogger();
  gateway = await startGateway({
    workers: workers.map((w) => ({ url: w.url })),
    host: "127.0.0.1",
    port: 0,
    policy: "round_robin",
    priorityScheduler: {
      enabled: true,
      defaultMaxClass: "system",
      configPath: yamlPath,
      tenantMetricTopN: 32,
    },
    legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
    apiKeys: (o.tenants ?? []).map((name) => ({ sha256: sha256Hex(keyOf(name)), tenant: name })),
    trustedTenantHeader: null,
    requireAuth: o.requireAuth ?? false,
    maxPayloadSize: 1024 * 1024,
    requestTimeoutSecs: 30,
    // Health checks every 60 s: no probe traffic or capacity flips during a test.
    health: { ...DEFAULT_HEALTH, intervalSecs: 60, timeoutSecs: 1 },
    pricing: o.pricing,
    admin: o.adminToken === undefined ? undefined : { host: "127.0.0.1", port: 0, token: o.adminToken },
    logger,
    clock: o.clock,
    ...o.gateway,
  });
  const gw = gateway;
  assert.equal(gw.admission.mode, "scheduler", `scheduler expected: ${gw.admission.fallbackReason}`);

  const send = (path: string, so: SendOptions = {}) => sendTo(gw.url, path, so, agent);
  const chat = (
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
  const admin = (method: string, path: string, body?: unknown, authorization?: string | null) => {
    assert.ok(gw.adminServer, "the stack has no admin listener");
    const value = authorization === undefined ? `Bearer ${o.adminToken}` : authorization;
    return sendTo(
      gw.adminServer.url,
      path,
      { method, body, headers: value === null ? {} : { authorization: value } },
      agent,
    );
  };

  return {
    gateway: gw,
    workers,
    logs: lines,
    url: gw.url,
    yamlPath,
    dir,
    writeYaml,
    send,
    chat,
    hold(tenant, body, headers) {
      const controller = new AbortController();
      const result = chat(tenant, body, headers, controller.signal).catch((err: unknown) => err as Error);
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
    admin,
    async status() {
      const reply = await admin("GET", "/api/v1/status");
      assert.equal(reply.status, 200, reply.text);
      return JSON.parse(reply.text) as AdminStatus;
    },
    snapshot() {
      const s = gw.admission.snapshot();
      const classes = s.classes;
      assert.ok(classes !== null);
      return { ...s, classes };
    },
    async scrape() {
      const reply = await send("/metrics");
      assert.equal(reply.status, 200);
      return parseMetrics(reply.text);
    },
  };
}

// --- assertions ----------------------------------------------------------------------------------

/** A gateway-made error: status, X-SMG-Error-Code and exactly `{"error":{"message","type","code"}}`. */
export function assertError(reply: Reply | Error, status: number, code: string, type?: string): string {
  assert.ok(
    !(reply instanceof Error),
    `expected ${status}, got ${reply instanceof Error ? reply.message : ""}`,
  );
  assert.equal(reply.status, status, `status (body: ${reply.text})`);
  assert.equal(reply.headers["x-smg-error-code"], code);
  assert.match(String(reply.headers["content-type"]), /^application\/json/);
  const body = JSON.parse(reply.text) as { error: Record<string, unknown> };
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.deepEqual(Object.keys(body.error).sort(), ["code", "message", "type"]);
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

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Samples {
  readonly text: string;
  readonly all: Sample[];
  /** The value of the series with exactly these labels (undefined when absent). */
  get(name: string, labels?: Record<string, string>): number | undefined;
  /** Every series of a family. */
  family(name: string): Sample[];
}

/** A small Prometheus text-format reader (sample lines only; label values without escapes are enough). */
export function parseMetrics(text: string): Samples {
  const all: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    assert.ok(m, `unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const lm of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[lm[1]!] = lm[2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    }
    all.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return {
    text,
    all,
    get(name, labels = {}) {
      const want = Object.entries(labels);
      return all.find(
        (s) =>
          s.name === name &&
          Object.keys(s.labels).length === want.length &&
          want.every(([k, v]) => s.labels[k] === v),
      )?.value;
    },
    family: (name) => all.filter((s) => s.name === name),
  };
}

// --- SSE -----------------------------------------------------------------------------------------

/** The `data:` payloads of an SSE body, parsed (the final `[DONE]` stays a string). */
export function sseEvents(text: string): Array<Record<string, unknown> | "[DONE]"> {
  return text
    .split("\n\n")
    .filter((frame) => frame.length > 0)
    .map((frame) => {
      assert.ok(frame.startsWith("data: "), `bad SSE frame: ${JSON.stringify(frame)}`);
      const data = frame.slice("data: ".length);
      return data === "[DONE]" ? "[DONE]" : (JSON.parse(data) as Record<string, unknown>);
    });
}

/** p-quantile (0..1) by nearest rank. */
export function quantile(values: number[], p: number): number {
  assert.ok(values.length > 0, "quantile of nothing");
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

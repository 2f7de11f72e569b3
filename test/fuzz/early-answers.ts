/**
 * Requests the gateway answers early and then closes the connection after (issue 35, item 5), the
 * requests a client pipelines behind them, and how a client times its writes: fast-check
 * arbitraries and renderers shared by the pipelining fuzz (test/fuzz/pipelining.test.ts) and soak
 * (test/soak/pipelining.test.ts), plus the small fleet both run against (a gateway, and a second
 * one whose only connection place is always taken, in front of one mock worker).
 */
import { connect, type Socket } from "node:net";
import fc from "fast-check";
import { pino } from "pino";
import { DEFAULT_HEALTH } from "../../src/gateway/options.js";
import { type Gateway, startGateway } from "../../src/gateway/server.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { type MockWorker, startMockWorker } from "../../src/mock-worker/index.js";
import { type LogLine, parseScrape } from "../helpers/harness.js";
import { TENANT_KEYS, TENANT_NAMES } from "./cases.js";
import type { Segment } from "./raw-http.js";

// --- the cases -----------------------------------------------------------------------------------

/** A request the gateway answers, then closes the connection after. */
export type Early =
  | { kind: "te"; method: string; path: string; te: string }
  | { kind: "no-host"; method: string; path: string; body: boolean }
  | { kind: "target"; method: string; target: string }
  | { kind: "expect"; expect: string; body: boolean }
  | { kind: "auth"; key: "missing" | "wrong"; body: boolean }
  | { kind: "version"; version: string; path: string }
  | { kind: "malformed-version"; line: string }
  | { kind: "te-http10"; withLength: boolean }
  | { kind: "own-path-body"; path: string }
  | { kind: "close"; how: "header" | "http10" }
  | { kind: "over-cap" };

/** A request pipelined behind it: valid, and served if it were the first on its connection. */
export interface Behind {
  route: "chat" | "completions" | "generate" | "models" | "health";
  tenant: number;
  chunked: boolean;
  stream: boolean;
  connection: "keep-alive" | "close" | "none";
}

export type Timing =
  | { kind: "together" }
  | { kind: "linger"; delayMs: number }
  | { kind: "split"; at: number; delayMs: number }
  /** The first bytes (the request line and more) a few at a time: lines split over many reads. */
  | { kind: "trickle"; size: number; delayMs: number };

export interface Case {
  early: Early;
  behind: Behind[];
  timing: Timing;
}

const WORKER_PATHS = ["/v1/chat/completions", "/v1/completions", "/generate"];

export const earlyArb: fc.Arbitrary<Early> = fc.oneof(
  fc.record({
    kind: fc.constant("te" as const),
    method: fc.constantFrom("POST", "PUT", "GET"),
    path: fc.constantFrom(...WORKER_PATHS, "/v1/models"),
    te: fc.constantFrom("gzip, chunked", "identity, chunked", "deflate,chunked", "x-zip , chunked"),
  }),
  fc.record({
    kind: fc.constant("no-host" as const),
    method: fc.constantFrom("POST", "GET", "DELETE"),
    path: fc.constantFrom(...WORKER_PATHS, "/v1/models", "/v1/models?x=1"),
    body: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant("target" as const),
    method: fc.constantFrom("POST", "GET", "OPTIONS"),
    target: fc.constantFrom(
      "*",
      "http://gw/v1/chat/completions",
      "https://gw/v1/models",
      "ftp://gw/x",
      "//v1/chat/completions",
    ),
  }),
  fc.record({
    kind: fc.constant("expect" as const),
    expect: fc.constantFrom("foo", "202-accepted", "bar=1", "continue"),
    body: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant("auth" as const),
    key: fc.constantFrom("missing" as const, "wrong" as const),
    body: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant("version" as const),
    version: fc.constantFrom("HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "HTTP/3.0", "HTTP/9.9"),
    path: fc.constantFrom(...WORKER_PATHS, "/v1/models", "/health"),
  }),
  fc.record({
    kind: fc.constant("malformed-version" as const),
    line: fc.constantFrom(
      "GET /health HTTP/1.1x",
      "POST /v1/chat/completions HTTP/11",
      "GET /v1/models HTTP/1.10",
      "GET /health",
      "POST /v1/chat/completions",
      "GET /health RTSP/1.0",
      "POST /v1/chat/completions http/1.1",
    ),
  }),
  fc.record({ kind: fc.constant("te-http10" as const), withLength: fc.boolean() }),
  fc.record({
    kind: fc.constant("own-path-body" as const),
    path: fc.constantFrom("/health", "/metrics", "/readiness", "/v1/models"),
  }),
  fc.record({
    kind: fc.constant("close" as const),
    how: fc.constantFrom("header" as const, "http10" as const),
  }),
  fc.constant({ kind: "over-cap" as const }),
);

export const behindArb: fc.Arbitrary<Behind> = fc.record({
  route: fc.constantFrom(
    "chat" as const,
    "completions" as const,
    "generate" as const,
    "models" as const,
    "health" as const,
  ),
  tenant: fc.integer({ min: 0, max: 2 }),
  chunked: fc.boolean(),
  stream: fc.boolean(),
  connection: fc.constantFrom("keep-alive" as const, "close" as const, "none" as const),
});

export const timingArb: fc.Arbitrary<Timing> = fc.oneof(
  fc.constant({ kind: "together" as const }),
  fc.record({ kind: fc.constant("linger" as const), delayMs: fc.integer({ min: 20, max: 400 }) }),
  fc.record({
    kind: fc.constant("split" as const),
    at: fc.integer({ min: 1, max: 400 }),
    delayMs: fc.integer({ min: 0, max: 60 }),
  }),
  fc.record({
    kind: fc.constant("trickle" as const),
    size: fc.integer({ min: 1, max: 9 }),
    delayMs: fc.integer({ min: 1, max: 4 }),
  }),
);

export const caseArb: fc.Arbitrary<Case> = fc.record({
  early: earlyArb,
  behind: fc.array(behindArb, { minLength: 1, maxLength: 4 }),
  timing: timingArb,
});

// --- rendering -----------------------------------------------------------------------------------

const CHAT = '{"model":"mock-llm","messages":[{"role":"user","content":"pipelined"}],"max_tokens":2}';

function withBody(head: string, body: string): string {
  return `${head}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** GET /v1/models is the gateway's own path: its answers are not in sluice_http_requests_total. */
function ownModels(method: string, path: string): number {
  return method === "GET" && path.split("?")[0] === "/v1/models" ? 0 : 1;
}

/** The early request's bytes and the answer it must get. */
export function renderEarly(
  e: Early,
  id: string,
): { bytes: string; status: number; codes: string[]; counted: number } {
  const auth = `authorization: Bearer ${TENANT_KEYS[0]}\r\n`;
  const tag = `x-fuzz-id: ${id}\r\n`;
  switch (e.kind) {
    case "te":
      return {
        bytes: `${e.method} ${e.path} HTTP/1.1\r\nhost: gw\r\n${tag}${auth}transfer-encoding: ${e.te}\r\n\r\n0\r\n\r\n`,
        status: 400,
        codes: ["unsupported_transfer_encoding"],
        counted: ownModels(e.method, e.path),
      };
    case "no-host": {
      const head = `${e.method} ${e.path} HTTP/1.1\r\n${tag}${auth}`;
      return {
        bytes: e.body ? withBody(head, CHAT) : `${head}\r\n`,
        status: 400,
        codes: ["missing_host_header"],
        counted: ownModels(e.method, e.path),
      };
    }
    case "target":
      return {
        bytes: withBody(`${e.method} ${e.target} HTTP/1.1\r\nhost: gw\r\n${tag}${auth}`, CHAT),
        status: 400,
        codes: ["invalid_request_target"],
        counted: 1,
      };
    case "expect": {
      const head = `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n${tag}${auth}expect: ${e.expect}\r\n`;
      return {
        bytes: e.body ? withBody(head, CHAT) : `${head}content-length: 0\r\n\r\n`,
        status: 417,
        codes: ["expectation_failed"],
        counted: 1,
      };
    }
    case "auth": {
      const key = e.key === "missing" ? "" : "authorization: Bearer not-a-key\r\n";
      const head = `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n${tag}${key}`;
      return {
        bytes: e.body ? withBody(head, CHAT) : `${head}content-length: 0\r\n\r\n`,
        status: 401,
        codes: [e.key === "missing" ? "missing_api_key" : "invalid_api_key"],
        counted: 1,
      };
    }
    case "version":
      return {
        bytes: withBody(`POST ${e.path} ${e.version}\r\nhost: gw\r\n${tag}${auth}`, CHAT),
        status: 505,
        codes: ["http_version_not_supported"],
        counted: 1,
      };
    case "malformed-version":
      return {
        bytes: withBody(`${e.line}\r\nhost: gw\r\n${tag}${auth}`, CHAT),
        status: 400,
        codes: ["malformed_request"],
        counted: 1,
      };
    case "te-http10": {
      const chunked = `${CHAT.length.toString(16)}\r\n${CHAT}\r\n0\r\n\r\n`;
      const length = e.withLength ? `content-length: ${chunked.length}\r\n` : "";
      return {
        bytes:
          `POST /v1/chat/completions HTTP/1.0\r\nhost: gw\r\n${tag}${auth}content-type: application/json\r\n` +
          `transfer-encoding: chunked\r\n${length}\r\n${chunked}`,
        status: 400,
        // Node's parser refuses Transfer-Encoding with Content-Length itself.
        codes: e.withLength
          ? ["malformed_request", "unsupported_transfer_encoding"]
          : ["unsupported_transfer_encoding"],
        counted: 1,
      };
    }
    case "own-path-body":
      return {
        bytes: `GET ${e.path} HTTP/1.1\r\nhost: gw\r\n${tag}${auth}content-length: 5\r\n\r\nhello`,
        status: 200,
        codes: [],
        counted: 0,
      };
    case "close":
      return {
        bytes:
          e.how === "header"
            ? withBody(
                `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n${tag}${auth}connection: close\r\n`,
                CHAT,
              )
            : withBody(`POST /v1/chat/completions HTTP/1.0\r\nhost: gw\r\n${tag}${auth}`, CHAT),
        status: 200,
        codes: [],
        counted: 1,
      };
    case "over-cap":
      return { bytes: "", status: 503, codes: ["too_many_connections"], counted: 1 };
  }
}

export function renderBehind(b: Behind, id: string): string {
  const conn = b.connection === "none" ? "" : `connection: ${b.connection}\r\n`;
  const head = (method: string, path: string) =>
    `${method} ${path} HTTP/1.1\r\nhost: gw\r\nx-fuzz-id: ${id}\r\nauthorization: Bearer ${TENANT_KEYS[b.tenant]}\r\n${conn}`;
  if (b.route === "models") return `${head("GET", "/v1/models")}\r\n`;
  if (b.route === "health") return `${head("GET", "/health")}\r\n`;
  const body =
    b.route === "chat"
      ? JSON.stringify({
          model: "mock-llm",
          messages: [{ role: "user", content: "x" }],
          max_tokens: 2,
          stream: b.stream,
        })
      : b.route === "completions"
        ? JSON.stringify({ model: "mock-llm", prompt: "x", max_tokens: 2, stream: b.stream })
        : JSON.stringify({ text: "x", sampling_params: { max_new_tokens: 2 } });
  const path =
    b.route === "chat" ? "/v1/chat/completions" : b.route === "completions" ? "/v1/completions" : "/generate";
  if (!b.chunked) return withBody(head("POST", path), body);
  return (
    `${head("POST", path)}content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n` +
    `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`
  );
}

/** The client's writes for a case's timing. */
export function plan(timing: Timing, early: Buffer, behind: Buffer): Segment[] {
  const all = Buffer.concat([early, behind]);
  switch (timing.kind) {
    case "together":
      return [{ bytes: all, delayMs: 0 }];
    case "linger":
      return [
        { bytes: early, delayMs: 0 },
        { bytes: behind, delayMs: timing.delayMs },
      ].filter((s) => s.bytes.length > 0);
    case "split": {
      const at = Math.min(timing.at, all.length - 1);
      return [
        { bytes: all.subarray(0, at), delayMs: 0 },
        { bytes: all.subarray(at), delayMs: timing.delayMs },
      ];
    }
    case "trickle": {
      const out: Segment[] = [];
      const upTo = Math.min(all.length - 1, 120);
      for (let pos = 0; pos < upTo; pos += timing.size) {
        out.push({
          bytes: all.subarray(pos, Math.min(pos + timing.size, upTo)),
          delayMs: pos === 0 ? 0 : timing.delayMs,
        });
      }
      out.push({ bytes: all.subarray(upTo), delayMs: timing.delayMs });
      return out;
    }
  }
}

// --- the fleet -----------------------------------------------------------------------------------

export interface PipeFleet {
  worker: MockWorker;
  gateway: Gateway;
  /** A gateway whose one connection place is always taken: every new connection gets 503. */
  capped: Gateway;
  held: Socket;
  logs: LogLine[];
}

/**
 * The fleet: legacy admission (no class or queue to tune), auth on with the fuzz tenants' keys.
 * Its log keeps errors and the drain's lines only (a soak makes many connections).
 */
export async function startPipeFleet(options: { workerCapacity?: number } = {}): Promise<PipeFleet> {
  const worker = await startMockWorker({
    maxRunningRequests: options.workerCapacity ?? 8,
    ttftMs: 1,
    tokenDelayMs: 0.2,
    batchSlowdown: 0,
    receivedLogSize: 20_000,
  });
  const lines: LogLine[] = [];
  const logger = pino(
    { level: "info" },
    {
      write(text: string) {
        const line = JSON.parse(text) as LogLine;
        if ((line.level >= 50 || line.msg.startsWith("drain")) && lines.length < 1000) lines.push(line);
      },
    },
  );
  const gatewayOptions = (maxConnections: number) => ({
    workers: [{ url: worker.url }],
    host: "127.0.0.1",
    port: 0,
    policy: "round_robin" as const,
    priorityScheduler: { enabled: false, defaultMaxClass: "default" as const, tenantMetricTopN: 32 },
    legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
    apiKeys: TENANT_NAMES.map((tenant, i) => ({ sha256: sha256Hex(TENANT_KEYS[i]!), tenant })),
    trustedTenantHeader: null,
    requireAuth: true,
    maxPayloadSize: 64 * 1024,
    requestTimeoutSecs: 10,
    health: { ...DEFAULT_HEALTH, intervalSecs: 60, timeoutSecs: 1, failureThreshold: 3, successThreshold: 1 },
    // The capped gateway's one place is held by a socket that never sends a byte: it must not
    // time out.
    clientLimits: { maxConnections, headersTimeoutSecs: maxConnections === 1 ? 3600 : 10 },
    logger,
  });
  const gateway = await startGateway(gatewayOptions(8192));
  const capped = await startGateway(gatewayOptions(1));
  const held = connect(capped.port, "127.0.0.1");
  held.on("error", () => {});
  await new Promise((resolve) => held.once("connect", resolve));
  return { worker, gateway, capped, held, logs: lines };
}

/** The answers `sluice_http_requests_total` counted so far (read in process: the capped gateway serves nothing). */
export async function answersCounted(gateway: Gateway): Promise<number> {
  const s = parseScrape(await gateway.metrics.metricsText());
  return (s.samples.get("sluice_http_requests_total") ?? []).reduce((n, m) => n + m.value, 0);
}

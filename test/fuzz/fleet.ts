/**
 * The fuzz fleet: one mock worker (capacity 4, tiny delays) behind a real gateway (auth on with
 * three tenants' API keys, a trusted tenant header, the priority scheduler with small queues), and
 * the batch runner that sends generated cases over raw sockets and checks the invariants a correct
 * gateway keeps whatever it is sent:
 *
 * per answer
 * - it parses as HTTP/1.1 and is not a 101;
 * - an answer the gateway made (no `x-sluice-admission`) has a documented status, a JSON body
 *   `{"error":{"message","type","code"}}` and `X-SMG-Error-Code` equal to its code; 200 only on the
 *   gateway's own paths; never 499 or 500; a 502/503/504 only when attributable (the case asked the
 *   worker to fail, or a preemption); Retry-After, when present, a non-negative integer;
 * - an answer the worker made was passed through with a status the worker makes;
 * per request
 * - at most one answer (two when bytes after the message form another request);
 * - an answer, when the request could be decided from the bytes sent and the client waited;
 * - what the gateway must refuse (a head Node refuses, framing other than a plain Content-Length or
 *   plain chunked, a target that is not a path, CONNECT) is never forwarded;
 * - the gateway's own paths (GET/HEAD /metrics, /health, /readiness, /v1/models, any query) are never forwarded;
 * after every batch
 * - the process did not crash (an uncaught exception is recorded, not fatal);
 * - once the gateway holds no client connection, in-flight and queued are 0 (the admission state,
 *   /metrics and the worker's open requests agree);
 * - the worker received no request whose client saw a rejection, no request without the case's
 *   `x-fuzz-id` (a request the gateway made up or split), none twice, none with its body lost, none
 *   with a client's API key or a hop-by-hop header, and nothing its HTTP parser refused;
 * - a valid request then gets 200.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { DEFAULT_HEALTH } from "../../src/gateway/options.js";
import { type Gateway, startGateway } from "../../src/gateway/server.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { type MockWorker, startMockWorker } from "../../src/mock-worker/index.js";
import { metric, parseScrape, smallSchedulerYaml } from "../helpers/harness.js";
import {
  FUZZ_MAX_PAYLOAD,
  type FuzzCase,
  type Rendered,
  render,
  TENANT_KEYS,
  TENANT_NAMES,
  TRUSTED_TENANT_HEADER,
} from "./cases.js";
import { admissionState } from "./gateway-state.js";
import { type ExchangeResult, exchange, header, printable, type RawResponse } from "./raw-http.js";

/** Statuses the gateway may make up itself (docs/gateway.md, docs/security.md). */
export const DOCUMENTED_STATUSES = new Set([
  200, 400, 401, 403, 404, 405, 408, 411, 413, 417, 429, 431, 501, 502, 503, 504, 505,
]);
/** Statuses a worker's own answer may have here (the mock: success, bad request, no route, too large). */
const WORKER_STATUSES = new Set([200, 400, 404, 413]);
/** Gateway error codes for requests that may have reached a worker before they failed. */
const DISPATCHED_CODES = new Set(["scheduler_preempted", "client_closed_request", "internal_error"]);
// GET /v1/models is the gateway's own too: the union of the model pools' models (docs/gateway.md).
const OWN_PATHS = new Set(["/metrics", "/health", "/readiness", "/v1/models"]);
/** Keys a fuzz client may send (the tenants' and a made-up one): none may reach the worker. */
const CLIENT_KEYS = [...TENANT_KEYS, "not-a-key"];
/**
 * Hop-by-hop headers the cases send (RFC 9110 7.6.1, and the ones their `Connection` names); the
 * gateway's own `connection` to the worker is its business.
 */
const HOP_BY_HOP = new Set(["keep-alive", "te", "trailer", "upgrade", "http2-settings", "x-private"]);

export interface Violation {
  invariant: string;
  detail: string;
  /** The case (label and bytes) when the violation belongs to one. */
  label?: string;
  bytes?: string;
  answers?: string;
}

export interface BatchReport {
  cases: number;
  violations: Violation[];
  /** Answers by status, and gateway errors by `status code`. */
  statuses: Map<string, number>;
  /** The fleet no longer serves: replace it before the next batch. */
  poisoned: boolean;
  elapsedMs: number;
}

export interface FuzzFleetOptions {
  /** Worker capacity (max_running_requests), default 4. */
  capacity?: number;
}

/**
 * The gateway runs in this process: an exception nothing catches is the gateway crashing. They are
 * recorded (instead of ending the process) and reported against the batch in progress.
 */
const crashes: Error[] = [];
let crashHook = false;
function recordCrashes(): void {
  if (crashHook) return;
  crashHook = true;
  process.on("uncaughtException", (err) => {
    if (crashes.length < 10) crashes.push(err);
  });
}

function count(map: Map<string, number>, key: string, by = 1): void {
  map.set(key, (map.get(key) ?? 0) + by);
}

function describeAnswers(result: ExchangeResult): string {
  const heads = result.parsed.responses.map((r) => {
    const code = header(r, "x-smg-error-code");
    return `${r.status}${code ? ` ${code}` : ""}${r.complete ? "" : " (incomplete)"} ${printable(r.body, 160)}`;
  });
  const end = result.cut
    ? "client cut"
    : result.timedOut
      ? "client gave up"
      : result.reset
        ? "reset"
        : "closed";
  return `[${heads.join(" | ")}] after ${Math.round(result.elapsedMs)} ms, ${end}${
    result.parsed.error ? `; ${result.parsed.error}` : ""
  }`;
}

function pathOfTarget(target: string): string {
  const q = target.indexOf("?");
  return q === -1 ? target : target.slice(0, q);
}

export class FuzzFleet {
  private seq = 0;
  /** Ids whose client saw a rejection, for this batch and the one before (late forwards). */
  private rejected = new Map<string, string>();
  private previousRejected = new Map<string, string>();
  /** Body bytes each case of the batch sent whole, by id. */
  private sentBodies = new Map<string, { bytes: number; label: string }>();
  readonly errorLogs: string[] = [];
  private errorLogCount = 0;

  private constructor(
    readonly gateway: Gateway,
    readonly worker: MockWorker,
    private readonly dir: string,
    private readonly runTag: string,
  ) {}

  static async start(options: FuzzFleetOptions = {}): Promise<FuzzFleet> {
    recordCrashes();
    const worker = await startMockWorker({
      maxRunningRequests: options.capacity ?? 4,
      ttftMs: 2,
      tokenDelayMs: 0.2,
      batchSlowdown: 0,
      contextLength: 4096,
      receivedLogSize: 20_000,
    });
    const dir = await mkdtemp(join(tmpdir(), "sluice-fuzz-"));
    const yamlPath = join(dir, "priority.yaml");
    await writeFile(
      yamlPath,
      smallSchedulerYaml({
        classes: {
          system: { queue_size: 8, queue_timeout_secs: 2, can_preempt: true },
          interactive: { queue_size: 8, queue_timeout_secs: 2, can_preempt: true },
          default: { queue_size: 8, queue_timeout_secs: 2 },
          bulk: { queue_size: 2, queue_timeout_secs: 1 },
        },
        tenant_policies: {
          "auth:alpha": { max_class: "system", weight: 4 },
          "auth:beta": { max_class: "interactive", weight: 2 },
          "auth:gamma": { max_class: "bulk", weight: 1 },
        },
      }),
    );
    const errorLogs: string[] = [];
    let fleet: FuzzFleet | undefined;
    const logger = pino(
      { level: "error" },
      {
        write(line: string) {
          if (fleet) {
            fleet.errorLogCount++;
            if (fleet.errorLogs.length < 20) fleet.errorLogs.push(line.slice(0, 400));
          } else errorLogs.push(line);
        },
      },
    );
    let gateway: Gateway;
    try {
      gateway = await startGateway({
        workers: [{ url: worker.url }],
        host: "127.0.0.1",
        port: 0,
        policy: "round_robin",
        priorityScheduler: {
          enabled: true,
          defaultMaxClass: "interactive",
          configPath: yamlPath,
          tenantMetricTopN: 32,
        },
        legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
        apiKeys: TENANT_NAMES.map((tenant, i) => ({ sha256: sha256Hex(TENANT_KEYS[i]!), tenant })),
        trustedTenantHeader: TRUSTED_TENANT_HEADER,
        requireAuth: true,
        maxPayloadSize: FUZZ_MAX_PAYLOAD,
        requestTimeoutSecs: 10,
        health: {
          ...DEFAULT_HEALTH,
          intervalSecs: 1,
          timeoutSecs: 1,
          failureThreshold: 3,
          successThreshold: 1,
        },
        logger,
      });
    } catch (err) {
      await worker.close();
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    if (gateway.admission.mode !== "scheduler") {
      await gateway.close();
      await worker.close();
      throw new Error(
        `fuzz fleet: expected scheduler mode, got ${gateway.admission.mode}: ${errorLogs.join("")}`,
      );
    }
    fleet = new FuzzFleet(gateway, worker, dir, Math.random().toString(36).slice(2, 8));
    fleet.errorLogs.push(...errorLogs.slice(0, 20));
    return fleet;
  }

  /** Gateway log lines at ERROR or above so far. */
  get errorLogTotal(): number {
    return this.errorLogCount;
  }

  async close(): Promise<void> {
    await this.gateway.close();
    await this.worker.close();
    await rm(this.dir, { recursive: true, force: true });
  }

  private nextId(): string {
    return `${this.runTag}-${++this.seq}`;
  }

  /** Sends every case at once, then checks the per-answer and after-batch invariants. */
  async runBatch(cases: FuzzCase[]): Promise<BatchReport> {
    const started = performance.now();
    const violations: Violation[] = [];
    const statuses = new Map<string, number>();
    this.previousRejected = this.rejected;
    this.rejected = new Map();
    const rendered = cases.map((c) => ({ c, r: render(c, this.nextId()) }));
    this.sentBodies = new Map();
    for (const { r } of rendered) {
      if (r.sentBodyBytes !== undefined)
        this.sentBodies.set(r.id, { bytes: r.sentBodyBytes, label: r.label });
    }
    const clientErrorsBefore = this.worker.stats().clientErrors;
    const results = await Promise.all(rendered.map(({ r }) => exchange(this.gateway.port, r.plan)));
    rendered.forEach(({ c, r }, i) => {
      this.checkCase(c, r, results[i]!, violations, statuses);
    });
    let poisoned = await this.checkAfterBatch(violations);
    const refused = this.worker.stats().clientErrors - clientErrorsBefore;
    if (refused > 0) {
      violations.push({
        invariant: "the worker can parse whatever the gateway forwards",
        detail: `the worker's HTTP parser refused ${refused} request(s) the gateway sent it (malformed or oversized)`,
        label: rendered
          .map(({ r }) => r.label)
          .join(" ;; ")
          .slice(0, 1500),
      });
    }
    // An exception that surfaced after the exchanges still belongs to this batch.
    await new Promise((resolve) => setImmediate(resolve));
    for (const err of crashes.splice(0)) {
      violations.push({
        invariant: "the process does not crash",
        detail: `uncaught exception: ${(err.stack ?? err.message).split("\n").slice(0, 4).join(" | ")}`,
        label: rendered
          .map(({ r }) => r.label)
          .join(" ;; ")
          .slice(0, 1500),
      });
      poisoned = true;
    }
    return { cases: cases.length, violations, statuses, poisoned, elapsedMs: performance.now() - started };
  }

  private checkCase(
    c: FuzzCase,
    r: Rendered,
    result: ExchangeResult,
    violations: Violation[],
    statuses: Map<string, number>,
  ): void {
    const fail = (invariant: string, detail: string): void => {
      violations.push({
        invariant,
        detail,
        label: r.label,
        bytes: printable(r.bytes, 600),
        answers: describeAnswers(result),
      });
    };
    const { parsed } = result;
    if (parsed.error !== undefined && !(result.cut && parsed.responses.length > 0)) {
      fail("answer is HTTP", parsed.error);
    }
    const answers = parsed.responses;
    if (answers.length === 0) {
      count(
        statuses,
        result.cut ? "(none: client cut)" : r.expectAnswer ? "(none)" : "(none: incomplete request)",
      );
    }
    if (answers.length > r.maxAnswers) {
      fail("at most one answer per request", `${answers.length} answers, at most ${r.maxAnswers} possible`);
    }
    if (r.expectAnswer && answers.length === 0) {
      const why = result.timedOut
        ? "no answer within the deadline"
        : result.reset
          ? "connection reset without an answer"
          : "connection closed without an answer";
      fail("a decidable request gets an answer", why);
    }
    const path = pathOfTarget(c.line.target);
    answers.forEach((res, i) => {
      count(statuses, String(res.status));
      this.checkAnswer(c, r, res, i, path, fail, statuses);
    });
  }

  private checkAnswer(
    c: FuzzCase,
    r: Rendered,
    res: RawResponse,
    index: number,
    path: string,
    fail: (invariant: string, detail: string) => void,
    statuses: Map<string, number>,
  ): void {
    if (res.status === 101) {
      fail("no protocol switch", "101 Switching Protocols");
      return;
    }
    const forwarded = header(res, "x-sluice-admission") !== undefined;
    if (forwarded && index === 0 && r.mustReject && r.maxAnswers === 1) {
      fail("what the gateway must refuse is never forwarded", `forwarded, the worker answered ${res.status}`);
    }
    if (forwarded && OWN_PATHS.has(path) && (c.line.method === "GET" || c.line.method === "HEAD")) {
      fail(
        "the gateway answers its own paths",
        `${c.line.method} ${c.line.target.slice(0, 40)} was forwarded to the worker`,
      );
    }
    if (forwarded) {
      if (!WORKER_STATUSES.has(res.status) && !(r.workerFault && res.status >= 500)) {
        fail("a worker's answer has a status the worker makes", `forwarded ${res.status}`);
      }
      return;
    }
    const code = header(res, "x-smg-error-code");
    if (res.status === 200) {
      if (!OWN_PATHS.has(path) || !["GET", "HEAD"].includes(c.line.method)) {
        fail("200 without admission only on the gateway's own paths", `200 for ${c.line.method} ${path}`);
      }
      return;
    }
    count(statuses, `${res.status} ${code ?? "(no X-SMG-Error-Code)"}`);
    if (!DOCUMENTED_STATUSES.has(res.status)) fail("documented status", `status ${res.status}`);
    if (res.status === 499) fail("499 is never sent", "a 499 reached the client");
    if (res.status === 500) fail("no 500", `500 ${code ?? ""}`);
    if (res.status === 502 || res.status === 504) {
      if (!r.workerFault) fail("no 5xx blaming a healthy worker", `${res.status} ${code ?? ""}`);
    }
    if (
      res.status === 503 &&
      code !== "scheduler_preempted" &&
      code !== "too_many_connections" &&
      !r.workerFault
    ) {
      fail("no 5xx blaming a healthy worker", `503 ${code ?? ""}`);
    }
    if (code === undefined) fail("an error answer carries X-SMG-Error-Code", `${res.status} without it`);
    const retry = header(res, "retry-after");
    if (retry !== undefined && !/^\d{1,6}$/.test(retry)) {
      fail("Retry-After is a non-negative integer", `retry-after: ${retry}`);
    }
    if (!r.plan.headFirst || index > 0) {
      if (res.complete) this.checkErrorBody(res, code, fail);
    }
    // Dispatched-then-failed codes aside, a gateway error is a rejection: the worker must not see it.
    // With bytes after the message (another request to the parser), the first answer may be that
    // request's: only a lone request's answer is attributed to it.
    if (
      index === 0 &&
      r.maxAnswers === 1 &&
      res.status >= 400 &&
      !DISPATCHED_CODES.has(code ?? "") &&
      !code?.startsWith("upstream_")
    ) {
      this.rejected.set(r.id, `${res.status} ${code ?? ""} for ${r.label}`);
    }
  }

  private checkErrorBody(
    res: RawResponse,
    code: string | undefined,
    fail: (invariant: string, detail: string) => void,
  ): void {
    const type = header(res, "content-type") ?? "";
    if (!/application\/json/i.test(type)) {
      fail("an error answer has a JSON body", `${res.status} content-type ${JSON.stringify(type)}`);
      return;
    }
    let doc: unknown;
    try {
      doc = JSON.parse(res.body.toString("utf8"));
    } catch {
      fail(
        "an error answer has a JSON body",
        `${res.status} body does not parse: ${printable(res.body, 120)}`,
      );
      return;
    }
    const error = (doc as { error?: unknown }).error as Record<string, unknown> | undefined;
    const ok =
      typeof doc === "object" &&
      doc !== null &&
      Object.keys(doc).length === 1 &&
      typeof error === "object" &&
      error !== null &&
      // OpenAI's error objects may also carry `param` (a string or null); nothing else.
      Object.keys(error)
        .filter((k) => k !== "param")
        .sort()
        .join(",") === "code,message,type" &&
      (error["param"] === undefined || error["param"] === null || typeof error["param"] === "string") &&
      typeof error["message"] === "string" &&
      (error["message"] as string).length > 0 &&
      typeof error["type"] === "string" &&
      typeof error["code"] === "string";
    if (!ok) {
      fail("an error answer has a JSON body", `${res.status} body ${printable(res.body, 200)}`);
      return;
    }
    if (code !== undefined && error!["code"] !== code) {
      fail("X-SMG-Error-Code matches the body", `header ${code}, body ${String(error!["code"])}`);
    }
  }

  /** In-flight/queued back to 0, the worker's log against the rejections, then a valid request. */
  private async checkAfterBatch(violations: Violation[]): Promise<boolean> {
    // Clients are gone once the gateway holds none of their connections; then nothing may stay
    // admitted, queued or open at the worker (seen twice in a row, so a request the gateway was
    // still taking in at the first look cannot pass for settled).
    const idle = () => {
      const s = admissionState(this.gateway);
      return (
        gatewaySockets(this.gateway.port) === 0 &&
        s.inflight === 0 &&
        s.queued === 0 &&
        this.worker.stats().open === 0
      );
    };
    let streak = 0;
    const settled = await waitUntil(
      () => {
        streak = idle() ? streak + 1 : 0;
        return streak >= 2;
      },
      3000,
      10,
    );
    if (!settled) {
      const s = admissionState(this.gateway);
      violations.push({
        invariant: "in-flight and queued return to 0",
        detail:
          `3 s after the clients left: admission in flight ${s.inflight}, queued ${s.queued}; ` +
          `worker open ${this.worker.stats().open}; client connections at the gateway ${gatewaySockets(this.gateway.port)}`,
      });
    }
    try {
      const scrapeRequest = Buffer.from("GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
      const result = await exchange(this.gateway.port, {
        segments: [{ bytes: scrapeRequest, delayMs: 0 }],
        headFirst: false,
        end: { kind: "wait", answers: 1, graceMs: 0, deadlineMs: 3000 },
      });
      const res = result.parsed.responses[0];
      if (res?.status !== 200 || !res.complete) throw new Error(`GET /metrics: ${describeAnswers(result)}`);
      const text = res.body.toString("utf8");
      const scrape = parseScrape(text);
      let inflight = 0;
      let queued = 0;
      for (const cls of ["system", "interactive", "default", "bulk"]) {
        inflight += metric(scrape, "smg_scheduler_inflight", { class: cls }) ?? 0;
        queued += metric(scrape, "smg_scheduler_queue_depth", { class: cls }) ?? 0;
      }
      const s = admissionState(this.gateway);
      if (inflight !== s.inflight || queued !== s.queued) {
        violations.push({
          invariant: "/metrics agrees with the scheduler",
          detail: `metrics inflight ${inflight} queued ${queued}; scheduler ${s.inflight} / ${s.queued}`,
        });
      }
    } catch (err) {
      violations.push({ invariant: "/metrics answers", detail: String(err) });
    }

    // Give a forward that is still on its way a moment to land before reading the log.
    await new Promise((resolve) => setTimeout(resolve, 20));
    const seen = new Map<string, number>();
    for (const entry of this.worker.received()) {
      if (entry.id === undefined) {
        violations.push({
          invariant: "the worker receives only the client's requests",
          detail: `the worker received an untagged ${entry.method} ${entry.path.slice(0, 80)} (${entry.bodyBytes ?? "?"} body bytes): made up or split by the gateway`,
        });
        continue;
      }
      seen.set(entry.id, (seen.get(entry.id) ?? 0) + 1);
      // Issue 8 #1 and #2: the client's key and hop-by-hop headers stay at the gateway.
      if (entry.authorization !== undefined && CLIENT_KEYS.some((k) => entry.authorization!.includes(k))) {
        violations.push({
          invariant: "a client's key never reaches a worker",
          detail: `the worker received authorization: ${entry.authorization.slice(0, 40)} on ${entry.method} ${entry.path.slice(0, 40)}`,
        });
      }
      const hop = entry.headerNames.filter((n) => HOP_BY_HOP.has(n) || n.startsWith("proxy-"));
      if (hop.length > 0) {
        violations.push({
          invariant: "hop-by-hop headers are not forwarded",
          detail: `the worker received ${[...new Set(hop)].join(", ")} on ${entry.method} ${entry.path.slice(0, 40)}`,
        });
      }
      const sent = this.sentBodies.get(entry.id);
      if (sent !== undefined && sent.bytes > 0 && entry.bodyBytes === 0) {
        violations.push({
          invariant: "a forwarded request keeps its body",
          detail: `the client sent ${sent.bytes} body bytes; the worker received ${entry.method} ${entry.path.slice(0, 60)} with none`,
          label: sent.label,
        });
      }
      const rejection = this.rejected.get(entry.id) ?? this.previousRejected.get(entry.id);
      if (rejection !== undefined) {
        violations.push({
          invariant: "a rejected request never reaches a worker",
          detail: `the worker received ${entry.method} ${entry.path.slice(0, 60)} (${entry.bodyBytes ?? "?"} body bytes) whose client got ${rejection}`,
        });
      }
    }
    for (const [id, n] of seen) {
      if (n > 1) {
        violations.push({
          invariant: "a request reaches a worker at most once",
          detail: `${id} received ${n} times`,
        });
      }
    }
    this.worker.clearReceived();
    return !(await this.probe(violations));
  }

  /** A valid request must get 200 (and reach the worker). False when it does not. */
  async probe(violations: Violation[]): Promise<boolean> {
    const id = this.nextId();
    const body = JSON.stringify({
      model: "mock-llm",
      messages: [{ role: "user", content: "probe" }],
      max_tokens: 2,
    });
    const bytes = Buffer.from(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-fuzz-id: ${id}\r\n` +
        `authorization: Bearer ${TENANT_KEYS[0]}\r\nx-smg-priority: interactive\r\n` +
        `content-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    );
    const result = await exchange(this.gateway.port, {
      segments: [{ bytes, delayMs: 0 }],
      headFirst: false,
      end: { kind: "wait", answers: 1, graceMs: 0, deadlineMs: 5000 },
    });
    const res = result.parsed.responses[0];
    if (res?.status !== 200 || !res.complete) {
      violations.push({
        invariant: "a valid request gets 200 after every batch",
        detail: `probe got ${describeAnswers(result)}`,
      });
      return false;
    }
    const received = this.worker.received().some((e) => e.id === id);
    this.worker.clearReceived();
    if (!received) {
      violations.push({
        invariant: "the worker's log sees forwarded requests",
        detail: `the probe ${id} got 200 but the worker did not log it: the x-fuzz-id tagging is broken`,
      });
    }
    return true;
  }
}

async function waitUntil(cond: () => boolean, timeoutMs: number, intervalMs = 5): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  return true;
}

/** Server-side sockets open at the gateway's port (its client connections). */
export function gatewaySockets(port: number): number {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  let n = 0;
  for (const h of handles) {
    if (typeof h === "object" && h !== null && (h as { localPort?: number }).localPort === port) n++;
  }
  return n;
}

/** Groups violations by invariant, with the first example of each. */
export function summarizeViolations(violations: Violation[], examples = 1): string {
  const groups = new Map<string, Violation[]>();
  for (const v of violations) {
    const key = `${v.invariant}: ${v.detail.replace(/\d+/g, "N").slice(0, 90)}`;
    const list = groups.get(key) ?? [];
    list.push(v);
    groups.set(key, list);
  }
  const out: string[] = [];
  for (const [key, list] of [...groups].sort((a, b) => b[1].length - a[1].length)) {
    out.push(`- ${list.length}x ${key}`);
    for (const v of list.slice(0, examples)) {
      out.push(`    detail:  ${v.detail}`);
      if (v.label) out.push(`    case:    ${v.label}`);
      if (v.bytes) out.push(`    bytes:   ${v.bytes}`);
      if (v.answers) out.push(`    answers: ${v.answers}`);
    }
  }
  return out.join("\n");
}

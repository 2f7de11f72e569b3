/**
 * The money soak (issue 35): sustained concurrent traffic from budgeted tenants, in process and over
 * two replicas sharing Redis, for SLUICE_MONEY_SOAK_SECS seconds each (default 10). 24 client loops
 * over raw sockets send, until the deadline, requests with and without max_tokens, streamed or not,
 * reusing three X-Request-Ids among all of them, to two workers (one never reports usage) short of
 * capacity (queueing, 408 queue timeouts), and 10% leave early (499 while queued or mid-stream).
 *
 * At the end, per tenant:
 * - every request is one ledger row with its own gateway id (DuckDB in process, PostgreSQL shared
 *   by the replicas), the client's id as sent;
 * - no 200 charged 0 output tokens, each with its token_source; no refused request charged;
 * - the budget booked exactly what the rows charged (in process: the book; Redis: the tenant's hash),
 *   and every hold in Redis is closed (settled or refunded, none left held);
 * - what was charged exceeds the budget by at most the bound of docs/tenants.md: the sum of each
 *   charge's excess over its reservation (plus, in process, the largest charge), with the
 *   reservations bounded below (each request reserves at least its prompt and the smallest of its
 *   limit, default_output_tokens and the shortest answer the soak's workers give an unlimited one);
 * - 408 rows store a wait of at least the queue timeout.
 * SLUICE_SOAK_SEED replays a seed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, test } from "node:test";
import { mulberry32 } from "@sluice/scheduler/core/random.js";
import { stringify } from "yaml";
import { StateKeys } from "../../src/admission/redis/keys.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { startRedisFleet } from "../admission/fleet.js";
import { redisClient, redisOrSkip } from "../admission/services.js";
import { PROMPT_TOKENS, schedulerDoc, startFleet, waitFor } from "../helpers/harness.js";
import { rawPost } from "../helpers/money.js";
import { duckRows, pgRows, postgresSchema, type Row, tempDir } from "../ledger/services.js";
import { rawExchange } from "../security/raw.js";

const SECS = Number(process.env["SLUICE_MONEY_SOAK_SECS"] ?? 10);
const SEED = process.env["SLUICE_SOAK_SEED"]
  ? Number(process.env["SLUICE_SOAK_SEED"])
  : Date.now() % 2_147_483_647;
const CLIENTS = 24;
const TENANTS = [
  { name: "small", policy: { budget_tokens: 4_000 } },
  { name: "medium", policy: { budget_tokens: 25_000 } },
  { name: "large", policy: { budget_tokens: 200_000, tokens_per_minute: 600_000 } },
  { name: "free", policy: {} },
];
const IDS = ["reused-a", "reused-b", "reused-c"];
/** default_output_tokens of every gateway here. */
const DEFAULT_OUTPUT = 300;
/** An answer to a request without max_tokens is 200..800 tokens; limits are 200..800 too. */
const SHORTEST = 200;
const LONGEST = 800;
const QUEUE_TIMEOUT_MS = 500;
const MODELS = ["soak-model"];

const keyOf = (name: string) => `sk-soak-${name}`;
const policies = () => Object.fromEntries(TENANTS.map((t) => [`auth:${t.name}`, t.policy]));
const priorityDoc = () =>
  schedulerDoc({
    classes: { default: { queue_size: 8, queue_timeout_secs: QUEUE_TIMEOUT_MS / 1000 } },
    tenant_policies: policies(),
  });

/** Counts of what the clients saw. */
interface Load {
  sent: number;
  byStatus: Record<string, number>;
  left: number;
}

/** The client loops, until the deadline: requests of every kind to `ports` (chosen at random). */
async function runLoad(ports: number[], seed: number, ms: number): Promise<Load> {
  const random = mulberry32(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)]!;
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const load: Load = { sent: 0, byStatus: {}, left: 0 };
  const deadline = performance.now() + ms;
  const client = async () => {
    while (performance.now() < deadline) {
      const tenant = pick(TENANTS).name;
      const limited = random() < 0.5;
      const limit = int(SHORTEST, LONGEST);
      const body: Record<string, unknown> = {
        model: MODELS[0],
        messages: [{ role: "user", content: "hello there" }],
      };
      if (limited) body.max_tokens = limit;
      if (random() < 0.5) body.stream = true;
      const headers: Record<string, string> = {
        authorization: `Bearer ${keyOf(tenant)}`,
        // An honest worker: never more than the limit.
        "x-mock-output-tokens": String(limited ? int(1, limit) : int(SHORTEST, LONGEST)),
      };
      if (random() < 0.7) headers["x-request-id"] = pick(IDS);
      const port = pick(ports);
      load.sent++;
      if (random() < 0.1) {
        // Leaves after 20..400 ms: while queued, or mid-answer.
        const text = JSON.stringify(body);
        let head = `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${text.length}\r\n`;
        for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
        await rawExchange(port, `${head}\r\n${text}`, { waitMs: int(20, 400) });
        load.left++;
        continue;
      }
      const res = await rawPost(port, body, headers, { waitMs: 30_000 });
      const key = res === undefined ? "none" : String(res.status);
      load.byStatus[key] = (load.byStatus[key] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: CLIENTS }, client));
  return load;
}

/** Every request's row, whichever way it ended. */
interface Ledger {
  rows: Row[];
}

const chargeOf = (r: Row) =>
  ((r.input_tokens as number | null) ?? 0) + ((r.output_tokens as number | null) ?? 0);

/**
 * The checks on the rows, per tenant; `booked(tenant)` is what its budget holds as used. Returns the
 * worst overrun seen, for the diagnostic line.
 */
async function checkLedger(
  ledger: Ledger,
  load: Load,
  booked: (tenant: string) => Promise<number | undefined>,
  inProcess: boolean,
): Promise<string[]> {
  const { rows } = ledger;
  const lines: string[] = [];
  // A client that leaves may close before the gateway read its request (the kernel then discards
  // it): such a request never arrived, and has no row.
  assert.ok(
    rows.length <= load.sent && rows.length >= load.sent - load.left,
    `${rows.length} rows for ${load.sent} requests (${load.left} left early)`,
  );
  assert.equal(new Set(rows.map((r) => r.sluice_request_id)).size, rows.length, "a gateway id each");
  const clientIds = rows.filter((r) => IDS.includes(r.request_id as string)).length;
  assert.ok(clientIds > 0, "the reused client ids are stored as sent");
  for (const r of rows) {
    if (r.status === 200) {
      assert.ok(
        ["reported", "counted", "estimated"].includes(r.token_source as string),
        `token source ${r.token_source}`,
      );
      assert.ok((r.output_tokens as number) >= 1, `a 200 charged ${r.output_tokens} output tokens`);
    }
    if (r.status === 403 || r.status === 408 || r.status === 429) {
      assert.equal(r.token_source, null);
      assert.equal(r.output_tokens, null);
    }
    if (r.status === 408) {
      assert.ok((r.queue_wait_ms as number) >= QUEUE_TIMEOUT_MS - 5, `a 408 waited ${r.queue_wait_ms} ms`);
    }
  }
  // The smallest reservation any request makes (its prompt, and its limit, the default, or a p95 of
  // answers that are all SHORTEST or longer).
  const least = PROMPT_TOKENS + Math.min(SHORTEST, DEFAULT_OUTPUT);
  for (const { name, policy } of TENANTS) {
    const mine = rows.filter((r) => r.tenant_id === `auth:${name}`);
    const total = mine.reduce((n, r) => n + chargeOf(r), 0);
    const budget = (policy as { budget_tokens?: number }).budget_tokens;
    if (budget === undefined) continue;
    const used = await booked(`auth:${name}`);
    if (used !== undefined) assert.equal(used, total, `${name}: the budget booked what the rows charged`);
    let excess = 0;
    let largest = 0;
    for (const r of mine) {
      excess += Math.max(0, chargeOf(r) - least);
      largest = Math.max(largest, chargeOf(r));
    }
    const bound = excess + (inProcess ? largest : 0);
    const served = mine.filter((r) => r.status === 200).length;
    lines.push(
      `${name}: ${mine.length} requests, ${served} served, ${total} charged of ${budget} (over by ${total - budget})`,
    );
    assert.ok(total - budget <= bound, `${name}: ${total} charged on ${budget}, over the bound ${bound}`);
  }
  return lines;
}

describe(`soak: money for ${SECS} s (seed ${SEED})`, { timeout: SECS * 2000 + 120_000 }, () => {
  test("in process: budgets, books and rows hold under sustained concurrent traffic", {
    timeout: SECS * 1000 + 60_000,
  }, async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    const fleet = await startFleet(t, {
      workers: [
        { maxRunningRequests: 6, ttftMs: 5, tokenDelayMs: 1, servedModels: MODELS },
        { maxRunningRequests: 6, ttftMs: 5, tokenDelayMs: 1, servedModels: MODELS, reportUsage: false },
      ],
      schedulerYaml: priorityDoc(),
      gateway: {
        apiKeys: TENANTS.map((x) => ({ sha256: sha256Hex(keyOf(x.name)), tenant: x.name })),
        defaultOutputTokens: DEFAULT_OUTPUT,
        ledger: { replica: "soak", target: { kind: "duckdb", path } },
      },
    });
    const load = await runLoad([fleet.gateway.port], SEED, SECS * 1000);
    t.diagnostic(`load: ${JSON.stringify(load)}`);
    await waitFor(() => fleet.gateway.admission.snapshot().inflight === 0, "every request ended", {
      timeoutMs: 20_000,
    });
    assert.equal(fleet.gateway.admission.snapshot().inflight, 0);
    const books = new Map(
      TENANTS.map((x) => {
        const budget = (x.policy as { budget_tokens?: number }).budget_tokens;
        const left = fleet.gateway.budgets.remaining(`auth:${x.name}`).budget_tokens;
        return [`auth:${x.name}`, budget === undefined || left === 0 ? undefined : budget - left!];
      }),
    );
    await fleet.gateway.close();
    const rows = await duckRows(path, "SELECT * FROM usage");
    for (const line of await checkLedger({ rows }, load, async (x) => books.get(x), true)) t.diagnostic(line);
  });

  test("two replicas sharing Redis and a PostgreSQL ledger: the same", {
    timeout: SECS * 1000 + 90_000,
  }, async (t) => {
    const url = await redisOrSkip(t);
    if (url === undefined) return;
    const ledgerUrl = await postgresSchema(t);
    if (ledgerUrl === undefined) return;
    const worker = {
      maxRunningRequests: 6,
      ttftMs: 5,
      tokenDelayMs: 1,
      batchSlowdown: 0,
      servedModels: MODELS,
    };
    const { prefix, replicas } = await startRedisFleet(t, {
      redisUrl: url,
      workers: [worker, { ...worker, reportUsage: false }],
      replicas: 2,
      schedulerYaml: stringify(priorityDoc()),
      apiKeys: Object.fromEntries(TENANTS.map((x) => [x.name, keyOf(x.name)])),
      flags: ["--ledger", ledgerUrl, "--default-output-tokens", String(DEFAULT_OUTPUT)],
    });
    const load = await runLoad(
      replicas.map((r) => Number(new URL(r.url).port)),
      SEED,
      SECS * 1000,
    );
    t.diagnostic(`load: ${JSON.stringify(load)}`);
    // The ledger writes every 200 ms: wait until the row count stops growing.
    let last = -1;
    await waitFor(
      async () => {
        const n = Number((await pgRows(ledgerUrl, "SELECT count(*) AS n FROM usage"))[0]!.n);
        const stable = n === last && n >= load.sent - load.left;
        last = n;
        return stable;
      },
      "every row written",
      { timeoutMs: 20_000, intervalMs: 500 },
    );
    const redis = redisClient(t, url);
    const keys = new StateKeys(prefix);
    // Every hold closed: settled or refunded by the end, none left held.
    await waitFor(
      async () => {
        const holds = await redis.keys(`${keys.base}hold:*`);
        for (const key of holds) if ((await redis.hget(key, "s")) === "held") return false;
        return true;
      },
      "every hold closed",
      { timeoutMs: 10_000 },
    );
    const rows = await pgRows(ledgerUrl, "SELECT * FROM usage");
    const booked = async (tenant: string) => Number((await redis.hget(keys.budget(tenant), "ut")) ?? 0);
    for (const line of await checkLedger({ rows }, load, booked, false)) t.diagnostic(line);
  });
});

/**
 * Fuzz: money under generated concurrent traffic, in both admission backends (issue 35, items 1, 2, 3
 * and 7). Each run is a fresh tenant with a hard budget (budget_tokens) and a fresh model (so no
 * output history: each request without max_tokens reserves default_output_tokens, or the model's
 * context), and sends 1..30 requests at once over raw sockets: with and without max_tokens, streamed
 * or not, with the client's X-Request-Id absent, unique, shared by the whole run or unusable, to two
 * workers (one reports usage, one never does), answering with generated lengths. After each run:
 *
 * - every request has one answer, and the client's id is echoed when it was usable;
 * - every request is one record (in process) or one ledger row (Redis mode, a shared PostgreSQL
 *   ledger), each with its own gateway id, the client's id stored as sent;
 * - every 200 is charged at least one output token, with a `token_source`; `reported` charges are the
 *   worker's own numbers;
 * - the budget booked exactly what the records (rows) charged;
 * - what was charged exceeds the budget by at most the documented bound (docs/tenants.md, "How far
 *   a hard budget can be overrun"): in process, one admitted request's charge plus every charge's
 *   excess over its reservation; in Redis mode, the excesses alone.
 *
 * On 40ea629 a shared X-Request-Id skipped the Redis hold, requests without max_tokens reserved no
 * output, streams without usage were charged their estimate, and PostgreSQL dropped rows of reused
 * ids: each breaks an invariant here. CI runs SLUICE_FUZZ_MONEY_RUNS runs per backend (default 12,
 * at most ~20 s each); SLUICE_FUZZ_SEED replays a seed.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { stringify } from "yaml";
import { StateKeys } from "../../src/admission/redis/keys.js";
import type { OutcomeRecord } from "../../src/contracts/outcome.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { startRedisFleet } from "../admission/fleet.js";
import { redisOrSkip } from "../admission/services.js";
import { PROMPT_TOKENS, schedulerDoc, startFleet, waitFor } from "../helpers/harness.js";
import { charged, type RawResponse, rawPost } from "../helpers/money.js";
import { pgRows, postgresSchema } from "../ledger/services.js";

const RUNS = Number(process.env["SLUICE_FUZZ_MONEY_RUNS"] ?? 12);
const SEED = process.env["SLUICE_FUZZ_SEED"]
  ? Number(process.env["SLUICE_FUZZ_SEED"])
  : Date.now() % 2_147_483_647;
/** The reservation of a replica (or fleet) run with --default-output-tokens. */
const DEFAULT_OUTPUT = 64;
/** The mock's context length (the reservation without history and without a default, less the prompt). */
const CONTEXT = 131_072;
const BUDGETS = [60, 150, 400, 1000, 2500, 5000];
/**
 * Tenants (and models), one per run while they last; a run after they are used up (shrinking runs
 * many) checks everything but the budget, which earlier runs spent.
 */
const TENANTS = 128;
const budgetOf = (k: number) => BUDGETS[k % BUDGETS.length]!;
const keyFor = (k: number) => `sk-money-${k}`;
/** A model per tenant, each served by every worker: a run's model has no output history yet. */
const MODELS = Array.from({ length: TENANTS }, (_, k) => `fuzz-model-${k}`);

interface Req {
  limit: number | undefined;
  out: number;
  stream: boolean;
  clientUsage: boolean;
  id: "none" | "unique" | "shared" | "unusable";
  target: number;
}

const reqArb: fc.Arbitrary<Req> = fc
  .record({
    limited: fc.boolean(),
    limit: fc.integer({ min: 1, max: 400 }),
    out: fc.integer({ min: 1, max: 1500 }),
    stream: fc.boolean(),
    clientUsage: fc.boolean(),
    id: fc.constantFrom("none", "unique", "shared", "shared", "unusable"),
    target: fc.integer({ min: 0, max: 1 }),
  })
  // An honest worker: never more than the limit the request set.
  .map((r) => ({
    ...r,
    limit: r.limited ? r.limit : undefined,
    out: r.limited ? Math.min(r.out, r.limit) : r.out,
  }));

const runArb = fc.array(reqArb, { minLength: 1, maxLength: 30, size: "max" });

function bodyOf(r: Req, model: string): Record<string, unknown> {
  const body: Record<string, unknown> = { model, messages: [{ role: "user", content: "hello there" }] };
  if (r.limit !== undefined) body.max_tokens = r.limit;
  if (r.stream) body.stream = true;
  if (r.stream && r.clientUsage) body.stream_options = { include_usage: true };
  return body;
}

function headersOf(r: Req, k: number, i: number, run: string): Record<string, string> {
  const h: Record<string, string> = {
    authorization: `Bearer ${keyFor(k)}`,
    "x-mock-output-tokens": String(r.out),
  };
  if (r.id === "unique") h["x-request-id"] = `${run}-${i}`;
  else if (r.id === "shared") h["x-request-id"] = `${run}-same`;
  else if (r.id === "unusable") h["x-request-id"] = "not usable, spaces";
  return h;
}

/** What a request reserves: prompt + its limit, else the default, else the context left after the prompt. */
function reservation(r: Req, defaultOutput: number | undefined): number {
  return PROMPT_TOKENS + (r.limit ?? defaultOutput ?? CONTEXT - PROMPT_TOKENS);
}

function checkAnswers(reqs: Req[], replies: Array<RawResponse | undefined>, run: string): void {
  reqs.forEach((r, i) => {
    const res = replies[i];
    assert.ok(res !== undefined, `request ${i} got no answer`);
    assert.ok(
      res.status === 200 ||
        (res.status === 403 && res.headers["x-smg-error-code"] === "tenant_budget_exhausted"),
      `request ${i}: ${res.status} ${res.body.slice(0, 200)}`,
    );
    const id = res.headers["x-request-id"];
    if (r.id === "unique") assert.equal(id, `${run}-${i}`);
    else if (r.id === "shared") assert.equal(id, `${run}-same`);
    else assert.ok(id && id !== "not usable, spaces", "an unusable id is replaced");
  });
}

/**
 * The overrun bound of docs/tenants.md from what each admitted request was charged: the sum of every
 * charge's excess over its reservation (in process, plus the largest charge). `chargesOf(id)`: the
 * charges of the 200 records (rows) whose request id is `id`. Requests sharing one id are matched to
 * their records as a group, against the smallest reservation among them.
 */
function overrunBound(
  reqs: Req[],
  replies: Array<RawResponse | undefined>,
  chargesOf: (id: string) => number[],
  defaults: (r: Req) => number | undefined,
  run: string,
  inProcess: boolean,
): number {
  let excess = 0;
  let largest = 0;
  let sharedReservation = Number.POSITIVE_INFINITY;
  reqs.forEach((r, i) => {
    if (r.id === "shared") {
      sharedReservation = Math.min(sharedReservation, reservation(r, defaults(r)));
      return;
    }
    if (replies[i]?.status !== 200) return;
    for (const c of chargesOf(String(replies[i]!.headers["x-request-id"]))) {
      excess += Math.max(0, c - reservation(r, defaults(r)));
      largest = Math.max(largest, c);
    }
  });
  for (const c of chargesOf(`${run}-same`)) {
    excess += Math.max(0, c - sharedReservation);
    largest = Math.max(largest, c);
  }
  return excess + (inProcess ? largest : 0);
}

/** What the runs of one test did, for its diagnostic line. */
class Stats {
  runs = 0;
  requests = 0;
  served = 0;
  worstOver = Number.NEGATIVE_INFINITY;
  worst = "";

  add(requests: number, served: number, total: number, budget: number, concurrent: number): void {
    this.runs++;
    this.requests += requests;
    this.served += served;
    if (total - budget > this.worstOver) {
      this.worstOver = total - budget;
      this.worst = `${total} charged on a budget of ${budget} with ${concurrent} concurrent requests`;
    }
  }

  toString(): string {
    return `${this.runs} runs, ${this.requests} requests, ${this.served} served; worst overrun ${this.worstOver} tokens (${this.worst})`;
  }
}

/** A 200's record (row): a token source, and at least one output token charged. */
function checkRecord(
  o: { tokenSource?: string | null | undefined; outputTokens?: number | null },
  what: string,
) {
  assert.ok(
    o.tokenSource === "reported" || o.tokenSource === "counted" || o.tokenSource === "estimated",
    `${what}: token source ${o.tokenSource}`,
  );
  assert.ok((o.outputTokens ?? 0) >= 1, `${what}: charged ${o.outputTokens} output tokens`);
}

describe("fuzz: money in process", { timeout: 120_000 }, () => {
  const policies = Object.fromEntries(
    Array.from({ length: TENANTS }, (_, k) => [`auth:m${k}`, { budget_tokens: budgetOf(k) }]),
  );

  for (const defaultOutput of [undefined, DEFAULT_OUTPUT]) {
    test(`generated runs keep the budget and the books (default_output_tokens ${defaultOutput ?? "unset"}, seed ${SEED})`, {
      timeout: 60_000,
    }, async (t) => {
      const stats = new Stats();
      let tenant = 0;
      const fleet = await startFleet(t, {
        workers: [
          { maxRunningRequests: 64, ttftMs: 1, tokenDelayMs: 0, servedModels: MODELS },
          { maxRunningRequests: 64, ttftMs: 1, tokenDelayMs: 0, servedModels: MODELS, reportUsage: false },
        ],
        schedulerYaml: schedulerDoc({ tenant_policies: policies }),
        gateway: {
          apiKeys: Array.from({ length: TENANTS }, (_, k) => ({
            sha256: sha256Hex(keyFor(k)),
            tenant: `m${k}`,
          })),
          defaultOutputTokens: defaultOutput,
        },
      });
      await fc.assert(
        fc.asyncProperty(runArb, async (reqs) => {
          const fresh = tenant < TENANTS;
          const k = tenant++ % TENANTS;
          const run = `run${k}-${Math.random().toString(36).slice(2, 8)}`;
          const model = MODELS[k]!;
          const replies = await Promise.all(
            reqs.map((r, i) => rawPost(fleet.gateway.port, bodyOf(r, model), headersOf(r, k, i, run))),
          );
          checkAnswers(reqs, replies, run);
          const ids = new Set(replies.map((r) => String(r!.headers["x-request-id"])));
          const mine = (o: OutcomeRecord) => o.tenantId === `auth:m${k}` && ids.has(o.requestId);
          await waitFor(() => fleet.outcomes.filter(mine).length === reqs.length, "one record per request");
          const records = fleet.outcomes.filter(mine);
          assert.equal(new Set(records.map((o) => o.sluiceRequestId)).size, reqs.length, "a gateway id each");
          for (const o of records) {
            if (o.status === 200) checkRecord(o, `record ${o.requestId}`);
            else assert.equal(o.tokenSource, undefined);
          }
          if (!fresh) return;
          const total = records.reduce((n, o) => n + charged(o), 0);
          const budget = budgetOf(k);
          const left = fleet.gateway.budgets.remaining(`auth:m${k}`).budget_tokens!;
          if (total < budget) assert.equal(budget - left, total, "the budget booked what was charged");
          else assert.equal(left, 0);
          const chargesOf = (id: string) =>
            records.filter((o) => o.requestId === id && o.status === 200).map(charged);
          const bound = overrunBound(reqs, replies, chargesOf, () => defaultOutput, run, true);
          stats.add(reqs.length, records.filter((o) => o.status === 200).length, total, budget, reqs.length);
          assert.ok(
            total - budget <= bound,
            `charged ${total} on a budget of ${budget}: over the bound ${bound}`,
          );
        }),
        { numRuns: RUNS, seed: SEED, interruptAfterTimeLimit: 20_000, markInterruptAsFailure: false },
      );
      t.diagnostic(`in process: ${stats}`);
    });
  }
});

describe("fuzz: money in Redis mode, two replicas, a shared PostgreSQL ledger", { timeout: 180_000 }, () => {
  test(`generated runs keep the shared budget and the ledger's books (seed ${SEED})`, {
    timeout: 120_000,
  }, async (t) => {
    const stats = new Stats();
    const url = await redisOrSkip(t);
    if (url === undefined) return;
    const ledgerUrl = await postgresSchema(t);
    if (ledgerUrl === undefined) return;
    const policies = Object.fromEntries(
      Array.from({ length: TENANTS }, (_, k) => [`auth:m${k}`, { budget_tokens: budgetOf(k) }]),
    );
    const worker = {
      maxRunningRequests: 64,
      ttftMs: 1,
      tokenDelayMs: 0,
      batchSlowdown: 0,
      servedModels: MODELS,
    };
    // Replica 0 reserves the model's context for a request without max_tokens, replica 1 its default.
    const { prefix, redis, ports } = await startRedisFleet(t, {
      redisUrl: url,
      workers: [worker, { ...worker, reportUsage: false }],
      replicas: 2,
      schedulerYaml: stringify(schedulerDoc({ tenant_policies: policies })),
      apiKeys: Object.fromEntries(Array.from({ length: TENANTS }, (_, k) => [`m${k}`, keyFor(k)])),
      flags: ["--ledger", ledgerUrl],
      replicaFlags: (i) => (i === 1 ? ["--default-output-tokens", String(DEFAULT_OUTPUT)] : []),
    });
    const keys = new StateKeys(prefix);
    let tenant = 0;
    await fc.assert(
      fc.asyncProperty(runArb, async (reqs) => {
        const fresh = tenant < TENANTS;
        const k = tenant++ % TENANTS;
        const run = `run${k}-${Math.random().toString(36).slice(2, 8)}`;
        const model = MODELS[k]!;
        const replies = await Promise.all(
          reqs.map((r, i) => rawPost(ports[r.target]!, bodyOf(r, model), headersOf(r, k, i, run))),
        );
        checkAnswers(reqs, replies, run);
        // Every id here is `[A-Za-z0-9._:-]` (the gateway's, or the run's own).
        const ids = new Set(replies.map((r) => String(r!.headers["x-request-id"])));
        // The replicas create the table with their first flush: until then there is no row to read.
        const rowsOf = () =>
          pgRows(
            ledgerUrl,
            "SELECT request_id, sluice_request_id, status, input_tokens, output_tokens, token_source " +
              `FROM usage WHERE request_id IN (${[...ids].map((id) => `'${id}'`).join(", ")})`,
          ).catch((err: { code?: string }) => {
            if (err.code === "42P01") return [];
            throw err;
          });
        await waitFor(async () => (await rowsOf()).length === reqs.length, "one ledger row per request", {
          timeoutMs: 10_000,
        });
        const rows = await rowsOf();
        assert.equal(new Set(rows.map((r) => r.sluice_request_id)).size, reqs.length, "a gateway id each");
        const chargeOf = (r: (typeof rows)[number]) =>
          ((r.input_tokens as number | null) ?? 0) + ((r.output_tokens as number | null) ?? 0);
        for (const r of rows) {
          if (r.status === 200) {
            checkRecord(
              { tokenSource: r.token_source as string, outputTokens: r.output_tokens as number },
              "row",
            );
          } else assert.equal(r.token_source, null);
        }
        if (!fresh) return;
        const total = rows.reduce((n, r) => n + chargeOf(r), 0);
        const account = keys.budget(`auth:m${k}`);
        await waitFor(
          async () => Number((await redis.hget(account, "ut")) ?? 0) === total,
          `Redis booked what the ledger charged (${total})`,
          { timeoutMs: 10_000 },
        );
        const budget = budgetOf(k);
        const chargesOf = (id: string) =>
          rows.filter((r) => r.request_id === id && r.status === 200).map(chargeOf);
        const bound = overrunBound(
          reqs,
          replies,
          chargesOf,
          (r) => (r.target === 1 ? DEFAULT_OUTPUT : undefined),
          run,
          false,
        );
        stats.add(reqs.length, rows.filter((r) => r.status === 200).length, total, budget, reqs.length);
        assert.ok(
          total - budget <= bound,
          `charged ${total} on a budget of ${budget}: over the bound ${bound}`,
        );
      }),
      { numRuns: RUNS, seed: SEED, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false },
    );
    t.diagnostic(`two replicas: ${stats}`);
  });
});

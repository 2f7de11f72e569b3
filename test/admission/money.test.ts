/**
 * Money in Redis mode, over two replicas sharing Redis and raw loopback sockets (issue 35):
 *
 * 1. the budget hold is keyed by the gateway's id for the request, never the client's X-Request-Id:
 *    requests reusing one id are each held against the term budget and the tokens-per-minute bucket
 *    (on 40ea629 the reserve script answered "duplicate" and admitted them with no hold at all);
 * 2. concurrent requests without max_tokens on two replicas cannot overrun a term budget: each
 *    reserves an output estimate, and in Redis mode a reservation must fit in what is left. What
 *    remains is an answer longer than its reservation (a p95, or default_output_tokens): the
 *    overrun is at most the sum of those excesses, measured here.
 */
import assert from "node:assert/strict";
import { describe, type TestContext, test } from "node:test";
import { StateKeys } from "../../src/admission/redis/keys.js";
import type { MockWorkerOptions } from "../../src/mock-worker/index.js";
import { PROMPT_TOKENS, smallSchedulerYaml, waitFor } from "../helpers/harness.js";
import { rawPost, tally, unlimitedChat, usageTotal } from "../helpers/money.js";
import { startRedisFleet } from "./fleet.js";
import { redisOrSkip } from "./services.js";

const KEY = { authorization: "Bearer sk-acme" };
const ESTIMATE = PROMPT_TOKENS + 4;

async function twoReplicas(
  t: TestContext,
  policy: Record<string, unknown>,
  options: { worker?: Partial<MockWorkerOptions>; extra?: string[] } = {},
) {
  const url = await redisOrSkip(t);
  if (url === undefined) return undefined;
  const { ports, redis, prefix } = await startRedisFleet(t, {
    redisUrl: url,
    workers: [{ maxRunningRequests: 128, ttftMs: 2, tokenDelayMs: 0, batchSlowdown: 0, ...options.worker }],
    replicas: 2,
    schedulerYaml: smallSchedulerYaml({ tenant_policies: { "auth:acme": policy } }),
    apiKeys: { acme: "sk-acme" },
    flags: options.extra,
  });
  const account = new StateKeys(prefix).budget("auth:acme");
  const used = async () => Number((await redis.hget(account, "ut")) ?? 0);
  return { ports, redis, used, prefix };
}

describe("money in Redis mode: holds are keyed by the gateway's id", () => {
  test("30 requests reusing one X-Request-Id over two replicas: the term budget holds", async (t) => {
    const f = await twoReplicas(t, { budget_tokens: 50 });
    if (f === undefined) return;
    const replies = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        rawPost(
          f.ports[i % 2]!,
          { ...unlimitedChat(), max_tokens: 4 },
          { ...KEY, "X-Request-Id": "same-id" },
        ),
      ),
    );
    const counts = tally(replies);
    // A reservation must fit what is left: 7 of 7 tokens fit in 50.
    assert.deepEqual(counts, { "200": 7, "403 tenant_budget_exhausted": 23 }, JSON.stringify(counts));
    for (const r of replies) assert.equal(r!.headers["x-request-id"], "same-id");
    await waitFor(async () => (await f.used()) === 7 * ESTIMATE, "every answer settled");
    const holds = await f.redis.keys(`${new StateKeys(f.prefix).base}hold:auth:acme:*`);
    assert.equal(holds.length, 7, "one hold per admitted request");
    assert.ok(!holds.some((k) => k.endsWith(":same-id")), "no hold is keyed by the client's id");
  });

  test("30 requests reusing one X-Request-Id over two replicas: tokens_per_minute holds", async (t) => {
    const limit = 70;
    const f = await twoReplicas(t, { tokens_per_minute: limit });
    if (f === undefined) return;
    const started = performance.now();
    const replies = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        rawPost(
          f.ports[i % 2]!,
          { ...unlimitedChat(), max_tokens: 4 },
          { ...KEY, "X-Request-Id": "same-id" },
        ),
      ),
    );
    const refill = (limit * (performance.now() - started)) / 60_000;
    const served = tally(replies)["200"] ?? 0;
    assert.ok(
      served * ESTIMATE <= limit + ESTIMATE + refill,
      `${served} x ${ESTIMATE} tokens served against ${limit}/min (+${refill.toFixed(1)} refilled)`,
    );
  });
});

describe("money in Redis mode: requests without max_tokens over two replicas", () => {
  test("40 concurrent requests on the last 84 tokens of a 5000-token budget: none over", async (t) => {
    const f = await twoReplicas(t, { budget_tokens: 5000 }, { worker: { defaultMaxTokens: 2000 } });
    if (f === undefined) return;
    const first = await rawPost(f.ports[0]!, { ...unlimitedChat(), max_tokens: 4913 }, KEY);
    assert.equal(first?.status, 200);
    await waitFor(async () => (await f.used()) === 4916, "84 left");
    const replies = await Promise.all(
      // Answers take 2 s (1 ms a token): all 40 arrive while the first ones run.
      Array.from({ length: 40 }, (_, i) =>
        rawPost(f.ports[i % 2]!, unlimitedChat(), { ...KEY, "x-mock-token-delay-ms": "1" }),
      ),
    );
    const counts = tally(replies);
    const served = replies.reduce((n, r) => n + usageTotal(r), 0);
    t.diagnostic(
      `two replicas: ${JSON.stringify(counts)}, ${served} tokens served on 84 left: ${served - 84} over`,
    );
    // No history, no default_output_tokens: each reserves the model's context, which does not fit.
    assert.equal(served, 0, JSON.stringify(counts));
    assert.equal(counts["403 tenant_budget_exhausted"], 40);
  });

  test("only requests for generated output reserve one: an embedding on a small budget is let through", async (t) => {
    const f = await twoReplicas(t, { budget_tokens: 100 });
    if (f === undefined) return;
    // No history, no default: a chat without max_tokens would hold a context, which does not fit.
    const chat = await rawPost(f.ports[0]!, unlimitedChat(), KEY);
    assert.equal(chat?.status, 403);
    assert.equal(chat?.headers["x-smg-error-code"], "tenant_budget_exhausted");
    // An embedding holds its prompt alone: it reaches the worker (which serves no embeddings: 404).
    const embedding = await rawPost(f.ports[1]!, { model: "mock-llm", input: "hello there" }, KEY, {
      path: "/v1/embeddings",
    });
    assert.equal(embedding?.status, 404);
    // The hold was taken (the prompt alone), then refunded: a worker's 404 charges nothing.
    await waitFor(async () => (await f.used()) === 0, "the hold refunded");
  });

  test("40 concurrent requests, answers longer than the reservation: over by at most their excess", async (t) => {
    const reserve = 1000;
    const f = await twoReplicas(
      t,
      { budget_tokens: 5000 },
      { extra: ["--default-output-tokens", String(reserve)] },
    );
    if (f === undefined) return;
    // Answers of 500 to 2000 tokens against a reservation of 1000 (as a p95 would be passed by 5%).
    const lengths = Array.from({ length: 40 }, (_, i) => 500 + ((i * 397) % 1501));
    const replies = await Promise.all(
      lengths.map((n, i) =>
        rawPost(f.ports[i % 2]!, unlimitedChat(), { ...KEY, "x-mock-output-tokens": String(n) }),
      ),
    );
    const counts = tally(replies);
    const served = replies.reduce((n, r) => n + usageTotal(r), 0);
    let excess = 0;
    for (const r of replies) excess += Math.max(0, usageTotal(r) - (PROMPT_TOKENS + reserve));
    const over = served - 5000;
    t.diagnostic(
      `two replicas, reservation ${reserve}: ${JSON.stringify(counts)}, ${served} served of 5000: ${over} over (bound ${excess})`,
    );
    assert.ok(over <= excess, `${over} over, more than the answers' excess ${excess}`);
    await waitFor(async () => (await f.used()) === served, "Redis charged what was served");
  });
});

/**
 * Budgets and tokens_per_minute live in Redis, reserve-then-reconcile, across three replicas:
 * a tenant's per-minute limit holds fleet-wide (never more than the limit plus one request's
 * estimate), a term budget is never overrun by concurrent requests racing its last tokens, and
 * every request is charged, whatever X-Request-Id it carries (the hold is keyed by the gateway's own
 * id: issue 35, item 1).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { StateKeys } from "../../src/admission/redis/keys.js";
import { assertError, authFor, type Reply, smallSchedulerYaml, waitFor } from "../helpers/harness.js";
import { harnessKeys, startRedisFleet } from "./fleet.js";
import { chat, redisOrSkip } from "./services.js";

/** Each request: 3 prompt tokens ("hello there") + max_tokens 4 = an estimate of 7, and 7 used. */
const ESTIMATE = 7;

async function fleet(t: import("node:test").TestContext, policy: Record<string, unknown>) {
  const url = await redisOrSkip(t);
  if (url === undefined) return undefined;
  return startRedisFleet(t, {
    redisUrl: url,
    workers: [{ maxRunningRequests: 64, ttftMs: 2, tokenDelayMs: 1, batchSlowdown: 0 }],
    replicas: 3,
    schedulerYaml: smallSchedulerYaml({ tenant_policies: { "auth:acme": policy } }),
    apiKeys: harnessKeys("acme"),
  });
}

function tally(replies: Array<Reply | Error>): Map<string, Reply[]> {
  const out = new Map<string, Reply[]>();
  for (const r of replies) {
    assert.ok(!(r instanceof Error), `transport error: ${r instanceof Error ? r.message : ""}`);
    const key = r.status === 200 ? "200" : `${r.status} ${r.headers["x-smg-error-code"]}`;
    out.set(key, [...(out.get(key) ?? []), r]);
  }
  return out;
}

describe("shared budgets", () => {
  test("tokens_per_minute holds across replicas: at most the limit plus one estimate", async (t) => {
    const limit = 70;
    const f = await fleet(t, { tokens_per_minute: limit });
    if (f === undefined) return;
    const started = performance.now();
    const replies = await Promise.all(
      Array.from({ length: 30 }, (_, i) => chat(f.replicas[i % 3]!, authFor("acme"))),
    );
    const minutes = (performance.now() - started) / 60_000;
    const byCode = tally(replies);
    const served = byCode.get("200")?.length ?? 0;
    const refill = limit * minutes;
    assert.ok(
      served * ESTIMATE <= limit + ESTIMATE + refill,
      `served ${served} x ${ESTIMATE} tokens against ${limit}/min (+${refill.toFixed(1)} refilled)`,
    );
    assert.ok(served >= Math.floor(limit / ESTIMATE) - 1, `the bucket was used (${served} served)`);
    const refused = byCode.get("429 token_budget_exceeded") ?? [];
    assert.equal(
      served + refused.length,
      30,
      `only 200 and 429 token_budget_exceeded: ${[...byCode.keys()]}`,
    );
    assertError(refused[0]!, 429, "token_budget_exceeded");
    assert.ok(Number(refused[0]!.headers["retry-after"]) >= 1);
  });

  test("a term budget is never overrun by concurrent requests racing its last tokens", async (t) => {
    const budget = 50;
    const f = await fleet(t, { budget_tokens: budget });
    if (f === undefined) return;
    const replies = await Promise.all(
      Array.from({ length: 30 }, (_, i) => chat(f.replicas[i % 3]!, authFor("acme"))),
    );
    const byCode = tally(replies);
    const served = byCode.get("200") ?? [];
    let used = 0;
    for (const r of served) {
      const usage = (JSON.parse(r.text) as { usage: { total_tokens: number } }).usage;
      used += usage.total_tokens;
    }
    assert.ok(used <= budget, `${used} tokens used of a ${budget}-token budget`);
    assert.equal(served.length, Math.floor(budget / ESTIMATE), "every estimate that fits was served");
    const refused = byCode.get("403 tenant_budget_exhausted") ?? [];
    assert.equal(served.length + refused.length, 30, `only 200 and 403: ${[...byCode.keys()]}`);
    assertError(refused[0]!, 403, "tenant_budget_exhausted");
  });

  test("requests reusing one request id are each charged, on any replica", async (t) => {
    const f = await fleet(t, { budget_tokens: 1000 });
    if (f === undefined) return;
    const redis = f.redis;
    const account = new StateKeys(f.prefix).budget("auth:acme");
    const used = async () => Number((await redis.hget(account, "ut")) ?? 0);
    const first = await chat(f.replicas[0]!, { ...authFor("acme"), "x-request-id": "retry-me-1" });
    assert.ok(!(first instanceof Error) && first.status === 200);
    await waitFor(async () => (await used()) === ESTIMATE, "the first attempt was charged");
    const retry = await chat(f.replicas[1]!, { ...authFor("acme"), "x-request-id": "retry-me-1" });
    assert.ok(!(retry instanceof Error) && retry.status === 200);
    const other = await chat(f.replicas[2]!, { ...authFor("acme"), "x-request-id": "another-one" });
    assert.ok(!(other instanceof Error) && other.status === 200);
    await waitFor(async () => (await used()) === 3 * ESTIMATE, "every request was charged");
    assert.equal(await used(), 3 * ESTIMATE, "the reused id was charged like any other request");
  });
});

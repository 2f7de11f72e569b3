/**
 * Every tenant outcome through real HTTP: 401, 403 tenant_inactive (suspended, outside its access
 * window), 403 model_not_allowed, 403 tenant_budget_exhausted, 429 token_budget_exceeded with the exact
 * Retry-After, then the scheduler's own 429 scheduler_queue_full; and the order of the checks when
 * several apply. A ManualClock makes the calendar and the per-minute bucket exact (it starts on a
 * Sunday at noon UTC).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import {
  assertError,
  assertOk,
  authFor,
  type Fleet,
  schedulerDoc,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const SUNDAY_NOON = Date.UTC(2026, 0, 4, 12, 0);
const MONDAY_8AM = Date.UTC(2026, 0, 5, 8, 0);
const MONDAY_8PM = Date.UTC(2026, 0, 5, 20, 0);

const TENANTS = [
  "plain",
  "suspended",
  "office",
  "office-suspended",
  "restricted",
  "capped",
  "metered",
  "spent",
  "all-limits",
  "model-and-budget",
];

const POLICIES = {
  "auth:plain": {},
  "auth:suspended": { active: false },
  "auth:office": { access_windows: ["Mon-Fri 08:00-20:00 UTC"] },
  "auth:office-suspended": { active: false, access_windows: ["Mon-Fri 08:00-20:00 UTC"] },
  "auth:restricted": { models: ["other-model"] },
  "auth:capped": { budget_tokens: 10 },
  "auth:metered": { tokens_per_minute: 120 },
  // Budget and bucket both run dry after one 100-token request.
  "auth:spent": { budget_tokens: 50, tokens_per_minute: 120 },
  // Every limit applies at once.
  "auth:all-limits": {
    active: false,
    access_windows: ["Sat 00:00-00:01 UTC"],
    models: ["other-model"],
    budget_tokens: 0,
    tokens_per_minute: 1,
  },
  "auth:model-and-budget": { models: ["other-model"], budget_tokens: 0, tokens_per_minute: 1 },
};

/** 3 prompt tokens + 97 = 100 estimated tokens, and the mock reports exactly that. */
const HUNDRED = { max_tokens: 97 };

async function outcomesStack(t: Parameters<typeof startFleet>[0], clock: ManualClock): Promise<Fleet> {
  return startFleet(t, {
    // It serves the model the restricted tenant may use, so that request is routed, not 404.
    workers: [{ maxRunningRequests: 1, servedModels: ["mock-llm", "other-model"] }],
    schedulerYaml: schedulerDoc({ classes: { bulk: { queue_size: 1 } }, tenant_policies: POLICIES }),
    tenants: TENANTS,
    gateway: { requireAuth: true, clock },
  });
}

describe("tenancy outcomes over HTTP", () => {
  test("401, 403 x3, 429 with Retry-After, then the scheduler's 429, each with its code and body", async (t) => {
    const clock = new ManualClock(SUNDAY_NOON);
    const stack = await outcomesStack(t, clock);
    const worker = stack.workers[0]!;

    // 401: no key, an unknown key, a key in the wrong scheme.
    assertError(await stack.chatAs(undefined), 401, "missing_api_key", "authentication_error");
    assertError(
      await stack.chatAs(undefined, {}, { authorization: "Bearer sk-nobody" }),
      401,
      "invalid_api_key",
      "authentication_error",
    );
    assertError(
      await stack.chatAs(undefined, {}, { authorization: "Basic c2stbm9ib2R5" }),
      401,
      "invalid_api_key",
      "authentication_error",
    );

    // 403 tenant_inactive: suspended, and outside the access window (a Sunday).
    let msg = assertError(await stack.chatAs("suspended"), 403, "tenant_inactive", "permission_error");
    assert.match(msg, /suspended/);
    msg = assertError(await stack.chatAs("office"), 403, "tenant_inactive", "permission_error");
    assert.match(msg, /Mon-Fri 08:00-20:00 UTC/);

    // 403 model_not_allowed.
    msg = assertError(await stack.chatAs("restricted"), 403, "model_not_allowed", "permission_error");
    assert.match(msg, /mock-llm/);
    assertOk(await stack.chatAs("restricted", { model: "other-model" }));

    // 403 tenant_budget_exhausted: the first request (100 tokens) uses up the 10-token budget.
    assertOk(await stack.chatAs("capped", HUNDRED));
    msg = assertError(await stack.chatAs("capped"), 403, "tenant_budget_exhausted", "permission_error");
    assert.match(msg, /10 tokens budget/);

    // 429 token_budget_exceeded: 120 tokens per minute (2 per second), 100 used -> 20 left; another
    // 100 needs 80 more = 40 s.
    const first = await stack.chatAs("metered", HUNDRED);
    assertOk(first);
    assert.equal(first.headers["retry-after"], undefined);
    let reply = await stack.chatAs("metered", HUNDRED);
    assertError(reply, 429, "token_budget_exceeded", "rate_limit_error");
    assert.equal(reply.headers["retry-after"], "40");
    clock.advance(39_000); // 20 + 78 = 98 tokens: 2 short = 1 s
    reply = await stack.chatAs("metered", HUNDRED);
    assertError(reply, 429, "token_budget_exceeded");
    assert.equal(reply.headers["retry-after"], "1");
    clock.advance(1_000);
    assertOk(await stack.chatAs("metered", HUNDRED));
    // A smaller request fits what is left sooner: the bucket is empty now, 10 tokens = 5 s.
    reply = await stack.chatAs("metered", { max_tokens: 7 });
    assertError(reply, 429, "token_budget_exceeded");
    assert.equal(reply.headers["retry-after"], "5");

    // A suspended tenant's 403 carries no Retry-After (waiting does not help); a used-up term
    // budget's says when its period ends: February 1st, past a day away, so the one-day cap.
    assert.equal((await stack.chatAs("suspended")).headers["retry-after"], undefined);
    assert.equal((await stack.chatAs("capped")).headers["retry-after"], "86400");

    // Rejected requests never reached the worker: only the 4 admitted ones did.
    assert.equal(worker.stats().totalRequests, 4);

    // Monday 08:00 UTC opens the window (07:59:59.999 does not); 20:00 closes it.
    clock.advanceTo(MONDAY_8AM - 1);
    assertError(await stack.chatAs("office"), 403, "tenant_inactive");
    clock.advanceTo(MONDAY_8AM);
    assertOk(await stack.chatAs("office"));
    clock.advanceTo(MONDAY_8PM - 1);
    assertOk(await stack.chatAs("office"));
    clock.advanceTo(MONDAY_8PM);
    assertError(await stack.chatAs("office"), 403, "tenant_inactive");

    // The scheduler's outcomes still work behind the tenant checks: one slot, a bulk queue of one.
    const running = stack.holdAs("plain", {}, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "10000" });
    await waitFor(() => worker.stats().running === 1, "the slot is taken at the worker");
    const queued = stack.holdAs("plain", {}, { "x-smg-priority": "bulk" });
    await waitFor(() => stack.snapshot().classes.bulk.queued === 1, "one bulk request queued");
    reply = await stack.chatAs("plain", {}, { "x-smg-priority": "bulk" });
    assertError(reply, 429, "scheduler_queue_full", "rate_limit_error");
    await running.cancel();
    const late = await queued.result;
    assertOk(late);
    assert.equal(late.headers["x-sluice-admission"], "queued");
  });

  test("when several checks fail, the first in order answers: 401 > inactive > model > budget > bucket > queue", async (t) => {
    const clock = new ManualClock(SUNDAY_NOON);
    const stack = await outcomesStack(t, clock);
    const worker = stack.workers[0]!;

    // The key is checked before anything about the tenant: a wrong key for a suspended tenant is 401.
    assertError(
      await stack.chatAs(undefined, {}, { authorization: `${authFor("suspended").authorization}x` }),
      401,
      "invalid_api_key",
    );
    // Suspended and outside its window and a forbidden model and no budget and an empty bucket.
    assertError(await stack.chatAs("all-limits"), 403, "tenant_inactive");
    // Suspended is reported before the window.
    assert.match(assertError(await stack.chatAs("office-suspended"), 403, "tenant_inactive"), /suspended/);
    // Forbidden model and no budget and too small a bucket: the model is reported.
    assertError(await stack.chatAs("model-and-budget"), 403, "model_not_allowed");
    // With the allowed model the budget comes next (403), before the bucket (429).
    assertError(
      await stack.chatAs("model-and-budget", { model: "other-model" }),
      403,
      "tenant_budget_exhausted",
    );

    // Budget used up and bucket empty at once: 403, not 429.
    assertOk(await stack.chatAs("spent", { max_tokens: 97 }));
    assertError(await stack.chatAs("spent", { max_tokens: 97 }), 403, "tenant_budget_exhausted");
    assertError(await stack.chatAs("spent", { model: "nope" }), 403, "tenant_budget_exhausted");

    // Tenant limits answer before the scheduler: with the bulk queue full, a budget or bucket
    // rejection is still a 403/429 of its own, never scheduler_queue_full.
    assertOk(await stack.chatAs("capped", { max_tokens: 97 }));
    assertOk(await stack.chatAs("metered", { max_tokens: 97 })); // 20 of 120 left
    const running = stack.holdAs("plain", {}, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "10000" });
    await waitFor(() => worker.stats().running === 1, "the slot is taken at the worker");
    const queued = stack.holdAs("plain", {}, { "x-smg-priority": "bulk" });
    await waitFor(() => stack.snapshot().classes.bulk.queued === 1, "one bulk request queued");
    const bulk = { "x-smg-priority": "bulk" };
    assertError(await stack.chatAs("plain", {}, bulk), 429, "scheduler_queue_full");
    assertError(await stack.chatAs("capped", {}, bulk), 403, "tenant_budget_exhausted");
    const overBucket = await stack.chatAs("metered", { max_tokens: 97 }, bulk);
    assertError(overBucket, 429, "token_budget_exceeded");
    assert.equal(overBucket.headers["retry-after"], "40");
    // 10 tokens fit the bucket, so the scheduler answers; its rejection gives the hold back.
    assertError(await stack.chatAs("metered", { max_tokens: 7 }, bulk), 429, "scheduler_queue_full");
    assertError(await stack.chatAs("metered", { max_tokens: 7 }, bulk), 429, "scheduler_queue_full");
    assert.equal(stack.gateway.budgets.remaining("auth:metered").tokens_per_minute, 20);
    assertError(await stack.chatAs("suspended", {}, bulk), 403, "tenant_inactive");
    assertError(await stack.chatAs("restricted", {}, bulk), 403, "model_not_allowed");
    await running.cancel();
    assertOk(await queued.result);
  });
});

/**
 * The pieces of the rate-limit headers and of Retry-After, one by one: the reset duration's format
 * (OpenAI's, Go's duration text), which headers a policy gets, the request bucket of
 * requests_per_minute, the budget period's end, the queue-drain estimate and the worker-return rule.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { BudgetBook, secsToPeriodEnd } from "@sluice/scheduler/core/budgets.js";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import type { TenantPolicy } from "@sluice/scheduler/core/config.js";
import type { ClassSnapshot } from "@sluice/scheduler/core/events.js";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import type { GatewayFile } from "../../src/config/gateway-file.js";
import { resolveOptionValues } from "../../src/config/option-layers.js";
import { parseSchedulerYaml } from "../../src/config/scheduler-file.js";
import type { AdmissionSnapshot } from "../../src/contracts/admission-backend.js";
import type { ModelPool } from "../../src/gateway/fleet/model-pools.js";
import {
  formatResetDuration,
  isRateLimitHeader,
  rateLimitHeaders,
} from "../../src/gateway/http/rate-limit-headers.js";
import { QueueDrain } from "../../src/gateway/request/queue-drain.js";
import { retryAfterSecsFor, secsUntilWorkerBack } from "../../src/gateway/request/retry-after.js";

describe("the reset duration, as OpenAI writes it", () => {
  test("under a second: whole milliseconds, rounded up", () => {
    assert.equal(formatResetDuration(20), "20ms");
    assert.equal(formatResetDuration(1), "1ms");
    assert.equal(formatResetDuration(0.2), "1ms");
    assert.equal(formatResetDuration(999), "999ms");
    assert.equal(formatResetDuration(999.5), "1s");
  });

  test("seconds, with the fraction to the millisecond and no trailing zeros", () => {
    assert.equal(formatResetDuration(1000), "1s");
    assert.equal(formatResetDuration(1500), "1.5s");
    assert.equal(formatResetDuration(1250), "1.25s");
    assert.equal(formatResetDuration(1001), "1.001s");
    assert.equal(formatResetDuration(59_999), "59.999s");
  });

  test("minutes carry their seconds, even zero ones", () => {
    assert.equal(formatResetDuration(60_000), "1m0s");
    assert.equal(formatResetDuration(360_000), "6m0s");
    assert.equal(formatResetDuration(90_500), "1m30.5s");
    assert.equal(formatResetDuration(3_599_000), "59m59s");
  });

  test("hours carry minutes and seconds", () => {
    assert.equal(formatResetDuration(3_600_000), "1h0m0s");
    assert.equal(formatResetDuration(7_384_250), "2h3m4.25s");
    assert.equal(formatResetDuration(86_400_000), "24h0m0s");
  });

  test("nothing to wait, or no number: 0s", () => {
    assert.equal(formatResetDuration(0), "0s");
    assert.equal(formatResetDuration(-5), "0s");
    assert.equal(formatResetDuration(Number.NaN), "0s");
  });
});

function asRecord(flat: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!;
  return out;
}

describe("which headers a tenant's policy gets", () => {
  test("only the pairs it has: tokens alone", () => {
    const h = asRecord(rateLimitHeaders({ tokens_per_minute: 1000 }, { tokens_per_minute: 250 }));
    assert.deepEqual(h, {
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "250",
      // 750 tokens at 1000 a minute: 45 s.
      "x-ratelimit-reset-tokens": "45s",
    });
  });

  test("every limit: both buckets and both term budgets", () => {
    const policy: TenantPolicy = {
      requests_per_minute: 60,
      tokens_per_minute: 90_000,
      budget_tokens: 1_000_000,
      budget_cost_usd: 25,
    };
    const h = asRecord(
      rateLimitHeaders(policy, {
        requests_per_minute: 59.5,
        tokens_per_minute: 0,
        budget_tokens: 12_345.9,
        budget_cost_usd: 3.1234567,
      }),
    );
    assert.deepEqual(h, {
      "x-ratelimit-limit-requests": "60",
      "x-ratelimit-remaining-requests": "59",
      "x-ratelimit-reset-requests": "500ms",
      "x-ratelimit-limit-tokens": "90000",
      "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-reset-tokens": "1m0s",
      "x-sluice-budget-remaining-tokens": "12345",
      "x-sluice-budget-remaining-usd": "3.123457",
    });
  });

  test("no such limit: no header; a full bucket resets in 0s", () => {
    assert.deepEqual(rateLimitHeaders({ max_class: "default", weight: 2 }, {}), []);
    const h = asRecord(rateLimitHeaders({ requests_per_minute: 10 }, {}));
    assert.equal(h["x-ratelimit-remaining-requests"], "10");
    assert.equal(h["x-ratelimit-reset-requests"], "0s");
    assert.equal(
      asRecord(rateLimitHeaders({ budget_cost_usd: 5 }, { budget_cost_usd: 0 }))[
        "x-sluice-budget-remaining-usd"
      ],
      "0",
    );
  });

  test("the names sluice owns", () => {
    assert.ok(isRateLimitHeader("x-ratelimit-remaining-tokens"));
    assert.ok(isRateLimitHeader("x-sluice-budget-remaining-usd"));
    assert.ok(!isRateLimitHeader("x-sluice-class"));
    assert.ok(!isRateLimitHeader("retry-after"));
  });
});

describe("requests_per_minute", () => {
  const JAN31_2359 = Date.UTC(2026, 0, 31, 23, 59);
  const book = (policy: TenantPolicy, clock: ManualClock) =>
    new BudgetBook({ policies: new Map([["t", policy]]), clock });

  test("a bucket of whole requests: refused at empty with the refill time, refilled by the clock", () => {
    const clock = new ManualClock(JAN31_2359);
    const b = book({ requests_per_minute: 2 }, clock);
    assert.ok(b.governs("t"));
    assert.ok(b.check("t", undefined, { inputTokens: 10, outputTokens: 10 }).ok);
    assert.ok(b.check("t", undefined, { inputTokens: 10, outputTokens: 10 }).ok);
    assert.deepEqual(b.remaining("t"), { requests_per_minute: 0 });
    const refused = b.check("t", undefined, { inputTokens: 1, outputTokens: 0 });
    assert.ok(!refused.ok);
    assert.equal(refused.code, "request_rate_exceeded");
    assert.equal(refused.message, "tenant t is over its 2 requests per minute");
    // One request at 2 a minute: 30 s.
    assert.equal(refused.retryAfterSecs, 30);
    clock.advance(29_000);
    const stillShort = b.check("t", undefined, { inputTokens: 1, outputTokens: 0 });
    assert.ok(!stillShort.ok);
    assert.equal(stillShort.retryAfterSecs, 1);
    clock.advance(1_000);
    assert.ok(b.check("t", undefined, { inputTokens: 1, outputTokens: 0 }).ok);
  });

  test("a refusal by either bucket takes nothing from the other", () => {
    const clock = new ManualClock(JAN31_2359);
    const b = book({ requests_per_minute: 3, tokens_per_minute: 100 }, clock);
    assert.ok(b.check("t", undefined, { inputTokens: 100, outputTokens: 0 }).ok);
    assert.deepEqual(b.remaining("t"), { requests_per_minute: 2, tokens_per_minute: 0 });
    // The token bucket refuses: the request bucket keeps its two requests.
    const byTokens = b.check("t", undefined, { inputTokens: 10, outputTokens: 0 });
    assert.ok(!byTokens.ok);
    assert.equal(byTokens.code, "token_budget_exceeded");
    assert.deepEqual(b.remaining("t"), { requests_per_minute: 2, tokens_per_minute: 0 });
    // A minute later both are full; three small requests empty the request bucket.
    clock.advance(60_000);
    for (let i = 0; i < 3; i++) assert.ok(b.check("t", undefined, { inputTokens: 1, outputTokens: 0 }).ok);
    // The request bucket refuses: the token bucket keeps its 97 tokens.
    const byRequests = b.check("t", undefined, { inputTokens: 10, outputTokens: 0 });
    assert.ok(!byRequests.ok);
    assert.equal(byRequests.code, "request_rate_exceeded");
    assert.deepEqual(b.remaining("t"), { requests_per_minute: 0, tokens_per_minute: 97 });
  });
});

describe("the budget period's end", () => {
  test("the next UTC midnight, or the first of the next month", () => {
    assert.equal(secsToPeriodEnd("day", Date.UTC(2026, 5, 10, 23, 59, 30)), 30);
    assert.equal(secsToPeriodEnd("day", Date.UTC(2026, 5, 10, 0, 0, 0)), 86_400);
    assert.equal(secsToPeriodEnd("month", Date.UTC(2026, 11, 31, 23, 0, 0)), 3600);
    // February 2028 has 29 days.
    assert.equal(secsToPeriodEnd("month", Date.UTC(2028, 1, 28, 0, 0, 0)), 2 * 86_400);
    assert.equal(secsToPeriodEnd("day", Date.UTC(2026, 5, 10, 23, 59, 59, 999)), 1);
  });

  test("a used-up term budget says when its period ends", () => {
    const clock = new ManualClock(Date.UTC(2026, 2, 3, 22, 0));
    const b = new BudgetBook({
      policies: new Map([["t", { budget_tokens: 10, budget_period: "day" as const }]]),
      clock,
    });
    assert.ok(b.check("t", undefined, { inputTokens: 10, outputTokens: 0 }).ok);
    const refused = b.check("t", undefined, { inputTokens: 1, outputTokens: 0 });
    assert.ok(!refused.ok);
    assert.equal(refused.code, "tenant_budget_exhausted");
    assert.equal(refused.retryAfterSecs, 2 * 3600);
  });
});

function classes(queued: Partial<Record<"bulk" | "default" | "interactive" | "system", number>>) {
  const one = (n: number): ClassSnapshot => ({
    inflight: 0,
    queued: n,
    queueLimit: 100,
    reserved: 0,
    headroom: 0,
    capacityPressure: 0,
  });
  return {
    bulk: one(queued.bulk ?? 0),
    default: one(queued.default ?? 0),
    interactive: one(queued.interactive ?? 0),
    system: one(queued.system ?? 0),
  };
}

describe("the queue-drain estimate", () => {
  const snapshot = (
    capacity: number,
    c: ReturnType<typeof classes> | null,
    queued = 0,
  ): AdmissionSnapshot => ({
    capacity,
    inflight: capacity,
    queued,
    utilization: 1,
    classes: c,
  });

  test("no served request yet: no estimate, the floor stands", () => {
    const drain = new QueueDrain();
    assert.equal(drain.meanServiceMs("p"), undefined);
    assert.equal(drain.secsUntilAdmitted("p", snapshot(4, classes({ default: 50 })), "default"), 1);
  });

  test("(queued ahead + 1) x mean service time / slots, counting only its class and above", () => {
    const drain = new QueueDrain();
    drain.served("p", 2000);
    // 3 default + 2 interactive + 1 system ahead, bulk behind: 7 x 2 s / 2 slots = 7 s.
    const c = classes({ bulk: 40, default: 3, interactive: 2, system: 1 });
    assert.equal(drain.secsUntilAdmitted("p", snapshot(2, c), "default"), 7);
    // A system request has only the system queue ahead: 2 x 2 s / 2 = 2 s.
    assert.equal(drain.secsUntilAdmitted("p", snapshot(2, c), "system"), 2);
    // Legacy admission: one FIFO queue of 9: 10 x 2 s / 2 = 10 s.
    assert.equal(drain.secsUntilAdmitted("p", snapshot(2, null, 9), undefined), 10);
    // No slot at all counts as one.
    assert.equal(drain.secsUntilAdmitted("p", snapshot(0, classes({})), "bulk"), 2);
    // Pools are apart.
    assert.equal(drain.meanServiceMs("q"), undefined);
  });

  test("the mean moves toward recent service times", () => {
    const drain = new QueueDrain();
    drain.served("p", 1000);
    for (let i = 0; i < 100; i++) drain.served("p", 5000);
    assert.ok(Math.abs(drain.meanServiceMs("p")! - 5000) < 1);
    drain.served("p", Number.NaN);
    drain.served("p", -1);
    assert.ok(Math.abs(drain.meanServiceMs("p")! - 5000) < 1, "bad samples are ignored");
  });
});

describe("the Retry-After rule per code", () => {
  const drain = new QueueDrain();
  drain.served("pool-a", 3000);
  const pool = {
    name: "pool-a",
    admission: {
      snapshot: () => ({
        capacity: 3,
        inflight: 3,
        queued: 5,
        utilization: 1,
        classes: classes({ default: 5 }),
      }),
    },
  } as unknown as ModelPool;
  const facts = { drain, pool, cls: "default" as const, workerReturnSecs: 7 };

  test("queue refusals: the drain (6 x 3 s / 3 slots), whatever the decider attached", () => {
    for (const code of [
      "scheduler_queue_full",
      "scheduler_queue_timeout",
      "scheduler_preempted",
      "admission_queue_full",
      "admission_queue_timeout",
      "worker_room_timeout",
    ] as const) {
      assert.equal(retryAfterSecsFor(code, 1, facts), 6, code);
    }
  });

  test("before routing or before any service sample: the decider's figure, else 1", () => {
    assert.equal(retryAfterSecsFor("scheduler_queue_full", undefined, { ...facts, pool: undefined }), 1);
    const fresh = { ...facts, drain: new QueueDrain() };
    assert.equal(retryAfterSecsFor("admission_queue_full", 1, fresh), 1);
    assert.equal(retryAfterSecsFor("scheduler_queue_timeout", undefined, fresh), 1);
  });

  test("buckets, budgets and shedding keep their deciders' figures, whole and at least 1", () => {
    assert.equal(retryAfterSecsFor("token_budget_exceeded", 40, facts), 40);
    assert.equal(retryAfterSecsFor("request_rate_exceeded", 0.2, facts), 1);
    assert.equal(retryAfterSecsFor("tenant_budget_exhausted", 3600, facts), 3600);
    assert.equal(retryAfterSecsFor("load_shed", 2.5, facts), 3);
    assert.equal(retryAfterSecsFor("tenant_inactive", undefined, facts), undefined);
  });

  test("a pool with a shedding predictor: its forecast wait when it has one", () => {
    const predicting = (predictedWaitMs: number) =>
      ({
        ...pool,
        shedding: { prioritizer: { status: () => ({ predictedWaitMs }) } },
      }) as unknown as ModelPool;
    assert.equal(retryAfterSecsFor("scheduler_queue_full", 1, { ...facts, pool: predicting(4200) }), 5);
    // No forecast (-1: no completions seen) or nothing queued (0): the drain estimate.
    assert.equal(retryAfterSecsFor("scheduler_queue_full", 1, { ...facts, pool: predicting(-1) }), 6);
    assert.equal(retryAfterSecsFor("scheduler_queue_timeout", 1, { ...facts, pool: predicting(0) }), 6);
  });

  test("no healthy worker: the worker-return figure", () => {
    assert.equal(retryAfterSecsFor("no_healthy_workers", 1, facts), 7);
  });

  test("a worker comes back at the soonest circuit cooldown, else by the next health-check round", () => {
    const open = (endsAt: number | undefined) => ({ breaker: { cooldownEndsAt: endsAt } });
    assert.equal(secsUntilWorkerBack([open(undefined), open(undefined)], 1000, 10), 10);
    assert.equal(secsUntilWorkerBack([open(5_500), open(31_000)], 1000, 10), 5);
    assert.equal(secsUntilWorkerBack([open(500)], 1000, 10), 1);
    assert.equal(secsUntilWorkerBack([open(100_000)], 1000, 10), 10);
  });
});

describe("bad settings name their key", () => {
  test("requests_per_minute must be a number above 0", () => {
    const policy = (value: string) => `tenant_policies:\n  "auth:a": {requests_per_minute: ${value}}\n`;
    assert.equal(parseSchedulerYaml(policy("90")).tenantPolicies.get("auth:a")?.requests_per_minute, 90);
    for (const bad of ["0", "-3", "fast"]) {
      assert.throws(
        () => parseSchedulerYaml(policy(bad)),
        (err: Error) => /tenant_policies\.auth:a\.requests_per_minute/.test(err.message),
        bad,
      );
    }
  });

  test("rate_limit_headers: on by default; off from the environment or the file; anything else is named", () => {
    const none = { commandLine: {}, env: {}, file: {}, filePath: undefined };
    assert.equal(resolveOptionValues(none).rate_limit_headers, true);
    assert.equal(
      resolveOptionValues({ ...none, env: { SLUICE_RATE_LIMIT_HEADERS: "false" } }).rate_limit_headers,
      false,
    );
    assert.equal(
      resolveOptionValues({ ...none, file: { rate_limit_headers: false }, filePath: "g.yaml" })
        .rate_limit_headers,
      false,
    );
    assert.throws(
      () => resolveOptionValues({ ...none, env: { SLUICE_RATE_LIMIT_HEADERS: "maybe" } }),
      /SLUICE_RATE_LIMIT_HEADERS/,
    );
    assert.throws(
      () =>
        resolveOptionValues({
          ...none,
          file: { rate_limit_headers: "no" } as GatewayFile,
          filePath: "g.yaml",
        }),
      /g\.yaml: rate_limit_headers/,
    );
  });

  test("--no-rate-limit-headers turns them off on the command line, over the environment", () => {
    const w = ["--worker-urls", "http://127.0.0.1:1"];
    assert.equal(parseGatewayArgs(w, {}).rateLimitHeaders, true);
    assert.equal(parseGatewayArgs([...w, "--no-rate-limit-headers"], {}).rateLimitHeaders, false);
    assert.equal(
      parseGatewayArgs([...w, "--rate-limit-headers"], { SLUICE_RATE_LIMIT_HEADERS: "false" })
        .rateLimitHeaders,
      true,
    );
  });
});

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  BudgetBook,
  type BudgetHold,
  type BudgetRejection,
  periodStart,
  type Usage,
} from "@sluice/scheduler/core/budgets.js";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import type { Pricing, TenantPolicy } from "@sluice/scheduler/core/config.js";
import { pricingSchema } from "../../src/config/pricing.js";
import { parseSchedulerYaml } from "../../src/config/scheduler-file.js";

/** Saturday 31 January 2026, 23:59 UTC: one minute before both a day and a month boundary. */
const JAN31_2359 = Date.UTC(2026, 0, 31, 23, 59);
const FEB01 = Date.UTC(2026, 1, 1);
const MINUTE = 60_000;

const PRICING: Pricing = {
  "llama-70b": { input_per_mtok: 2, output_per_mtok: 10 },
  "llama-8b": { input_per_mtok: 0.5, output_per_mtok: 1 },
};

function setup(
  policies: Record<string, TenantPolicy>,
  options: { start?: number; pricing?: Pricing } = {},
): { clock: ManualClock; book: BudgetBook } {
  const clock = new ManualClock(options.start ?? JAN31_2359);
  const book = new BudgetBook({
    policies: new Map(Object.entries(policies)),
    clock,
    ...(options.pricing ? { pricing: options.pricing } : {}),
  });
  return { clock, book };
}

function use(inputTokens: number, outputTokens: number): Usage {
  return { inputTokens, outputTokens };
}

function admitted(result: BudgetHold | BudgetRejection): BudgetHold {
  if (!result.ok) assert.fail(`expected admission, got ${result.code}: ${result.message}`);
  return result;
}

function rejected(result: BudgetHold | BudgetRejection): BudgetRejection {
  if (result.ok) assert.fail("expected a rejection, the request was admitted");
  return result;
}

function near(actual: number | undefined, expected: number, what = "value"): void {
  assert.ok(actual !== undefined, `${what} is undefined`);
  assert.ok(Math.abs(actual - expected) < 1e-12, `${what}: expected ${expected}, got ${actual}`);
}

describe("periodStart", () => {
  test("day and month starts in UTC", () => {
    assert.equal(periodStart("day", JAN31_2359), Date.UTC(2026, 0, 31));
    assert.equal(periodStart("month", JAN31_2359), Date.UTC(2026, 0, 1));
    assert.equal(periodStart("day", FEB01), FEB01);
    assert.equal(periodStart("month", FEB01), FEB01);
    assert.equal(periodStart("month", Date.UTC(2028, 1, 29, 12)), Date.UTC(2028, 1, 1));
    assert.equal(periodStart("day", FEB01 - 1), Date.UTC(2026, 0, 31));
  });
});

describe("order of checks", () => {
  // Every tenant below fails the checks from its own position onwards; the first failing one must win.
  const failing: TenantPolicy = {
    access_windows: ["Mon-Fri 08:00-20:00 UTC"], // Saturday 23:59 is outside
    models: ["llama-8b"],
    budget_tokens: 100,
    tokens_per_minute: 100,
  };

  test("suspended beats window, model, term budget and bucket", () => {
    const { book } = setup({ t: { ...failing, active: false } });
    const r = rejected(book.check("t", "llama-70b", use(500, 500)));
    assert.equal(r.code, "tenant_inactive");
    assert.equal(r.message, "tenant t is suspended");
    assert.equal(r.retryAfterSecs, undefined);
    // A reason, not an HTTP answer: the gateway's error table maps the code to its status.
    assert.deepEqual(Object.keys(r).sort(), ["code", "message", "ok"]);
  });

  test("outside the windows beats model, term budget and bucket", () => {
    const { book } = setup({ t: failing });
    const r = rejected(book.check("t", "llama-70b", use(500, 500)));
    assert.equal(r.code, "tenant_inactive");
    assert.equal(r.message, "tenant t is outside its access windows (Mon-Fri 08:00-20:00 UTC)");
  });

  test("model beats term budget and bucket", () => {
    const { book } = setup({ t: { ...failing, access_windows: ["Sat 00:00-24:00 UTC"], budget_tokens: 0 } });
    const r = rejected(book.check("t", "llama-70b", use(500, 500)));
    assert.equal(r.code, "model_not_allowed");
    assert.equal(r.message, 'tenant t may not use model "llama-70b"');
  });

  test("term budget beats an empty bucket", () => {
    const { book } = setup({ t: { ...failing, access_windows: undefined } });
    admitted(book.check("t", "llama-8b", use(60, 40))); // uses the whole term budget and the whole bucket
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 0, budget_tokens: 0 });
    const r = rejected(book.check("t", "llama-8b", use(10, 0)));
    assert.equal(r.code, "tenant_budget_exhausted");
  });

  test("the bucket comes last", () => {
    const { book } = setup({ t: { ...failing, access_windows: undefined, budget_tokens: 1000 } });
    admitted(book.check("t", "llama-8b", use(60, 40)));
    const r = rejected(book.check("t", "llama-8b", use(10, 0)));
    assert.equal(r.code, "token_budget_exceeded");
    assert.equal(r.retryAfterSecs, 6); // 10 tokens at 100/60 per second
  });

  test("a rejection holds nothing", () => {
    const { book } = setup({ t: { budget_tokens: 1000, tokens_per_minute: 600, models: ["llama-8b"] } });
    rejected(book.check("t", "llama-70b", use(100, 100)));
    rejected(book.check("t", undefined, use(100, 100)));
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 600, budget_tokens: 1000 });
  });
});

describe("tenant_inactive", () => {
  test("active: false is a 403 until a reload reactivates the tenant", () => {
    const { book } = setup({ t: { active: false } });
    assert.equal(book.governs("t"), true);
    const r = rejected(book.check("t", "llama-8b", use(1, 1)));
    assert.equal(r.code, "tenant_inactive");
    book.setPolicies(new Map([["t", { active: true }]]), {});
    admitted(book.check("t", "llama-8b", use(1, 1)));
    assert.equal(book.governs("t"), false, "active: true alone enforces nothing");
  });

  test("outside every access window, inside any one of them", () => {
    const { clock, book } = setup({
      t: { access_windows: ["Mon-Fri 08:00-20:00 UTC", "Sun 10:00-12:00 UTC"] },
    });
    assert.equal(book.governs("t"), true);
    const r = rejected(book.check("t", undefined, use(1, 1)));
    assert.equal(r.code, "tenant_inactive");
    assert.equal(
      r.message,
      "tenant t is outside its access windows (Mon-Fri 08:00-20:00 UTC; Sun 10:00-12:00 UTC)",
    );
    clock.advanceTo(Date.UTC(2026, 1, 1, 9, 59)); // Sunday 09:59
    assert.equal(rejected(book.check("t", undefined, use(1, 1))).code, "tenant_inactive");
    clock.advanceTo(Date.UTC(2026, 1, 1, 10, 0)); // Sunday 10:00
    admitted(book.check("t", undefined, use(1, 1)));
    clock.advanceTo(Date.UTC(2026, 1, 1, 12, 0)); // Sunday 12:00
    assert.equal(rejected(book.check("t", undefined, use(1, 1))).code, "tenant_inactive");
    clock.advanceTo(Date.UTC(2026, 1, 2, 8, 0)); // Monday 08:00
    admitted(book.check("t", undefined, use(1, 1)));
    clock.advanceTo(Date.UTC(2026, 1, 2, 20, 0)); // Monday 20:00
    assert.equal(rejected(book.check("t", undefined, use(1, 1))).code, "tenant_inactive");
  });
});

describe("model allowlist", () => {
  test("absent allowlist admits every model, and requests without one", () => {
    const { book } = setup({ t: { budget_tokens: 1_000_000 } });
    admitted(book.check("t", "llama-70b", use(1, 1)));
    admitted(book.check("t", "anything-else", use(1, 1)));
    admitted(book.check("t", undefined, use(1, 1)));
    assert.deepEqual(book.remaining("t"), { budget_tokens: 1_000_000 - 6 });
  });

  test("an allowlist admits its models and rejects the rest with 403", () => {
    const { book } = setup({ t: { models: ["llama-8b", "llama-70b"] } });
    assert.equal(book.governs("t"), true);
    admitted(book.check("t", "llama-8b", use(1, 1)));
    admitted(book.check("t", "llama-70b", use(1, 1)));
    const r = rejected(book.check("t", "gpt-4o", use(1, 1)));
    assert.equal(r.code, "model_not_allowed");
    assert.equal(r.message, 'tenant t may not use model "gpt-4o"');
    assert.equal(
      rejected(book.check("t", "LLAMA-8B", use(1, 1))).code,
      "model_not_allowed",
      "names are exact",
    );
  });

  test("a request naming no model is rejected when there is an allowlist", () => {
    const { book } = setup({ t: { models: ["llama-8b"] } });
    const r = rejected(book.check("t", undefined, use(1, 1)));
    assert.equal(r.code, "model_not_allowed");
    assert.equal(r.message, "tenant t may not use model (none given)");
  });

  test("an empty allowlist admits nothing", () => {
    const { book } = setup({ t: { models: [] } });
    assert.equal(rejected(book.check("t", "llama-8b", use(1, 1))).code, "model_not_allowed");
  });
});

describe("term budgets", () => {
  test("budget_tokens: admitted until used up, then 403 tenant_budget_exhausted", () => {
    const { book } = setup({ t: { budget_tokens: 1000 } });
    assert.deepEqual(book.remaining("t"), { budget_tokens: 1000 });
    admitted(book.check("t", undefined, use(300, 100)));
    assert.deepEqual(book.remaining("t"), { budget_tokens: 600 });
    admitted(book.check("t", undefined, use(500, 100)));
    assert.deepEqual(book.remaining("t"), { budget_tokens: 0 });
    const r = rejected(book.check("t", undefined, use(1, 0)));
    assert.equal(r.code, "tenant_budget_exhausted");
    assert.equal(r.message, "tenant t has used its 1000 tokens budget for this month (UTC)");
    // Nothing frees up before the month ends: 23:59 on January 31st is a minute before it does.
    assert.equal(r.retryAfterSecs, 60);
  });

  test("the check is 'used up', so the last admitted request may overshoot", () => {
    const { book } = setup({ t: { budget_tokens: 1000 } });
    admitted(book.check("t", undefined, use(900, 0)));
    admitted(book.check("t", undefined, use(400, 0))); // 100 left: not used up yet
    assert.deepEqual(book.remaining("t"), { budget_tokens: 0 });
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_budget_exhausted");
  });

  test("budget_tokens: 0 admits nothing", () => {
    const { book } = setup({ t: { budget_tokens: 0 } });
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_budget_exhausted");
  });

  test("budget_cost_usd is priced per model from input_per_mtok / output_per_mtok", () => {
    const { book } = setup({ t: { budget_cost_usd: 0.01 } }, { pricing: PRICING });
    assert.equal(book.governs("t"), true);
    near(book.costUsd("llama-70b", use(1000, 500)), 0.007, "cost");
    near(book.costUsd("llama-8b", use(1_000_000, 1_000_000)), 1.5, "cost");
    assert.equal(book.costUsd("unpriced", use(1_000_000, 1_000_000)), 0);
    assert.equal(book.costUsd(undefined, use(1_000_000, 1_000_000)), 0);

    admitted(book.check("t", "llama-70b", use(1000, 500))); // $0.007
    near(book.remaining("t").budget_cost_usd, 0.003, "remaining after $0.007");
    admitted(book.check("t", "llama-8b", use(2000, 1000))); // $0.002
    near(book.remaining("t").budget_cost_usd, 0.001, "remaining after $0.009");
    admitted(book.check("t", "unpriced", use(1_000_000, 0))); // $0: unpriced models cost nothing
    near(book.remaining("t").budget_cost_usd, 0.001, "remaining after an unpriced model");
    admitted(book.check("t", "llama-70b", use(1000, 0))); // $0.002: overshoots to $0.011
    assert.equal(book.remaining("t").budget_cost_usd, 0);
    const r = rejected(book.check("t", "llama-8b", use(1, 0)));
    assert.equal(r.code, "tenant_budget_exhausted");
    assert.equal(r.message, "tenant t has used its 0.01 USD budget for this month (UTC)");
  });

  test("either term budget used up is enough", () => {
    const { book } = setup({ t: { budget_tokens: 1000, budget_cost_usd: 100 } }, { pricing: PRICING });
    admitted(book.check("t", "llama-70b", use(1000, 0)));
    const r = rejected(book.check("t", "llama-70b", use(1, 0)));
    assert.match(r.message, /1000 tokens budget/);
    near(book.remaining("t").budget_cost_usd, 100 - 0.002, "usd");
  });
});

describe("settle and refund", () => {
  test("settle corrects the term usage and the bucket by actual - estimate, upwards", () => {
    const { book } = setup({ t: { tokens_per_minute: 6000, budget_tokens: 100_000 } });
    const hold = admitted(book.check("t", undefined, use(1000, 1000)));
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 4000, budget_tokens: 98_000 });
    book.settle(hold, use(1500, 1500));
    assert.equal(hold.settled, true);
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 3000, budget_tokens: 97_000 });
  });

  test("settle corrects downwards", () => {
    const { book } = setup({ t: { tokens_per_minute: 6000, budget_tokens: 100_000 } });
    const hold = admitted(book.check("t", undefined, use(1000, 1000)));
    book.settle(hold, use(200, 300));
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 5500, budget_tokens: 99_500 });
  });

  test("settle corrects the USD usage with the hold's model", () => {
    const { book } = setup({ t: { budget_cost_usd: 1 } }, { pricing: PRICING });
    const up = admitted(book.check("t", "llama-70b", use(1000, 1000))); // $0.012
    near(book.remaining("t").budget_cost_usd, 0.988, "after the estimate");
    book.settle(up, use(1000, 11_000)); // +10000 output tokens: +$0.1
    near(book.remaining("t").budget_cost_usd, 0.888, "after settling upwards");
    const down = admitted(book.check("t", "llama-70b", use(10_000, 10_000))); // $0.12
    near(book.remaining("t").budget_cost_usd, 0.768, "after the second estimate");
    book.settle(down, use(0, 0)); // nothing was used after all
    near(book.remaining("t").budget_cost_usd, 0.888, "after settling downwards");
  });

  test("settle without usage keeps the estimate", () => {
    const { book } = setup({ t: { tokens_per_minute: 6000, budget_tokens: 100_000 } });
    const hold = admitted(book.check("t", undefined, use(1000, 1000)));
    book.settle(hold, undefined);
    assert.equal(hold.settled, true);
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 4000, budget_tokens: 98_000 });
  });

  test("refund gives the whole hold back", () => {
    const { book } = setup(
      { t: { tokens_per_minute: 6000, budget_tokens: 100_000, budget_cost_usd: 1 } },
      {
        pricing: PRICING,
      },
    );
    const hold = admitted(book.check("t", "llama-70b", use(1000, 1000)));
    near(book.remaining("t").budget_cost_usd, 0.988, "usd held");
    book.refund(hold);
    assert.equal(hold.settled, true);
    assert.deepEqual(book.remaining("t"), {
      tokens_per_minute: 6000,
      budget_tokens: 100_000,
      budget_cost_usd: 1,
    });
  });

  test("settle and refund are idempotent and exclusive", () => {
    const { book } = setup({ t: { tokens_per_minute: 6000, budget_tokens: 100_000 } });
    const a = admitted(book.check("t", undefined, use(1000, 1000)));
    book.settle(a, use(500, 500));
    book.settle(a, use(500, 500));
    book.settle(a, use(3000, 3000));
    book.refund(a);
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 5000, budget_tokens: 99_000 });

    const b = admitted(book.check("t", undefined, use(1000, 1000)));
    book.refund(b);
    book.refund(b);
    book.settle(b, use(2000, 2000));
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 5000, budget_tokens: 99_000 });
  });

  test("a refund never fills the bucket past its capacity", () => {
    const { clock, book } = setup({ t: { tokens_per_minute: 600 } });
    const hold = admitted(book.check("t", undefined, use(300, 0)));
    clock.advance(30_000); // refilled by 300: full again
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 600 });
    book.refund(hold);
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 600 });
  });
});

describe("per-minute token bucket", () => {
  test("429 token_budget_exceeded with Retry-After until the bucket holds the estimate", () => {
    const { clock, book } = setup({ t: { tokens_per_minute: 600 } }); // 10 tokens a second
    assert.equal(book.governs("t"), true);
    admitted(book.check("t", undefined, use(500, 100)));
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 0 });
    const r = rejected(book.check("t", undefined, use(80, 20)));
    assert.equal(r.code, "token_budget_exceeded");
    assert.equal(r.message, "tenant t is over its 600 tokens per minute");
    assert.equal(r.retryAfterSecs, 10);
    assert.equal(rejected(book.check("t", undefined, use(25, 0))).retryAfterSecs, 3); // 2.5 s rounds up

    clock.advance(4000); // +40
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 40 });
    assert.equal(rejected(book.check("t", undefined, use(80, 20))).retryAfterSecs, 6);
    assert.equal(rejected(book.check("t", undefined, use(41, 0))).retryAfterSecs, 1, "at least one second");
    clock.advance(5900); // 99 tokens
    assert.equal(rejected(book.check("t", undefined, use(80, 20))).retryAfterSecs, 1);
    clock.advance(100); // exactly 100
    admitted(book.check("t", undefined, use(80, 20)));
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 0 });
  });

  test("Retry-After is exact at rates that are not a whole number of tokens a second", () => {
    const { clock, book } = setup({ t: { tokens_per_minute: 11 }, u: { tokens_per_minute: 42 } });
    admitted(book.check("t", undefined, use(11, 0)));
    assert.equal(rejected(book.check("t", undefined, use(11, 0))).retryAfterSecs, 60);
    admitted(book.check("u", undefined, use(42, 0)));
    assert.equal(rejected(book.check("u", undefined, use(21, 0))).retryAfterSecs, 30);
    clock.advance(60_000);
    admitted(book.check("t", undefined, use(11, 0)));
    admitted(book.check("u", undefined, use(42, 0)));
  });

  test("refill is linear and stops at the capacity", () => {
    const { clock, book } = setup({ t: { tokens_per_minute: 1200 } }); // 20 tokens a second
    admitted(book.check("t", undefined, use(1200, 0)));
    clock.advance(15_000);
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 300 });
    clock.advance(30_000);
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 900 });
    clock.advance(10 * MINUTE);
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 1200 });
    admitted(book.check("t", undefined, use(1200, 0)));
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).retryAfterSecs, 1);
  });

  test("a request larger than the whole bucket passes only when the bucket is full", () => {
    const { clock, book } = setup({ t: { tokens_per_minute: 600 } });
    admitted(book.check("t", undefined, use(100, 0)));
    clock.advance(9_900); // 599 in the bucket
    const notFull = rejected(book.check("t", undefined, use(800, 200)));
    assert.equal(notFull.retryAfterSecs, 1);
    clock.advance(100); // full
    admitted(book.check("t", undefined, use(800, 200))); // the bucket goes 400 into debt
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 0 });
    assert.equal(rejected(book.check("t", undefined, use(10, 0))).retryAfterSecs, 41);
    clock.advance(MINUTE); // -400 + 600 = 200
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 200 });
    assert.equal(rejected(book.check("t", undefined, use(1000, 0))).retryAfterSecs, 40);
    clock.advance(39_900);
    assert.equal(rejected(book.check("t", undefined, use(1000, 0))).retryAfterSecs, 1);
    clock.advance(100);
    admitted(book.check("t", undefined, use(1000, 0)));
  });

  test("buckets are per tenant", () => {
    const { book } = setup({ a: { tokens_per_minute: 600 }, b: { tokens_per_minute: 600 } });
    admitted(book.check("a", undefined, use(600, 0)));
    assert.equal(rejected(book.check("a", undefined, use(1, 0))).code, "token_budget_exceeded");
    admitted(book.check("b", undefined, use(600, 0)));
  });
});

describe("period rollover at the UTC boundary", () => {
  test("a day budget used up at 23:59 is available again at 00:00", () => {
    const { clock, book } = setup({ t: { budget_tokens: 1000, budget_period: "day" } });
    admitted(book.check("t", undefined, use(600, 400)));
    const r = rejected(book.check("t", undefined, use(1, 0)));
    assert.equal(r.message, "tenant t has used its 1000 tokens budget for this day (UTC)");
    clock.advance(MINUTE - 1); // 23:59:59.999
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_budget_exhausted");
    assert.deepEqual(book.remaining("t"), { budget_tokens: 0 });
    clock.advance(1); // Feb 1, 00:00:00.000
    assert.deepEqual(book.remaining("t"), { budget_tokens: 1000 });
    const hold = admitted(book.check("t", undefined, use(1, 0)));
    assert.equal(hold.periodStart, FEB01);
  });

  test("a day budget resets on every day, not only at the month boundary", () => {
    const { clock, book } = setup(
      { t: { budget_tokens: 1000, budget_period: "day" } },
      { start: Date.UTC(2026, 0, 15, 23, 59) },
    );
    admitted(book.check("t", undefined, use(1000, 0)));
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_budget_exhausted");
    clock.advance(MINUTE);
    admitted(book.check("t", undefined, use(1000, 0)));
  });

  test("a month budget used up on Jan 31 23:59 is available again on Feb 1 00:00", () => {
    const { clock, book } = setup({ t: { budget_tokens: 1000, budget_period: "month" } });
    admitted(book.check("t", undefined, use(1000, 0)));
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_budget_exhausted");
    clock.advance(MINUTE - 1);
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_budget_exhausted");
    clock.advance(1);
    const hold = admitted(book.check("t", undefined, use(1, 0)));
    assert.equal(hold.periodStart, FEB01);
    assert.deepEqual(book.remaining("t"), { budget_tokens: 999 });
  });

  test("the period defaults to month: a midnight inside the month changes nothing", () => {
    const { clock, book } = setup({ t: { budget_tokens: 1000 } }, { start: Date.UTC(2026, 0, 15, 23, 59) });
    const hold = admitted(book.check("t", undefined, use(1000, 0)));
    assert.equal(hold.periodStart, Date.UTC(2026, 0, 1));
    clock.advance(MINUTE);
    const r = rejected(book.check("t", undefined, use(1, 0)));
    assert.equal(r.message, "tenant t has used its 1000 tokens budget for this month (UTC)");
    clock.advanceTo(FEB01);
    admitted(book.check("t", undefined, use(1, 0)));
  });

  test("a USD budget rolls over too", () => {
    const { clock, book } = setup(
      { t: { budget_cost_usd: 0.002, budget_period: "day" } },
      { pricing: PRICING },
    );
    admitted(book.check("t", "llama-70b", use(1000, 0)));
    assert.equal(rejected(book.check("t", "llama-70b", use(1, 0))).code, "tenant_budget_exhausted");
    clock.advance(MINUTE);
    assert.deepEqual(book.remaining("t"), { budget_cost_usd: 0.002 });
    admitted(book.check("t", "llama-70b", use(1, 0)));
  });

  test("a hold taken in the previous period and settled after the rollover does not charge the new one", () => {
    const { clock, book } = setup({ t: { budget_tokens: 1000, budget_period: "day" } });
    const late = admitted(book.check("t", undefined, use(500, 300)));
    const lost = admitted(book.check("t", undefined, use(100, 0)));
    assert.equal(late.periodStart, Date.UTC(2026, 0, 31));
    clock.advance(MINUTE);
    const fresh = admitted(book.check("t", undefined, use(200, 100)));
    assert.equal(fresh.periodStart, FEB01);
    assert.deepEqual(book.remaining("t"), { budget_tokens: 700 });
    book.settle(late, use(900, 900)); // +1000 over the estimate, all of it yesterday's
    assert.deepEqual(book.remaining("t"), { budget_tokens: 700 });
    book.refund(lost); // yesterday's refund frees nothing today
    assert.deepEqual(book.remaining("t"), { budget_tokens: 700 });
    book.settle(fresh, use(200, 200)); // today's own hold still corrects today
    assert.deepEqual(book.remaining("t"), { budget_tokens: 600 });
  });

  test("the bucket does not roll over with the period", () => {
    const { clock, book } = setup({
      t: { tokens_per_minute: 600, budget_tokens: 1000, budget_period: "day" },
    });
    clock.advance(45_000); // 23:59:45
    admitted(book.check("t", undefined, use(600, 0)));
    clock.advance(30_000); // 00:00:15, +300 in the bucket
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 300, budget_tokens: 1000 });
    assert.equal(rejected(book.check("t", undefined, use(400, 0))).retryAfterSecs, 10);
  });
});

describe("remaining", () => {
  test("reports only the budgets the tenant has", () => {
    const { book } = setup(
      {
        all: { tokens_per_minute: 6000, budget_tokens: 50_000, budget_cost_usd: 5 },
        tokens: { budget_tokens: 10 },
        models: { models: ["llama-8b"] },
      },
      { pricing: PRICING },
    );
    assert.deepEqual(book.remaining("all"), {
      tokens_per_minute: 6000,
      budget_tokens: 50_000,
      budget_cost_usd: 5,
    });
    admitted(book.check("all", "llama-8b", use(2000, 1000))); // $0.002
    const all = book.remaining("all");
    assert.equal(all.tokens_per_minute, 3000);
    assert.equal(all.budget_tokens, 47_000);
    near(all.budget_cost_usd, 4.998, "usd");
    assert.deepEqual(book.remaining("tokens"), { budget_tokens: 10 });
    assert.deepEqual(book.remaining("models"), {});
    assert.deepEqual(book.remaining("nobody"), {});
    assert.deepEqual(book.tenants().sort(), ["all", "models", "tokens"]);
  });
});

describe("reload (setPolicies)", () => {
  test("keeps the usage of the current period under new limits", () => {
    const { book } = setup({ t: { budget_tokens: 1000, tokens_per_minute: 600 } });
    admitted(book.check("t", undefined, use(600, 0)));
    book.setPolicies(new Map([["t", { budget_tokens: 800, tokens_per_minute: 1200 }]]), {});
    assert.deepEqual(book.remaining("t"), { budget_tokens: 200, tokens_per_minute: 0 });
    const r = rejected(book.check("t", undefined, use(100, 0)));
    assert.equal(r.code, "token_budget_exceeded");
    assert.equal(r.retryAfterSecs, 5, "the new rate of 20 tokens a second refills the old debt");
    book.setPolicies(new Map([["t", { budget_tokens: 600 }]]), {});
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_budget_exhausted");
  });

  test("new prices apply to later holds", () => {
    const { book } = setup({ t: { budget_cost_usd: 1 } }, { pricing: PRICING });
    admitted(book.check("t", "llama-70b", use(100_000, 0))); // $0.2
    book.setPolicies(new Map([["t", { budget_cost_usd: 1 }]]), {
      "llama-70b": { input_per_mtok: 4, output_per_mtok: 10 },
    });
    near(book.remaining("t").budget_cost_usd, 0.8, "usage kept");
    admitted(book.check("t", "llama-70b", use(100_000, 0))); // $0.4
    near(book.remaining("t").budget_cost_usd, 0.4, "new price");
  });

  test("a tokens_per_minute added by a reload starts with a full bucket", () => {
    const { clock, book } = setup({ t: { budget_tokens: 100_000 } });
    admitted(book.check("t", undefined, use(1000, 0)));
    clock.advance(1000);
    book.setPolicies(new Map([["t", { budget_tokens: 100_000, tokens_per_minute: 600 }]]), {});
    assert.deepEqual(book.remaining("t"), { budget_tokens: 99_000, tokens_per_minute: 600 });
    admitted(book.check("t", undefined, use(600, 0)));
    assert.equal(rejected(book.check("t", undefined, use(10, 0))).retryAfterSecs, 1);
  });

  test("a lower tokens_per_minute caps the bucket at once", () => {
    const { book } = setup({ t: { tokens_per_minute: 6000 } });
    admitted(book.check("t", undefined, use(1, 0)));
    book.setPolicies(new Map([["t", { tokens_per_minute: 600 }]]), {});
    assert.deepEqual(book.remaining("t"), { tokens_per_minute: 600 });
    admitted(book.check("t", undefined, use(600, 0)));
    assert.equal(rejected(book.check("t", undefined, use(60, 0))).retryAfterSecs, 6);
  });

  test("removing the policy removes every limit", () => {
    const { book } = setup({ t: { active: false, budget_tokens: 0 } });
    assert.equal(rejected(book.check("t", undefined, use(1, 0))).code, "tenant_inactive");
    book.setPolicies(new Map(), {});
    assert.equal(book.governs("t"), false);
    admitted(book.check("t", undefined, use(1, 0)));
    assert.deepEqual(book.remaining("t"), {});
  });
});

describe("tenants without a policy", () => {
  test("are never rejected and hold nothing", () => {
    const { clock, book } = setup({
      limited: { tokens_per_minute: 1, budget_tokens: 0, models: [], active: false },
    });
    assert.equal(book.governs("free"), false);
    for (let i = 0; i < 100; i++) {
      const hold = admitted(
        book.check("free", i % 2 === 0 ? undefined : "gpt-4o", use(1_000_000, 1_000_000)),
      );
      assert.equal(hold.periodStart, 0);
      if (i % 3 === 0) book.settle(hold, use(5_000_000, 0));
      else if (i % 3 === 1) book.refund(hold);
      clock.advance(1);
    }
    assert.deepEqual(book.remaining("free"), {});
    assert.deepEqual(book.tenants(), ["limited"]);
  });

  test("a book with no policies at all admits everything", () => {
    const book = new BudgetBook({ clock: new ManualClock(JAN31_2359) });
    admitted(book.check("auth:acme", "llama-70b", use(1e9, 1e9)));
    assert.deepEqual(book.tenants(), []);
  });
});

describe("policies from the config file", () => {
  test("a YAML tenant policy and a validated pricing table drive the book", () => {
    const cfg = parseSchedulerYaml(
      [
        "tenant_policies:",
        '  "auth:acme":',
        "    tokens_per_minute: 600",
        "    budget_tokens: 1000",
        "    budget_period: day",
        '    models: ["llama-70b"]',
        '    access_windows: ["Sat-Sun 00:00-24:00 UTC"]',
        '  "auth:off":',
        "    active: false",
      ].join("\n"),
    );
    const pricing = pricingSchema.parse({ "llama-70b": { input_per_mtok: 2, output_per_mtok: 10 } });
    const clock = new ManualClock(JAN31_2359);
    const book = new BudgetBook({ policies: cfg.tenantPolicies, pricing, clock });
    assert.equal(rejected(book.check("auth:off", "llama-70b", use(1, 0))).code, "tenant_inactive");
    assert.equal(rejected(book.check("auth:acme", "llama-8b", use(1, 0))).code, "model_not_allowed");
    admitted(book.check("auth:acme", "llama-70b", use(600, 0)));
    assert.equal(rejected(book.check("auth:acme", "llama-70b", use(60, 0))).retryAfterSecs, 6);
    clock.advanceTo(Date.UTC(2026, 1, 2)); // Monday 00:00: outside the weekend window
    assert.equal(rejected(book.check("auth:acme", "llama-70b", use(1, 0))).code, "tenant_inactive");
  });

  test("pricingSchema names the bad key", () => {
    const bad = pricingSchema.safeParse({ "llama-70b": { input_per_mtok: -1, output_per_mtok: 10 } });
    assert.equal(bad.success, false);
    assert.deepEqual(bad.error?.issues[0]?.path, ["llama-70b", "input_per_mtok"]);
    assert.equal(bad.error?.issues[0]?.message, "must be >= 0");
    const extra = pricingSchema.safeParse({
      m: { input_per_mtok: 1, output_per_mtok: 1, cached_per_mtok: 1 },
    });
    assert.equal(extra.success, false);
  });
});

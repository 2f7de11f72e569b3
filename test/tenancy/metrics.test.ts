/**
 * The tenant accounting metrics on /metrics: sluice_tenant_tokens_total{tenant,direction} (settled from
 * the worker's usage), sluice_budget_rejections_total{tenant,reason} and
 * sluice_budget_remaining{tenant,budget}. A ManualClock keeps the per-minute bucket from refilling, so
 * every value is exact.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { assertError, assertOk, metric, schedulerDoc, startFleet } from "../helpers/harness.js";

const PRICING = { "mock-llm": { input_per_mtok: 2000, output_per_mtok: 10000 } };

describe("tenant metrics", () => {
  test("tokens by direction, rejections by reason and remaining budgets, with the right values", async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 2, 10, 12));
    const stack = await startFleet(t, {
      schedulerYaml: schedulerDoc({
        tenant_policies: {
          "auth:acme": {
            models: ["mock-llm"],
            tokens_per_minute: 1000,
            budget_tokens: 5000,
            budget_cost_usd: 2,
          },
          "auth:off": { active: false },
          "auth:broke": { budget_tokens: 0 },
        },
      }),
      tenants: ["acme", "off", "broke", "free"],
      gateway: { pricing: PRICING, clock },
    });

    // acme: JSON, hidden-usage stream and client-usage stream; each held at 3 + 200, settled at 3 + 10.
    const over = { max_completion_tokens: 200, max_tokens: 10 };
    assertOk(await stack.chatAs("acme", over));
    assertOk(await stack.chatAs("acme", { ...over, stream: true }));
    assertOk(await stack.chatAs("acme", { ...over, stream: true, stream_options: { include_usage: true } }));
    // Rejections: a model off the list, then a request the bucket (1000 - 39 = 961) cannot cover.
    assertError(await stack.chatAs("acme", { model: "gpt-x" }), 403, "model_not_allowed");
    const tooBig = await stack.chatAs("acme", { max_tokens: 997 });
    assertError(tooBig, 429, "token_budget_exceeded");
    assert.equal(tooBig.headers["retry-after"], "3"); // 39 tokens short at 1000/min = 2.34 s
    assertError(await stack.chatAs("off"), 403, "tenant_inactive");
    assertError(await stack.chatAs("off"), 403, "tenant_inactive");
    assertError(await stack.chatAs("broke"), 403, "tenant_budget_exhausted");
    // A tenant without a policy is counted too.
    assertOk(await stack.chatAs("free", { max_tokens: 5 }));

    const m = await stack.scrape();
    const tokens = (tenant: string, direction: string) =>
      metric(m, "sluice_tenant_tokens_total", { tenant, direction });
    assert.equal(tokens("auth:acme", "input"), 9);
    assert.equal(tokens("auth:acme", "output"), 30);
    assert.equal(tokens("auth:free", "input"), 3);
    assert.equal(tokens("auth:free", "output"), 5);
    assert.equal(tokens("auth:off", "input"), undefined, "rejected requests use no tokens");

    const rejections = (tenant: string, reason: string) =>
      metric(m, "sluice_budget_rejections_total", { tenant, reason });
    assert.equal(rejections("auth:acme", "model_not_allowed"), 1);
    assert.equal(rejections("auth:acme", "token_budget_exceeded"), 1);
    assert.equal(rejections("auth:off", "tenant_inactive"), 2);
    assert.equal(rejections("auth:broke", "tenant_budget_exhausted"), 1);
    const total = (m.samples.get("sluice_budget_rejections_total") ?? []).reduce(
      (sum, s) => sum + s.value,
      0,
    );
    assert.equal(total, 5);

    const remaining = (tenant: string, budget: string) =>
      metric(m, "sluice_budget_remaining", { tenant, budget });
    assert.equal(remaining("auth:acme", "tokens_per_minute"), 1000 - 39);
    assert.equal(remaining("auth:acme", "budget_tokens"), 5000 - 39);
    const usd = remaining("auth:acme", "budget_cost_usd")!;
    assert.ok(Math.abs(usd - (2 - (3 * (3 * 2000 + 10 * 10000)) / 1e6)) < 1e-9, `USD left: ${usd}`);
    assert.equal(remaining("auth:broke", "budget_tokens"), 0);
    // Only the budgets a tenant has are exported.
    assert.deepEqual(
      (m.samples.get("sluice_budget_remaining") ?? [])
        .map((s) => `${s.labels.tenant}/${s.labels.budget}`)
        .sort(),
      [
        "auth:acme/budget_cost_usd",
        "auth:acme/budget_tokens",
        "auth:acme/tokens_per_minute",
        "auth:broke/budget_tokens",
      ],
    );

    // The gauge follows the bucket as it refills: one minute later it is full again.
    clock.advance(60_000);
    const later = await stack.scrape();
    assert.equal(
      metric(later, "sluice_budget_remaining", { tenant: "auth:acme", budget: "tokens_per_minute" }),
      1000,
    );
    assert.equal(
      metric(later, "sluice_budget_remaining", { tenant: "auth:acme", budget: "budget_tokens" }),
      5000 - 39,
    );
  });
});

/**
 * Term budgets roll over at the UTC boundary of their period. A ManualClock (whose time doubles as
 * epoch ms) drives the gateway: a day budget used up at 23:59 UTC passes again at 00:00 UTC, a month
 * budget only on the 1st; a request admitted before midnight and settled after it counts in the old day.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { assertError, assertOk, schedulerDoc, startFleet, waitFor } from "../helpers/harness.js";

const JAN_31_2359 = Date.UTC(2026, 0, 31, 23, 59);
const FEB_1 = Date.UTC(2026, 1, 1);
const FEB_1_2359 = Date.UTC(2026, 1, 1, 23, 59);
const FEB_2 = Date.UTC(2026, 1, 2);
/** 3 prompt tokens + 97: exactly the 100-token budgets below. */
const HUNDRED = { max_tokens: 97 };

describe("budget periods roll over at the UTC boundary", () => {
  test("day and month budgets: used up at 23:59 UTC, open again at 00:00 UTC of the next period", async (t) => {
    const clock = new ManualClock(JAN_31_2359);
    const stack = await startFleet(t, {
      schedulerYaml: schedulerDoc({
        tenant_policies: {
          "auth:daily": { budget_tokens: 100, budget_period: "day" },
          "auth:monthly": { budget_tokens: 100, budget_period: "month" },
          "auth:default-period": { budget_tokens: 100 },
        },
      }),
      tenants: ["daily", "monthly", "default-period"],
      gateway: { clock },
    });
    const remaining = (tenant: string) => stack.gateway.budgets.remaining(`auth:${tenant}`).budget_tokens;

    for (const tenant of ["daily", "monthly", "default-period"]) {
      assertOk(await stack.chatAs(tenant, HUNDRED));
      assertError(await stack.chatAs(tenant), 403, "tenant_budget_exhausted");
      assert.equal(remaining(tenant), 0);
    }
    const msg = assertError(await stack.chatAs("daily"), 403, "tenant_budget_exhausted");
    assert.match(msg, /this day \(UTC\)/);
    assert.match(assertError(await stack.chatAs("default-period"), 403, "tenant_budget_exhausted"), /month/);

    // One millisecond before midnight UTC: still the old day.
    clock.advanceTo(FEB_1 - 1);
    for (const tenant of ["daily", "monthly", "default-period"]) {
      assertError(await stack.chatAs(tenant), 403, "tenant_budget_exhausted");
    }

    // Midnight UTC on Feb 1 starts a new day and a new month.
    clock.advanceTo(FEB_1);
    for (const tenant of ["daily", "monthly", "default-period"]) {
      assert.equal(remaining(tenant), 100, `${tenant} starts the new period with its whole budget`);
      assertOk(await stack.chatAs(tenant, HUNDRED));
      assertError(await stack.chatAs(tenant), 403, "tenant_budget_exhausted");
    }

    // Midnight on Feb 2 is a new day but the same month.
    clock.advanceTo(FEB_1_2359);
    assertError(await stack.chatAs("daily"), 403, "tenant_budget_exhausted");
    clock.advanceTo(FEB_2);
    assertOk(await stack.chatAs("daily", HUNDRED));
    assertError(await stack.chatAs("monthly"), 403, "tenant_budget_exhausted");
    assertError(await stack.chatAs("default-period"), 403, "tenant_budget_exhausted");
    assert.equal(remaining("monthly"), 0);
  });

  test("a request admitted at 23:59:59 and settled after midnight counts in the old day only", async (t) => {
    const clock = new ManualClock(FEB_1 - 1000);
    const stack = await startFleet(t, {
      schedulerYaml: schedulerDoc({
        tenant_policies: { "auth:daily": { budget_tokens: 1000, budget_period: "day" } },
      }),
      tenants: ["daily"],
      gateway: { clock },
    });
    const remaining = () => stack.gateway.budgets.remaining("auth:daily").budget_tokens;

    // Held at the estimate (3 + 500), reported as 3 + 10 after midnight.
    const held = stack.holdAs(
      "daily",
      { max_completion_tokens: 500, max_tokens: 10 },
      { "x-mock-ttft-ms": "200" },
    );
    await waitFor(() => stack.workers[0]!.stats().running === 1, "the request runs at the worker");
    assert.equal(remaining(), 1000 - 503);
    clock.advanceTo(FEB_1);
    assert.equal(remaining(), 1000, "the new day starts clean");
    assertOk(await held.result);
    assert.equal(remaining(), 1000, "the late settlement did not touch the new day");
    assertOk(await stack.chatAs("daily", HUNDRED));
    assert.equal(remaining(), 900);
  });
});

/**
 * The admin API on its own listener: bearer-token auth (401 invalid_admin_token), unreachable through
 * the gateway port, live capacity pinning (reservations re-derived, queued work admitted at once),
 * status per class and tenant, and reload (a good file applies; a bad one is refused with 400
 * invalid_config naming the key and the running policy stays, also through gateway.reload()).
 */
import assert from "node:assert/strict";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { stringify as stringifyYaml } from "yaml";
import { reloadGatewayFile } from "../../src/cli/flags.js";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import {
  assertError,
  assertOk,
  type Doc,
  type Fleet,
  keyOf,
  schedulerDoc,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const TOKEN = "admin-token-0123456789";

/** interactive reserves a quarter of capacity (ceil), so its reservation follows every capacity change. */
const CLASSES = { interactive: { reserved_per_slot: 0.25 } };

async function adminStack(t: TestContext, policies: Record<string, Doc> = {}) {
  return startFleet(t, {
    workers: [{ maxRunningRequests: 8 }],
    schedulerYaml: schedulerDoc({ classes: CLASSES, tenant_policies: policies }),
    tenants: ["acme", "beta"],
    adminToken: TOKEN,
  });
}

function json(text: string): Record<string, unknown> {
  return JSON.parse(text) as Record<string, unknown>;
}

function assertCapacity(stack: Fleet, capacity: number, pinned: number | null): void {
  assert.equal(stack.gateway.capacity.capacity, capacity);
  assert.equal(stack.gateway.capacity.pinned ?? null, pinned);
  assert.equal(stack.snapshot().capacity, capacity);
}

describe("admin API", () => {
  test("every route refuses a missing or wrong token with 401 invalid_admin_token", async (t) => {
    const stack = await adminStack(t);
    const routes: Array<[string, string, unknown]> = [
      ["GET", "/api/v1/status", undefined],
      ["PUT", "/api/v1/capacity", { max_in_flight: 1 }],
      ["DELETE", "/api/v1/capacity", undefined],
      ["POST", "/api/v1/reload", undefined],
      ["GET", "/no/such/route", undefined],
    ];
    // No header, an empty one, no token, wrong tokens, the right token without or in another scheme.
    const refused = [
      null,
      "",
      "Bearer",
      "Bearer wrong-token",
      `Bearer ${TOKEN}x`,
      `Bearer ${TOKEN.slice(0, -1)}`,
    ];
    refused.push(TOKEN, `Basic ${TOKEN}`, `Token ${TOKEN}`);
    for (const [method, path, body] of routes) {
      for (const authorization of refused) {
        const reply = await stack.admin(method, path, body, authorization);
        assertError(reply, 401, "invalid_admin_token", "authentication_error");
      }
    }
    // Nothing was changed by the refused calls.
    assertCapacity(stack, 8, null);
    // The scheme name is case-insensitive; an unknown route with the right token is 404.
    assert.equal((await stack.admin("GET", "/api/v1/status", undefined, `bearer ${TOKEN}`)).status, 200);
    assertError(await stack.admin("GET", "/no/such/route"), 404, "not_found");
  });

  test("the admin API is not on the gateway port: PUT /api/v1/capacity there goes to the worker (404)", async (t) => {
    const stack = await adminStack(t);
    const auth = { authorization: `Bearer ${TOKEN}` };
    const put = await stack.send("/api/v1/capacity", {
      method: "PUT",
      body: { max_in_flight: 1 },
      headers: auth,
    });
    assert.equal(put.status, 404);
    // It is the worker's answer, proxied like any other request: admission headers, no gateway error code.
    assert.equal(put.headers["x-sluice-admission"], "fast");
    assert.equal(put.headers["x-smg-error-code"], undefined);
    assert.match(put.text, /no route for PUT \/api\/v1\/capacity/);
    const status = await stack.send("/api/v1/status", { headers: auth });
    assert.equal(status.status, 404);
    assert.match(status.text, /no route for GET/);
    assertCapacity(stack, 8, null);
  });

  test("PUT pins capacity live, re-derives reservations and admits queued work at once; DELETE unpins", async (t) => {
    const stack = await adminStack(t, { "auth:acme": { budget_tokens: 10_000 } });
    const auth = (reply: { status: number; text: string }) => {
      assert.equal(reply.status, 200, reply.text);
      return json(reply.text);
    };
    assertCapacity(stack, 8, null);
    assert.equal(stack.snapshot().classes.interactive.reserved, 2);

    assert.deepEqual(auth(await stack.admin("PUT", "/api/v1/capacity", { max_in_flight: 1 })), {
      capacity: 1,
      pinned: 1,
    });
    assertCapacity(stack, 1, 1);
    assert.equal(stack.snapshot().classes.interactive.reserved, 1);

    // Four slow interactive requests at capacity 1: one runs, three queue.
    const slow = { "x-smg-priority": "interactive", "x-mock-ttft-ms": "400" };
    const held = [0, 1, 2, 3].map(() => stack.holdAs("acme", { max_tokens: 2 }, slow));
    await waitFor(() => stack.snapshot().classes.interactive.queued === 3, "three queued behind one");
    let status = await stack.status();
    assert.equal(status.capacity, 1);
    assert.equal(status.pinned_capacity, 1);
    assert.equal(status.discovered_capacity, 8);
    assert.equal(status.inflight, 1);
    assert.equal(status.queued, 3);
    assert.equal(status.classes?.interactive.inflight, 1);
    assert.equal(status.classes?.interactive.queued, 3);
    assert.deepEqual(status.tenants["auth:acme"], {
      inflight: 1,
      queued: 3,
      budget_remaining: { budget_tokens: 10_000 - 4 * 5 },
    });

    // Pin 4: the three waiters are admitted by the time the PUT answers.
    const pinnedAt = performance.now();
    assert.deepEqual(auth(await stack.admin("PUT", "/api/v1/capacity", { max_in_flight: 4 })), {
      capacity: 4,
      pinned: 4,
    });
    const snap = stack.snapshot();
    assert.equal(snap.capacity, 4);
    assert.equal(snap.classes.interactive.inflight, 4);
    assert.equal(snap.classes.interactive.queued, 0);
    assert.equal(snap.classes.interactive.reserved, 1);
    await waitFor(() => stack.workers[0]!.stats().running === 4, "all four run at the worker");
    status = await stack.status();
    assert.equal(status.tenants["auth:acme"]?.inflight, 4);
    assert.equal(status.tenants["auth:acme"]?.queued, 0);

    const replies = await Promise.all(held.map((h) => h.result));
    const admissions = replies.map((r) => {
      assertOk(r);
      return r.headers["x-sluice-admission"];
    });
    assert.deepEqual(admissions.sort(), ["fast", "queued", "queued", "queued"]);
    // They finished one service time (~400 ms) after the pin, not three more.
    const lastEnd = Math.max(...replies.map((r) => (r instanceof Error ? 0 : r.endedAt)));
    assert.ok(lastEnd - pinnedAt < 1000, `the queued requests ran at once (${lastEnd - pinnedAt} ms)`);

    // Bigger than the worker reports is allowed (an operator's decision); reservations follow.
    auth(await stack.admin("PUT", "/api/v1/capacity", { max_in_flight: 16 }));
    assert.equal(stack.snapshot().classes.interactive.reserved, 4);

    // DELETE: back to the discovered capacity.
    const unpinned = auth(await stack.admin("DELETE", "/api/v1/capacity"));
    assert.equal(unpinned.capacity, 8);
    assert.equal(unpinned.pinned ?? null, null);
    assertCapacity(stack, 8, null);
    assert.equal(stack.snapshot().classes.interactive.reserved, 2);
    status = await stack.status();
    assert.equal(status.pinned_capacity, null);
    assert.equal(status.tenants["auth:acme"]?.inflight, 0);
    assert.deepEqual(status.tenants["auth:acme"]?.budget_remaining, { budget_tokens: 10_000 - 4 * 5 });
  });

  test("a bad capacity body is 400 and changes nothing", async (t) => {
    const stack = await adminStack(t);
    const bad: Array<[string | undefined, string]> = [
      ["not json", "invalid_json"],
      ["", "invalid_json"],
      [undefined, "invalid_json"],
      ["null", "invalid_capacity"],
      ["{}", "invalid_capacity"],
      ['{"max_in_flight": -1}', "invalid_capacity"],
      ['{"max_in_flight": 2.5}', "invalid_capacity"],
      ['{"max_in_flight": "4"}', "invalid_capacity"],
      ['{"max_in_flight": null}', "invalid_capacity"],
      ['{"capacity": 4}', "invalid_capacity"],
    ];
    for (const [body, code] of bad) {
      const reply = await stack.admin("PUT", "/api/v1/capacity", body);
      assertError(reply, 400, code, "invalid_request_error");
      assertCapacity(stack, 8, null);
    }
  });

  test("status lists each class and each tenant with work or a policy", async (t) => {
    const stack = await adminStack(t, {
      "auth:acme": { budget_tokens: 1000, tokens_per_minute: 600_000 },
      "auth:beta": { max_class: "bulk", budget_cost_usd: 5 },
    });
    const status = await stack.status();
    assert.equal(status.admission_mode, "scheduler");
    assert.deepEqual(Object.keys(status.classes ?? {}).sort(), ["bulk", "default", "interactive", "system"]);
    for (const cls of Object.values(status.classes ?? {})) {
      assert.deepEqual(Object.keys(cls).sort(), [
        "capacityPressure",
        "headroom",
        "inflight",
        "queueLimit",
        "queued",
        "reserved",
      ]);
    }
    assert.deepEqual(status.tenants["auth:acme"], {
      inflight: 0,
      queued: 0,
      budget_remaining: { budget_tokens: 1000, tokens_per_minute: 600_000 },
    });
    assert.deepEqual(status.tenants["auth:beta"], {
      inflight: 0,
      queued: 0,
      budget_remaining: { budget_cost_usd: 5 },
    });
    // An anonymous request in flight shows up while it runs, and leaves when done.
    const held = stack.holdAs(undefined, {}, { "x-mock-ttft-ms": "300" });
    await waitFor(() => stack.workers[0]!.stats().running === 1, "running");
    const during = await stack.status();
    assert.deepEqual(during.tenants.anonymous, { inflight: 1, queued: 0, budget_remaining: {} });
    assertOk(await held.result);
    assert.equal((await stack.status()).tenants.anonymous, undefined);
  });

  test("reload applies a changed YAML; a bad file is refused with 400 invalid_config and the old policy stays", async (t) => {
    const policies = {
      "auth:acme": { budget_tokens: 1000 },
      "auth:beta": { max_class: "bulk" },
    };
    const stack = await adminStack(t, policies);
    const beta = (extra: Record<string, string> = {}) =>
      stack.holdAs("beta", {}, { "x-smg-priority": "interactive", "x-mock-ttft-ms": "200", ...extra });
    const classOfBeta = async (): Promise<string> => {
      const h = beta();
      await waitFor(() => stack.snapshot().inflight === 1, "beta runs");
      const c = stack.snapshot().classes;
      const cls = (["system", "interactive", "default", "bulk"] as const).find((k) => c[k].inflight === 1)!;
      assertOk(await h.result);
      return cls;
    };
    assert.equal(await classOfBeta(), "bulk");
    assertOk(await stack.chatAs("acme", { max_tokens: 7 })); // 10 tokens
    assert.equal(stack.gateway.budgets.remaining("auth:acme").budget_tokens, 990);

    // A good file: acme's budget shrinks below what it used, beta may use interactive.
    await stack.writeYaml(
      schedulerDoc({
        classes: CLASSES,
        tenant_policies: { "auth:acme": { budget_tokens: 10 }, "auth:beta": { max_class: "interactive" } },
      }),
    );
    const ok = await stack.admin("POST", "/api/v1/reload");
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(json(ok.text), { tenantPolicies: 2 });
    assert.equal(await classOfBeta(), "interactive");
    // Usage so far in the period is kept: 10 used of 10.
    assert.equal(stack.gateway.budgets.remaining("auth:acme").budget_tokens, 0);
    assertError(await stack.chatAs("acme"), 403, "tenant_budget_exhausted");

    // Bad files: an unknown key, a bad value, broken YAML. Each is refused, naming what is wrong.
    const badFiles: Array<[string, RegExp]> = [
      [
        stringifyYaml(
          schedulerDoc({
            tenant_policies: { "auth:acme": { budget_tokenz: 5 }, "auth:beta": { max_class: "bulk" } },
          }),
        ),
        /tenant_policies\.auth:acme\.budget_tokenz: unknown key/,
      ],
      [
        stringifyYaml(
          schedulerDoc({
            tenant_policies: { "auth:acme": { budget_tokens: 5000 }, "auth:beta": { weight: -1 } },
          }),
        ),
        /tenant_policies\.auth:beta\.weight: must be > 0/,
      ],
      [
        stringifyYaml(
          schedulerDoc({ tenant_policies: { "auth:acme": { access_windows: ["Someday 25:00-26:00"] } } }),
        ),
        /tenant_policies\.auth:acme\.access_windows\.0/,
      ],
      ["tenant_policies: {auth:acme: [unclosed\n", /invalid YAML/],
    ];
    for (const [text, pattern] of badFiles) {
      await stack.writeYaml(text);
      const reply = await stack.admin("POST", "/api/v1/reload");
      const msg = assertError(reply, 400, "invalid_config", "invalid_request_error");
      assert.match(msg, pattern);
      // Without SIGHUP: gateway.reload() itself rejects with the same ConfigError.
      await assert.rejects(stack.gateway.reload(), (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, pattern);
        return true;
      });
      // The running policy stays: acme is still out of budget, beta still reaches interactive.
      assert.equal(stack.gateway.budgets.remaining("auth:acme").budget_tokens, 0);
      assertError(await stack.chatAs("acme"), 403, "tenant_budget_exhausted");
    }
    // A missing file is a bad file too (not a 500).
    await rm(stack.yamlPath!);
    const msg = assertError(await stack.admin("POST", "/api/v1/reload"), 400, "invalid_config");
    assert.match(msg, /priority_scheduler_config: cannot read .*priority\.yaml: ENOENT/);
    await assert.rejects(stack.gateway.reload(), ConfigError);
    assert.equal(stack.gateway.budgets.remaining("auth:acme").budget_tokens, 0);
    assert.equal(await classOfBeta(), "interactive");
    assert.ok(
      stack.logs.every((l) => l.msg !== "policy reloaded" || l.tenantPolicies === 2),
      "no partial reload was logged",
    );

    // A good file again applies again.
    await stack.writeYaml(schedulerDoc({ classes: CLASSES, tenant_policies: policies }));
    assert.deepEqual(await stack.gateway.reload(), { tenantPolicies: 2 });
    assert.equal(await classOfBeta(), "bulk");
    assert.equal(stack.gateway.budgets.remaining("auth:acme").budget_tokens, 990);
    assertOk(await stack.chatAs("acme"));
  });

  test("reload with the gateway file: api_keys and pricing apply together with the YAML, or nothing does", async (t) => {
    // Only the reloadable parts are read from this file on reload.
    const gatewayFile = (keys: string[], inputPerMtok: number) =>
      stringifyYaml({
        api_keys: keys.map((tenant) => ({ sha256: sha256Hex(keyOf(tenant)), tenant })),
        pricing: { "mock-llm": { input_per_mtok: inputPerMtok, output_per_mtok: 0 } },
      });
    const path = { value: "" };
    const stack = await startFleet(t, {
      workers: [{ maxRunningRequests: 8 }],
      schedulerYaml: schedulerDoc({ tenant_policies: { "auth:acme": { budget_cost_usd: 1 } } }),
      tenants: ["acme"],
      adminToken: TOKEN,
      gateway: {
        requireAuth: true,
        pricing: { "mock-llm": { input_per_mtok: 1000, output_per_mtok: 0 } },
        reloadGatewayConfig: () => reloadGatewayFile(path.value),
      },
    });
    path.value = join(stack.dir, "gateway.yaml");
    const remaining = () => stack.gateway.budgets.remaining("auth:acme").budget_cost_usd!;

    assertOk(await stack.chatAs("acme", { max_tokens: 1 })); // 3 input tokens at 1000/M
    assert.ok(Math.abs(remaining() - (1 - 0.003)) < 1e-12);
    assertError(await stack.chatAs("beta"), 401, "invalid_api_key");

    // A new key for beta and a 10x price: both apply.
    await writeFile(path.value, gatewayFile(["acme", "beta"], 10_000));
    const ok = await stack.admin("POST", "/api/v1/reload");
    assert.equal(ok.status, 200, ok.text);
    assertOk(await stack.chatAs("beta"));
    assertOk(await stack.chatAs("acme", { max_tokens: 1 }));
    assert.ok(Math.abs(remaining() - (1 - 0.003 - 0.03)) < 1e-12);

    // A valid YAML change with a bad gateway file: refused, and the YAML change is not applied either.
    await stack.writeYaml(schedulerDoc({ tenant_policies: { "auth:acme": { active: false } } }));
    await writeFile(
      path.value,
      gatewayFile(["acme"], 10_000).replace("input_per_mtok: 10000", "input_per_mtok: -1"),
    );
    const msg = assertError(await stack.admin("POST", "/api/v1/reload"), 400, "invalid_config");
    assert.match(msg, /pricing\.mock-llm\.input_per_mtok/);
    assertOk(await stack.chatAs("acme", { max_tokens: 1 })); // not suspended
    assertOk(await stack.chatAs("beta")); // the key added by the last good reload still works
  });
});

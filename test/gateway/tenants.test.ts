/**
 * Tenants through the gateway: the tenant comes from the API key (never from a header a client can
 * set), its max_class clamps the requested class, and --require-auth answers 401.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, test } from "node:test";
import {
  assertError,
  assertOk,
  type Fleet,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const ACME_KEY = "sk-test-acme-0123456789";
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");
const ACME_AUTH = { authorization: `Bearer ${ACME_KEY}` };
const API_KEYS = [{ sha256: sha256(ACME_KEY), tenant: "acme" }];

async function holdBulkSlot(fleet: Fleet) {
  const held = fleet.hold({}, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "5000" });
  await waitFor(() => fleet.snapshot().classes.bulk.inflight === 1, "bulk holds the only slot");
  await waitFor(() => fleet.workers[0]!.stats().running === 1, "bulk reached the worker");
  return held;
}

describe("gateway tenants: clamp", () => {
  test("a tenant with max_class default asking for system is admitted as default and cannot preempt", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 1 }],
      schedulerYaml: smallSchedulerYaml({ tenant_policies: { "auth:acme": { max_class: "default" } } }),
      gateway: { apiKeys: API_KEYS },
    });
    const bulk = await holdBulkSlot(fleet);

    const acme = fleet.hold({}, { ...ACME_AUTH, "x-smg-priority": "system" });
    await waitFor(() => fleet.snapshot().classes.default.queued === 1, "acme queued as default");
    assert.equal(fleet.snapshot().classes.system.queued, 0);
    assert.equal(fleet.snapshot().classes.bulk.inflight, 1, "the bulk request was not preempted");

    await bulk.cancel();
    const reply = await acme.result;
    assertOk(reply);
    assert.equal(reply.headers["x-sluice-admission"], "queued");

    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_clamp_total", {
        tenant: "auth:acme",
        requested_class: "system",
        effective_class: "default",
      }),
      1,
    );
    assert.equal(
      metric(s, "smg_scheduler_preemption_total", { victim_class: "bulk", by_class: "system" }),
      0,
    );
    assert.equal(metric(s, "smg_scheduler_admit_total", { class: "default", outcome: "admitted" }), 1);
    assert.equal(metric(s, "smg_scheduler_admit_total", { class: "system", outcome: "admitted" }), 0);
  });

  test("control: the same request without the key (anonymous, ceiling system) preempts", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 1 }],
      schedulerYaml: smallSchedulerYaml({ tenant_policies: { "auth:acme": { max_class: "default" } } }),
      gateway: { apiKeys: API_KEYS },
    });
    const bulk = await holdBulkSlot(fleet);
    const reply = await fleet.chat({}, { "x-smg-priority": "system" });
    assertOk(reply);
    assertError(await bulk.result, 503, "scheduler_preempted");
  });

  test("a client cannot choose its tenant by header: x-tenant-id without trusted_tenant_header stays anonymous", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml({
        tenant_policies: {
          acme: { max_class: "system" },
          "auth:acme": { max_class: "system" },
          "header:acme": { max_class: "system" },
        },
      }),
      priorityScheduler: { defaultMaxClass: "default" },
      gateway: { apiKeys: API_KEYS },
    });
    const forged = {
      "x-tenant-id": "acme",
      "x-smg-tenant": "auth:acme",
      "x-api-key": ACME_KEY,
      authorization: "Bearer not-a-known-key",
    };
    assertOk(await fleet.chat({}, { ...forged, "x-smg-priority": "system" }));
    assertOk(await fleet.chat({}, { ...forged, "x-smg-priority": "no-such-class" }));
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_clamp_total", {
        tenant: "anonymous",
        requested_class: "system",
        effective_class: "default",
      }),
      1,
    );
    assert.equal(metric(s, "smg_scheduler_unknown_priority_value_total", { tenant: "anonymous" }), 1);
    for (const sample of s.samples.get("smg_scheduler_clamp_total") ?? []) {
      assert.equal(sample.labels.tenant, "anonymous");
    }
    assert.equal(metric(s, "smg_scheduler_admit_total", { class: "system", outcome: "admitted" }), 0);
  });

  test("with trusted_tenant_header configured, that header names the tenant (header:<value>)", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml({ tenant_policies: { "header:acme": { max_class: "interactive" } } }),
      priorityScheduler: { defaultMaxClass: "default" },
      gateway: { trustedTenantHeader: "X-Tenant-Id" },
    });
    assertOk(await fleet.chat({}, { "x-tenant-id": "acme", "x-smg-priority": "system" }));
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_clamp_total", {
        tenant: "header:acme",
        requested_class: "system",
        effective_class: "interactive",
      }),
      1,
    );
  });
});

describe("gateway tenants: --require-auth", () => {
  test("401 missing_api_key without a key, 401 invalid_api_key with a wrong one, 200 with the right one", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      gateway: { apiKeys: API_KEYS, requireAuth: true },
    });
    const missing = await fleet.chat();
    assertError(missing, 401, "missing_api_key");
    assert.equal(JSON.parse(missing.text).error.type, "authentication_error");

    assertError(await fleet.chat({}, { authorization: "Bearer wrong" }), 401, "invalid_api_key");
    assertError(await fleet.chat({}, { authorization: `Basic ${ACME_KEY}` }), 401, "invalid_api_key");
    assertError(await fleet.chat({}, { "x-tenant-id": "acme" }), 401, "missing_api_key");

    assertOk(await fleet.chat({}, ACME_AUTH));
    assertOk(await fleet.chat({}, { authorization: `bearer   ${ACME_KEY}  ` }));
    assert.equal(fleet.workers[0]!.stats().totalRequests, 2, "refused requests never reached the worker");
    assert.equal(fleet.snapshot().inflight, 0);
    // The gateway's own endpoints stay open.
    assert.equal((await fleet.send("/health")).status, 200);
  });

  test("with no api_keys configured, a presented bearer key is invalid_api_key, not missing_api_key", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      gateway: { requireAuth: true },
    });
    assertError(await fleet.chat(), 401, "missing_api_key");
    assertError(await fleet.chat({}, ACME_AUTH), 401, "invalid_api_key");
  });

  test("behind an auth proxy: require-auth accepts the trusted tenant header", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      gateway: { requireAuth: true, trustedTenantHeader: "x-tenant-id" },
    });
    assertOk(await fleet.chat({}, { "x-tenant-id": "acme" }));
    assertOk(await fleet.chat({}, { "x-tenant-id": "acme", authorization: "Bearer upstream-token" }));
    assertError(await fleet.chat(), 401, "missing_api_key");
    assertError(await fleet.chat({}, { "x-tenant-id": "   " }), 401, "missing_api_key");
  });
});

/**
 * One outcome record per request, emitted exactly once, rejected ones included; and X-Request-Id
 * on every answer.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { stringify as stringifyYaml } from "yaml";
import { sha256Hex } from "../../src/gateway/tenancy/tenants.js";
import { chatBody, smallSchedulerYaml, startFleet, waitFor } from "../helpers/harness.js";
import { rawExchange } from "../security/raw.js";

describe("outcome records", () => {
  test("an admitted request: fast, ok, its classes, usage, TTFT, worker", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      priorityScheduler: { defaultMaxClass: "interactive" },
    });
    const reply = await fleet.chat(
      { max_tokens: 3 },
      { "x-smg-priority": "system", "x-request-id": "abc-123" },
    );
    assert.equal(reply.status, 200);
    assert.equal(reply.headers["x-request-id"], "abc-123");
    await waitFor(() => fleet.outcomes.length === 1, "one record");
    const o = fleet.outcomes[0]!;
    assert.equal(o.requestId, "abc-123");
    assert.equal(o.tenantId, "anonymous");
    assert.equal(o.model, "mock-llm");
    assert.equal(o.requestedClass, "system");
    assert.equal(o.effectiveClass, "interactive");
    assert.equal(o.admission, "fast");
    assert.equal(o.outcome, "ok");
    assert.equal(o.status, 200);
    assert.equal(o.errorCode, undefined);
    assert.equal(o.outputTokens, 3);
    assert.ok((o.inputTokens ?? 0) > 0);
    assert.ok(o.ttftMs !== undefined && o.ttftMs >= 0 && o.ttftMs <= o.durationMs);
    assert.equal(o.worker, fleet.workers[0]!.url);
    assert.ok(o.estimatedTokens >= 3);
    assert.ok(Math.abs(o.tsMs - Date.now()) < 60_000);
  });

  test("rejections leave exactly one record each, with the code and no worker", async (t) => {
    const key = "k-1";
    const yaml = stringifyYaml({ tenant_policies: { "auth:acme": { models: ["other-model"] } } });
    const fleet = await startFleet(t, {
      schedulerYaml: yaml,
      gateway: { apiKeys: [{ sha256: sha256Hex(key), tenant: "acme" }], requireAuth: true },
    });
    assert.equal((await fleet.chat()).status, 401);
    assert.equal((await fleet.chat({}, { authorization: `Bearer ${key}` })).status, 403);
    const r = await rawExchange(
      fleet.gateway.port,
      "POST * HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n",
    );
    assert.equal(r.responses[0]?.status, 400);
    assert.ok(r.responses[0]?.headers["x-request-id"], "gateway errors carry X-Request-Id");
    await waitFor(() => fleet.outcomes.length === 3, "three records");
    const [a, b, c] = fleet.outcomes;
    assert.deepEqual(
      [a!.errorCode, b!.errorCode, c!.errorCode],
      ["missing_api_key", "model_not_allowed", "invalid_request_target"],
    );
    for (const o of fleet.outcomes) {
      assert.equal(o.admission, "rejected");
      assert.equal(o.outcome, "rejected");
      assert.equal(o.worker, undefined);
      assert.equal(o.costUsd, undefined);
    }
    assert.equal(b!.tenantId, "auth:acme");
  });

  test("a client that leaves while queued: cancelled, 499, one record", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 1 }],
      schedulerYaml: smallSchedulerYaml(),
    });
    const running = fleet.hold({}, { "x-mock-ttft-ms": "3000" });
    await waitFor(() => fleet.snapshot().inflight === 1, "slot taken");
    const queued = fleet.hold();
    await waitFor(() => fleet.snapshot().queued === 1, "queued");
    await queued.cancel();
    await waitFor(() => fleet.outcomes.length === 1, "the cancelled request's record");
    const o = fleet.outcomes[0]!;
    assert.equal(o.outcome, "cancelled");
    assert.equal(o.status, 499);
    assert.equal(o.errorCode, "scheduler_client_cancelled");
    assert.equal(o.admission, "rejected");
    await running.cancel();
    await waitFor(() => fleet.outcomes.length === 2, "the running request's record");
    assert.equal(fleet.outcomes[1]!.outcome, "cancelled");
    assert.equal(fleet.outcomes[1]!.admission, "fast");
  });

  test("a worker error is an `error` outcome with the worker's status; a bad client id is replaced", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const reply = await fleet.chat(chatBody(), {
      "x-mock-fail": "500",
      "x-request-id": "bad id with spaces",
    });
    assert.equal(reply.status, 500);
    const id = reply.headers["x-request-id"] as string;
    assert.match(id, /^[0-9a-f]{12}-[0-9a-z]+$/);
    await waitFor(() => fleet.outcomes.length === 1, "one record");
    assert.equal(fleet.outcomes[0]!.outcome, "error");
    assert.equal(fleet.outcomes[0]!.status, 500);
    assert.equal(fleet.outcomes[0]!.requestId, id);
    const own = await rawExchange(
      fleet.gateway.port,
      "GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
    );
    assert.ok(own.responses[0]?.headers["x-request-id"]);
    const raw = await rawExchange(fleet.gateway.port, "GARBAGE\r\n\r\n");
    assert.ok(raw.responses[0]?.headers["x-request-id"], "even Node's own rejections");
  });
});

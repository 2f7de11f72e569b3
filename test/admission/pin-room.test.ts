/**
 * A fleet-wide pin above the workers' reports, in Redis mode (issue 35, finding 13): pinned
 * through replica A's admin API, it lifts the worker's room on every replica, so four concurrent
 * requests sent to replica B all reach a worker that reports 1.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { assertOk, smallSchedulerYaml, waitFor } from "../helpers/harness.js";
import { startRedisFleet } from "./fleet.js";
import { ADMIN_TOKEN, adminGet, chat, redisOrSkip } from "./services.js";

test("Redis mode: a pin above the workers' reports lifts their room on every replica", async (t) => {
  const url = await redisOrSkip(t);
  if (url === undefined) return;
  const {
    workers: [worker],
    replicas: [a, b],
  } = await startRedisFleet(t, {
    redisUrl: url,
    workers: [{ maxRunningRequests: 8, reportedCapacity: 1, ttftMs: 5, tokenDelayMs: 2, batchSlowdown: 0 }],
    replicas: 2,
    schedulerYaml: smallSchedulerYaml(),
    defaultMaxClass: "system",
    admin: true,
  });
  const pin = await fetch(`${a!.adminUrl}/api/v1/capacity`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ max_in_flight: 4 }),
  });
  assert.equal(pin.status, 200, await pin.text());
  await waitFor(async () => (await adminGet(b!, "/api/v1/status")).capacity === 4, "B sees the pin");
  const started = performance.now();
  const replies = Promise.all([0, 1, 2, 3].map(() => chat(b!, { "x-mock-ttft-ms": "800" })));
  await waitFor(() => worker!.stats().open === 4, "all four open at the worker", { timeoutMs: 2000 });
  for (const r of await replies) assertOk(r);
  assert.ok(performance.now() - started < 3000, "in one service time, not after a 5 s wait");
});

/**
 * Fair shares across replicas: the tenants' service accounting is shared (fair tags in Redis), so
 * two backlogged tenants whose requests arrive on different replicas are served in proportion to
 * their weights, as on one replica. Measured here: the heavier tenant's share of the first
 * admissions once both are backlogged, against its weight's share (3 / (3 + 1) = 75%).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { authFor, type Reply, smallSchedulerYaml, waitFor } from "../helpers/harness.js";
import { harnessKeys, startRedisFleet } from "./fleet.js";
import { chat, leasesInRedis, queuedInRedis, redisOrSkip } from "./services.js";

test("weighted fair shares hold across replicas (weights 3 : 1 -> 75% of admissions)", async (t) => {
  const url = await redisOrSkip(t);
  if (url === undefined) return;
  const { replicas, prefix, redis } = await startRedisFleet(t, {
    redisUrl: url,
    workers: [{ maxRunningRequests: 2, ttftMs: 10, tokenDelayMs: 1, batchSlowdown: 0 }],
    replicas: 3,
    schedulerYaml: smallSchedulerYaml({
      tenant_policies: { "auth:heavy": { weight: 3 }, "auth:light": { weight: 1 }, "auth:holder": {} },
    }),
    apiKeys: harnessKeys("heavy", "light", "holder"),
  });
  // Both slots held while the two tenants' backlogs build up, each spread over two replicas.
  const held = [0, 1].map(() => chat(replicas[0]!, { ...authFor("holder"), "x-mock-ttft-ms": "1500" }));
  await waitFor(async () => (await leasesInRedis(redis, prefix)) === 2, "both slots held");
  const order: string[] = [];
  const backlog = (tenant: string, replica: number) =>
    chat(replicas[replica]!, authFor(tenant)).then((reply) => {
      order.push(tenant);
      return reply;
    });
  const requests: Array<Promise<Reply | Error>> = [];
  for (let i = 0; i < 24; i++) {
    requests.push(backlog("heavy", 1 + (i % 2)));
    requests.push(backlog("light", i % 2 === 0 ? 0 : 2));
  }
  await waitFor(async () => (await queuedInRedis(redis, prefix)) === 48, "both backlogs queued");
  for (const r of await Promise.all([...held, ...requests])) {
    assert.ok(!(r instanceof Error) && r.status === 200, r instanceof Error ? r.message : r.text);
  }
  // While both are backlogged (the first 24 completions: the light tenant's 24 outlast them).
  const first = order.slice(0, 24);
  const heavy = first.filter((name) => name === "heavy").length;
  const share = heavy / first.length;
  t.diagnostic(
    `heavy tenant's share of the first 24 admissions: ${(share * 100).toFixed(1)}% (weight share 75%)`,
  );
  assert.ok(
    Math.abs(share - 0.75) <= 2 / 24,
    `share ${(share * 100).toFixed(1)}% within 2 admissions of 75%`,
  );
});

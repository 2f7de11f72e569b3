/**
 * Bounded starvation promotion across replicas: the promotion credit lives in Redis beside the
 * shared queues, so bulk waiters past their mark take at most `starvation_max_share` of the
 * admissions while interactive waiters queue, whichever replica each request came through; and a
 * promotion serves the class's fair-order head, not its oldest ticket.
 */
import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import {
  authFor,
  type Reply,
  type SchedulerYamlSpec,
  smallSchedulerYaml,
  waitFor,
} from "../helpers/harness.js";
import { harnessKeys, startRedisFleet } from "./fleet.js";
import { chat, leasesInRedis, queuedInRedis, redisOrSkip } from "./services.js";

/**
 * Two replicas over one Redis in front of a worker of one slot, held by a system request for
 * 1.5 s. Then two backlogs queue, the first wholly before the second (`first` is older), each
 * spread over both replicas; every answer must be 200. Returns the labels in answer order (one
 * slot: the order of admission).
 */
async function twoBacklogsOnOneSlot(
  t: TestContext,
  url: string,
  scheduler: SchedulerYamlSpec,
  apiKeys: string[],
  first: { label: string; headers: Record<string, string>; n: number },
  second: { label: string; headers: Record<string, string>; n: number },
): Promise<string[]> {
  const { replicas, prefix, redis } = await startRedisFleet(t, {
    redisUrl: url,
    workers: [{ maxRunningRequests: 1, ttftMs: 5, tokenDelayMs: 1, batchSlowdown: 0 }],
    replicas: 2,
    schedulerYaml: smallSchedulerYaml(scheduler),
    apiKeys: harnessKeys(...apiKeys),
    defaultMaxClass: "system",
  });
  const held = chat(replicas[0]!, { "x-smg-priority": "system", "x-mock-ttft-ms": "1500" });
  await waitFor(async () => (await leasesInRedis(redis, prefix)) === 1, "the one slot held");
  const order: string[] = [];
  const send = (label: string, headers: Record<string, string>, replica: number) =>
    chat(replicas[replica]!, headers).then((reply) => {
      order.push(label);
      return reply;
    });
  const requests: Array<Promise<Reply | Error>> = [];
  for (let i = 0; i < first.n; i++) requests.push(send(first.label, first.headers, i % 2));
  await waitFor(async () => (await queuedInRedis(redis, prefix)) === first.n, `${first.label} queued`);
  for (let i = 0; i < second.n; i++) requests.push(send(second.label, second.headers, (i + 1) % 2));
  const all = first.n + second.n;
  await waitFor(async () => (await queuedInRedis(redis, prefix)) === all, "both backlogs queued");
  for (const r of await Promise.all([held, ...requests])) {
    assert.ok(!(r instanceof Error) && r.status === 200, r instanceof Error ? r.message : r.text);
  }
  return order;
}

test("promoted bulk waiters take at most starvation_max_share of admissions while interactive waits", async (t) => {
  const url = await redisOrSkip(t);
  if (url === undefined) return;
  // Bulk queues first (the oldest waiters): unbounded promotion would serve all of it first.
  const order = await twoBacklogsOnOneSlot(
    t,
    url,
    {
      classes: {
        // Every bulk waiter is past its mark almost at once; a quarter of the admissions at most.
        bulk: { starvation_threshold_secs: 0.001, starvation_max_share: 0.25, queue_timeout_secs: 120 },
        interactive: { queue_timeout_secs: 120, can_preempt: false },
        system: { can_preempt: false },
      },
    },
    [],
    { label: "bulk", headers: { "x-smg-priority": "bulk" }, n: 16 },
    { label: "interactive", headers: { "x-smg-priority": "interactive" }, n: 16 },
  );
  // While interactive waited (its 16 served), bulk got its starting credit plus a quarter of the
  // admissions: at most 1 + 0.25 x 21 = 6 of the first 21, and it was never shut out.
  const untilLastInteractive = order.lastIndexOf("interactive") + 1;
  const bulkMeanwhile = order.slice(0, untilLastInteractive).filter((c) => c === "bulk").length;
  assert.ok(bulkMeanwhile >= 2 && bulkMeanwhile <= 1 + 0.25 * untilLastInteractive, order.join(","));
});

test("a promotion across replicas serves the class's fair-order head, not its oldest ticket", async (t) => {
  const url = await redisOrSkip(t);
  if (url === undefined) return;
  // The light tenant's tickets are all older: oldest-first promotion would serve all 12 first.
  const order = await twoBacklogsOnOneSlot(
    t,
    url,
    {
      // Every bulk ticket is past its mark at once: each slot is handed out by the starvation pass.
      classes: {
        bulk: { starvation_threshold_secs: 0.001, queue_timeout_secs: 120 },
        system: { can_preempt: false },
      },
      tenant_policies: { "auth:heavy": { weight: 3 }, "auth:light": { weight: 1 } },
    },
    ["heavy", "light"],
    { label: "light", headers: { ...authFor("light"), "x-smg-priority": "bulk" }, n: 12 },
    { label: "heavy", headers: { ...authFor("heavy"), "x-smg-priority": "bulk" }, n: 12 },
  );
  // Weights 3 : 1 in fair order: heavy takes most of the first twelve slots.
  const heavyFirst = order.slice(0, 12).filter((x) => x === "heavy").length;
  assert.ok(heavyFirst >= 7, order.join(","));
});

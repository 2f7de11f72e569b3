/**
 * Redis stopped and restarted under load (a private redis-server, killed with SIGKILL and started
 * again empty), with three replicas:
 * - fail mode local: every request is still served, on each replica's share (capacity / 3), so the
 *   fleet's in-flight stays within capacity; the replicas say so in /metrics, and rejoin without a
 *   restart when Redis is back (their running requests are counted again);
 * - fail mode closed: new requests get 503 scheduler_unavailable while Redis is away, and are served
 *   again once it is back.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  assertError,
  metric,
  parseScrape,
  type Reply,
  sendTo,
  smallSchedulerYaml,
  waitFor,
} from "../helpers/harness.js";
import { startRedisFleet } from "./fleet.js";
import { chat, leasesInRedis, privateRedis, type Replica, redisClient, sampleInflight } from "./services.js";

async function scrape(replica: Replica): Promise<ReturnType<typeof parseScrape>> {
  const reply = await sendTo(replica.url, "/metrics");
  return parseScrape(reply.text);
}

/** Clients sending one request after another to the replicas until stopped. */
function load(replicas: Replica[], clients: number): { stop(): Promise<Array<Reply | Error>> } {
  let running = true;
  const replies: Array<Reply | Error> = [];
  const loops = Array.from({ length: clients }, async (_, i) => {
    while (running) {
      replies.push(await chat(replicas[i % replicas.length]!, { "x-mock-ttft-ms": "15" }));
    }
  });
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
      return replies;
    },
  };
}

async function setup(t: import("node:test").TestContext, failMode: string) {
  const redis = await privateRedis(t);
  if (redis === undefined) return undefined;
  const {
    workers: ws,
    replicas,
    prefix,
  } = await startRedisFleet(t, {
    redisUrl: redis.url,
    workers: [3, 3].map((c) => ({ maxRunningRequests: c, ttftMs: 5, tokenDelayMs: 1, batchSlowdown: 0 })),
    replicas: 3,
    schedulerYaml: smallSchedulerYaml({
      classes: { system: { can_preempt: false }, interactive: { can_preempt: false } },
    }),
    stateFlags: ["--state-fail-mode", failMode, "--lease-ttl-secs", "2"],
  });
  return { redis, ws, replicas, prefix };
}

async function allSay(replicas: Replica[], name: string, value: number): Promise<void> {
  await waitFor(
    async () => {
      for (const r of replicas) if (metric(await scrape(r), name) !== value) return false;
      return true;
    },
    `every replica reports ${name} ${value}`,
    { timeoutMs: 10_000, intervalMs: 50 },
  );
}

describe("Redis stopped and restarted under load", () => {
  test("fail mode local: served on each replica's share meanwhile, rejoined without restart", async (t) => {
    const fleet = await setup(t, "local");
    if (fleet === undefined) return;
    const { redis, ws, replicas, prefix } = fleet;
    const sampler = sampleInflight(ws, 6);
    const t0 = performance.now();
    const traffic = load(replicas, 12);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const stoppedAt = performance.now() - t0;
    await redis.stop();
    await allSay(replicas, "sluice_state_local_fallback", 1);
    const localAt = performance.now() - t0;
    for (const r of replicas) assert.equal(metric(await scrape(r), "sluice_state_redis_up"), 0);
    await new Promise((resolve) => setTimeout(resolve, 600));
    const startAt = performance.now() - t0;
    await redis.start();
    await allSay(replicas, "sluice_state_redis_up", 1);
    const upAt = performance.now() - t0;
    for (const r of replicas) assert.equal(metric(await scrape(r), "sluice_state_local_fallback"), 0);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const replies = await traffic.stop();
    const max = sampler.stop();
    t.diagnostic(
      `stopped ${stoppedAt.toFixed(0)} ms, local ${localAt.toFixed(0)}, restarted ${startAt.toFixed(0)}, rejoined ${upAt.toFixed(0)}; ${replies.length} requests`,
    );

    const statuses = new Map<string, number>();
    for (const r of replies) {
      const key = r instanceof Error ? r.message : String(r.status);
      statuses.set(key, (statuses.get(key) ?? 0) + 1);
    }
    assert.deepEqual([...statuses.keys()], ["200"], `every request served: ${JSON.stringify([...statuses])}`);
    assert.ok(
      max <= 6,
      `at most the fleet's capacity (6) open at the workers, saw ${max} at ${sampler.over.map((o) => (o - t0).toFixed(0))} ms (stopped ${stoppedAt.toFixed(0)}, local ${localAt.toFixed(0)}, started ${startAt.toFixed(0)}, up ${upAt.toFixed(0)})`,
    );
    for (const r of replicas) {
      assert.ok(
        (metric(await scrape(r), "sluice_state_unavailable_total") ?? 0) >= 1,
        "the outage was counted",
      );
    }
    // Rejoined: all three registered in the restarted (empty) Redis, and nothing held afterwards.
    const client = redisClient(t, redis.url);
    const registered = await client.keys(`${prefix}*:replicas`);
    assert.equal(registered.length, 1);
    assert.equal(await client.zcard(registered[0]!), 3);
    await waitFor(async () => (await leasesInRedis(client, prefix)) === 0, "no lease left after the load");
    assert.ok(
      replicas.every((r) => r.out.stdout.includes("admitting on this replica's share")),
      "logged",
    );
  });

  test("fail mode closed: 503 scheduler_unavailable while Redis is away, served again when it is back", async (t) => {
    const fleet = await setup(t, "closed");
    if (fleet === undefined) return;
    const { redis, replicas } = fleet;
    const traffic = load(replicas, 6);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await redis.stop();
    await allSay(replicas, "sluice_state_redis_up", 0);
    for (const r of replicas) assertError(await chat(r), 503, "scheduler_unavailable");
    await redis.start();
    await allSay(replicas, "sluice_state_redis_up", 1);
    for (const r of replicas) {
      const reply = await chat(r);
      assert.ok(!(reply instanceof Error) && reply.status === 200, "served again");
    }
    const replies = await traffic.stop();
    const codes = new Set(
      replies.map((r) =>
        r instanceof Error ? r.message : `${r.status} ${r.headers["x-smg-error-code"] ?? ""}`,
      ),
    );
    // The only failures are the documented one.
    for (const code of codes) assert.ok(code === "200 " || code === "503 scheduler_unavailable", code);
    for (const r of replicas) {
      assert.ok((metric(await scrape(r), "sluice_state_closed_rejections_total") ?? 0) >= 1);
    }
  });
});

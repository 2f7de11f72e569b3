/**
 * Fair shares end to end, over real HTTP on loopback: a gateway with the priority scheduler in
 * front of a mock worker with 8 slots, three tenants (named by a trusted tenant header) with weights
 * 1:2:5 sending open-loop traffic at about 3x the capacity. Every request asks for 4x the tokens it
 * really produces (max_tokens = 4 x the x-mock-output-tokens the worker honours), so every
 * admission is charged an overestimate that only the usage in the answer corrects. Queue timeouts
 * are 5x the mean service time, as in issue 17 (5 s for ~1 s of service), scaled down so the test
 * takes about 15 s.
 *
 * Served tokens are what the worker reports in each answer's usage (prompt + completion). Asserted
 * (fairness only, no timing thresholds): token shares within 10% of the weights over the run, and
 * no tenant below half its fair share in any window of 10x the mean service time.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import { Agent } from "undici";
import { sendTo, smallSchedulerYaml, startFleet } from "../helpers/harness.js";

const TENANTS = [
  { name: "a", weight: 1 },
  { name: "b", weight: 2 },
  { name: "c", weight: 5 },
] as const;
const WEIGHT_SUM = TENANTS.reduce((s, t) => s + t.weight, 0);
const CAPACITY = 8;
/** Output tokens of a request: uniform in 20..60 (mean 40), 5 ms apart -> ~200 ms of service. */
const MIN_OUTPUT = 20;
const MAX_OUTPUT = 60;
const TOKEN_DELAY_MS = 5;
const MEAN_SERVICE_MS = 10 + ((MIN_OUTPUT + MAX_OUTPUT) / 2) * TOKEN_DELAY_MS;
const QUEUE_TIMEOUT_SECS = (5 * MEAN_SERVICE_MS) / 1000;
const OVERLOAD = 3;
const WARMUP_MS = 2_000;
const RUN_MS = 14_000;
const WINDOW_MS = 10 * MEAN_SERVICE_MS;

interface Served {
  tenant: string;
  at: number;
  tokens: number;
}

test("1:2:5 at 3x capacity with queue timeouts and 4x overestimates: shares follow weights over HTTP", async (t) => {
  const fleet = await startFleet(t, {
    workers: [{ maxRunningRequests: CAPACITY, ttftMs: 10, tokenDelayMs: TOKEN_DELAY_MS, batchSlowdown: 0 }],
    workerCapacity: [CAPACITY],
    schedulerYaml: smallSchedulerYaml({
      classes: {
        default: {
          queue_size: 100_000,
          queue_timeout_secs: QUEUE_TIMEOUT_SECS,
          starvation_threshold_secs: 3600,
        },
      },
      tenant_policies: Object.fromEntries(TENANTS.map((x) => [`header:${x.name}`, { weight: x.weight }])),
    }),
    gateway: { trustedTenantHeader: "x-tenant" },
  });
  assert.equal(fleet.snapshot().capacity, CAPACITY);
  // Its own client pool, large enough that every request waits in the gateway's queue (where the
  // scheduler and its timeouts apply), never in the client's (the harness's pool has 64 sockets).
  const agent = new Agent({ connections: 4096, keepAliveTimeout: 2000 });
  t.after(() => agent.destroy());

  const rand = prng(0x5eed);
  const served: Served[] = [];
  const statuses = new Map<number, number>();
  const inflight = new Set<Promise<void>>();
  const start = performance.now();
  // Each tenant alone offers the whole capacity (3x overall): one request per MEAN_SERVICE_MS / 8.
  const gapMs = (MEAN_SERVICE_MS / CAPACITY) * (TENANTS.length / OVERLOAD);

  const sendOne = (tenant: string) => {
    const output = MIN_OUTPUT + Math.floor(rand() * (MAX_OUTPUT - MIN_OUTPUT + 1));
    const p = sendTo(
      fleet.url,
      "/v1/chat/completions",
      {
        method: "POST",
        headers: { "x-tenant": tenant, "x-mock-output-tokens": String(output) },
        body: { model: "mock-llm", messages: [{ role: "user", content: "hi" }], max_tokens: 4 * output },
      },
      agent,
    )
      .then(
        (reply) => {
          statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1);
          if (reply.status !== 200) return;
          const usage = (
            JSON.parse(reply.text) as { usage: { prompt_tokens: number; completion_tokens: number } }
          ).usage;
          served.push({
            tenant,
            at: performance.now() - start,
            tokens: usage.prompt_tokens + usage.completion_tokens,
          });
        },
        () => {
          statuses.set(-1, (statuses.get(-1) ?? 0) + 1);
        },
      )
      .finally(() => inflight.delete(p));
    inflight.add(p);
  };

  // Open loop: arrivals on a fixed schedule (Poisson gaps), whatever the answers do. A timer that
  // fires late sends everything that was due, so the offered load holds on a loaded machine.
  const next = TENANTS.map(() => rand() * gapMs);
  while (performance.now() - start < RUN_MS) {
    const now = performance.now() - start;
    TENANTS.forEach((tenant, i) => {
      while (next[i]! <= now) {
        sendOne(tenant.name);
        next[i]! += -Math.log(1 - rand()) * gapMs;
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await Promise.all([...inflight]);

  // Shares over the run, after the warm-up (and before the tail where arrivals stop).
  const end = RUN_MS;
  const tally = new Map<string, number>(TENANTS.map((x) => [x.name, 0]));
  for (const s of served)
    if (s.at >= WARMUP_MS && s.at < end) tally.set(s.tenant, tally.get(s.tenant)! + s.tokens);
  const total = [...tally.values()].reduce((a, b) => a + b, 0);
  const shares = TENANTS.map((x) => (100 * tally.get(x.name)!) / total);
  t.diagnostic(
    `statuses ${JSON.stringify(Object.fromEntries(statuses))}; token shares ${shares.map((s) => s.toFixed(1)).join(" / ")} (target 12.5 / 25 / 62.5)`,
  );
  assert.ok((statuses.get(408) ?? 0) > 0, "the run must be overloaded enough for queue timeouts");
  for (const [i, x] of TENANTS.entries()) {
    const want = (100 * x.weight) / WEIGHT_SUM;
    assert.ok(Math.abs(shares[i]! - want) / want <= 0.1, `${x.name}: ${shares[i]!.toFixed(2)}% vs ${want}%`);
  }

  // No tenant below half its fair share in any window (tumbling windows over the measured span).
  let worstWindow = Number.POSITIVE_INFINITY;
  for (let from = WARMUP_MS; from + WINDOW_MS <= end; from += WINDOW_MS) {
    const w = new Map<string, number>(TENANTS.map((x) => [x.name, 0]));
    for (const s of served)
      if (s.at >= from && s.at < from + WINDOW_MS) w.set(s.tenant, w.get(s.tenant)! + s.tokens);
    const sum = [...w.values()].reduce((a, b) => a + b, 0);
    for (const x of TENANTS) {
      const ratio = w.get(x.name)! / sum / (x.weight / WEIGHT_SUM);
      worstWindow = Math.min(worstWindow, ratio);
      assert.ok(
        ratio >= 0.5,
        `${x.name} got ${(100 * ratio).toFixed(0)}% of its fair share in [${from}, ${from + WINDOW_MS}) ms`,
      );
    }
  }
  t.diagnostic(
    `worst window: ${(100 * worstWindow).toFixed(0)}% of a tenant's fair share (window ${WINDOW_MS} ms)`,
  );
});

/**
 * Weighted fair sharing through the gateway against a mock worker.
 *
 * 1. Three tenants with weights 1, 2 and 5 flood one class (bulk, no reservations, so only capacity
 *    binds), each keeping 12 requests outstanding in closed loops. Over a window after warm-up, the
 *    completed output tokens split 1:2:5 within 5 % of each tenant's ideal share.
 * 2. A small tenant's interactive requests keep a p99 queue wait (X-Sluice-Queue-Wait-Ms) far under
 *    the class timeout, with no 408, while a large tenant floods the same class deep enough that its
 *    own requests wait for seconds.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Fleet, quantile, type Reply, schedulerDoc, startFleet, waitFor } from "../helpers/harness.js";

interface Completion {
  tenant: string;
  at: number;
  status: number;
  outputTokens: number;
  waitMs: number | undefined;
}

/**
 * Runs `loops` closed loops for a tenant until `stop()` says so: each sends a request as soon as its
 * previous one answered. Every answer is recorded.
 */
function closedLoops(
  stack: Fleet,
  tenant: string,
  loops: number,
  body: Record<string, unknown>,
  headers: Record<string, string>,
  log: Completion[],
  stopped: () => boolean,
): Promise<void> {
  const one = async () => {
    while (!stopped()) {
      const reply: Reply = await stack.chatAs(tenant, body, headers);
      let outputTokens = 0;
      if (reply.status === 200) {
        outputTokens = (JSON.parse(reply.text) as { usage: { completion_tokens: number } }).usage
          .completion_tokens;
      }
      const wait = reply.headers["x-sluice-queue-wait-ms"];
      log.push({
        tenant,
        at: reply.endedAt,
        status: reply.status,
        outputTokens,
        waitMs: wait === undefined ? undefined : Number(wait),
      });
    }
  };
  return Promise.all(Array.from({ length: loops }, one)).then(() => undefined);
}

describe("weighted fair sharing through the gateway", () => {
  test("weights 1:2:5 flooding one class get output tokens 1:2:5 within 5 %", async (t) => {
    const weights: Record<string, number> = { light: 1, medium: 2, heavy: 5 };
    const tenants = Object.keys(weights);
    const stack = await startFleet(t, {
      workers: [{ maxRunningRequests: 4, ttftMs: 2, tokenDelayMs: 1, batchSlowdown: 0 }],
      schedulerYaml: schedulerDoc({
        classes: { bulk: { queue_size: 1000 } },
        tenant_policies: Object.fromEntries(tenants.map((n) => [`auth:${n}`, { weight: weights[n]! }])),
      }),
      tenants,
    });
    assert.equal(stack.snapshot().capacity, 4);

    const log: Completion[] = [];
    let stop = false;
    const running = tenants.map((n) =>
      closedLoops(stack, n, 12, { max_tokens: 8 }, { "x-smg-priority": "bulk" }, log, () => stop),
    );
    try {
      // Warm-up: every loop has sent, the queue is backlogged.
      await waitFor(() => log.length >= 150, "warm-up completions", { timeoutMs: 10_000, intervalMs: 20 });
      const start = performance.now();
      const firstIndex = log.length;
      const deadline = start + 12_000;
      await waitFor(() => log.length - firstIndex >= 2000 || performance.now() > deadline, "the window", {
        timeoutMs: 15_000,
        intervalMs: 20,
      });
      const end = performance.now();
      stop = true;
      await Promise.all(running);

      const window = log.filter((c) => c.at > start && c.at <= end);
      assert.ok(window.length >= 1500, `enough completions in the window: ${window.length}`);
      assert.deepEqual(
        log.filter((c) => c.status !== 200),
        [],
        "nothing was rejected",
      );
      const tokens: Record<string, number> = {};
      for (const n of tenants) tokens[n] = 0;
      for (const c of window) tokens[c.tenant]! += c.outputTokens;
      const total = Object.values(tokens).reduce((a, b) => a + b, 0);
      const weightSum = Object.values(weights).reduce((a, b) => a + b, 0);
      const ratios: Record<string, number> = {};
      for (const n of tenants) ratios[n] = tokens[n]! / total / (weights[n]! / weightSum);
      t.diagnostic(
        `fairness window ${(end - start).toFixed(0)} ms, ${window.length} completions, ${total} output tokens; ` +
          tenants
            .map(
              (n) =>
                `${n} (w${weights[n]}) ${tokens[n]} = ${((100 * tokens[n]!) / total).toFixed(2)} %, ratio ${ratios[n]!.toFixed(4)}`,
            )
            .join("; "),
      );
      for (const n of tenants) {
        assert.ok(
          ratios[n]! >= 0.95 && ratios[n]! <= 1.05,
          `${n}: share / ideal = ${ratios[n]!.toFixed(4)} (tokens ${JSON.stringify(tokens)})`,
        );
      }
      // Every tenant was backlogged throughout: the queue never ran dry after warm-up.
      const waits = window.filter((c) => c.waitMs !== undefined && c.waitMs > 0).length;
      assert.ok(waits / window.length > 0.95, `queued admissions: ${waits} of ${window.length}`);
    } finally {
      stop = true;
      await Promise.all(running);
    }
  });

  test("a small tenant's interactive p99 queue wait stays far under the 2 s timeout while a large one floods", async (t) => {
    const stack = await startFleet(t, {
      workers: [{ maxRunningRequests: 4, ttftMs: 2, tokenDelayMs: 1, batchSlowdown: 0 }],
      schedulerYaml: schedulerDoc({
        classes: { interactive: { queue_size: 5000, queue_timeout_secs: 2 } },
        tenant_policies: { "auth:small": { weight: 1 }, "auth:large": { weight: 5 } },
      }),
      tenants: ["small", "large"],
    });
    const interactive = { "x-smg-priority": "interactive" };
    const log: Completion[] = [];
    let stopLarge = false;
    let stopSmall = false;
    // The large tenant: 200 outstanding requests of ~35 ms each on 4 slots, i.e. a queue ~2 s deep.
    const large = closedLoops(
      stack,
      "large",
      200,
      { max_tokens: 4 },
      { ...interactive, "x-mock-ttft-ms": "30" },
      log,
      () => stopLarge,
    );
    let small: Promise<void> | undefined;
    try {
      await waitFor(() => stack.snapshot().classes.interactive.queued >= 100, "the flood is queued", {
        timeoutMs: 5000,
      });
      small = closedLoops(stack, "small", 2, { max_tokens: 4 }, interactive, log, () => stopSmall);
      await waitFor(() => log.filter((c) => c.tenant === "small").length >= 100, "small's requests", {
        timeoutMs: 15_000,
        intervalMs: 20,
      });
      stopSmall = true;
      await small;
      stopLarge = true;
      await large;

      const mine = log.filter((c) => c.tenant === "small");
      const theirs = log.filter((c) => c.tenant === "large");
      assert.deepEqual(
        mine.filter((c) => c.status !== 200).map((c) => c.status),
        [],
        "no 408 (or anything else) for the small tenant",
      );
      const smallWaits = mine.map((c) => c.waitMs!);
      const p99 = quantile(smallWaits, 0.99);
      const largeWaits = theirs.filter((c) => c.status === 200).map((c) => c.waitMs!);
      const largeP50 = quantile(largeWaits, 0.5);
      const timeouts = theirs.filter((c) => c.status === 408).length;
      t.diagnostic(
        `small: ${mine.length} requests, queue wait p50 ${quantile(smallWaits, 0.5)} ms, p99 ${p99} ms, max ` +
          `${Math.max(...smallWaits)} ms; large: ${theirs.length} answers, ${timeouts} x 408, admitted wait ` +
          `p50 ${largeP50} ms`,
      );
      assert.ok(p99 < 2000, `small tenant p99 queue wait ${p99} ms`);
      // The flood is real: the large tenant's own requests wait hundreds of ms at the median.
      assert.ok(largeP50 > 500, `large tenant median wait ${largeP50} ms`);
    } finally {
      stopSmall = true;
      stopLarge = true;
      await Promise.all([large, small]);
    }
  });
});

/**
 * A burst of mixed-priority traffic with preemptions, queue rejections and clients leaving at random
 * moments: every answer is a 200 or a well-formed gateway error, and afterwards nothing is left held
 * (scheduler slots and queues, per-worker counters, the workers' running requests).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { request } from "undici";
import { chatBody, smallSchedulerYaml, startFleet, waitFor } from "../helpers/harness.js";

/** Small deterministic PRNG (mulberry32), so the traffic mix is the same on every run. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const CLASSES = ["bulk", "default", "interactive", "system"] as const;
const EXPECTED_ERRORS = new Set(["scheduler_preempted", "scheduler_queue_full", "scheduler_queue_timeout"]);

describe("gateway under churn", () => {
  test("mixed priorities, preemption and random client aborts leave nothing held", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 2 }, { maxRunningRequests: 2 }],
      schedulerYaml: smallSchedulerYaml({
        classes: {
          system: { reserved_floor: 1 },
          default: { queue_size: 6 },
          bulk: { queue_size: 6, queue_timeout_secs: 1 },
        },
      }),
    });
    const random = prng(42);
    const outcomes = new Map<string, number>();
    const count = (key: string) => outcomes.set(key, (outcomes.get(key) ?? 0) + 1);

    const one = async (i: number) => {
      await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * 300)));
      const cls = CLASSES[Math.floor(random() * CLASSES.length)]!;
      const stream = random() < 0.5;
      const abortAfter = random() < 0.25 ? Math.floor(random() * 150) : undefined;
      const controller = new AbortController();
      if (abortAfter !== undefined) setTimeout(() => controller.abort(), abortAfter);
      try {
        const res = await request(`${fleet.url}/v1/chat/completions`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "x-smg-priority": cls,
            "x-mock-ttft-ms": String(Math.floor(random() * 60)),
            "x-mock-token-delay-ms": "5",
          },
          body: JSON.stringify(chatBody({ stream, max_tokens: 1 + (i % 8) })),
          signal: controller.signal,
        });
        const text = await res.body.text();
        if (res.statusCode === 200) {
          if (stream) assert.ok(text.endsWith("data: [DONE]\n\n"), `request ${i}: complete stream`);
          else assert.equal(JSON.parse(text).object, "chat.completion");
          count("200");
        } else {
          const code = res.headers["x-smg-error-code"];
          assert.ok(
            typeof code === "string" && EXPECTED_ERRORS.has(code),
            `request ${i}: ${res.statusCode} ${text}`,
          );
          assert.equal(JSON.parse(text).error.code, code);
          count(code);
        }
      } catch (err) {
        assert.ok(
          controller.signal.aborted,
          `request ${i} failed without being aborted: ${(err as Error).message}`,
        );
        count("aborted");
      }
    };
    await Promise.all(Array.from({ length: 80 }, (_, i) => one(i)));

    assert.ok((outcomes.get("200") ?? 0) > 0, JSON.stringify([...outcomes]));
    await waitFor(
      () => fleet.snapshot().inflight === 0 && fleet.snapshot().queued === 0,
      "scheduler drained",
    );
    for (const cls of CLASSES) {
      assert.equal(fleet.snapshot().classes[cls].inflight, 0, `${cls} in flight`);
      assert.equal(fleet.snapshot().classes[cls].queued, 0, `${cls} queued`);
    }
    await waitFor(
      () => fleet.workers.every((w) => w.stats().running === 0 && w.stats().waiting === 0),
      "workers idle",
    );
    for (const w of fleet.gateway.workers.workers)
      assert.equal(w.inflight, 0, `gateway in-flight count on ${w.url}`);
    const counters = fleet.gateway.admission.counters()!;
    let preempted = 0;
    for (const cls of CLASSES) preempted += counters.admissions[cls].preempted;
    // Every 503 is a preemption; a preempted request whose client also left counts as aborted here.
    const answered503 = outcomes.get("scheduler_preempted") ?? 0;
    const aborted = outcomes.get("aborted") ?? 0;
    assert.ok(
      answered503 <= preempted && preempted <= answered503 + aborted,
      `preemptions ${preempted}, 503 answers ${answered503}, aborted ${aborted}`,
    );
  });
});

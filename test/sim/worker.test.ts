/**
 * The worker model against hand-computed timings: a lone request, chunked prefill, a request that
 * joins mid-step, KV-cache pressure under both KV policies, slowdown and failure.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { EventQueue, SimClock } from "../../src/sim/clock.js";
import { kvBytesPerToken, kvTokensOf, WORKER_PROFILES, type WorkerProfile } from "../../src/sim/profiles.js";
import { Job, Worker, type WorkerListener } from "../../src/sim/worker.js";

const base: WorkerProfile = {
  beta0: 1000, // 1 ms per iteration
  beta1: 10, // 0.01 ms per prefill token
  beta2: 100, // 0.1 ms per decode token
  maxRunning: 8,
  kvTokens: 100_000,
  maxBatchedTokens: 1000,
  kvPolicy: "recompute",
};

interface Seen {
  first: Map<string, number>;
  done: Map<string, number>;
  failed: Map<string, string>;
}

function harness(profile: Partial<WorkerProfile> = {}) {
  const queue = new EventQueue();
  const clock = new SimClock(queue, 0);
  const seen: Seen = { first: new Map(), done: new Map(), failed: new Map() };
  const listener: WorkerListener = {
    firstToken: (job, t) => seen.first.set(job.ref as string, t),
    finished: (job, t) => seen.done.set(job.ref as string, t),
    failed: (job, _t, reason) => seen.failed.set(job.ref as string, reason),
  };
  const worker = new Worker(0, "w0", { ...base, ...profile }, clock, listener);
  const run = (until = Number.POSITIVE_INFINITY) => {
    for (let ev = queue.pop(); ev !== undefined; ev = queue.pop()) {
      if (ev.t > until) {
        queue.schedule(ev.t, ev.fn);
        break;
      }
      clock.current = ev.t;
      ev.fn();
    }
  };
  const at = (t: number, fn: () => void) => queue.schedule(t, fn);
  return { worker, clock, seen, run, at };
}

const close = (a: number | undefined, b: number) =>
  assert.ok(a !== undefined && Math.abs(a - b) < 1e-6, `${a} != ${b}`);

test("a lone request: one prefill iteration, then one decode iteration per further token", () => {
  const h = harness();
  h.worker.submit(new Job(500, 10, 10, "a"));
  h.run();
  // prefill: 1 ms + 500 * 0.01 ms = 6 ms, producing token 1; then 9 decode steps of 1.1 ms
  close(h.seen.first.get("a"), 6);
  close(h.seen.done.get("a"), 6 + 9 * 1.1);
  assert.equal(h.worker.kvTokensUsed, 0);
  assert.equal(h.worker.stats.completed, 1);
});

test("chunked prefill: a prompt longer than the token budget takes several iterations", () => {
  const h = harness();
  h.worker.submit(new Job(2500, 1, 1, "a"));
  h.run();
  // chunks of 1000, 1000, 500: 11 + 11 + 6 ms; a one-token answer ends with its prefill
  close(h.seen.first.get("a"), 28);
  close(h.seen.done.get("a"), 28);
});

test("a request arriving mid-step joins at the end of the iteration in progress", () => {
  const h = harness();
  h.worker.submit(new Job(100, 100, 100, "a")); // prefill 2 ms, then 1.1 ms decode steps
  h.at(2.5, () => h.worker.submit(new Job(100, 2, 2, "b")));
  h.run();
  close(h.seen.first.get("a"), 2);
  // a's first decode iteration runs 2 .. 3.1; b joins the next one: 1 + 100*0.01 + 1*0.1 = 2.1 ms
  close(h.seen.first.get("b"), 3.1 + 2.1);
  // then both decode: 1 + 2*0.1 = 1.2 ms; b's second token ends it
  close(h.seen.done.get("b"), 5.2 + 1.2);
  // a: tokens 1 (2 ms), 2 (3.1), 3 (5.2), 4 (6.4), then 96 more alone at 1.1 ms
  close(h.seen.done.get("a"), 6.4 + 96 * 1.1);
});

test("max_running bounds the batch; the rest waits inside the worker", () => {
  const h = harness({ maxRunning: 1 });
  h.worker.submit(new Job(100, 3, 3, "a"));
  h.worker.submit(new Job(100, 3, 3, "b"));
  assert.equal(h.worker.load, 2);
  h.run();
  close(h.seen.done.get("a"), 2 + 2 * 1.1);
  close(h.seen.first.get("b"), 4.2 + 2);
});

test("recompute: a full KV cache preempts the newest request, which redoes its prefill later", () => {
  const h = harness({ kvTokens: 250 });
  h.worker.submit(new Job(100, 60, 60, "a"));
  h.worker.submit(new Job(100, 60, 60, "b"));
  h.run();
  assert.ok(h.worker.stats.kvPreemptions >= 1);
  assert.equal(h.seen.done.size, 2);
  assert.ok(h.worker.stats.kvPeak <= 250);
  assert.equal(h.worker.kvTokensUsed, 0);
});

test("reserve: admission holds prompt + max_tokens, so nothing is preempted", () => {
  const h = harness({ kvTokens: 250, kvPolicy: "reserve" });
  h.worker.submit(new Job(100, 60, 100, "a"));
  h.worker.submit(new Job(100, 60, 100, "b"));
  h.run();
  assert.equal(h.worker.stats.kvPreemptions, 0);
  // b waited for a to finish: it could not reserve 200 more tokens next to a's 200
  assert.ok(h.seen.first.get("b")! >= h.seen.done.get("a")!);
  assert.equal(h.worker.kvTokensUsed, 0);
});

test("a request that can never fit fails at once with context_length", () => {
  const h = harness({ kvTokens: 100 });
  h.worker.submit(new Job(90, 20, 20, "a"));
  assert.equal(h.seen.failed.get("a"), "context_length");
});

test("slowdown multiplies step time from the next iteration; failure fails everything on the worker", () => {
  const h = harness();
  h.worker.submit(new Job(100, 11, 11, "a"));
  h.at(2, () => h.worker.setSlowdown(2));
  h.run();
  close(h.seen.first.get("a"), 2);
  // the iteration started at 2 ms runs at the old speed; the other nine take 2.2 ms
  close(h.seen.done.get("a"), 2 + 1.1 + 9 * 2.2);
  const f = harness();
  f.worker.submit(new Job(100, 50, 50, "x"));
  f.worker.submit(new Job(100, 50, 50, "y"));
  f.at(10, () => f.worker.fail());
  f.run();
  assert.deepEqual([...f.seen.failed.values()], ["upstream_reset", "upstream_reset"]);
  assert.equal(f.seen.done.size, 0);
  assert.equal(f.worker.load, 0);
});

test("aborting a running request frees its place and KV at once", () => {
  const h = harness({ maxRunning: 1 });
  const a = new Job(100, 50, 50, "a");
  h.worker.submit(a);
  h.worker.submit(new Job(100, 2, 2, "b"));
  h.at(1, () => h.worker.abort(a));
  h.run();
  assert.equal(h.seen.done.has("a"), false);
  // a's prefill iteration (0 .. 2 ms) completes, then b runs alone
  close(h.seen.first.get("b"), 4);
});

// --- issue 36: KV sized from GPU memory, attention that grows with context, prefix blocks ---

test("the KV cache is sized from GPU memory: 0.9 of it, less weights and a reserve, over KV bytes per token", () => {
  const h70 = WORKER_PROFILES["llama3-70b-4xh100"]!.hardware!;
  // 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 bytes = 320 KiB a token.
  assert.equal(kvBytesPerToken(h70), 327_680);
  const free = 4 * (80 * 0.9 - 2) * 1024 ** 3 - 70.6e9 * 2;
  assert.equal(kvTokensOf(h70), Math.floor(free / 327_680));
  assert.equal(WORKER_PROFILES["llama3-70b-4xh100"]!.kvTokens, 486_595);
  // The 1-GPU profiles agree with BLIS's total_kv_blocks x 16 within 5%.
  const blis: Record<string, number> = {
    "llama3-8b-h100": 29205 * 16,
    "qwen2.5-7b-h100": 74768 * 16,
    "smollm3-3b-h100": 62704 * 16,
  };
  for (const [name, tokens] of Object.entries(blis)) {
    const ours = WORKER_PROFILES[name]!.kvTokens;
    assert.ok(Math.abs(ours / tokens - 1) < 0.05, `${name}: ${ours} vs ${tokens}`);
  }
});

test("attention: each decode iteration costs more as the context grows (exactly, over a macro step)", () => {
  const h = harness({ attnDecodeUs: 0.1 });
  h.worker.submit(new Job(500, 10, 10, "a"));
  h.run();
  close(h.seen.first.get("a"), 6);
  // nine decode iterations over contexts 500 .. 508: 9 x 1.1 ms + 0.1 us x (500 + ... + 508)
  close(h.seen.done.get("a"), 6 + 9.9 + (0.1 * (9 * 500 + 36)) / 1000);
  // A longer prompt: every decode step is dearer.
  const g = harness({ attnDecodeUs: 0.1 });
  g.worker.submit(new Job(900, 10, 10, "b"));
  g.run();
  close(g.seen.done.get("b")! - g.seen.first.get("b")!, 9.9 + (0.1 * (9 * 900 + 36)) / 1000);
});

test("attention: a prefill chunk attends to everything before it", () => {
  const h = harness({ attnPrefillUs: 0.001 });
  h.worker.submit(new Job(2000, 1, 1, "a"));
  h.run();
  // two chunks of 1000: 11 ms each, plus 0.001 us x pairs: 1000 x 500, then 1000 x (1000 + 500)
  close(h.seen.first.get("a"), 22 + (0.001 * (1000 * 500 + 1000 * 1500)) / 1000);
});

test("prefix blocks: leading blocks found (held by a running request, or free) are not prefilled", () => {
  const h = harness();
  const job = (prompt: number, blocks: number[], ref: string) => {
    const j = new Job(prompt, 5, 5, ref);
    j.prefixBlocks = blocks;
    j.blockTokens = 100;
    return j;
  };
  h.worker.submit(job(300, [1, 2, 3], "a"));
  h.run(4); // a's prefill (1 + 3 ms) is done: its blocks are held
  h.worker.submit(job(300, [1, 2, 9], "b"));
  h.run();
  // b finds blocks 1 and 2 (200 tokens) and prefills 100 next to a's decode
  assert.equal(h.worker.stats.cachedTokens, 200);
  h.worker.submit(job(300, [1, 2, 3], "c"));
  h.run();
  // all three blocks are free and cached now; the last token is always computed
  assert.equal(h.worker.stats.cachedTokens, 200 + 299);
});

test("prefix blocks: free blocks live in the KV the running requests leave, least recently used first", () => {
  const h = harness({ kvTokens: 1000 });
  const job = (prompt: number, blocks: number[] | undefined, ref: string) => {
    const j = new Job(prompt, 5, 5, ref);
    j.prefixBlocks = blocks;
    j.blockTokens = 100;
    return j;
  };
  h.worker.submit(job(300, [1, 2, 3], "a"));
  h.run();
  assert.equal(h.worker.prefixCacheStats.tokens, 300);
  // 800 tokens running leave 200 free: the oldest block goes (1), and 2 once big's output grows
  h.worker.submit(job(800, undefined, "big"));
  h.run(1);
  assert.equal(h.worker.prefixCacheStats.tokens, 200);
  assert.equal(h.worker.prefixCacheStats.evicted, 1);
  h.run();
  h.worker.submit(job(300, [1, 2, 3], "b"));
  h.run();
  assert.equal(h.worker.stats.cachedTokens, 0, "block 1 was evicted, so nothing matches");
});

test("computedPrefill: the prefill done so far, mid macro step; recompute counts what a KV preemption threw away", () => {
  const h = harness();
  const a = new Job(3000, 5, 5, "a");
  h.worker.submit(a);
  h.run(15);
  h.clock.current = 15; // one 11 ms chunk done, the second under way (one macro step of three)
  assert.equal(h.worker.computedPrefill(a), 1000);
  h.run();
  const r = harness({ kvTokens: 250 });
  const x = new Job(100, 60, 60, "x");
  const y = new Job(100, 60, 60, "y");
  r.worker.submit(x);
  r.worker.submit(y);
  r.run();
  assert.ok(r.worker.stats.recomputedTokens > 0);
  assert.equal(x.recomputed + y.recomputed, r.worker.stats.recomputedTokens);
});

/**
 * The workers' prefix cache, the proof's other half: the model (chained blocks, LRU in tokens), the
 * mock worker reporting cached tokens in usage (OpenAI's `prompt_tokens_details.cached_tokens`,
 * SGLang's `meta_info.cached_tokens`) and prefilling only what is not cached, and the simulator's
 * worker skipping the cached part of a prefill.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { request } from "undici";
import { startMockWorker } from "../../src/mock-worker/index.js";
import {
  BLOCK_CHARS,
  BLOCK_TOKENS,
  blockKeys,
  PrefixCache,
  promptText,
} from "../../src/mock-worker/prefix-cache.js";
import { EventQueue, SimClock } from "../../src/sim/clock.js";
import { Job, Worker } from "../../src/sim/worker.js";

const block = (c: string) => c.repeat(BLOCK_CHARS);

describe("prefix cache model", () => {
  test("a block hits only when everything before it matches too", () => {
    const cache = new PrefixCache(1000);
    const abc = blockKeys(block("a") + block("b") + block("c") + "tail");
    assert.equal(abc.length, 3, "the partial last block is not a block");
    assert.equal(cache.serve(abc, 3 * BLOCK_TOKENS + 1), 0);
    assert.equal(cache.peek(blockKeys(block("a") + block("b") + block("x"))), 2 * BLOCK_TOKENS);
    // Same second block after a different first: a different prefix, no hit.
    assert.equal(cache.peek(blockKeys(block("x") + block("b"))), 0);
    assert.equal(cache.serve(abc, 30), 30, "never more than the prompt's tokens");
    assert.deepEqual(cache.counters(), {
      capacityTokens: 1000,
      storedTokens: 3 * BLOCK_TOKENS,
      promptTokens: 3 * BLOCK_TOKENS + 1 + 30,
      cachedTokens: 30,
    });
  });

  test("least recently used blocks go first, a prefix's tail before its head", () => {
    const cache = new PrefixCache(4 * BLOCK_TOKENS);
    const first = blockKeys(block("a") + block("b") + block("c"));
    cache.serve(first, 48);
    cache.serve(blockKeys(block("x") + block("y")), 32); // 5 blocks in 4: c, the oldest, goes
    assert.equal(cache.peek(first), 2 * BLOCK_TOKENS, "the head of the older prompt is still usable");
    cache.clear();
    assert.equal(cache.peek(first), 0);
  });

  test("the prompt text of chat, completion and native bodies", () => {
    assert.equal(
      promptText({
        messages: [
          { role: "system", content: "s" },
          { role: "user", content: [{ type: "text", text: "u" }] },
        ],
      }),
      "system\ns\nuser\nu\n",
    );
    assert.equal(promptText({ prompt: ["a", "b"] }), "ab");
    assert.equal(promptText({ text: "native" }), "native");
    assert.equal(promptText(null), "");
  });
});

describe("the mock worker's prefix cache", () => {
  test("reports cached tokens and prefills only the rest; off by default", async (t) => {
    const worker = await startMockWorker({ prefixCacheTokens: 4096, ttftMs: 0, tokenDelayMs: 0 });
    const plain = await startMockWorker({ ttftMs: 0, tokenDelayMs: 0 });
    t.after(() => Promise.all([worker.close(), plain.close()]));
    const system = "Answer as a librarian would, citing the shelf. ".repeat(12);
    const body = (question: string, stream = false) => ({
      model: "mock-llm",
      messages: [
        { role: "system", content: system },
        { role: "user", content: question },
      ],
      max_tokens: 2,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    });
    const post = async (url: string, path: string, payload: unknown) => {
      const res = await request(`${url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(payload),
      });
      return res.body.text();
    };

    const first = JSON.parse(await post(worker.url, "/v1/chat/completions", body("Where is Dune?")));
    assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
    // The two prompts share their text up to the question's last words: its full blocks are cached.
    const shared = `system\n${system}\nuser\nWhere is `.length;
    assert.equal(
      worker.peekCachedTokens(body("Where is Emma?")),
      Math.floor(shared / BLOCK_CHARS) * BLOCK_TOKENS,
    );
    const second = JSON.parse(await post(worker.url, "/v1/chat/completions", body("Where is Emma?")));
    const cached = second.usage.prompt_tokens_details.cached_tokens as number;
    assert.ok(
      cached > 0 && cached < second.usage.prompt_tokens,
      `${cached} of ${second.usage.prompt_tokens}`,
    );
    // Streamed, with include_usage: the usage chunk carries it too.
    const events = (await post(worker.url, "/v1/chat/completions", body("Where is Emma?", true)))
      .split("\n\n")
      .filter((e) => e.startsWith("data: {"))
      .map((e) => JSON.parse(e.slice(6)));
    assert.equal(events.at(-1).usage.prompt_tokens_details.cached_tokens, cached);
    // SGLang's native endpoint reports it in meta_info.
    const native = JSON.parse(
      await post(worker.url, "/generate", { text: system, sampling_params: { max_new_tokens: 1 } }),
    );
    assert.equal(native.meta_info.cached_tokens, 0, "another prompt text");
    const stats = worker.stats().prefixCache!;
    assert.equal(stats.cachedTokens, 2 * cached);
    assert.equal(stats.capacityTokens, 4096);

    // Without a prefix cache: the usage is as before, no details.
    const off = JSON.parse(await post(plain.url, "/v1/chat/completions", body("Where is Dune?")));
    assert.deepEqual(Object.keys(off.usage), ["prompt_tokens", "completion_tokens", "total_tokens"]);
    assert.equal(plain.stats().prefixCache, undefined);
    assert.equal(plain.peekCachedTokens(body("Where is Dune?")), 0);
  });

  test("a restarted worker starts with a cold cache", async (t) => {
    const worker = await startMockWorker({ prefixCacheTokens: 1024, ttftMs: 0, tokenDelayMs: 0 });
    t.after(() => worker.close());
    const payload = { model: "mock-llm", prompt: block("p").repeat(3), max_tokens: 1 };
    const send = async () => {
      const res = await request(`${worker.url}/v1/completions`, {
        method: "POST",
        reset: true, // no kept connection across the restart
        headers: { "content-type": "application/json" },
        body: JSON.stringify(payload),
      });
      return JSON.parse(await res.body.text()).usage.prompt_tokens_details.cached_tokens as number;
    };
    assert.equal(await send(), 0);
    assert.equal(await send(), 48);
    await worker.restart();
    assert.equal(await send(), 0);
  });
});

describe("the simulator's prefix cache", () => {
  test("a prompt found in the cache skips that much prefill: its first token comes sooner", () => {
    const queue = new EventQueue();
    const clock = new SimClock(queue, 0);
    const first = new Map<string, number>();
    const profile = {
      beta0: 1000,
      beta1: 10,
      beta2: 100,
      maxRunning: 8,
      kvTokens: 100_000,
      maxBatchedTokens: 4000,
      kvPolicy: "recompute" as const,
      prefixCacheTokens: 10_000,
    };
    const worker = new Worker(0, "w0", profile, clock, {
      firstToken: (job, t) => first.set(job.ref as string, t),
      finished: () => {},
      failed: () => {},
    });
    const run = () => {
      for (let ev = queue.pop(); ev !== undefined; ev = queue.pop()) {
        clock.current = ev.t;
        ev.fn();
      }
    };
    const blocks = Array.from({ length: 100 }, (_, i) => i + 1); // a 1600-token prompt's blocks
    const job = (ref: string, keys: number[] | undefined) => {
      const j = new Job(1600, 1, 1, ref);
      j.prefixBlocks = keys;
      return j;
    };
    worker.submit(job("cold", blocks));
    run();
    // 1 ms + 1600 * 0.01 ms
    assert.ok(Math.abs(first.get("cold")! - 17) < 1e-9);
    const t0 = clock.now();
    worker.submit(job("warm", blocks));
    run();
    // All 1600 cached but the last token is always computed: 1 ms + 1 * 0.01 ms.
    assert.ok(Math.abs(first.get("warm")! - t0 - 1.01) < 1e-9, `${first.get("warm")! - t0}`);
    const t1 = clock.now();
    worker.submit(job("half", [...blocks.slice(0, 50), ...blocks.slice(50).map((k) => k + 1000)]));
    run();
    assert.ok(Math.abs(first.get("half")! - t1 - 9) < 1e-9, "800 cached, 800 prefilled");
    worker.submit(job("no keys", undefined));
    run();
    assert.equal(worker.stats.cachedTokens, 1599 + 800);
    assert.equal(worker.kvTokensUsed, 0, "cached tokens left the KV with their requests");
  });
});

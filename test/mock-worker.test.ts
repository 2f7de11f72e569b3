import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { request } from "undici";
import { type MockWorker, type MockWorkerOptions, startMockWorker } from "../src/mock-worker/index.js";

const FAST: MockWorkerOptions = { ttftMs: 5, tokenDelayMs: 1 };

async function withWorker(opts: MockWorkerOptions, fn: (w: MockWorker) => Promise<void>): Promise<void> {
  const worker = await startMockWorker({ ...FAST, ...opts });
  try {
    await fn(worker);
  } finally {
    await worker.close();
  }
}

async function postJson(
  worker: MockWorker,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  const res = await request(`${worker.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

/** The `data:` payloads of an SSE body, in order. */
function sseData(text: string): string[] {
  return text
    .split("\n\n")
    .filter((frame) => frame.length > 0)
    .map((frame) => {
      assert.ok(frame.startsWith("data: "), `bad SSE frame: ${frame}`);
      return frame.slice("data: ".length);
    });
}

async function waitFor(cond: () => boolean, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("mock worker: OpenAI chat", () => {
  test("non-stream answers a full chat.completion with usage", async () => {
    await withWorker({ model: "m1" }, async (w) => {
      const res = await postJson(w, "/v1/chat/completions", {
        model: "m1",
        messages: [
          { role: "system", content: "abcd" }, // 4 chars
          { role: "user", content: [{ type: "text", text: "efghi" }] }, // 5 chars
        ],
        max_tokens: 3,
      });
      assert.equal(res.status, 200);
      const body = JSON.parse(res.text);
      assert.equal(body.object, "chat.completion");
      assert.equal(body.model, "m1");
      assert.equal(typeof body.id, "string");
      assert.equal(typeof body.created, "number");
      assert.deepEqual(body.choices, [
        {
          index: 0,
          message: { role: "assistant", content: "tok0 tok1 tok2" },
          logprobs: null,
          finish_reason: "length",
        },
      ]);
      assert.deepEqual(body.usage, { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
      assert.equal(w.stats().completed, 1);
      assert.equal(w.stats().totalRequests, 1);
    });
  });

  test("default output length and max_completion_tokens", async () => {
    await withWorker({ defaultMaxTokens: 4 }, async (w) => {
      const dflt = JSON.parse((await postJson(w, "/v1/chat/completions", { messages: [] })).text);
      assert.equal(dflt.usage.completion_tokens, 4);
      assert.equal(dflt.choices[0].finish_reason, "stop");
      const capped = JSON.parse(
        (await postJson(w, "/v1/chat/completions", { messages: [], max_completion_tokens: 2 })).text,
      );
      assert.equal(capped.choices[0].message.content, "tok0 tok1");
    });
  });

  test("stream sends one chunk per token, a finish chunk and [DONE]; no usage unless asked", async () => {
    await withWorker({}, async (w) => {
      const res = await postJson(w, "/v1/chat/completions", {
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 5,
        stream: true,
      });
      assert.equal(res.status, 200);
      assert.match(String(res.headers["content-type"]), /^text\/event-stream/);
      const data = sseData(res.text);
      assert.equal(data.at(-1), "[DONE]");
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
      for (const c of chunks) {
        assert.equal(c.object, "chat.completion.chunk");
        assert.equal("usage" in c, false);
      }
      const contents = chunks.map((c) => c.choices[0]?.delta.content).filter((s) => s);
      assert.deepEqual(contents, ["tok0", " tok1", " tok2", " tok3", " tok4"]);
      assert.equal(chunks[0].choices[0].delta.role, "assistant");
      assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
      assert.ok(chunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null));
    });
  });

  test("stream with include_usage ends with the usage chunk before [DONE]", async () => {
    await withWorker({}, async (w) => {
      const res = await postJson(w, "/v1/chat/completions", {
        messages: [{ role: "user", content: "12345678" }],
        max_tokens: 2,
        stream: true,
        stream_options: { include_usage: true },
      });
      const data = sseData(res.text);
      assert.equal(data.at(-1), "[DONE]");
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
      const usage = chunks.at(-1);
      assert.deepEqual(usage.choices, []);
      assert.deepEqual(usage.usage, { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 });
      assert.equal(chunks.at(-2).choices[0].finish_reason, "length");
      assert.ok(chunks.slice(0, -1).every((c) => c.usage === null));
    });
  });

  test("zero delays answer at once, streaming included", async () => {
    await withWorker({ ttftMs: 0, tokenDelayMs: 0 }, async (w) => {
      const res = await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 50, stream: true });
      const contents = sseData(res.text)
        .slice(0, -1)
        .map((d) => JSON.parse(d).choices[0].delta.content)
        .filter((s) => s);
      assert.equal(contents.length, 50);
      const plain = await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 0 });
      assert.equal(JSON.parse(plain.text).choices[0].message.content, "");
      assert.equal(w.stats().completed, 2);
    });
  });
});

describe("mock worker: other endpoints", () => {
  test("/v1/completions non-stream and stream", async () => {
    await withWorker({}, async (w) => {
      const res = await postJson(w, "/v1/completions", { prompt: "abcdefghi", max_tokens: 3 });
      const body = JSON.parse(res.text);
      assert.equal(body.object, "text_completion");
      assert.equal(body.choices[0].text, "tok0 tok1 tok2");
      assert.equal(body.choices[0].finish_reason, "length");
      assert.deepEqual(body.usage, { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });

      const streamed = await postJson(w, "/v1/completions", {
        prompt: "x",
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      });
      const data = sseData(streamed.text);
      assert.equal(data.at(-1), "[DONE]");
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
      assert.equal(chunks.map((c) => c.choices[0]?.text ?? "").join(""), "tok0 tok1 tok2");
      assert.deepEqual(chunks.at(-1).usage, { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 });
    });
  });

  test("/generate non-stream and stream", async () => {
    await withWorker({}, async (w) => {
      const res = await postJson(w, "/generate", {
        text: "abcdefgh",
        sampling_params: { max_new_tokens: 4 },
      });
      assert.equal(res.status, 200);
      const body = JSON.parse(res.text);
      assert.equal(body.text, "tok0 tok1 tok2 tok3");
      assert.equal(body.meta_info.prompt_tokens, 2);
      assert.equal(body.meta_info.completion_tokens, 4);
      assert.equal(body.meta_info.finish_reason.type, "length");

      const streamed = await postJson(w, "/generate", {
        text: "abcdefgh",
        sampling_params: { max_new_tokens: 3 },
        stream: true,
      });
      const data = sseData(streamed.text);
      assert.equal(data.at(-1), "[DONE]");
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
      assert.deepEqual(
        chunks.map((c) => c.text),
        ["tok0", "tok0 tok1", "tok0 tok1 tok2"],
      );
      assert.equal(chunks.at(-1).meta_info.finish_reason.type, "length");
      assert.equal(chunks[0].meta_info.finish_reason, null);
    });
  });

  test("/v1/models, 404 and 400 on bad JSON", async () => {
    await withWorker({ model: "mx" }, async (w) => {
      const models = await request(`${w.url}/v1/models`);
      assert.deepEqual(await models.body.json(), {
        object: "list",
        data: [{ id: "mx", object: "model", created: 0, owned_by: "sluice-mock" }],
      });
      const missing = await request(`${w.url}/nope`);
      assert.equal(missing.statusCode, 404);
      assert.equal(((await missing.body.json()) as { error: { code: string } }).error.code, "not_found");

      const bad = await postJson(w, "/v1/chat/completions", "{not json");
      assert.equal(bad.status, 400);
      const err = JSON.parse(bad.text);
      assert.equal(err.error.type, "invalid_request_error");
      assert.equal(typeof err.error.message, "string");
      const badMax = await postJson(w, "/v1/completions", { prompt: "x", max_tokens: -1 });
      assert.equal(badMax.status, 400);
    });
  });

  test("/get_server_info with and without capacity", async () => {
    await withWorker({ maxRunningRequests: 7, model: "mm" }, async (w) => {
      const info = (await (await request(`${w.url}/get_server_info`)).body.json()) as Record<string, unknown>;
      assert.equal(info["max_running_requests"], 7);
      assert.equal(info["model_path"], "mm");
    });
    await withWorker({ maxRunningRequests: 7, reportCapacity: false }, async (w) => {
      const info = (await (await request(`${w.url}/get_server_info`)).body.json()) as Record<string, unknown>;
      assert.equal("max_running_requests" in info, false);
      assert.equal(info["model_path"], "mock-llm");
    });
  });

  test("/health flips with setHealthy", async () => {
    await withWorker({ healthy: false }, async (w) => {
      const down = await request(`${w.url}/health`);
      assert.equal(down.statusCode, 503);
      await down.body.dump();
      w.setHealthy(true);
      const up = await request(`${w.url}/health`);
      assert.equal(up.statusCode, 200);
      assert.equal(await up.body.text(), "OK");
      w.setHealthy(false);
      const again = await request(`${w.url}/health`);
      assert.equal(again.statusCode, 503);
      await again.body.dump();
    });
  });

  test("records the last request's raw body and headers", async () => {
    await withWorker({}, async (w) => {
      const raw = '{ "messages" : [],\n  "max_tokens": 1, "extra": "keep me" }';
      await postJson(w, "/v1/chat/completions", raw, { "x-smg-priority": "bulk" });
      await (await request(`${w.url}/health`)).body.dump(); // must not overwrite the record
      const stats = w.stats();
      assert.equal(stats.lastRequestBody, raw);
      assert.equal(stats.lastRequestHeaders?.["x-smg-priority"], "bulk");
    });
  });
});

describe("mock worker: batching and failures", () => {
  test("requests beyond maxRunningRequests wait in the worker; all complete", async () => {
    await withWorker({ maxRunningRequests: 3 }, async (w) => {
      let maxSeen = 0;
      let maxWaiting = 0;
      const sampler = setInterval(() => {
        const s = w.stats();
        maxSeen = Math.max(maxSeen, s.running);
        maxWaiting = Math.max(maxWaiting, s.waiting);
      }, 1);
      try {
        const results = await Promise.all(
          Array.from({ length: 10 }, (_, i) =>
            postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 5, stream: i % 2 === 0 }),
          ),
        );
        assert.ok(results.every((r) => r.status === 200));
      } finally {
        clearInterval(sampler);
      }
      const s = w.stats();
      assert.ok(maxSeen <= 3, `running reached ${maxSeen}`);
      assert.ok(maxWaiting > 0, "some requests should have waited");
      assert.equal(s.peakRunning, 3);
      assert.equal(s.completed, 10);
      assert.equal(s.running, 0);
      assert.equal(s.waiting, 0);
      assert.equal(s.totalRequests, 10);
    });
  });

  test("client abort mid-stream frees the slot", async () => {
    await withWorker({ maxRunningRequests: 1 }, async (w) => {
      const ac = new AbortController();
      const res = await fetch(`${w.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [], max_tokens: 100_000, stream: true }),
        signal: ac.signal,
      });
      const reader = res.body!.getReader();
      const first = await reader.read();
      assert.ok(first.value && first.value.length > 0);
      assert.equal(w.stats().running, 1);
      ac.abort();
      await reader.cancel().catch(() => {});
      await waitFor(() => w.stats().running === 0 && w.stats().aborted === 1);
      assert.equal(w.stats().completed, 0);
      // The freed slot serves the next request.
      const next = await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1 });
      assert.equal(next.status, 200);
    });
  });

  test("a waiting request that disconnects leaves the queue", async () => {
    await withWorker({ maxRunningRequests: 1 }, async (w) => {
      const holder = postJson(
        w,
        "/v1/chat/completions",
        { messages: [], max_tokens: 1 },
        { "x-mock-ttft-ms": "600" },
      );
      await waitFor(() => w.stats().running === 1);
      const ac = new AbortController();
      const queued = fetch(`${w.url}/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ messages: [], max_tokens: 1 }),
        signal: ac.signal,
      }).catch(() => "aborted");
      await waitFor(() => w.stats().waiting === 1);
      ac.abort();
      assert.equal(await queued, "aborted");
      await waitFor(() => w.stats().waiting === 0 && w.stats().aborted === 1);
      assert.equal((await holder).status, 200);
      assert.equal(w.stats().completed, 1);
    });
  });

  test("x-mock-ttft-ms holds the first token back", async () => {
    await withWorker({}, async (w) => {
      const started = performance.now();
      const res = await postJson(
        w,
        "/v1/chat/completions",
        { messages: [], max_tokens: 1 },
        { "x-mock-ttft-ms": "150" },
      );
      assert.equal(res.status, 200);
      assert.ok(performance.now() - started >= 140);
    });
  });

  test("x-mock-fail: 500, reset and hang", async () => {
    await withWorker({}, async (w) => {
      const failed = await postJson(w, "/v1/chat/completions", { messages: [] }, { "x-mock-fail": "500" });
      assert.equal(failed.status, 500);
      assert.equal(JSON.parse(failed.text).error.type, "server_error");

      await assert.rejects(postJson(w, "/v1/chat/completions", { messages: [] }, { "x-mock-fail": "reset" }));

      const ac = new AbortController();
      const hung = request(`${w.url}/generate`, {
        method: "POST",
        body: JSON.stringify({ text: "x" }),
        headers: { "x-mock-fail": "hang" },
        signal: ac.signal,
      });
      await waitFor(() => w.stats().running === 1);
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(w.stats().running, 1, "a hung request keeps its slot");
      ac.abort();
      await assert.rejects(hung);
      await waitFor(() => w.stats().running === 0 && w.stats().aborted === 1);
      assert.equal(w.stats().completed, 0);
      assert.equal(w.stats().totalRequests, 3);
    });
  });

  test("close() ends in-flight requests promptly", async () => {
    const w = await startMockWorker({ ...FAST, tokenDelayMs: 50 });
    const pending = postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1000, stream: true });
    await waitFor(() => w.stats().running === 1);
    const started = performance.now();
    await w.close();
    assert.ok(performance.now() - started < 500);
    await assert.rejects(pending);
    assert.equal(w.stats().running, 0);
  });
});

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { describe, test } from "node:test";
import { request } from "undici";
import { mockWorkerCommand } from "../../src/mock-worker/cli.js";
import { type MockWorker, type MockWorkerOptions, startMockWorker } from "../../src/mock-worker/index.js";
import { resolveOptions } from "../../src/mock-worker/options.js";
import { Batcher } from "../../src/mock-worker/simulation.js";

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

/** The JSON chunks of an SSE body, its final `[DONE]` left out. */
function sseChunks(text: string): ReturnType<typeof JSON.parse>[] {
  return sseData(text)
    .slice(0, -1)
    .map((d) => JSON.parse(d));
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

  test("a stream interval sends several tokens per event, reports it, and keeps usage exact", async () => {
    await withWorker({ streamInterval: 4 }, async (w) => {
      const info = (await (await request(`${w.url}/get_server_info`)).body.json()) as Record<string, unknown>;
      assert.equal(info["stream_interval"], 4);
      const chat = await postJson(w, "/v1/chat/completions", {
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 10,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = sseChunks(chat.text);
      // Role, three token events (4, 4, then the last 2 at the end), finish, usage.
      assert.deepEqual(
        chunks.map((c) => c.choices[0]?.delta.content ?? null),
        ["", "tok0 tok1 tok2 tok3", " tok4 tok5 tok6 tok7", " tok8 tok9", null, null],
      );
      assert.equal(chunks.at(-1).usage.completion_tokens, 10);
      const generate = await postJson(w, "/generate", {
        text: "abcdefgh",
        sampling_params: { max_new_tokens: 5 },
        stream: true,
      });
      const texts = sseChunks(generate.text);
      assert.deepEqual(
        texts.map((c) => [c.text, c.meta_info.completion_tokens]),
        [
          ["tok0 tok1 tok2 tok3", 4],
          ["tok0 tok1 tok2 tok3 tok4", 5],
        ],
      );
      assert.equal(texts.at(-1).meta_info.finish_reason.type, "length");
    });
    assert.throws(() => resolveOptions({ streamInterval: 0 }), /streamInterval must be a positive integer/);
  });

  test("reportUsage false: no usage chunk however the client asks, no usage in a whole answer", async () => {
    await withWorker({ reportUsage: false }, async (w) => {
      const streamed = await postJson(w, "/v1/chat/completions", {
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = sseChunks(streamed.text);
      assert.ok(chunks.length >= 4);
      assert.ok(chunks.every((c) => !("usage" in c)));
      const whole = JSON.parse((await postJson(w, "/v1/completions", { prompt: "x", max_tokens: 3 })).text);
      assert.equal(whole.choices[0].text, "tok0 tok1 tok2");
      assert.equal("usage" in whole, false);
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

// --- instrumentation: open requests, over-capacity spells, the received log, restarts, faults ---

/** Raw HTTP/1.1 exchange: writes `head` (+ body), returns every byte received until the server closes. */
function rawExchange(
  worker: MockWorker,
  bytes: string,
  { timeoutMs = 2000 }: { timeoutMs?: number } = {},
): Promise<{ data: Buffer; closedByServer: boolean }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect(worker.port, "127.0.0.1", () => socket.write(bytes));
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ data: Buffer.concat(chunks), closedByServer: false });
    }, timeoutMs);
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", () => {}); // a reset still ends in 'close'
    socket.on("close", () => {
      clearTimeout(timer);
      resolve({ data: Buffer.concat(chunks), closedByServer: true });
    });
    socket.on("timeout", reject);
  });
}

function chatRequest(body: Record<string, unknown>, headers: Record<string, string> = {}): string {
  const text = JSON.stringify(body);
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  return (
    `POST /v1/chat/completions HTTP/1.1\r\nhost: w\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(text)}\r\n${extra}\r\n${text}`
  );
}

describe("mock worker: capacity counters", () => {
  test("counts open requests, the peak, and time spent above maxRunningRequests", async () => {
    await withWorker({ maxRunningRequests: 2 }, async (w) => {
      const within = await Promise.all(
        [1, 2].map(() =>
          postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1 }, { "x-mock-ttft-ms": "30" }),
        ),
      );
      assert.ok(within.every((r) => r.status === 200));
      let s = w.stats();
      assert.equal(s.openPeak, 2);
      assert.equal(s.overCapacityMs, 0);
      assert.equal(s.overCapacitySpells, 0);

      const started = performance.now();
      const over = Promise.all(
        [1, 2, 3, 4].map(() =>
          postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1 }, { "x-mock-ttft-ms": "80" }),
        ),
      );
      await waitFor(() => w.stats().open === 4);
      s = w.stats();
      assert.equal(s.running, 2);
      assert.equal(s.waiting, 2);
      assert.equal(s.overCapacitySpells, 1);
      assert.ok(s.overCapacityMs >= 0, "a spell in progress is counted");
      assert.ok((await over).every((r) => r.status === 200));
      const elapsed = performance.now() - started;
      s = w.stats();
      assert.equal(s.open, 0);
      assert.equal(s.openPeak, 4);
      assert.equal(s.overCapacitySpells, 1);
      // Over capacity from the 3rd arrival until the first pair finished (one ttft), not the whole run.
      assert.ok(s.overCapacityMs >= 60 && s.overCapacityMs < elapsed, `overCapacityMs ${s.overCapacityMs}`);
      assert.equal(s.longestOverCapacityMs, s.overCapacityMs);
      assert.ok(s.trackedMs >= elapsed);
    });
  });

  test("a client that leaves before the first byte closes its request at once (non-streaming)", async () => {
    await withWorker({ maxRunningRequests: 1 }, async (w) => {
      const socket = connect(w.port, "127.0.0.1");
      socket.on("error", () => {});
      socket.write(chatRequest({ messages: [], max_tokens: 1 }, { "x-mock-ttft-ms": "10000" }));
      await waitFor(() => w.stats().open === 1 && w.stats().running === 1);
      // A second one waits inside the worker: 2 open, above capacity.
      const waiter = connect(w.port, "127.0.0.1");
      waiter.on("error", () => {});
      waiter.write(chatRequest({ messages: [], max_tokens: 1 }, { "x-mock-ttft-ms": "10000" }));
      await waitFor(() => w.stats().open === 2);
      const cut = performance.now();
      socket.destroy();
      await waitFor(() => w.stats().open === 1, 200);
      assert.ok(performance.now() - cut < 200);
      waiter.destroy();
      await waitFor(() => w.stats().open === 0, 200);
      const s = w.stats();
      assert.equal(s.aborted, 2);
      assert.equal(s.overCapacitySpells, 1);
      assert.ok(s.longestOverCapacityMs < 1000);
    });
  });

  test("GET /mock/stats serves the counters as JSON", async () => {
    await withWorker({ maxRunningRequests: 3 }, async (w) => {
      await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 2 });
      const res = await request(`${w.url}/mock/stats`);
      const json = (await res.body.json()) as Record<string, unknown>;
      for (const key of [
        "open",
        "openPeak",
        "overCapacityMs",
        "overCapacitySpells",
        "longestOverCapacityMs",
        "trackedMs",
        "received",
        "clientErrors",
        "restarts",
      ]) {
        assert.equal(typeof json[key], "number", key);
      }
      assert.equal(json["maxRunningRequests"], 3);
      assert.equal(json["completed"], 1);
      assert.equal(json["openPeak"], 1);
      assert.equal("lastRequestBody" in json, false);
    });
  });

  test("resetStats starts the counters afresh", async () => {
    await withWorker({ maxRunningRequests: 1 }, async (w) => {
      await Promise.all(
        [1, 2].map(() => postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1 })),
      );
      assert.equal(w.stats().openPeak, 2);
      w.resetStats();
      const s = w.stats();
      assert.deepEqual(
        [s.completed, s.totalRequests, s.openPeak, s.overCapacitySpells, s.overCapacityMs, s.received],
        [0, 0, 0, 0, 0, 0],
      );
      assert.deepEqual(w.received(), []);
    });
  });
});

describe("mock worker: received log", () => {
  test("logs inference requests and tagged requests by x-fuzz-id / x-request-id, not health polls", async () => {
    await withWorker({}, async (w) => {
      await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1 }, { "x-fuzz-id": "f1" });
      await postJson(
        w,
        "/v1/completions",
        { prompt: "x", max_tokens: 1 },
        { "x-request-id": "r2", authorization: "Bearer k" },
      );
      await postJson(w, "/generate", { text: "x" });
      await (await request(`${w.url}/health`)).body.dump();
      await (await request(`${w.url}/nope?x=1`, { headers: { "x-fuzz-id": "f4" } })).body.dump();
      const log = w.received();
      assert.deepEqual(
        log.map((e) => [e.id, e.method, e.path]),
        [
          ["f1", "POST", "/v1/chat/completions"],
          ["r2", "POST", "/v1/completions"],
          [undefined, "POST", "/generate"],
          ["f4", "GET", "/nope?x=1"],
        ],
      );
      assert.equal(log[0]!.bodyBytes, JSON.stringify({ messages: [], max_tokens: 1 }).length);
      assert.ok(log[0]!.headerNames.includes("x-fuzz-id") && log[0]!.headerNames.includes("content-type"));
      assert.equal(log[0]!.authorization, undefined);
      assert.equal(log[1]!.authorization, "Bearer k");
      assert.equal(log[3]!.bodyBytes, 0);
      assert.equal(w.stats().received, 4);
      const served = (await (await request(`${w.url}/mock/received`)).body.json()) as Array<{ id?: string }>;
      assert.deepEqual(
        served.map((e) => e.id ?? null),
        ["f1", "r2", null, "f4"],
      );
      w.clearReceived();
      assert.deepEqual(w.received(), []);
    });
  });

  test("the log is a bounded ring; the count keeps going", async () => {
    await withWorker({ receivedLogSize: 3 }, async (w) => {
      for (let i = 0; i < 5; i++) {
        await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 0 }, { "x-fuzz-id": `id${i}` });
      }
      assert.deepEqual(
        w.received().map((e) => e.id),
        ["id2", "id3", "id4"],
      );
      assert.equal(w.stats().received, 5);
    });
  });

  test("bytes that are not HTTP count as client errors", async () => {
    await withWorker({}, async (w) => {
      const { data } = await rawExchange(w, "NOT HTTP AT ALL\r\n\r\n");
      assert.match(data.toString("latin1"), /^HTTP\/1\.1 400/);
      assert.equal(w.stats().clientErrors, 1);
      assert.equal(w.stats().received, 0);
    });
  });
});

describe("mock worker: restart", () => {
  test("restart() kills in-flight work, refuses connections while down, then serves on the same port", async () => {
    await withWorker({ tokenDelayMs: 20 }, async (w) => {
      const pending = postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1000, stream: true });
      await waitFor(() => w.stats().running === 1);
      const restarted = w.restart({ downMs: 150 });
      await assert.rejects(pending);
      await new Promise((r) => setTimeout(r, 20));
      await assert.rejects(request(`${w.url}/health`), (err: Error & { code?: string }) => {
        assert.equal(err.code, "ECONNREFUSED");
        return true;
      });
      await restarted;
      const ok = await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1 });
      assert.equal(ok.status, 200);
      const s = w.stats();
      assert.equal(s.restarts, 1);
      assert.equal(s.aborted, 1);
      assert.equal(s.completed, 1);
      assert.equal(s.totalRequests, 2);
      assert.equal(s.open, 0);
    });
  });

  test("close() during a restart leaves the worker closed", async () => {
    const w = await startMockWorker({ ...FAST });
    const restarted = w.restart({ downMs: 50 });
    await w.close();
    await restarted;
    await assert.rejects(request(`${w.url}/health`));
    await assert.rejects(w.restart());
  });

  test("a worker can also be started again on a closed worker's port", async () => {
    const first = await startMockWorker({ ...FAST });
    const port = first.port;
    await first.close();
    const second = await startMockWorker({ ...FAST, port });
    try {
      assert.equal(second.url, first.url);
      assert.equal(
        (await postJson(second, "/v1/chat/completions", { messages: [], max_tokens: 1 })).status,
        200,
      );
    } finally {
      await second.close();
    }
  });
});

describe("mock worker: fault modes", () => {
  const body = { messages: [], max_tokens: 5 };

  test("garbage: bytes that are not HTTP, then close", async () => {
    await withWorker({}, async (w) => {
      const { data, closedByServer } = await rawExchange(w, chatRequest(body, { "x-mock-fail": "garbage" }));
      assert.ok(closedByServer);
      assert.ok(data.length > 0);
      assert.doesNotMatch(data.toString("latin1"), /^HTTP\//);
      await waitFor(() => w.stats().open === 0);
      await assert.rejects(postJson(w, "/v1/chat/completions", body, { "x-mock-fail": "garbage" }));
    });
  });

  test("bad-json: 200, JSON content type, a body that does not parse", async () => {
    await withWorker({}, async (w) => {
      const res = await postJson(w, "/v1/chat/completions", body, { "x-mock-fail": "bad-json" });
      assert.equal(res.status, 200);
      assert.match(String(res.headers["content-type"]), /application\/json/);
      assert.throws(() => JSON.parse(res.text));
    });
  });

  test("bad-length: Content-Length larger than the body, then close", async () => {
    await withWorker({}, async (w) => {
      const { data, closedByServer } = await rawExchange(
        w,
        chatRequest(body, { "x-mock-fail": "bad-length" }),
      );
      assert.ok(closedByServer);
      const text = data.toString("latin1");
      const [head, rest] = text.split("\r\n\r\n") as [string, string];
      assert.match(head, /^HTTP\/1\.1 200/);
      const declared = Number(/content-length: (\d+)/i.exec(head)?.[1]);
      assert.ok(declared > Buffer.byteLength(rest), `declared ${declared}, got ${rest.length}`);
      await assert.rejects(postJson(w, "/v1/chat/completions", body, { "x-mock-fail": "bad-length" }));
    });
  });

  test("die-mid-stream: a few tokens, then the connection dies; the slot is freed", async () => {
    await withWorker({ maxRunningRequests: 1 }, async (w) => {
      const streamed = await rawExchange(
        w,
        chatRequest(
          { ...body, stream: true },
          { "x-mock-fail": "die-mid-stream", "x-mock-die-after-tokens": "3" },
        ),
      );
      assert.ok(streamed.closedByServer);
      const text = streamed.data.toString("latin1");
      assert.match(text, /^HTTP\/1\.1 200/);
      assert.match(text, /tok2/);
      assert.doesNotMatch(text, /tok3/);
      assert.doesNotMatch(text, /\[DONE\]/);

      const plain = await rawExchange(w, chatRequest(body, { "x-mock-fail": "die-mid-stream" }));
      assert.ok(plain.closedByServer);
      const [head, rest] = plain.data.toString("latin1").split("\r\n\r\n") as [string, string];
      assert.match(head, /^HTTP\/1\.1 200/);
      assert.ok(Number(/content-length: (\d+)/i.exec(head)?.[1]) > Buffer.byteLength(rest));

      // Fewer tokens than the cut point: it still dies instead of finishing.
      const short = await rawExchange(
        w,
        chatRequest({ messages: [], max_tokens: 1, stream: true }, { "x-mock-fail": "die-mid-stream" }),
      );
      assert.doesNotMatch(short.data.toString("latin1"), /\[DONE\]/);
      await waitFor(() => w.stats().open === 0 && w.stats().running === 0);
      assert.equal(w.stats().completed, 0);
      assert.equal(w.stats().aborted, 3);
      assert.equal((await postJson(w, "/v1/chat/completions", body)).status, 200);
    });
  });

  test("/get_server_info can report any max_running_requests, valid or not", async () => {
    for (const value of [0, -5, 1e12, "lots", null]) {
      await withWorker({ maxRunningRequests: 2, reportedCapacity: value }, async (w) => {
        const info = (await (await request(`${w.url}/get_server_info`)).body.json()) as Record<
          string,
          unknown
        >;
        assert.deepEqual(info["max_running_requests"], value);
        assert.equal(w.stats().maxRunningRequests, 2);
      });
    }
    await withWorker({ maxRunningRequests: 2 }, async (w) => {
      w.setReportedCapacity(-1);
      const lying = (await (await request(`${w.url}/get_server_info`)).body.json()) as Record<
        string,
        unknown
      >;
      assert.equal(lying["max_running_requests"], -1);
      w.setReportedCapacity(undefined);
      const honest = (await (await request(`${w.url}/get_server_info`)).body.json()) as Record<
        string,
        unknown
      >;
      assert.equal(honest["max_running_requests"], 2);
    });
  });

  test("a request beyond the context length is refused with 400, like vLLM", async () => {
    await withWorker({ contextLength: 100 }, async (w) => {
      const huge = await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 1e30 });
      assert.equal(huge.status, 400);
      assert.equal(JSON.parse(huge.text).error.code, "context_length_exceeded");
      const fits = await postJson(w, "/v1/chat/completions", { messages: [], max_tokens: 100 });
      assert.equal(fits.status, 200);
      const info = (await (await request(`${w.url}/get_server_info`)).body.json()) as Record<string, unknown>;
      assert.equal(info["context_length"], 100);
    });
  });
});

describe("mock worker: a knee", () => {
  const idle = { start() {}, abort() {} };
  test("delays rise by kneeSlowdown per running request past the knee, and not before it", () => {
    const batcher = new Batcher(64, 0, 4, 0.5);
    const scaled: number[] = [];
    for (let i = 0; i < 8; i++) {
      batcher.enqueue({ ...idle });
      scaled.push(batcher.scale(10));
    }
    // 1..4 running: the base; then 1.5x, 2x, 2.5x, 3x.
    assert.deepEqual(scaled, [10, 10, 10, 10, 15, 20, 25, 30]);
  });

  test("a knee below 0 or a negative slowdown is refused", () => {
    assert.throws(() => resolveOptions({ knee: -1 }), /knee must be a non-negative integer/);
    assert.throws(() => resolveOptions({ kneeSlowdown: -0.5 }), /kneeSlowdown must be a non-negative number/);
  });
});

test("docs/mock-worker.md lists every flag of `sluice mock-worker` with its default", () => {
  const doc = readFileSync(new URL("../../docs/mock-worker.md", import.meta.url), "utf8");
  const rows = new Map<string, string>();
  for (const line of doc.split("\n")) {
    const m = /^\| `(--[a-z-]+)[^`]*` \| ([^|]*) \|/.exec(line);
    if (m) rows.set(m[1]!, m[2]!.trim());
  }
  const flags = mockWorkerCommand().options;
  assert.ok(flags.length >= 19, "the command's options were read");
  for (const option of flags) {
    const row = rows.get(option.long!);
    assert.ok(row !== undefined, `docs/mock-worker.md has no row for ${option.long}`);
    const d: unknown = option.defaultValue;
    if (typeof d === "number" || typeof d === "string") {
      assert.ok(
        row.split(" ")[0] === String(d),
        `${option.long}: documented default "${row}", the flag's is ${d}`,
      );
    }
    rows.delete(option.long!);
  }
  assert.deepEqual([...rows.keys()], [], "rows for flags the command does not have");
});

/**
 * `--engine vllm | sglang`: the mock worker serves each engine's own signals over real HTTP, and its
 * KV model makes requests wait at the engine and preempts running ones as the engines document.
 *
 * The expected names, types and label names below are written from the engines' sources, not from
 * the worker's own tables, so a drift on either side fails here:
 * - vLLM: vllm-project/vllm, vllm/v1/metrics/loggers.py (PrometheusStatLogger) at commit 005a810;
 *   counters appear with prometheus_client's `_total` suffix; `max_model_len` in /v1/models cards.
 * - SGLang: sgl-project/sglang, python/sglang/srt/metrics/collector.py at commit 00ae9c1 (names,
 *   types), docs/references/production_metrics.md (label `model_name`), and
 *   python/sglang/srt/entrypoints/http_server.py (/get_server_info: server args + scheduler info).
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import parsePrometheusTextFormat, { type PrometheusFamily } from "parse-prometheus-text-format";
import { request } from "undici";
import { mockWorkerCommand } from "../../src/mock-worker/cli.js";
import { type MockWorker, type MockWorkerOptions, startMockWorker } from "../../src/mock-worker/index.js";
import { resolveOptions } from "../../src/mock-worker/options.js";

type Fixture = Record<string, { type: PrometheusFamily["type"]; labels: string[] }>;

const VLLM_LABELS = ["engine", "model_name"];
const VLLM_FIXTURE: Fixture = {
  "vllm:num_requests_running": { type: "GAUGE", labels: VLLM_LABELS },
  "vllm:num_requests_waiting": { type: "GAUGE", labels: VLLM_LABELS },
  "vllm:kv_cache_usage_perc": { type: "GAUGE", labels: VLLM_LABELS },
  "vllm:gpu_cache_usage_perc": { type: "GAUGE", labels: VLLM_LABELS },
  "vllm:num_preemptions_total": { type: "COUNTER", labels: VLLM_LABELS },
  "vllm:prompt_tokens_total": { type: "COUNTER", labels: VLLM_LABELS },
  "vllm:generation_tokens_total": { type: "COUNTER", labels: VLLM_LABELS },
  "vllm:request_success_total": { type: "COUNTER", labels: [...VLLM_LABELS, "finished_reason"] },
  "vllm:time_to_first_token_seconds": { type: "HISTOGRAM", labels: VLLM_LABELS },
  "vllm:time_per_output_token_seconds": { type: "HISTOGRAM", labels: VLLM_LABELS },
  "vllm:e2e_request_latency_seconds": { type: "HISTOGRAM", labels: VLLM_LABELS },
  "vllm:request_queue_time_seconds": { type: "HISTOGRAM", labels: VLLM_LABELS },
  // An info-style gauge: CacheConfig's fields as labels (a subset checked here), value 1.
  "vllm:cache_config_info": { type: "GAUGE", labels: ["block_size", "engine", "num_gpu_blocks"] },
};

const SGLANG_LABELS = ["model_name"];
const SGLANG_FIXTURE: Fixture = {
  "sglang:num_running_reqs": { type: "GAUGE", labels: SGLANG_LABELS },
  "sglang:num_queue_reqs": { type: "GAUGE", labels: SGLANG_LABELS },
  "sglang:token_usage": { type: "GAUGE", labels: SGLANG_LABELS },
  "sglang:num_used_tokens": { type: "GAUGE", labels: SGLANG_LABELS },
  "sglang:cache_hit_rate": { type: "GAUGE", labels: SGLANG_LABELS },
  "sglang:max_total_num_tokens": { type: "GAUGE", labels: SGLANG_LABELS },
  "sglang:num_retracted_requests_total": { type: "COUNTER", labels: SGLANG_LABELS },
  "sglang:prompt_tokens_total": { type: "COUNTER", labels: SGLANG_LABELS },
  "sglang:generation_tokens_total": { type: "COUNTER", labels: SGLANG_LABELS },
  "sglang:num_requests_total": { type: "COUNTER", labels: SGLANG_LABELS },
  "sglang:time_to_first_token_seconds": { type: "HISTOGRAM", labels: SGLANG_LABELS },
  "sglang:inter_token_latency_seconds": { type: "HISTOGRAM", labels: SGLANG_LABELS },
  "sglang:e2e_request_latency_seconds": { type: "HISTOGRAM", labels: SGLANG_LABELS },
  "sglang:queue_time_seconds": { type: "HISTOGRAM", labels: SGLANG_LABELS },
};

interface Scrape {
  families: Map<string, PrometheusFamily>;
  /** Every sample's value by name and labels; histograms as `_bucket`, `_count`, `_sum`. */
  value(name: string, labels?: Record<string, string>): number | undefined;
}

/**
 * Parses with parse-prometheus-text-format; a second pass with histograms declared untyped gives
 * their `_count`/`_sum` samples whole (the parser folds a histogram's buckets into one map).
 */
function parse(text: string): Scrape {
  const families = new Map(parsePrometheusTextFormat(text).map((f) => [f.name, f] as const));
  const flat = parsePrometheusTextFormat(text.replace(/^(# TYPE \S+) histogram$/gm, "$1 untyped"));
  return {
    families,
    value(name, labels = {}) {
      const found = flat
        .find((f) => f.name === name)
        ?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
      return found === undefined ? undefined : Number(found.value);
    },
  };
}

async function scrape(w: MockWorker): Promise<Scrape> {
  const res = await request(`${w.url}/metrics`);
  assert.equal(res.statusCode, 200);
  assert.match(String(res.headers["content-type"]), /^text\/plain; version=0\.0\.4/);
  return parse(await res.body.text());
}

async function getJson(w: MockWorker, path: string): Promise<{ status: number; body: unknown }> {
  const res = await request(`${w.url}${path}`);
  const text = await res.body.text();
  return { status: res.statusCode, body: text === "" ? undefined : JSON.parse(text) };
}

async function withWorker(opts: MockWorkerOptions, fn: (w: MockWorker) => Promise<void>): Promise<void> {
  const worker = await startMockWorker(opts);
  try {
    await fn(worker);
  } finally {
    await worker.close();
  }
}

/** Label names across a family's samples (a histogram's from its `_count` lines, `le` left out). */
function labelNames(text: string, family: string, type: PrometheusFamily["type"]): string[] {
  const sample = type === "HISTOGRAM" ? `${family}_count` : family;
  const names = new Set<string>();
  for (const line of text.split("\n")) {
    const m = /^([^\s{]+)\{([^}]*)\}/.exec(line);
    if (m?.[1] !== sample) continue;
    for (const pair of m[2]!.split(/,(?=[a-z_]+=")/)) names.add(pair.slice(0, pair.indexOf("=")));
  }
  return [...names].sort();
}

function checkFixture(text: string, fixture: Fixture): void {
  const families = parse(text).families;
  for (const [name, want] of Object.entries(fixture)) {
    const family = families.get(name);
    assert.ok(family !== undefined, `/metrics has no family ${name}`);
    assert.equal(family.type, want.type, `${name}: type`);
    const got = labelNames(text, name, want.type);
    for (const label of want.labels) assert.ok(got.includes(label), `${name}: no label ${label} in ${got}`);
    if (name !== "vllm:cache_config_info") assert.deepEqual(got, [...want.labels].sort(), `${name}: labels`);
  }
}

async function waitFor(
  cond: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 5000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Two requests of 30 prompt tokens and 10 output tokens against a KV cache of 64 tokens (vLLM: 4
 * blocks of 16) take all of it (31 tokens = 2 blocks each). A third, of 40 prompt tokens, waits at
 * the engine. When a running one reaches its 33rd token there is no block left: the newest running
 * request (b) is preempted and goes back to the front of the queue; it is recomputed once a has
 * finished, and c (which needs 3 blocks) runs last, alone. Exactly one preemption, whichever of a
 * and b asks first. Returns the order the answers came back in, the KV blocks in use once a and b
 * both ran, and a scrape taken while c waited.
 */
async function overflowKv(
  w: MockWorker,
): Promise<{ order: string[]; fullBlocks: number; whileWaiting: Scrape }> {
  const order: string[] = [];
  const send = (id: string, promptTokens: number) =>
    request(`${w.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-mock-prompt-tokens": String(promptTokens) },
      body: JSON.stringify({ model: "m", prompt: id, max_tokens: 10 }),
    }).then(async (res) => {
      assert.equal(res.statusCode, 200);
      const body = (await res.body.json()) as { choices: { text: string }[] };
      assert.equal(body.choices[0]!.text, "tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9");
      order.push(id);
    });
  const a = send("a", 30);
  await waitFor(() => w.stats().running === 1, "a running");
  const b = send("b", 30);
  await waitFor(() => w.stats().running === 2, "b running");
  const fullBlocks = w.stats().kv!.usedBlocks;
  const c = send("c", 40);
  await waitFor(() => w.stats().totalRequests === 3 && w.stats().waiting >= 1, "c waiting");
  const whileWaiting = await scrape(w);
  await Promise.all([a, b, c]);
  return { order, fullBlocks, whileWaiting };
}

const KV_TIMING: MockWorkerOptions = { ttftMs: 200, tokenDelayMs: 20, batchSlowdown: 0, contextLength: 64 };

describe("mock worker --engine vllm", () => {
  test("/metrics has vLLM's names, types and labels; /v1/models has max_model_len; no /get_server_info", async () => {
    await withWorker({ engine: "vllm", model: "m", contextLength: 4096, kvTokens: 8192 }, async (w) => {
      const res = await request(`${w.url}/metrics`);
      const text = await res.body.text();
      checkFixture(text, VLLM_FIXTURE);
      const s = parse(text);
      const labels = { model_name: "m", engine: "0" };
      assert.equal(s.value("vllm:num_requests_running", labels), 0);
      assert.equal(s.value("vllm:kv_cache_usage_perc", labels), 0);
      assert.equal(s.value("vllm:request_success_total", { ...labels, finished_reason: "length" }), 0);
      // KV capacity in tokens is block_size x num_gpu_blocks.
      assert.equal(s.value("vllm:cache_config_info", { block_size: "16", num_gpu_blocks: "512" }), 1);

      const models = await getJson(w, "/v1/models");
      assert.equal(models.status, 200);
      const card = (models.body as { data: Record<string, unknown>[] }).data[0]!;
      assert.equal(card["id"], "m");
      assert.equal(card["max_model_len"], 4096);
      assert.equal((await getJson(w, "/get_server_info")).status, 404);
      // vLLM's own default concurrency (max_num_seqs) when none is given.
      assert.equal(w.stats().maxRunningRequests, 256);
    });
  });

  test("past its KV capacity a request waits at the engine, and the newest running one is preempted and recomputed", async () => {
    await withWorker({ ...KV_TIMING, engine: "vllm", model: "m", kvTokens: 64 }, async (w) => {
      assert.equal(w.stats().kv?.totalBlocks, 4);
      const { order, fullBlocks, whileWaiting } = await overflowKv(w);
      const labels = { model_name: "m", engine: "0" };
      // The preempted request (b) resumes before the one that waited behind it (c).
      assert.deepEqual(order, ["a", "b", "c"]);
      assert.equal(fullBlocks, 4);
      assert.ok(whileWaiting.value("vllm:num_requests_waiting", labels)! >= 1);
      const usage = whileWaiting.value("vllm:kv_cache_usage_perc", labels)!;
      assert.ok(usage > 0 && usage <= 1, `kv_cache_usage_perc ${usage} in 0..1`);
      assert.equal(whileWaiting.value("vllm:gpu_cache_usage_perc", labels), usage);
      const end = await scrape(w);
      assert.equal(end.value("vllm:num_preemptions_total", labels), 1);
      assert.equal(end.value("vllm:num_requests_waiting", labels), 0);
      assert.equal(end.value("vllm:num_requests_running", labels), 0);
      assert.equal(end.value("vllm:kv_cache_usage_perc", labels), 0);
      assert.equal(end.value("vllm:request_success_total", { ...labels, finished_reason: "length" }), 3);
      assert.equal(end.value("vllm:prompt_tokens_total", labels), 100);
      assert.equal(end.value("vllm:generation_tokens_total", labels), 30);
      assert.equal(end.value("vllm:request_queue_time_seconds_count", labels), 3);
      assert.equal(end.value("vllm:time_to_first_token_seconds_count", labels), 3);
      assert.equal(w.stats().kv?.preemptions, 1);
      assert.equal(w.stats().completed, 3);
    });
  });
});

describe("mock worker: preemption seen from the client", () => {
  const opts: MockWorkerOptions = { ...KV_TIMING, engine: "vllm", model: "m", kvTokens: 64 };
  const body = (stream: boolean) => JSON.stringify({ model: "m", prompt: "x", max_tokens: 10, stream });
  const headers = { "content-type": "application/json", "x-mock-prompt-tokens": "30" };

  test("a preempted stream pauses and resumes: every token once, in order", async () => {
    await withWorker(opts, async (w) => {
      const a = request(`${w.url}/v1/chat/completions`, { method: "POST", headers, body: body(true) });
      await waitFor(() => w.stats().running === 1, "a running");
      const b = request(`${w.url}/v1/chat/completions`, { method: "POST", headers, body: body(true) });
      const texts = await Promise.all(
        [a, b].map(async (pending) => {
          const res = await pending;
          assert.equal(res.statusCode, 200);
          return res.body.text();
        }),
      );
      assert.equal(w.stats().kv?.preemptions, 1);
      for (const text of texts) {
        const chunks = text
          .split("\n\n")
          .filter((f) => f.startsWith("data: {"))
          .map(
            (f) => JSON.parse(f.slice(6)) as { choices: { delta: { role?: string; content?: string } }[] },
          );
        const deltas = chunks.map((c) => c.choices[0]!.delta);
        assert.equal(deltas.filter((d) => d.role === "assistant").length, 1);
        assert.equal(
          deltas.map((d) => d.content ?? "").join(""),
          "tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9",
        );
        assert.ok(text.endsWith("data: [DONE]\n\n"));
      }
    });
  });

  test("a preempted request whose client leaves leaves the queue and frees nothing twice", async () => {
    await withWorker(opts, async (w) => {
      const a = request(`${w.url}/v1/completions`, { method: "POST", headers, body: body(false) });
      await waitFor(() => w.stats().running === 1, "a running");
      const leaving = new AbortController();
      const b = request(`${w.url}/v1/completions`, {
        method: "POST",
        headers,
        body: body(false),
        signal: leaving.signal,
      }).catch((err: unknown) => err);
      await waitFor(() => w.stats().kv?.preemptions === 1, "b preempted");
      assert.equal(w.stats().waiting, 1);
      leaving.abort();
      assert.ok((await b) instanceof Error);
      await waitFor(() => w.stats().waiting === 0 && w.stats().aborted === 1, "b gone from the queue");
      assert.equal((await a).statusCode, 200);
      await waitFor(() => w.stats().running === 0, "a done");
      assert.equal(w.stats().kv?.usedBlocks, 0);
      assert.equal(w.stats().completed, 1);
    });
  });
});

describe("mock worker --engine sglang", () => {
  test("/metrics has SGLang's names, types and labels; /get_server_info has the KV pool", async () => {
    await withWorker(
      { engine: "sglang", model: "m", maxRunningRequests: 8, contextLength: 1024, kvTokens: 5000 },
      async (w) => {
        const res = await request(`${w.url}/metrics`);
        const text = await res.body.text();
        checkFixture(text, SGLANG_FIXTURE);
        const s = parse(text);
        assert.equal(s.value("sglang:max_total_num_tokens", { model_name: "m" }), 5000);
        assert.equal(s.value("sglang:token_usage", { model_name: "m" }), 0);

        const info = (await getJson(w, "/get_server_info")).body as Record<string, unknown>;
        assert.equal(info["max_running_requests"], 8);
        assert.equal(info["max_total_num_tokens"], 5000);
        assert.equal(info["context_length"], 1024);
        assert.equal(info["max_req_input_len"], 1023);
      },
    );
  });

  test("past its KV pool a request queues, and the newest running one is retracted and rerun", async () => {
    await withWorker({ ...KV_TIMING, engine: "sglang", model: "m", kvTokens: 64 }, async (w) => {
      const { order, fullBlocks, whileWaiting } = await overflowKv(w);
      const labels = { model_name: "m" };
      assert.deepEqual(order, ["a", "b", "c"]);
      assert.equal(fullBlocks, 62, "SGLang holds KV token by token: 31 + 31");
      assert.ok(whileWaiting.value("sglang:num_queue_reqs", labels)! >= 1);
      const usage = whileWaiting.value("sglang:token_usage", labels)!;
      assert.ok(usage > 0 && usage <= 1, `token_usage ${usage} in 0..1`);
      assert.equal(whileWaiting.value("sglang:num_used_tokens", labels), usage * 64);
      const end = await scrape(w);
      assert.equal(end.value("sglang:num_retracted_requests_total", labels), 1);
      assert.equal(end.value("sglang:num_queue_reqs", labels), 0);
      assert.equal(end.value("sglang:token_usage", labels), 0);
      assert.equal(end.value("sglang:num_requests_total", labels), 3);
      assert.equal(end.value("sglang:generation_tokens_total", labels), 30);
    });
  });
});

describe("mock worker: KV model options", () => {
  test("without --engine nothing changes: no /metrics, no KV model", async () => {
    await withWorker({}, async (w) => {
      assert.equal((await request(`${w.url}/metrics`)).statusCode, 404);
      assert.equal(w.stats().kv, undefined);
      assert.equal(w.stats().maxRunningRequests, 64);
      const info = (await getJson(w, "/get_server_info")).body as Record<string, unknown>;
      assert.equal("max_total_num_tokens" in info, false);
    });
  });

  test("a KV cache that cannot hold one full-context request is refused, as vLLM refuses to start", () => {
    assert.throws(
      () => resolveOptions({ engine: "vllm", kvTokens: 100, contextLength: 100 }),
      /kvTokens 100 \(96 in whole blocks of 16\) cannot hold one request of the context length 100/,
    );
    assert.throws(() => resolveOptions({ kvTokens: 0 }), /kvTokens must be a positive integer/);
    assert.throws(() => resolveOptions({ engine: "tgi" as never }), /engine must be one of vllm, sglang/);
  });

  test("the CLI takes --engine, --kv-tokens and --block-size", () => {
    const program = mockWorkerCommand();
    program.parse(["--engine", "vllm", "--kv-tokens", "4096", "--block-size", "32"], { from: "user" });
    const opts = program.opts<{ engine?: string; kvTokens?: number; blockSize?: number }>();
    assert.equal(opts.engine, "vllm");
    assert.equal(opts.kvTokens, 4096);
    assert.equal(opts.blockSize, 32);
    assert.throws(
      () =>
        mockWorkerCommand()
          .exitOverride()
          .configureOutput({ writeErr: () => {} })
          .parse(["--engine", "tgi"], { from: "user" }),
      /expected one of vllm, sglang/,
    );
  });
});

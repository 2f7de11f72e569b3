/**
 * Reading engine signals (docs/capacity.md): the Prometheus text reader, what a vLLM or SGLang
 * exposition reduces to, the load estimate carried between scrapes, and the `engine` settings.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { request } from "undici";
import { EngineLoad } from "../../src/capacity/engine-signals/engine-load.js";
import {
  type EngineReading,
  EngineSignalError,
  readSglang,
  readVllm,
  sglangServerInfo,
  VLLM_DEFAULT_MAX_NUM_SEQS,
} from "../../src/capacity/engine-signals/engine-reading.js";
import {
  PrometheusTextError,
  parsePrometheusText,
} from "../../src/capacity/engine-signals/prometheus-text.js";
import { resolveGatewaySettings } from "../../src/config/resolve-gateway-settings.js";
import { startMockWorker } from "../../src/mock-worker/index.js";
import { writeTempFile } from "../helpers/harness.js";

async function get(url: string): Promise<string> {
  const r = await request(url);
  assert.equal(r.statusCode, 200);
  return r.body.text();
}

describe("the Prometheus text reader", () => {
  test("samples with labels, escapes, special values and timestamps; comments skipped", () => {
    const text = [
      "# HELP a_total Things.",
      "# TYPE a_total counter",
      'a_total{x="1",path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb"} 3 1700000000000',
      "b +Inf",
      "c{} -Inf",
      "d NaN",
      'e{le="0.5",} 1.5e3',
      "",
    ].join("\n");
    const samples = parsePrometheusText(text);
    assert.deepEqual(
      samples.map((s) => s.name),
      ["a_total", "b", "c", "d", "e"],
    );
    assert.deepEqual(samples[0]!.labels, { x: "1", path: "C:\\dir", quote: 'say "hi"', nl: "a\nb" });
    assert.equal(samples[0]!.value, 3);
    assert.equal(samples[1]!.value, Number.POSITIVE_INFINITY);
    assert.equal(samples[2]!.value, Number.NEGATIVE_INFINITY);
    assert.ok(Number.isNaN(samples[3]!.value));
    assert.equal(samples[4]!.value, 1500);
  });

  test("HTML, JSON and broken lines are errors naming the line", () => {
    assert.throws(() => parsePrometheusText("<html>"), /line 1: not a sample/);
    assert.throws(() => parsePrometheusText('ok 1\n{"running": 3}'), /line 2: not a sample/);
    assert.throws(() => parsePrometheusText('m{a="x} 1'), PrometheusTextError);
    assert.throws(() => parsePrometheusText("m lots"), /line 1: m: value "lots" is not a number/);
    assert.throws(() => parsePrometheusText("m 1 2 3"), /expected a value and an optional timestamp/);
    assert.throws(() => parsePrometheusText('m{a="\\x"} 1'), /bad escape/);
  });
});

describe("vLLM signals", () => {
  test("the vLLM mock's own /metrics: running, waiting, KV use and KV capacity from cache_config_info", async (t) => {
    const worker = await startMockWorker({
      engine: "vllm",
      maxRunningRequests: 32,
      kvTokens: 16 * 400,
      contextLength: 4096,
    });
    t.after(() => worker.close());
    const reading = readVllm(parsePrometheusText(await get(`${worker.url}/metrics`)));
    const kv = worker.stats().kv!;
    assert.deepEqual(reading, {
      maxRunning: VLLM_DEFAULT_MAX_NUM_SEQS,
      maxRunningSource: "vllm_default",
      kvCapacityTokens: kv.blockSize * kv.totalBlocks,
      running: 0,
      waiting: 0,
      kvUtilization: 0,
    } satisfies EngineReading);
  });

  test("older vLLM (gpu_cache_usage_perc only), two data-parallel engines, max_num_seqs when exported", () => {
    const text = [
      'vllm:num_requests_running{engine="0",model_name="m"} 3',
      'vllm:num_requests_running{engine="1",model_name="m"} 5',
      'vllm:num_requests_waiting{engine="0",model_name="m"} 1',
      'vllm:num_requests_waiting{engine="1",model_name="m"} 0',
      'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.2',
      'vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.4',
      'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",engine="0"} 1',
      'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",engine="1"} 1',
    ].join("\n");
    const r = readVllm(parsePrometheusText(text));
    assert.equal(r.running, 8);
    assert.equal(r.waiting, 1);
    assert.ok(Math.abs(r.kvUtilization! - 0.3) < 1e-9);
    assert.equal(r.kvCapacityTokens, 32_000);
    assert.equal(r.maxRunning, 2 * VLLM_DEFAULT_MAX_NUM_SEQS, "the default per engine");
    const withSeqs = readVllm(
      parsePrometheusText(`${text}\nvllm:scheduler_config_info{max_num_seqs="48",engine="0"} 1`),
    );
    assert.equal(withSeqs.maxRunning, 48);
    assert.equal(withSeqs.maxRunningSource, "max_num_seqs");
  });

  test("an exposition without the running gauge is not read as zeros", () => {
    assert.throws(
      () => readVllm(parsePrometheusText('vllm:num_requests_waiting{model_name="m"} 0')),
      (err: unknown) => err instanceof EngineSignalError && /no vllm:num_requests_running/.test(err.message),
    );
    assert.throws(
      () => readVllm(parsePrometheusText("vllm:num_requests_running -1\nvllm:num_requests_waiting 0")),
      /negative/,
    );
  });
});

describe("SGLang signals", () => {
  test("the SGLang mock's /metrics and /get_server_info", async (t) => {
    const worker = await startMockWorker({
      engine: "sglang",
      maxRunningRequests: 12,
      kvTokens: 4096,
      contextLength: 1024,
    });
    t.after(() => worker.close());
    const info = sglangServerInfo(
      JSON.parse(await get(`${worker.url}/get_server_info`)) as Record<string, unknown>,
    );
    assert.deepEqual(info, { maxRunningRequests: 12, maxTotalNumTokens: 4096 });
    const reading = readSglang(parsePrometheusText(await get(`${worker.url}/metrics`)), info);
    assert.deepEqual(reading, {
      maxRunning: 12,
      maxRunningSource: "max_running_requests",
      kvCapacityTokens: 4096,
      running: 0,
      waiting: 0,
      kvUtilization: 0,
    } satisfies EngineReading);
  });

  test("recent SGLang labels (tp_rank, engine_type) are summed; unusable server info is ignored", () => {
    const text = [
      'sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 4',
      'sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 2',
      'sglang:token_usage{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.25',
      'sglang:max_total_num_tokens{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 9000',
    ].join("\n");
    const info = sglangServerInfo({ max_running_requests: "lots", max_total_num_tokens: -1 });
    assert.deepEqual(info, { maxRunningRequests: undefined, maxTotalNumTokens: undefined });
    const r = readSglang(parsePrometheusText(text), info);
    assert.equal(r.running, 4);
    assert.equal(r.waiting, 2);
    assert.equal(r.kvUtilization, 0.25);
    assert.equal(r.kvCapacityTokens, 9000, "from the gauge when /get_server_info gives none");
    assert.equal(r.maxRunning, undefined);
  });
});

describe("the load carried between scrapes", () => {
  const reading = (running: number, waiting: number, kvUtilization?: number): EngineReading => ({
    maxRunning: 8,
    maxRunningSource: "max_num_seqs",
    kvCapacityTokens: 10_000,
    running,
    waiting,
    kvUtilization,
  });
  const own = (
    requestsBefore: number,
    requestsAfter: number,
    promptTokensBefore = 0,
    promptTokensAfter = 0,
  ) => ({
    requestsBefore,
    requestsAfter,
    promptTokensBefore,
    promptTokensAfter,
  });

  test("foreign = engine's running + waiting less our own; open now = foreign + our own now", () => {
    const load = new EngineLoad();
    assert.equal(load.estimatedOpen(4), undefined, "no reading yet");
    assert.equal(load.foreign, 0);
    load.record(reading(5, 2), 1000, own(4, 4));
    assert.equal(load.foreign, 3);
    // Admitted 2 since, completed 3: 7 + 2 - 3 = 6 = 3 others + our 3.
    assert.equal(load.estimatedOpen(3), 6);
    assert.equal(load.ageSeconds(3500), 2.5);
  });

  test("own count taken at its lower of ask and answer; the engine counting fewer than ours is no negative load", () => {
    const load = new EngineLoad();
    // Our 2 were open when asked, 4 when the answer came: two may not have reached the engine yet.
    load.record(reading(5, 0), 0, own(2, 4));
    assert.equal(load.foreign, 3);
    load.record(reading(1, 0), 0, own(4, 4));
    assert.equal(load.foreign, 0);
    assert.equal(load.scrapes, 2);
  });

  test("KV use carried by our prompts: admitted since add, completed since subtract", () => {
    const load = new EngineLoad();
    assert.equal(load.estimatedKvUsedTokens(0), undefined);
    // 25% of 10000 in use; our in-flight prompts held 1000 tokens at the scrape.
    load.record(reading(2, 0, 0.25), 0, own(2, 2, 1000, 1000));
    assert.equal(load.estimatedKvUsedTokens(1000), 2500);
    // A 3000-token prompt admitted since: 5500.
    assert.equal(load.estimatedKvUsedTokens(4000), 5500);
    assert.equal(load.estimatedKvUtilization(4000), 0.55);
    // Every one of ours done: never below 0.
    assert.equal(load.estimatedKvUsedTokens(0), 1500);
    load.record(reading(0, 0, 0), 0, own(0, 0));
    assert.equal(load.estimatedKvUsedTokens(0), 0);
    load.record(reading(0, 0, 0.1), 0, own(1, 1, 5000, 5000));
    assert.equal(load.estimatedKvUsedTokens(0), 0);
    // An engine that exports no KV use: no estimate.
    load.record(reading(0, 0), 0, own(0, 0));
    assert.equal(load.estimatedKvUtilization(0), undefined);
  });

  test("with scrapes off a single reading counts no foreign load; clear forgets", () => {
    const load = new EngineLoad();
    load.record(reading(6, 0), 0, own(0, 0), false);
    assert.equal(load.foreign, 0);
    assert.equal(load.estimatedOpen(1), 1);
    load.clear();
    assert.equal(load.latest, undefined);
  });
});

describe("engine settings", () => {
  test("workers[].engine and --worker-engine: valid values pass, others name the key", async (t) => {
    const good = await writeTempFile(
      t,
      "gw.yaml",
      "workers:\n  - url: http://127.0.0.1:9001\n    engine: vllm\n  - url: http://127.0.0.1:9002\n",
    );
    const settings = resolveGatewaySettings({
      commandLine: { config: good, worker_engine: "sglang", engine_scrape_interval_ms: 0 },
      env: {},
    });
    assert.deepEqual(
      settings.workers.map((w) => w.engine),
      ["vllm", undefined],
    );
    assert.deepEqual(settings.engineSignals, {
      engine: "sglang",
      scrapeIntervalMs: 0,
      scrapeTimeoutMs: 1000,
    });

    const bad = await writeTempFile(
      t,
      "bad.yaml",
      "workers:\n  - url: http://127.0.0.1:9001\n    engine: trt\n",
    );
    assert.throws(
      () => resolveGatewaySettings({ commandLine: { config: bad }, env: {} }),
      /workers\.0\.engine.*must be one of auto, vllm, sglang, openai/s,
    );
    assert.throws(
      () => resolveGatewaySettings({ commandLine: { config: good }, env: { SLUICE_WORKER_ENGINE: "trt" } }),
      /SLUICE_WORKER_ENGINE/,
    );
  });
});

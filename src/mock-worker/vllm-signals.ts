/**
 * vLLM's own signals, as the `--engine vllm` worker serves them.
 *
 * Source: vllm-project/vllm, vllm/v1/metrics/loggers.py (PrometheusStatLogger) at commit 005a810
 * (the v0.10 line, where the deprecated `vllm:gpu_cache_usage_perc` is still exported beside
 * `vllm:kv_cache_usage_perc`), and docs/design/metrics.md. Names, types, label names and bucket
 * bounds are vLLM's; HELP texts are our own words. Every series carries `model_name` (the served
 * model name) and `engine` (the engine core's index, "0" for one engine); `vllm:request_success_total`
 * adds `finished_reason`. `vllm:cache_config_info` is an info-style gauge fixed at 1 whose labels are
 * the CacheConfig's fields as strings (`block_size`, `num_gpu_blocks`, ...) and `engine`: KV capacity
 * in tokens is block_size x num_gpu_blocks. Counters are written with their `_total` suffix, as
 * prometheus_client writes them (its `_created` series are left out).
 *
 * vLLM has no /get_server_info; the context length is `max_model_len` in each /v1/models entry
 * (vllm/entrypoints/openai/protocol.py, ModelCard).
 */

import type { EngineView } from "./engine-view.js";
import { type FamilyDefinition, type Labels, renderFamily, type Series } from "./exposition.js";

const LABELS = ["model_name", "engine"] as const;

/** vLLM's `--block-size` default (tokens per KV block). */
export const VLLM_DEFAULT_BLOCK_SIZE = 16;

const TIME_TO_FIRST_TOKEN_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
  80.0, 160.0, 640.0, 2560.0,
];
const TIME_PER_OUTPUT_TOKEN_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
const REQUEST_LATENCY_BUCKETS = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
  960.0, 1920.0, 7680.0,
];

export const VLLM_HISTOGRAM_BOUNDS = {
  timeToFirstToken: TIME_TO_FIRST_TOKEN_BUCKETS,
  queueTime: REQUEST_LATENCY_BUCKETS,
  e2eLatency: REQUEST_LATENCY_BUCKETS,
  timePerOutputToken: TIME_PER_OUTPUT_TOKEN_BUCKETS,
};

/** The CacheConfig fields the mock reports in `vllm:cache_config_info`, in vLLM's order. */
const CACHE_CONFIG_LABELS = [
  "block_size",
  "gpu_memory_utilization",
  "swap_space",
  "cache_dtype",
  "num_gpu_blocks_override",
  "sliding_window",
  "enable_prefix_caching",
  "cpu_offload_gb",
  "num_gpu_blocks",
  "num_cpu_blocks",
  "engine",
] as const;

function family(name: string, type: FamilyDefinition["type"], help: string, extra: string[] = []) {
  return { name, type, help, labelNames: [...LABELS, ...extra] };
}

const VLLM_FAMILIES = {
  running: family("vllm:num_requests_running", "gauge", "Requests in the running batch."),
  waiting: family("vllm:num_requests_waiting", "gauge", "Requests waiting for a running slot or KV."),
  gpuCacheUsage: family(
    "vllm:gpu_cache_usage_perc",
    "gauge",
    "KV cache usage, 0..1 (deprecated name of vllm:kv_cache_usage_perc).",
  ),
  kvCacheUsage: family("vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 0..1 (1 = full)."),
  cacheConfig: {
    name: "vllm:cache_config_info",
    type: "gauge",
    help: "The cache configuration, as labels (value 1).",
    labelNames: CACHE_CONFIG_LABELS,
  },
  preemptions: family("vllm:num_preemptions_total", "counter", "Preemptions since the engine started."),
  promptTokens: family("vllm:prompt_tokens_total", "counter", "Prompt tokens processed."),
  generationTokens: family("vllm:generation_tokens_total", "counter", "Output tokens generated."),
  requestSuccess: family("vllm:request_success_total", "counter", "Finished requests by reason.", [
    "finished_reason",
  ]),
  timeToFirstToken: {
    ...family("vllm:time_to_first_token_seconds", "histogram", "Time to first token, seconds."),
    buckets: TIME_TO_FIRST_TOKEN_BUCKETS,
  },
  timePerOutputToken: {
    ...family("vllm:time_per_output_token_seconds", "histogram", "Time per output token, seconds."),
    buckets: TIME_PER_OUTPUT_TOKEN_BUCKETS,
  },
  e2eLatency: {
    ...family("vllm:e2e_request_latency_seconds", "histogram", "Request latency end to end, seconds."),
    buckets: REQUEST_LATENCY_BUCKETS,
  },
  queueTime: {
    ...family("vllm:request_queue_time_seconds", "histogram", "Time a request spent waiting, seconds."),
    buckets: REQUEST_LATENCY_BUCKETS,
  },
} satisfies Record<string, FamilyDefinition>;

/** vLLM's finish reasons, each with a series from the start. */
const FINISH_REASONS = ["stop", "length", "abort"] as const;

/** The `vllm:cache_config_info` labels: CacheConfig fields as Python's str() writes them. */
function cacheConfigLabels(view: EngineView): Labels {
  return {
    block_size: String(view.kv.blockSize),
    gpu_memory_utilization: "0.9",
    swap_space: "4",
    cache_dtype: "auto",
    num_gpu_blocks_override: "None",
    sliding_window: "None",
    enable_prefix_caching: "True",
    cpu_offload_gb: "0",
    num_gpu_blocks: String(view.kv.totalBlocks),
    num_cpu_blocks: "None",
    engine: "0",
  };
}

/** The whole `GET /metrics` body of a vLLM worker. */
export function vllmMetrics(view: EngineView): string {
  const labels: Labels = { model_name: view.model, engine: "0" };
  const one = (value: number): Series[] => [{ labels, value }];
  const f = VLLM_FAMILIES;
  const reasons = FINISH_REASONS.map((reason) => ({
    labels: { ...labels, finished_reason: reason },
    value: reason === "abort" ? view.aborted : (view.stats.finishReasons.get(reason) ?? 0),
  }));
  return [
    renderFamily(f.running, one(view.running)),
    renderFamily(f.waiting, one(view.waiting)),
    renderFamily(f.gpuCacheUsage, one(view.kv.usage)),
    renderFamily(f.kvCacheUsage, one(view.kv.usage)),
    renderFamily(f.preemptions, one(view.preemptions)),
    renderFamily(f.promptTokens, one(view.stats.promptTokens)),
    renderFamily(f.generationTokens, one(view.stats.generationTokens)),
    renderFamily(f.requestSuccess, reasons),
    renderFamily(f.timeToFirstToken, [{ labels, value: view.stats.timeToFirstToken }]),
    renderFamily(f.timePerOutputToken, [{ labels, value: view.stats.timePerOutputToken }]),
    renderFamily(f.e2eLatency, [{ labels, value: view.stats.e2eLatency }]),
    renderFamily(f.queueTime, [{ labels, value: view.stats.queueTime }]),
    renderFamily(f.cacheConfig, [{ labels: cacheConfigLabels(view), value: 1 }]),
  ].join("");
}

/** vLLM's `GET /v1/models`: each model card carries `max_model_len`. */
export function vllmModels(models: readonly string[], maxModelLen: number): unknown {
  return {
    object: "list",
    data: models.map((id) => ({
      id,
      object: "model",
      created: 0,
      owned_by: "vllm",
      root: models[0],
      parent: null,
      max_model_len: maxModelLen,
      permission: [],
    })),
  };
}

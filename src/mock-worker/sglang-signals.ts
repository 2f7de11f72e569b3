/**
 * SGLang's own signals, as the `--engine sglang` worker serves them.
 *
 * Sources: sgl-project/sglang, python/sglang/srt/metrics/collector.py at commit 00ae9c1
 * (SchedulerMetricsCollector and TokenizerMetricsCollector: names, types, bucket bounds) and
 * docs/references/production_metrics.md (the exposition as SGLang documents it, every series
 * labelled `model_name` only; recent releases add `engine_type`, `tp_rank` and `pp_rank`, so a
 * reader should select by `model_name` and ignore labels it does not know). HELP texts are our own
 * words. `GET /get_server_info` is python/sglang/srt/entrypoints/http_server.py: the server
 * arguments (`max_running_requests`, `context_length`, ...) merged with the scheduler's info
 * (`max_total_num_tokens`, the KV pool's size in tokens, and `max_req_input_len`).
 */

import type { EngineView } from "./engine-view.js";
import { type FamilyDefinition, type Labels, renderFamily, type Series } from "./exposition.js";

const LABELS = ["model_name"] as const;

const TIME_TO_FIRST_TOKEN_BUCKETS = [
  0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
];
const E2E_LATENCY_BUCKETS = [
  0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400,
];
const INTER_TOKEN_LATENCY_BUCKETS = [
  0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6,
  0.8, 1.0, 2.0, 4.0, 6.0, 8.0,
];
const QUEUE_TIME_BUCKETS = [
  0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600,
  700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
];

export const SGLANG_HISTOGRAM_BOUNDS = {
  timeToFirstToken: TIME_TO_FIRST_TOKEN_BUCKETS,
  queueTime: QUEUE_TIME_BUCKETS,
  e2eLatency: E2E_LATENCY_BUCKETS,
  timePerOutputToken: INTER_TOKEN_LATENCY_BUCKETS,
};

function family(name: string, type: FamilyDefinition["type"], help: string): FamilyDefinition {
  return { name, type, help, labelNames: LABELS };
}

const SGLANG_FAMILIES = {
  running: family("sglang:num_running_reqs", "gauge", "Requests running."),
  usedTokens: family("sglang:num_used_tokens", "gauge", "KV tokens in use."),
  tokenUsage: family("sglang:token_usage", "gauge", "KV token pool usage, 0..1."),
  queue: family("sglang:num_queue_reqs", "gauge", "Requests in the waiting queue."),
  cacheHitRate: family("sglang:cache_hit_rate", "gauge", "Prefix cache hit rate."),
  maxTotalTokens: family("sglang:max_total_num_tokens", "gauge", "Size of the KV token pool."),
  retracted: family(
    "sglang:num_retracted_requests_total",
    "counter",
    "Requests retracted to free KV since the engine started.",
  ),
  promptTokens: family("sglang:prompt_tokens_total", "counter", "Prompt tokens processed."),
  generationTokens: family("sglang:generation_tokens_total", "counter", "Output tokens generated."),
  requests: family("sglang:num_requests_total", "counter", "Requests finished."),
  timeToFirstToken: {
    ...family("sglang:time_to_first_token_seconds", "histogram", "Time to first token, seconds."),
    buckets: TIME_TO_FIRST_TOKEN_BUCKETS,
  },
  interTokenLatency: {
    ...family("sglang:inter_token_latency_seconds", "histogram", "Time between output tokens, seconds."),
    buckets: INTER_TOKEN_LATENCY_BUCKETS,
  },
  e2eLatency: {
    ...family("sglang:e2e_request_latency_seconds", "histogram", "Request latency end to end, seconds."),
    buckets: E2E_LATENCY_BUCKETS,
  },
  queueTime: {
    ...family("sglang:queue_time_seconds", "histogram", "Time a request spent queued, seconds."),
    buckets: QUEUE_TIME_BUCKETS,
  },
} satisfies Record<string, FamilyDefinition>;

/** The whole `GET /metrics` body of an SGLang worker. */
export function sglangMetrics(view: EngineView): string {
  const labels: Labels = { model_name: view.model };
  const one = (value: number): Series[] => [{ labels, value }];
  const f = SGLANG_FAMILIES;
  return [
    renderFamily(f.running, one(view.running)),
    renderFamily(f.usedTokens, one(view.kv.usedTokens)),
    renderFamily(f.tokenUsage, one(view.kv.usage)),
    renderFamily(f.queue, one(view.waiting)),
    renderFamily(f.cacheHitRate, one(view.prefixHitRate)),
    renderFamily(f.maxTotalTokens, one(view.kv.capacityTokens)),
    renderFamily(f.retracted, one(view.preemptions)),
    renderFamily(f.promptTokens, one(view.stats.promptTokens)),
    renderFamily(f.generationTokens, one(view.stats.generationTokens)),
    renderFamily(f.requests, one(view.stats.finished)),
    renderFamily(f.timeToFirstToken, [{ labels, value: view.stats.timeToFirstToken }]),
    renderFamily(f.interTokenLatency, [{ labels, value: view.stats.timePerOutputToken }]),
    renderFamily(f.e2eLatency, [{ labels, value: view.stats.e2eLatency }]),
    renderFamily(f.queueTime, [{ labels, value: view.stats.queueTime }]),
  ].join("");
}

/** What the scheduler adds to SGLang's `/get_server_info`: the KV pool and the longest prompt. */
export function sglangSchedulerInfo(view: EngineView): Record<string, unknown> {
  return {
    max_total_num_tokens: view.kv.capacityTokens,
    max_req_input_len: Math.min(view.contextLength, view.kv.capacityTokens) - 1,
  };
}

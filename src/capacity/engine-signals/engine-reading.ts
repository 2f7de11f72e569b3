/**
 * One scrape of an engine's own signals, reduced to what admission needs: how many requests it can
 * run at once, its KV cache in tokens, how many requests it runs and queues now, and its KV use.
 *
 * vLLM (vllm/v1/metrics/loggers.py): `vllm:num_requests_running`, `vllm:num_requests_waiting`,
 * `vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` before it), and the info gauge
 * `vllm:cache_config_info` whose labels carry `block_size` and `num_gpu_blocks`. vLLM exports no
 * `max_num_seqs`; when some `vllm:*_info` gauge carries one it is used, else vLLM's default (256)
 * per engine, never more than the engine's KV blocks (each running sequence holds at least one).
 * SGLang (python/sglang/srt/metrics/collector.py, /get_server_info): `sglang:num_running_reqs`,
 * `sglang:num_queue_reqs`, `sglang:token_usage`, and from /get_server_info
 * `max_running_requests` and `max_total_num_tokens` (the KV pool in tokens).
 * Series are summed across label sets (data-parallel engines, several served model names).
 */
import type { PrometheusSample } from "./prometheus-text.js";

/** vLLM's `--max-num-seqs` default for its OpenAI server, per engine core. */
export const VLLM_DEFAULT_MAX_NUM_SEQS = 256;

/** Where a reading's `maxRunning` came from (shown in the admin status). */
export type MaxRunningSource =
  | "max_num_seqs"
  | "vllm_default"
  | "vllm_default_kv_blocks"
  | "max_running_requests"
  | "none";

export interface EngineReading {
  /** Most requests the engine runs at once; undefined when the engine does not say. */
  readonly maxRunning: number | undefined;
  readonly maxRunningSource: MaxRunningSource;
  /** KV cache capacity in tokens; undefined when not exported. */
  readonly kvCapacityTokens: number | undefined;
  /** Requests in the engine's running batch. */
  readonly running: number;
  /** Requests queued inside the engine (waiting for a running slot or KV). */
  readonly waiting: number;
  /** KV cache in use, 0..1; undefined when not exported. */
  readonly kvUtilization: number | undefined;
}

/** A /metrics body that answers but lacks what the engine must export. */
export class EngineSignalError extends Error {}

function series(samples: readonly PrometheusSample[], name: string): PrometheusSample[] {
  return samples.filter((s) => s.name === name && Number.isFinite(s.value));
}

function sumOf(samples: readonly PrometheusSample[], name: string): number | undefined {
  const found = series(samples, name);
  if (found.length === 0) return undefined;
  let sum = 0;
  for (const s of found) sum += s.value;
  return sum;
}

function meanOf(samples: readonly PrometheusSample[], name: string): number | undefined {
  const found = series(samples, name);
  if (found.length === 0) return undefined;
  return (sumOf(found, name) ?? 0) / found.length;
}

function required(samples: readonly PrometheusSample[], name: string): number {
  const value = sumOf(samples, name);
  if (value === undefined) throw new EngineSignalError(`no ${name} series`);
  if (value < 0) throw new EngineSignalError(`${name} is negative (${value})`);
  return value;
}

function positiveInt(raw: string | undefined): number | undefined {
  if (raw === undefined || !/^\d+$/.test(raw)) return undefined;
  const n = Number(raw);
  return n >= 1 && Number.isSafeInteger(n) ? n : undefined;
}

function utilization(value: number | undefined): number | undefined {
  return value === undefined ? undefined : Math.min(1, Math.max(0, value));
}

/** Does the exposition come from vLLM / SGLang? (auto recognition) */
export function exportsFamily(samples: readonly PrometheusSample[], prefix: "vllm:" | "sglang:"): boolean {
  return samples.some((s) => s.name.startsWith(prefix));
}

export function readVllm(samples: readonly PrometheusSample[]): EngineReading {
  const running = required(samples, "vllm:num_requests_running");
  const waiting = required(samples, "vllm:num_requests_waiting");
  const kvUtilization = utilization(
    meanOf(samples, "vllm:kv_cache_usage_perc") ?? meanOf(samples, "vllm:gpu_cache_usage_perc"),
  );
  let kvCapacityTokens: number | undefined;
  let kvBlocks = 0;
  const cacheInfo = series(samples, "vllm:cache_config_info");
  for (const s of cacheInfo) {
    const blockSize = positiveInt(s.labels.block_size);
    const blocks = positiveInt(s.labels.num_gpu_blocks);
    if (blockSize === undefined || blocks === undefined) continue;
    kvCapacityTokens = (kvCapacityTokens ?? 0) + blockSize * blocks;
    kvBlocks += blocks;
  }
  const engines = Math.max(1, cacheInfo.length);
  let maxNumSeqs: number | undefined;
  for (const s of samples) {
    if (!s.name.startsWith("vllm:") || !s.name.endsWith("_info")) continue;
    const n = positiveInt(s.labels.max_num_seqs);
    if (n !== undefined) maxNumSeqs = (maxNumSeqs ?? 0) + n;
  }
  let maxRunning: number;
  let maxRunningSource: MaxRunningSource;
  if (maxNumSeqs !== undefined) {
    maxRunning = maxNumSeqs;
    maxRunningSource = "max_num_seqs";
  } else if (kvBlocks > 0 && kvBlocks < VLLM_DEFAULT_MAX_NUM_SEQS * engines) {
    maxRunning = kvBlocks;
    maxRunningSource = "vllm_default_kv_blocks";
  } else {
    maxRunning = VLLM_DEFAULT_MAX_NUM_SEQS * engines;
    maxRunningSource = "vllm_default";
  }
  return { maxRunning, maxRunningSource, kvCapacityTokens, running, waiting, kvUtilization };
}

/** What /get_server_info says of capacity (the caller parsed its JSON). */
export interface SglangServerInfo {
  readonly maxRunningRequests: number | undefined;
  readonly maxTotalNumTokens: number | undefined;
}

export function sglangServerInfo(info: Record<string, unknown>): SglangServerInfo {
  const int = (v: unknown) => (typeof v === "number" && Number.isSafeInteger(v) && v >= 1 ? v : undefined);
  return {
    maxRunningRequests: int(info.max_running_requests),
    maxTotalNumTokens: int(info.max_total_num_tokens),
  };
}

export function readSglang(
  samples: readonly PrometheusSample[],
  info: SglangServerInfo | undefined,
): EngineReading {
  const running = required(samples, "sglang:num_running_reqs");
  const waiting = required(samples, "sglang:num_queue_reqs");
  const maxRunning = info?.maxRunningRequests;
  return {
    maxRunning,
    maxRunningSource: maxRunning === undefined ? "none" : "max_running_requests",
    kvCapacityTokens: info?.maxTotalNumTokens ?? sumOf(samples, "sglang:max_total_num_tokens"),
    running,
    waiting,
    kvUtilization: utilization(meanOf(samples, "sglang:token_usage")),
  };
}

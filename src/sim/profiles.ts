/**
 * Named worker profiles for the simulator's continuous-batching model (see worker.ts and
 * docs/simulate.md). A profile is a model of an inference engine, not a measurement of one.
 *
 * The step-time coefficients are the "blackbox" latency model of BLIS (the llm-d inference-sim,
 * github.com/inference-sim/inference-sim, `defaults.yaml`): per engine iteration,
 *   step_us = beta0 + beta1 * prefill_tokens + beta2 * decode_tokens,
 * fitted by its authors against vLLM v0.8.4 on the named GPU and tensor parallelism. The KV
 * capacity is that file's `total_kv_blocks` times vLLM's default block size of 16 tokens. The batch
 * limits are engine settings, not fitted: max_running is vLLM's `max_num_seqs` and
 * max_batched_tokens its `max_num_batched_tokens` (chunked prefill); set them to your engine's flags.
 */

export type KvPolicy = "recompute" | "reserve";

export interface WorkerProfile {
  /** Fixed cost per iteration, microseconds. */
  beta0: number;
  /** Per prefill token in the iteration, microseconds. */
  beta1: number;
  /** Per decode token in the iteration (one per decoding request), microseconds. */
  beta2: number;
  /** Requests in the running batch at most (the capacity the gateway discovers). */
  maxRunning: number;
  /** KV-cache capacity in tokens. */
  kvTokens: number;
  /** Token budget of one iteration (decode tokens first, then prefill chunks). */
  maxBatchedTokens: number;
  /**
   * What happens when the KV cache runs out. `recompute`: admit a request when its prompt fits,
   * and when decoding fills the cache, preempt the newest running request back to the worker's
   * queue (vLLM's default; its prefill is redone later). `reserve`: admit only when the prompt plus
   * max_tokens fits, so nothing is ever preempted inside the worker (TGI/SGLang-style reservation).
   */
  kvPolicy: KvPolicy;
  /**
   * Prefix cache size in tokens (0 or absent: none). Jobs that carry `prefixBlocks` skip the prefill
   * of their prompt's leading blocks found in it (src/mock-worker/prefix-cache.ts's model).
   */
  prefixCacheTokens?: number | undefined;
}

export interface NamedProfile extends WorkerProfile {
  description: string;
  source: string;
}

const BLIS = "BLIS (llm-d inference-sim) defaults.yaml, blackbox coefficients for vLLM v0.8.4";

export const WORKER_PROFILES: Readonly<Record<string, NamedProfile>> = {
  "llama3-8b-h100": {
    description: "Llama 3.1 8B Instruct on one H100 (TP1), vLLM",
    source: `${BLIS}: meta-llama/llama-3.1-8b-instruct, H100, tensor_parallelism 1 (total_kv_blocks 29205)`,
    beta0: 5752.705,
    beta1: 17.2509,
    beta2: 5.9991,
    maxRunning: 64,
    kvTokens: 29205 * 16,
    maxBatchedTokens: 8192,
    kvPolicy: "recompute",
  },
  "llama3-70b-4xh100": {
    description: "Llama 3.3 70B Instruct on four H100s (TP4), vLLM",
    source: `${BLIS}: meta-llama/llama-3.3-70b-instruct, H100, tensor_parallelism 4 (total_kv_blocks 128273)`,
    beta0: 12601.271,
    beta1: 76.4228,
    beta2: 66.844,
    maxRunning: 64,
    kvTokens: 128273 * 16,
    maxBatchedTokens: 8192,
    kvPolicy: "recompute",
  },
  "qwen2.5-7b-h100": {
    description: "Qwen 2.5 7B Instruct (FP8) on one H100 (TP1), vLLM",
    source: `${BLIS}: redhatai/qwen2.5-7b-instruct-fp8-dynamic, H100, tensor_parallelism 1 (total_kv_blocks 74768)`,
    beta0: 5174.311,
    beta1: 13.2414,
    beta2: 4.8985,
    maxRunning: 64,
    kvTokens: 74768 * 16,
    maxBatchedTokens: 8192,
    kvPolicy: "recompute",
  },
  "smollm3-3b-h100": {
    description: "SmolLM3 3B (FP8) on one H100 (TP1), vLLM: a small model",
    source: `${BLIS}: redhatai/smollm3-3b-fp8-dynamic, H100, tensor_parallelism 1 (total_kv_blocks 62704)`,
    beta0: 3535.419,
    beta1: 27.4695,
    beta2: 8.3246,
    maxRunning: 32,
    kvTokens: 62704 * 16,
    maxBatchedTokens: 4096,
    kvPolicy: "recompute",
  },
  toy: {
    description: "a deliberately small made-up worker for tests and examples (tight KV cache)",
    source: "illustrative values, not fitted to any engine",
    beta0: 5000,
    beta1: 20,
    beta2: 40,
    maxRunning: 16,
    kvTokens: 32768,
    maxBatchedTokens: 2048,
    kvPolicy: "recompute",
  },
};

export const PROFILE_NAMES = Object.keys(WORKER_PROFILES);

/**
 * Named worker profiles for the simulator's continuous-batching model (see worker.ts and
 * docs/simulate.md). A profile is a model of an inference engine, not a measurement of one.
 *
 * The step-time coefficients are the "blackbox" latency model of BLIS (the llm-d inference-sim,
 * github.com/inference-sim/inference-sim, `defaults.yaml`): per engine iteration,
 *   step_us = beta0 + beta1 * prefill_tokens + beta2 * decode_tokens,
 * fitted by its authors against vLLM v0.8.4 on the named GPU and tensor parallelism. On top of it
 * (issue 36), attention that grows with context, from the model's shape and the GPU's figures
 * (worker.ts): each decoding request reads its whole KV cache every iteration, and each prefill
 * token attends to every token before it.
 *
 * The KV capacity is sized from GPU memory as vLLM sizes it: gpu_memory_utilization (0.9) of the
 * GPUs' memory, less the weights and an activation reserve, over the KV bytes of one token
 * (2 x layers x KV heads x head dim x bytes per element). (BLIS's `total_kv_blocks` agrees with this
 * within 5% for the 1-GPU profiles, and is 4x it for the 70B on 4 GPUs: the simulated KV cache
 * never bound there, 6% peak on the Azure trace.)
 *
 * The batch limits are engine settings, not fitted: max_running is vLLM's `max_num_seqs` and
 * max_batched_tokens its `max_num_batched_tokens` (chunked prefill). Its default on GPUs of 70 GiB
 * and more is 8192 for the OpenAI server in vLLM V1 (`EngineArgs.get_batch_defaults`,
 * vllm/engine/arg_utils.py), and SGLang's `chunked_prefill_size` is 8192 on H100-class GPUs
 * (server_args.py); neither depends on the model's size. Set them to your engine's flags.
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
  /** Attention: microseconds per context token of each decoding request, per iteration (0: none). */
  attnDecodeUs?: number | undefined;
  /** Attention: microseconds per (prefill token, earlier token) pair (0: none). */
  attnPrefillUs?: number | undefined;
}

interface NamedProfile extends WorkerProfile {
  description: string;
  source: string;
  /** The hardware and model figures the KV capacity and attention cost come from (absent: given directly). */
  hardware?: Hardware | undefined;
}

/** The figures the KV cache and attention cost are derived from. */
interface Hardware {
  gpus: number;
  /** Memory per GPU, GiB. */
  gpuMemGiB: number;
  /** HBM bandwidth per GPU, TB/s, and dense BF16 TFLOP/s per GPU (datasheet). */
  hbmTBs: number;
  tflops: number;
  /** Parameters (billions) and bytes per weight (2: BF16, 1: FP8). */
  paramsB: number;
  weightBytes: number;
  layers: number;
  kvHeads: number;
  /** Query heads (attention FLOPs) and the head dimension. */
  heads: number;
  headDim: number;
  /** Bytes per KV element (2: BF16). */
  kvBytes: number;
}

/** vLLM's default gpu_memory_utilization, and what the runtime keeps for activations and CUDA graphs, GiB per GPU. */
const GPU_MEMORY_UTILIZATION = 0.9;
const ACTIVATION_RESERVE_GIB = 2;
/** Fractions of the datasheet figures kernels reach: memory-bound attention reads, compute-bound prefill attention. */
const HBM_EFFICIENCY = 0.7;
const FLOPS_EFFICIENCY = 0.5;
const GIB = 1024 ** 3;

/** KV bytes of one token: K and V, every layer, every KV head. */
export function kvBytesPerToken(h: Hardware): number {
  return 2 * h.layers * h.kvHeads * h.headDim * h.kvBytes;
}

/** The KV cache in tokens that vLLM would allocate on this hardware. */
export function kvTokensOf(h: Hardware): number {
  const free = h.gpus * (h.gpuMemGiB * GPU_MEMORY_UTILIZATION - ACTIVATION_RESERVE_GIB) * GIB;
  const weights = h.paramsB * 1e9 * h.weightBytes;
  return Math.floor((free - weights) / kvBytesPerToken(h));
}

/**
 * Attention cost coefficients, microseconds: per context token a decoding request reads (its KV
 * cache, memory-bound), and per (query, key) pair a prefill computes (4 x layers x heads x head dim
 * FLOPs, compute-bound). Both spread over the tensor-parallel GPUs.
 */
function attentionCost(h: Hardware): { decodeUsPerToken: number; prefillUsPerPair: number } {
  const bytesPerUs = h.gpus * h.hbmTBs * 1e6 * HBM_EFFICIENCY;
  const flopsPerUs = h.gpus * h.tflops * 1e6 * FLOPS_EFFICIENCY;
  return {
    decodeUsPerToken: kvBytesPerToken(h) / bytesPerUs,
    prefillUsPerPair: (4 * h.layers * h.heads * h.headDim) / flopsPerUs,
  };
}

const H100 = { gpuMemGiB: 80, hbmTBs: 3.35, tflops: 989 };

function fromHardware(
  p: Omit<NamedProfile, "kvTokens" | "attnDecodeUs" | "attnPrefillUs" | "hardware">,
  h: Hardware,
): NamedProfile {
  const a = attentionCost(h);
  return {
    ...p,
    hardware: h,
    kvTokens: kvTokensOf(h),
    attnDecodeUs: a.decodeUsPerToken,
    attnPrefillUs: a.prefillUsPerPair,
  };
}

const BLIS = "BLIS (llm-d inference-sim) defaults.yaml, blackbox coefficients for vLLM v0.8.4";

export const WORKER_PROFILES: Readonly<Record<string, NamedProfile>> = {
  "llama3-8b-h100": fromHardware(
    {
      description: "Llama 3.1 8B Instruct on one H100 (TP1), vLLM",
      source: `${BLIS}: meta-llama/llama-3.1-8b-instruct, H100, tensor_parallelism 1`,
      beta0: 5752.705,
      beta1: 17.2509,
      beta2: 5.9991,
      maxRunning: 64,
      maxBatchedTokens: 8192,
      kvPolicy: "recompute",
    },
    {
      ...H100,
      gpus: 1,
      paramsB: 8.03,
      weightBytes: 2,
      layers: 32,
      kvHeads: 8,
      heads: 32,
      headDim: 128,
      kvBytes: 2,
    },
  ),
  "llama3-70b-4xh100": fromHardware(
    {
      description: "Llama 3.3 70B Instruct on four H100s (TP4), vLLM",
      source: `${BLIS}: meta-llama/llama-3.3-70b-instruct, H100, tensor_parallelism 4`,
      beta0: 12601.271,
      beta1: 76.4228,
      beta2: 66.844,
      maxRunning: 64,
      maxBatchedTokens: 8192,
      kvPolicy: "recompute",
    },
    {
      ...H100,
      gpus: 4,
      paramsB: 70.6,
      weightBytes: 2,
      layers: 80,
      kvHeads: 8,
      heads: 64,
      headDim: 128,
      kvBytes: 2,
    },
  ),
  "qwen2.5-7b-h100": fromHardware(
    {
      description: "Qwen 2.5 7B Instruct (FP8) on one H100 (TP1), vLLM",
      source: `${BLIS}: redhatai/qwen2.5-7b-instruct-fp8-dynamic, H100, tensor_parallelism 1`,
      beta0: 5174.311,
      beta1: 13.2414,
      beta2: 4.8985,
      maxRunning: 64,
      maxBatchedTokens: 8192,
      kvPolicy: "recompute",
    },
    {
      ...H100,
      gpus: 1,
      paramsB: 7.62,
      weightBytes: 1,
      layers: 28,
      kvHeads: 4,
      heads: 28,
      headDim: 128,
      kvBytes: 2,
    },
  ),
  "smollm3-3b-h100": fromHardware(
    {
      description: "SmolLM3 3B (FP8) on one H100 (TP1), vLLM: a small model",
      source: `${BLIS}: redhatai/smollm3-3b-fp8-dynamic, H100, tensor_parallelism 1`,
      beta0: 3535.419,
      beta1: 27.4695,
      beta2: 8.3246,
      maxRunning: 32,
      maxBatchedTokens: 8192,
      kvPolicy: "recompute",
    },
    {
      ...H100,
      gpus: 1,
      paramsB: 3.08,
      weightBytes: 1,
      layers: 36,
      kvHeads: 4,
      heads: 16,
      headDim: 128,
      kvBytes: 2,
    },
  ),
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

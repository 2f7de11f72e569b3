/**
 * Each simulator profile against a published measurement (docs/simulate.md, "Each profile against
 * a published measurement"). A measurement is kept with the workload exactly as it was run (every
 * request's prompt and output length, how many were in flight), so the simulator can run the same
 * requests on the profile's worker and the two can be compared figure by figure.
 *
 * The worker is driven on its own (no gateway, no admission): the published runs sent straight to
 * the engine, so the worker model alone must account for the latency.
 */
import { EventQueue, SimClock } from "./clock.js";
import { WORKER_PROFILES, type WorkerProfile } from "./profiles.js";
import { Job, Worker, type WorkerListener } from "./worker.js";

/** One request of a published run: its prompt tokens and the output tokens it really produced. */
export interface RunRequest {
  prompt: number;
  output: number;
}

/** Latency figures as vLLM's benchmark_serving reports them (means over the run, ms). */
export interface LatencyFigures {
  /** Mean time to first token. */
  ttftMs: number;
  /** Mean over requests of (end - first token) / (output - 1), requests with output > 1. */
  tpotMs: number;
  /** Mean gap between consecutive output tokens over all gaps of all requests. */
  itlMs: number;
}

export interface PublishedMeasurement {
  /** Who published it and where: a repository path at a commit, or an address. */
  source: string;
  model: string;
  hardware: string;
  engine: string;
  /** The run in words, as the docs print it. */
  workload: string;
  requests: readonly RunRequest[];
  /** Requests in flight at most (closed loop); requests.length sends them all at once. */
  concurrency: number;
  /** Engine settings of the run that differ from the profile's (engine flags, not fitted coefficients). */
  engineSettings: Partial<Pick<WorkerProfile, "maxRunning" | "maxBatchedTokens">>;
  published: LatencyFigures;
}

export interface ProfileCalibration {
  profile: string;
  /** The measurement the profile is held to; absent when none was found for its model and GPU. */
  measurement?: PublishedMeasurement | undefined;
  /** Where a measurement was looked for (printed when none was found or the one found is imperfect). */
  searched: readonly string[];
}

/** How far a simulated figure may be from the published one and still count as reproducing it. */
export const CALIBRATION_TOLERANCE = 0.15;

/**
 * Runs `requests` through one worker with at most `concurrency` in flight (each finished request
 * lets the next one in, with no think time), all starting at time 0, and measures them as
 * benchmark_serving does.
 */
export function simulateRun(
  profile: WorkerProfile,
  requests: readonly RunRequest[],
  concurrency: number,
): LatencyFigures {
  if (requests.length === 0) throw new Error("simulateRun: no requests");
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new Error(`simulateRun: concurrency must be a positive integer, got ${concurrency}`);
  }
  const queue = new EventQueue();
  const clock = new SimClock(queue, 0);
  const sentAt = new Float64Array(requests.length);
  const firstAt = new Float64Array(requests.length).fill(Number.NaN);
  const doneAt = new Float64Array(requests.length).fill(Number.NaN);
  let next = 0;
  let worker: Worker;
  const send = () => {
    const i = next++;
    const r = requests[i]!;
    sentAt[i] = clock.now();
    worker.submit(new Job(r.prompt, r.output, r.output, i));
  };
  const listener: WorkerListener = {
    firstToken: (job, t) => {
      firstAt[job.ref as number] = t;
    },
    finished: (job, t) => {
      doneAt[job.ref as number] = t;
      if (next < requests.length) send();
    },
    failed: (job, _t, reason) => {
      throw new Error(`simulateRun: request ${job.ref as number} failed (${reason})`);
    },
  };
  worker = new Worker(0, "calibration", profile, clock, listener);
  while (next < Math.min(concurrency, requests.length)) send();
  for (let ev = queue.pop(); ev !== undefined; ev = queue.pop()) {
    clock.current = ev.t;
    ev.fn();
  }
  let ttft = 0;
  let tpotSum = 0;
  let tpotCount = 0;
  let gapTime = 0;
  let gaps = 0;
  requests.forEach((r, i) => {
    ttft += firstAt[i]! - sentAt[i]!;
    const decode = doneAt[i]! - firstAt[i]!;
    if (r.output > 1) {
      tpotSum += decode / (r.output - 1);
      tpotCount++;
    }
    gapTime += decode;
    gaps += r.output - 1;
  });
  return {
    ttftMs: ttft / requests.length,
    tpotMs: tpotCount > 0 ? tpotSum / tpotCount : Number.NaN,
    itlMs: gaps > 0 ? gapTime / gaps : Number.NaN,
  };
}

/** The profile with the run's engine settings applied (its coefficients untouched). */
export function profileForRun(profile: string, m: PublishedMeasurement): WorkerProfile {
  const p = WORKER_PROFILES[profile];
  if (p === undefined) throw new Error(`no worker profile named ${profile}`);
  return { ...p, ...m.engineSettings };
}

/** Simulated over published, less one: +0.10 is 10% above the measurement. */
export function relativeError(simulated: number, published: number): number {
  return simulated / published - 1;
}

export function withinTolerance(simulated: LatencyFigures, published: LatencyFigures): boolean {
  return (
    Math.abs(relativeError(simulated.ttftMs, published.ttftMs)) <= CALIBRATION_TOLERANCE &&
    Math.abs(relativeError(simulated.tpotMs, published.tpotMs)) <= CALIBRATION_TOLERANCE
  );
}

// Lambda Labs' vLLM benchmark (github.com/LambdaLabsML/vllm-benchmark, benchmark.py at the same
// commit): vLLM v0.5.4 in its official image, one H100 80GB SXM, --max-model-len 2048,
// --max-num-seqs 256, no --num-scheduler-steps (the single-step scheduler: every output token is
// streamed as its iteration ends) and no chunked prefill, so an iteration's token budget is
// max(max_model_len, 2048) = 2048. benchmark_serving sent 10 ShareGPT prompts at once (request
// rate inf); the result file lists every request's prompt and output length.
const LAMBDA_V054_LLAMA3_8B: PublishedMeasurement = {
  source:
    "LambdaLabsML/vllm-benchmark, results_v0.5.4/1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_mml2048_mns256_nss0_np10.json (commit 680cc0a3f925fbf1700b8ba928c7ceebe0015986, run 2024-09-15)",
  model: "meta-llama/Meta-Llama-3-8B-Instruct (BF16; the same shapes as Llama 3.1 8B)",
  hardware: "1 x H100 80GB SXM, TP1",
  engine: "vLLM v0.5.4, single-step scheduling, max_num_seqs 256, no chunked prefill",
  workload: "10 ShareGPT requests sent at once (1,369 prompt and 1,866 output tokens in all)",
  requests: [
    { prompt: 13, output: 120 },
    { prompt: 25, output: 428 },
    { prompt: 27, output: 233 },
    { prompt: 10, output: 194 },
    { prompt: 329, output: 101 },
    { prompt: 29, output: 741 },
    { prompt: 399, output: 9 },
    { prompt: 328, output: 3 },
    { prompt: 4, output: 6 },
    { prompt: 205, output: 31 },
  ],
  concurrency: 10,
  engineSettings: { maxRunning: 256, maxBatchedTokens: 2048 },
  published: { ttftMs: 55.27, tpotMs: 10.15, itlMs: 8.72 },
};

const SEARCHED_COMMON = [
  "BLIS (inference-sim/inference-sim, inference-sim/training, inference-sim/sim-to-real-accuracy-validation): the vLLM runs its coefficients were fitted on are not published (its repositories hold simulated golden figures; the ground-truth directories are untracked)",
  "Vidur (microsoft/vidur): operator profiles, no end-to-end serving table for these models",
  "LambdaLabsML/vllm-benchmark: Llama 3 / 3.1 8B and 70B only",
  "NVIDIA NIM benchmarking pages: TensorRT-LLM, mostly FP8, not these engines and precisions",
  "tenstorrent/tt-inference-server GPU reference runs: H100 tables for other models only",
  "vLLM issues and pull requests, SGLang benchmark pages, NVIDIA Dynamo pages, GPUStack performance lab, Red Hat AI model cards, Azure and Ori blog posts",
];

export const PROFILE_CALIBRATIONS: readonly ProfileCalibration[] = [
  {
    profile: "llama3-8b-h100",
    measurement: LAMBDA_V054_LLAMA3_8B,
    searched: SEARCHED_COMMON,
  },
  {
    profile: "llama3-70b-4xh100",
    searched: [
      ...SEARCHED_COMMON,
      "LambdaLabsML/vllm-benchmark benchmark_v0.md has Llama 3.1 70B on four H100s (vLLM v0.6.0, one scheduler step: median TPOT 102.99 ms, median ITL 63.54 ms) but for 5,000 ShareGPT prompts whose lengths are not published, so the run cannot be replayed",
      "NVIDIA Dynamo's Llama-3.3-70B topology benchmark (4 x H100, TP4, vLLM, 8192/1024 tokens, concurrency 64) runs the FP8 model and publishes no figures",
    ],
  },
  {
    profile: "qwen2.5-7b-h100",
    searched: [
      ...SEARCHED_COMMON,
      "no TTFT/TPOT table for Qwen 2.5 7B (FP8 or BF16) on an H100 with a stated load was found; the published Qwen 2.5 7B figures are for V100s and Ascend",
    ],
  },
  {
    profile: "smollm3-3b-h100",
    searched: [
      ...SEARCHED_COMMON,
      "no serving measurement of SmolLM3 3B on an H100 was found (its pages give model cards and llama.cpp figures on consumer GPUs)",
    ],
  },
];

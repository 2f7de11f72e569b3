/**
 * Public types of the mock worker and the defaults its options resolve to.
 */

import { ENGINES, type Engine } from "./engine-view.js";
import type { PrefixCacheCounters } from "./prefix-cache.js";
import type { CapacityCounters, ReceivedRequest } from "./tracking.js";
import { VLLM_DEFAULT_BLOCK_SIZE } from "./vllm-signals.js";

export type { CapacityCounters, ReceivedRequest } from "./tracking.js";

export interface MockWorkerOptions {
  /**
   * The engine whose own signals the worker serves beside the OpenAI API (default none: today's
   * SGLang-like worker, without /metrics). `vllm`: vLLM's /metrics, /v1/models with
   * `max_model_len`, no /get_server_info. `sglang`: SGLang's /metrics, and /get_server_info with
   * the KV pool's size (`max_total_num_tokens`). Either turns the KV model on (`kvTokens`).
   */
  engine?: Engine;
  /**
   * KV cache capacity in tokens: the running set is bounded by memory too. A request waits at the
   * engine until its prompt fits; a running request whose next token does not fit preempts the
   * newest running one, which is recomputed later. Default none (memory never binds), or with an
   * engine maxRunningRequests x contextLength (every running request can reach full context).
   * Like vLLM, a cache that cannot hold one request of the full context length is refused.
   */
  kvTokens?: number;
  /** Tokens per KV block (vLLM's `--block-size`), default 16 with engine vllm, else 1 (SGLang's pages of one token). */
  kvBlockSize?: number;
  /** 0 = ephemeral (default 0). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /**
   * Default 64 (256 with engine vllm, vLLM's `--max-num-seqs` default); reported by
   * /get_server_info; requests beyond it wait inside the worker (FIFO).
   */
  maxRunningRequests?: number;
  /** Default "mock-llm". */
  model?: string;
  /**
   * Every model the worker serves (aliases, LoRA adapters), listed at `GET /v1/models`; default
   * `[model]`. Answers are labelled with the request's model when it is one of these.
   */
  servedModels?: string[];
  /** Like vLLM: a request naming a model the worker does not serve gets 404 (default false). */
  strictModels?: boolean;
  /** Serve `GET /v1/models` (default true; false = 404, as a worker with only SGLang's native API). */
  modelsEndpoint?: boolean;
  /** Base time to first token, default 20. */
  ttftMs?: number;
  /** Base per-token delay (inter-token latency), default 5. */
  tokenDelayMs?: number;
  /**
   * Fraction added per extra running request, default 0.02:
   * effective delay = base * (1 + batchSlowdown * (running - 1)).
   */
  batchSlowdown?: number;
  /**
   * The concurrency past which the worker saturates (0 = none, the default): each running request
   * beyond it multiplies delays by a further `kneeSlowdown`, so time per token rises steeply there,
   * as a GPU's does once its batch stops fitting:
   * effective delay *= 1 + kneeSlowdown * max(0, running - knee).
   */
  knee?: number;
  /** Slowdown per running request past the knee, default 0.5. */
  kneeSlowdown?: number;
  /**
   * Output tokens per streamed event, default 1 (SGLang's `--stream-interval`; speculative
   * decoding also sends several at once): a stream carries ceil(tokens / streamInterval) token
   * events, each with that many tokens' text. Reported at /get_server_info as `stream_interval`.
   */
  streamInterval?: number;
  /**
   * Default true; false = the worker never reports usage: no usage chunk however the client asks
   * (`stream_options` ignored), no `usage` in a whole OpenAI answer (a bare OpenAI-compatible server).
   */
  reportUsage?: boolean;
  /** Default true; false = /get_server_info omits `stream_interval` (a worker whose events must be learned). */
  reportStreamInterval?: boolean;
  /** Output length when the request gives none, default 16. */
  defaultMaxTokens?: number;
  /** Initial health, default true. */
  healthy?: boolean;
  /** Default true; false = /get_server_info omits max_running_requests (to test the 64 fallback). */
  reportCapacity?: boolean;
  /**
   * What /get_server_info reports as `max_running_requests`, verbatim, even when it is not a valid
   * capacity (0, -5, 1e12, "lots"): a worker that lies. Undefined (the default) = maxRunningRequests.
   * The worker still runs maxRunningRequests at a time. Ignored when reportCapacity is false.
   */
  reportedCapacity?: unknown;
  /**
   * The model's context length, default 131072: like vLLM and SGLang, a request whose prompt plus
   * requested output exceeds it is answered 400 (`context_length_exceeded`) instead of generating
   * forever. Reported as `context_length` by /get_server_info.
   */
  contextLength?: number;
  /** Entries kept by the received-requests log (a ring), default 10000; 0 = count only. */
  receivedLogSize?: number;
  /**
   * Largest request head the worker's HTTP parser accepts, default 16384 (Node's own default, like
   * a real server's limit). A head beyond it is refused by the parser (431) and counted in
   * `clientErrors`; raise it to log what a gateway forwarded whatever its size.
   */
  maxHeaderSize?: number;
  /**
   * Size of the worker's prefix cache in tokens (prefix-cache.ts), default 0 = none. With one, the
   * time to first token grows with the prompt tokens not found in it (`prefillMsPerToken`), and
   * usage reports `prompt_tokens_details.cached_tokens` as OpenAI does.
   */
  prefixCacheTokens?: number;
  /** With a prefix cache: milliseconds of prefill per uncached prompt token, added to the TTFT, default 0.05. */
  prefillMsPerToken?: number;
}

export interface MockWorkerStats extends CapacityCounters {
  /** The worker's real capacity (maxRunningRequests), whatever it reports. */
  maxRunningRequests: number;
  running: number;
  waiting: number;
  completed: number;
  aborted: number;
  totalRequests: number;
  peakRunning: number;
  /** Requests logged as received (see received()), the ones the bounded log dropped included. */
  received: number;
  /** Requests whose bytes the worker's HTTP parser refused (answered 400/431); resets are not counted. */
  clientErrors: number;
  /** Times restart() brought the worker back. */
  restarts: number;
  /** Inference requests received per model named in the body ("" for none). */
  requestsByModel: Record<string, number>;
  lastRequestHeaders?: Record<string, string | string[] | undefined>;
  lastRequestBody?: string;
  /** The prefix cache's counters, when the worker has one. */
  prefixCache?: PrefixCacheCounters;
  /** The KV model's state, when the worker has one. */
  kv?: KvCounters;
}

export interface KvCounters {
  /** Capacity in tokens (whole blocks) and in blocks. */
  capacityTokens: number;
  blockSize: number;
  totalBlocks: number;
  usedBlocks: number;
  usedTokens: number;
  /** Running requests that lost their KV to another's growth since the counters started. */
  preemptions: number;
}

export interface MockWorker {
  /** e.g. http://127.0.0.1:40123 */
  readonly url: string;
  readonly port: number;
  /** /health answers 503 while unhealthy. */
  setHealthy(healthy: boolean): void;
  /** Counters; also served as JSON at `GET /mock/stats` (without the last request's headers and body). */
  stats(): MockWorkerStats;
  /** The received-requests log, oldest first (bounded by receivedLogSize); also at `GET /mock/received`. */
  received(): ReceivedRequest[];
  /** Empties the received-requests log. */
  clearReceived(): void;
  /** Starts every counter afresh (completed, aborted, totals, peaks, over-capacity, the log). */
  resetStats(): void;
  /** Changes what /get_server_info reports as max_running_requests (undefined = the real capacity). */
  setReportedCapacity(value: unknown): void;
  /**
   * Prompt tokens of an inference request's body (a chat or completion body) that the prefix cache
   * holds now, without touching it: what an oracle that knows every worker's cache would read.
   * 0 without a prefix cache.
   */
  peekCachedTokens(body: unknown): number;
  /** Changes the models the worker serves (as a worker reloaded with another model would). */
  setServedModels(models: string[]): void;
  /**
   * Kills the worker as a crash would (every connection destroyed, in-flight work aborted, the
   * listener closed), waits `downMs` (default 0; connections are refused meanwhile), then listens
   * again on the same port. Counters carry on across the restart.
   */
  restart(options?: { downMs?: number }): Promise<void>;
  /** Closes the server and all sockets promptly. */
  close(): Promise<void>;
}

type ResolvedOptions = Required<Omit<MockWorkerOptions, "engine" | "kvTokens">> & {
  engine: Engine | undefined;
  /** Undefined = no KV model. */
  kvTokens: number | undefined;
};

export function resolveOptions(opts: MockWorkerOptions = {}): ResolvedOptions {
  const engine = opts.engine;
  if (engine !== undefined && !ENGINES.includes(engine)) {
    throw new RangeError(`engine must be one of ${ENGINES.join(", ")}, got ${String(engine)}`);
  }
  const maxRunningRequests = opts.maxRunningRequests ?? (engine === "vllm" ? 256 : 64);
  const contextLength = opts.contextLength ?? 131_072;
  const resolved: ResolvedOptions = {
    engine,
    kvTokens: opts.kvTokens ?? (engine === undefined ? undefined : maxRunningRequests * contextLength),
    kvBlockSize: opts.kvBlockSize ?? (engine === "vllm" ? VLLM_DEFAULT_BLOCK_SIZE : 1),
    port: opts.port ?? 0,
    host: opts.host ?? "127.0.0.1",
    maxRunningRequests,
    model: opts.model ?? "mock-llm",
    servedModels: opts.servedModels ?? [opts.model ?? "mock-llm"],
    strictModels: opts.strictModels ?? false,
    modelsEndpoint: opts.modelsEndpoint ?? true,
    ttftMs: opts.ttftMs ?? 20,
    tokenDelayMs: opts.tokenDelayMs ?? 5,
    batchSlowdown: opts.batchSlowdown ?? 0.02,
    knee: opts.knee ?? 0,
    kneeSlowdown: opts.kneeSlowdown ?? 0.5,
    defaultMaxTokens: opts.defaultMaxTokens ?? 16,
    streamInterval: opts.streamInterval ?? 1,
    reportStreamInterval: opts.reportStreamInterval ?? true,
    reportUsage: opts.reportUsage ?? true,
    healthy: opts.healthy ?? true,
    reportCapacity: opts.reportCapacity ?? true,
    reportedCapacity: opts.reportedCapacity,
    contextLength,
    receivedLogSize: opts.receivedLogSize ?? 10_000,
    maxHeaderSize: opts.maxHeaderSize ?? 16 * 1024,
    prefixCacheTokens: opts.prefixCacheTokens ?? 0,
    prefillMsPerToken: opts.prefillMsPerToken ?? 0.05,
  };
  if (!Number.isInteger(resolved.maxRunningRequests) || resolved.maxRunningRequests < 1) {
    throw new RangeError(`maxRunningRequests must be a positive integer, got ${resolved.maxRunningRequests}`);
  }
  if (!Number.isInteger(resolved.defaultMaxTokens) || resolved.defaultMaxTokens < 0) {
    throw new RangeError(`defaultMaxTokens must be a non-negative integer, got ${resolved.defaultMaxTokens}`);
  }
  if (!Number.isInteger(resolved.streamInterval) || resolved.streamInterval < 1) {
    throw new RangeError(`streamInterval must be a positive integer, got ${resolved.streamInterval}`);
  }
  for (const key of [
    "contextLength",
    "receivedLogSize",
    "maxHeaderSize",
    "knee",
    "prefixCacheTokens",
  ] as const) {
    const v = resolved[key];
    if (!Number.isInteger(v) || v < 0)
      throw new RangeError(`${key} must be a non-negative integer, got ${v}`);
  }
  if (!Number.isInteger(resolved.kvBlockSize) || resolved.kvBlockSize < 1) {
    throw new RangeError(`kvBlockSize must be a positive integer, got ${resolved.kvBlockSize}`);
  }
  const kv = resolved.kvTokens;
  if (kv !== undefined) {
    if (!Number.isInteger(kv) || kv < 1)
      throw new RangeError(`kvTokens must be a positive integer, got ${kv}`);
    // vLLM refuses to start when one sequence of max_model_len tokens cannot fit in its KV cache.
    const whole = Math.floor(kv / resolved.kvBlockSize) * resolved.kvBlockSize;
    if (whole < resolved.contextLength) {
      throw new RangeError(
        `kvTokens ${kv} (${whole} in whole blocks of ${resolved.kvBlockSize}) cannot hold one request of ` +
          `the context length ${resolved.contextLength}; lower contextLength or raise kvTokens`,
      );
    }
  }
  for (const key of [
    "ttftMs",
    "tokenDelayMs",
    "batchSlowdown",
    "kneeSlowdown",
    "prefillMsPerToken",
  ] as const) {
    const v = resolved[key];
    if (!Number.isFinite(v) || v < 0) throw new RangeError(`${key} must be a non-negative number, got ${v}`);
  }
  return resolved;
}

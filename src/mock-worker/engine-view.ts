/**
 * The engine signals a worker serves: which engine it imitates, and the state its /metrics and
 * info routes read at the moment of a scrape.
 */

import type { EngineStats } from "./engine-stats.js";
import type { KvCache } from "./kv-cache.js";

/** The engine a mock worker imitates, beyond the OpenAI API every engine serves. */
export type Engine = "vllm" | "sglang";

export const ENGINES: readonly Engine[] = ["vllm", "sglang"];

/** A worker's state as one scrape sees it. */
export interface EngineView {
  /** The served model's name (the first one served), as the engines label their series. */
  readonly model: string;
  readonly running: number;
  readonly waiting: number;
  readonly kv: KvCache;
  readonly maxRunningRequests: number;
  readonly contextLength: number;
  /** Preemptions since the counters started. */
  readonly preemptions: number;
  /** Requests ended early by their client (or the worker closing). */
  readonly aborted: number;
  readonly stats: EngineStats;
  /** Prompt tokens found in the prefix cache over those looked up, 0 without a cache. */
  readonly prefixHitRate: number;
}

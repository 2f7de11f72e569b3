/**
 * Which inference engine a worker runs: the operator says (`engine`, per worker or for the fleet),
 * or `auto` recognises it from the routes it answers (docs/capacity.md, "Recognising the engine").
 */

export const ENGINE_CHOICES = ["auto", "vllm", "sglang", "openai"] as const;
export type EngineChoice = (typeof ENGINE_CHOICES)[number];
/** A recognised engine; `openai` is any OpenAI-compatible server that exports no load signals. */
export type EngineKind = Exclude<EngineChoice, "auto">;

/** Defaults of the engine-signal options (`worker_engine`, `engine_scrape_interval_ms`, `engine_scrape_timeout_ms`). */
export const DEFAULT_ENGINE_SIGNALS = {
  engine: "auto" as EngineChoice,
  scrapeIntervalMs: 2000,
  scrapeTimeoutMs: 1000,
};

/**
 * How many output tokens one answer (one choice) of a request will have, predicted from the recent
 * answers of its tenant on its model. One predictor serves three readers: the budget reservation of
 * a request without an output limit, load shedding's predicted wait, and the token-weighted load of
 * routing. The gateway and the simulator each hold one, on their own clock.
 *
 * The prediction is, in this order (docs/output-prediction.md):
 *
 *   1. `tenant`: the tenant's recent answers on this model, a decaying high quantile, once it has
 *      MIN_SAMPLES answers younger than MAX_AGE_MS;
 *   2. `model`: the same over every tenant's answers on the model;
 *   3. `default`: `default_output_tokens`, when configured;
 *   4. `context`: what the model's context leaves after the prompt.
 *
 * then capped by the request's own limit (`max_tokens` and its aliases): a request cannot produce
 * more, and a prediction the cap decided says so (source `max_tokens`).
 *
 * Decaying quantile: each answer weighs 0.5^(age / HALF_LIFE_MS); the prediction is the smallest
 * answer at which the weight of the answers at or below it reaches QUANTILE of the total weight.
 * With equal ages this is the plain p95. Recent answers weigh more, so a tenant whose prompts
 * changed (a batch job started, a new system prompt) moves the prediction in minutes, while a short
 * lull keeps what was learnt.
 *
 * Pure: time comes from the injected `now`; keys are bounded (MAX_KEYS, oldest first): a client
 * chooses the model name, and a trusted header the tenant.
 */

/** Answers kept per key. */
export const WINDOW = 128;
/** Answers older than this are forgotten whatever their weight. */
export const MAX_AGE_MS = 60 * 60_000;
/** Weight halves every this many milliseconds of an answer's age. */
export const HALF_LIFE_MS = 10 * 60_000;
/** Answers (younger than MAX_AGE_MS) a key needs before its quantile is used. */
export const MIN_SAMPLES = 8;
/** The quantile predicted: high, because a budget that reserves less than the answer lets concurrent requests overspend. */
export const QUANTILE = 0.95;
/** Tenant+model and model keys kept together. */
export const MAX_KEYS = 1024;
/** A key's quantile is recomputed at most this often without new answers (ages move slowly). */
const RECOMPUTE_MS = 10_000;
/**
 * With new answers, at most this often, unless REFRESH_ANSWERS came in or there was no quantile:
 * a busy key predicts for every request, and one answer moves a p95 of 128 little.
 */
const REFRESH_MS = 1000;
const REFRESH_ANSWERS = 16;

/** Where a prediction came from: a step of the fallback chain, or the request's own cap. */
export type PredictionSource = "tenant" | "model" | "default" | "context" | "max_tokens";

export const PREDICTION_SOURCES: readonly PredictionSource[] = Object.freeze([
  "tenant",
  "model",
  "default",
  "context",
  "max_tokens",
]);

export interface OutputPrediction {
  /** Output tokens predicted for one answer (choice); at least 1. */
  readonly tokens: number;
  readonly source: PredictionSource;
  /**
   * The chain's answer came from answers (tenant or model), not from a ceiling (the default, the
   * context): only then is it an estimate of length a queue can be weighed by.
   */
  readonly learned: boolean;
  /**
   * The expected output of one answer (a decaying mean, under the request's cap) when answers
   * taught it: what a sum of many requests holds (KV packing), where `tokens` is what one may need.
   */
  readonly expectedTokens?: number | undefined;
}

export interface PredictionInput {
  readonly tenant: string;
  readonly model: string | undefined;
  /** The request's output limit per choice, when it sets one. */
  readonly maxTokens?: number | undefined;
  /** `default_output_tokens`; undefined skips that step. */
  readonly defaultOutputTokens?: number | undefined;
  /** What the model's context leaves after the prompt: the last resort. */
  readonly contextTokens: number;
}

class Samples {
  private readonly values = new Float64Array(WINDOW);
  private readonly at = new Float64Array(WINDOW);
  private next = 0;
  private count = 0;
  private cached: number | undefined;
  /** The decaying mean, computed with the quantile. */
  private cachedMean: number | undefined;
  private cachedAt = Number.NEGATIVE_INFINITY;
  /** Answers added since the quantile was computed. */
  private fresh = 0;

  add(tokens: number, now: number): void {
    this.values[this.next] = tokens;
    this.at[this.next] = now;
    this.next = (this.next + 1) % WINDOW;
    if (this.count < WINDOW) this.count++;
    this.fresh++;
  }

  /** The decaying mean, on the same answers and terms as the quantile. */
  mean(now: number): number | undefined {
    this.quantile(now);
    return this.cachedMean;
  }

  /** The decaying quantile of the answers younger than MAX_AGE_MS; undefined with fewer than MIN_SAMPLES. */
  quantile(now: number): number | undefined {
    const age = now - this.cachedAt;
    const stale =
      age >= RECOMPUTE_MS ||
      (this.fresh > 0 && (this.cached === undefined || age >= REFRESH_MS || this.fresh >= REFRESH_ANSWERS));
    if (!stale) return this.cached;
    this.cachedAt = now;
    this.fresh = 0;
    const live: Array<{ value: number; weight: number }> = [];
    let total = 0;
    for (let i = 0; i < this.count; i++) {
      const age = Math.max(0, now - this.at[i]!);
      if (age > MAX_AGE_MS) continue;
      const weight = 0.5 ** (age / HALF_LIFE_MS);
      live.push({ value: this.values[i]!, weight });
      total += weight;
    }
    if (live.length < MIN_SAMPLES) {
      this.cached = undefined;
      this.cachedMean = undefined;
      return undefined;
    }
    let weighted = 0;
    for (const s of live) weighted += s.value * s.weight;
    this.cachedMean = weighted / total;
    live.sort((a, b) => a.value - b.value);
    // A hair under the target: equal weights summed in floating point must reach k/n exactly.
    const target = QUANTILE * total * (1 - 1e-12);
    let cumulative = 0;
    let found = live[live.length - 1]!.value;
    for (const s of live) {
      cumulative += s.weight;
      if (cumulative >= target) {
        found = s.value;
        break;
      }
    }
    this.cached = found;
    return found;
  }
}

export class OutputPredictor {
  private readonly keys = new Map<string, Samples>();

  constructor(private readonly now: () => number) {}

  /** One answer the model ended by itself: `tokens` output tokens per choice. */
  learn(tenant: string, model: string | undefined, tokens: number): void {
    if (!(tokens >= 0) || !Number.isFinite(tokens)) return;
    const now = this.now();
    this.samples(modelKey(model)).add(tokens, now);
    this.samples(tenantKey(tenant, model)).add(tokens, now);
  }

  /**
   * The expected output per choice (a decaying mean: tenant and model, then model), undefined until
   * answers taught it. What a sum of many requests holds (KV packing, docs/capacity.md), where the
   * p95 of `predict` is what one request may need (a budget hold).
   */
  expected(tenant: string, model: string | undefined): number | undefined {
    const now = this.now();
    return this.keys.get(tenantKey(tenant, model))?.mean(now) ?? this.keys.get(modelKey(model))?.mean(now);
  }

  /** The chain's answer, before the request's cap. */
  uncapped(
    tenant: string,
    model: string | undefined,
    defaultOutputTokens: number | undefined,
    contextTokens: number,
  ): OutputPrediction {
    const now = this.now();
    const own = this.keys.get(tenantKey(tenant, model))?.quantile(now);
    if (own !== undefined) return { tokens: Math.max(1, Math.ceil(own)), source: "tenant", learned: true };
    const all = this.keys.get(modelKey(model))?.quantile(now);
    if (all !== undefined) return { tokens: Math.max(1, Math.ceil(all)), source: "model", learned: true };
    if (defaultOutputTokens !== undefined) {
      return { tokens: Math.max(1, defaultOutputTokens), source: "default", learned: false };
    }
    return { tokens: Math.max(1, Math.ceil(contextTokens)), source: "context", learned: false };
  }

  /** The output tokens one answer of this request will have. */
  predict(input: PredictionInput): OutputPrediction {
    const chain = this.uncapped(input.tenant, input.model, input.defaultOutputTokens, input.contextTokens);
    const cap = input.maxTokens;
    const capped = cap !== undefined && Number.isFinite(cap);
    const learnedMean = chain.learned ? this.expected(input.tenant, input.model) : undefined;
    const mean = learnedMean === undefined ? undefined : Math.max(1, Math.round(learnedMean));
    const expectedTokens = mean === undefined ? undefined : capped ? Math.min(mean, cap) : mean;
    const extra = expectedTokens === undefined ? {} : { expectedTokens };
    if (capped && cap < chain.tokens) {
      return { tokens: Math.max(1, Math.ceil(cap)), source: "max_tokens", learned: chain.learned, ...extra };
    }
    return { ...chain, ...extra };
  }

  /** Keys held (tests, status). */
  get size(): number {
    return this.keys.size;
  }

  private samples(key: string): Samples {
    let s = this.keys.get(key);
    if (s === undefined) {
      if (this.keys.size >= MAX_KEYS) {
        // The oldest key first: Map iterates in insertion order.
        const oldest = this.keys.keys().next().value;
        if (oldest !== undefined) this.keys.delete(oldest);
      }
      s = new Samples();
      this.keys.set(key, s);
    }
    return s;
  }
}

/**
 * The chain in force, in words, for the gateway's start log: which steps a request without history
 * falls back on (docs/output-prediction.md).
 */
export function describePredictionChain(defaultOutputTokens: number | undefined): string {
  const fallback =
    defaultOutputTokens === undefined
      ? "then the model's context less the prompt (default_output_tokens unset)"
      : `then default_output_tokens (${defaultOutputTokens})`;
  return `tenant+model, then model: decaying p${Math.round(QUANTILE * 100)} (half-life ${HALF_LIFE_MS / 60_000} min, ${MIN_SAMPLES} answers needed); ${fallback}; capped by the request's max_tokens`;
}

/**
 * |predicted − actual| / actual for one answer, or undefined when the answer says nothing about the
 * prediction: no output (a ratio over 0), or an answer that stopped at its own limit (`capped`: the
 * length the model would have produced is unknown, only that it was at least the limit).
 */
export function predictionErrorRatio(predicted: number, actual: number, capped: boolean): number | undefined {
  if (capped || !(actual > 0) || !Number.isFinite(actual) || !Number.isFinite(predicted)) return undefined;
  return Math.abs(predicted - actual) / actual;
}

function modelKey(model: string | undefined): string {
  return `m\u0000${model ?? ""}`;
}

function tenantKey(tenant: string, model: string | undefined): string {
  return `t\u0000${tenant}\u0000${model ?? ""}`;
}

/**
 * What a budget reserves for the output of a request that sets no output limit (`max_tokens`,
 * `max_completion_tokens`, `sampling_params.max_new_tokens`). Counting 0 for it let any number of
 * concurrent requests in on the last few tokens of a hard budget (issue 35, item 2); the reservation
 * is, in this order (docs/tenants.md, "Token accounting"):
 *
 *   1. the tenant's recent output length on this model, at a high quantile (p95 of its last
 *      WINDOW answers without a limit, none older than MAX_AGE_MS), once it has MIN_SAMPLES;
 *   2. the same over every tenant's answers on the model;
 *   3. `default_output_tokens`, when configured;
 *   4. the model's context: the cost ceiling less the prompt (`--max-cost-tokens`, by default the
 *      largest context a worker reports).
 *
 * Answers with a limit do not teach: the limit, not the model, ended them. Each replica learns
 * from its own answers. Keys are bounded (MAX_KEYS, oldest dropped first): a client chooses the model
 * name, and a trusted header the tenant.
 */

/** Answers kept per key. */
export const WINDOW = 128;
/** Answers older than this are forgotten (a tenant whose prompts changed gets a new estimate). */
export const MAX_AGE_MS = 60 * 60_000;
/** Answers a key needs before its quantile is used. */
export const MIN_SAMPLES = 8;
/** The quantile reserved. */
const QUANTILE = 0.95;
/** Tenant+model and model keys kept together. */
export const MAX_KEYS = 1024;
/** A key's quantile is recomputed at most this often without new answers (for samples aging out). */
const RECOMPUTE_MS = 10_000;

type ReservationSource = "tenant" | "model" | "default" | "context";

interface OutputReservation {
  /** Output tokens reserved for one answer (choice). */
  tokens: number;
  source: ReservationSource;
}

class Samples {
  private readonly values = new Float64Array(WINDOW);
  private readonly at = new Float64Array(WINDOW);
  private next = 0;
  private count = 0;
  private cached: number | undefined;
  private cachedAt = Number.NEGATIVE_INFINITY;

  add(tokens: number, now: number): void {
    this.values[this.next] = tokens;
    this.at[this.next] = now;
    this.next = (this.next + 1) % WINDOW;
    if (this.count < WINDOW) this.count++;
    this.cachedAt = Number.NEGATIVE_INFINITY;
  }

  /** The quantile of the answers younger than MAX_AGE_MS; undefined with fewer than MIN_SAMPLES. */
  quantile(now: number): number | undefined {
    if (now - this.cachedAt < RECOMPUTE_MS) return this.cached;
    const live: number[] = [];
    for (let i = 0; i < this.count; i++) if (now - this.at[i]! <= MAX_AGE_MS) live.push(this.values[i]!);
    this.cachedAt = now;
    if (live.length < MIN_SAMPLES) {
      this.cached = undefined;
      return undefined;
    }
    live.sort((a, b) => a - b);
    this.cached = live[Math.min(live.length - 1, Math.ceil(QUANTILE * live.length) - 1)]!;
    return this.cached;
  }
}

export class OutputLengths {
  private readonly keys = new Map<string, Samples>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** One answer without an output limit: `tokens` output tokens per choice (reported or counted). */
  learn(tenant: string, model: string | undefined, tokens: number): void {
    if (!(tokens >= 0) || !Number.isFinite(tokens)) return;
    const now = this.now();
    this.samples(modelKey(model)).add(tokens, now);
    this.samples(tenantKey(tenant, model)).add(tokens, now);
  }

  /**
   * The output tokens to reserve for one answer of a request without a limit. `contextTokens`: what
   * the model's context leaves after the prompt (the last resort).
   */
  reservation(
    tenant: string,
    model: string | undefined,
    defaultOutputTokens: number | undefined,
    contextTokens: number,
  ): OutputReservation {
    const now = this.now();
    const own = this.keys.get(tenantKey(tenant, model))?.quantile(now);
    if (own !== undefined) return { tokens: Math.ceil(own), source: "tenant" };
    const all = this.keys.get(modelKey(model))?.quantile(now);
    if (all !== undefined) return { tokens: Math.ceil(all), source: "model" };
    if (defaultOutputTokens !== undefined) return { tokens: defaultOutputTokens, source: "default" };
    return { tokens: contextTokens, source: "context" };
  }

  /** Keys held (tests). */
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

function modelKey(model: string | undefined): string {
  return `m\u0000${model ?? ""}`;
}

function tenantKey(tenant: string, model: string | undefined): string {
  return `t\u0000${tenant}\u0000${model ?? ""}`;
}

/**
 * Capacity in KV tokens (docs/capacity.md, "Capacity in KV tokens"): the pure part shared by the
 * gateway (src/gateway/fleet/workers.ts) and the simulator (src/sim/kv-gate.ts).
 *
 * A request's footprint is the KV it will hold at its end: its prompt (less what the worker's
 * prefix cache already holds, where known) plus its predicted output. A worker's token budget is
 * its KV capacity x `kv_target_utilization`. The scheduler still counts requests: a worker's room
 * in requests is its budget / the pool's mean footprint of recent requests, bounded by its
 * max_running (docs/design.md, "Capacity in KV tokens", says why the core is not taught sizes).
 * Routing then places each request on a worker whose budget it fits.
 */

export const CAPACITY_UNITS = ["requests", "kv_tokens"] as const;
export type CapacityUnit = (typeof CAPACITY_UNITS)[number];

/**
 * `kv_target_utilization` default: 0.9. The footprint's output part is a prediction (a decaying
 * p95, so usually high), and the engine needs some KV beyond the sum of whole requests (partially
 * filled blocks, a prefill chunk's activations, vLLM's watermark of free blocks): 10% is that slack.
 * Higher runs into engine-side queueing or preemption; lower leaves KV idle.
 */
export const DEFAULT_KV_TARGET_UTILIZATION = 0.9;

/** A pool's capacity unit and target, resolved. */
export interface KvCapacitySettings {
  readonly unit: CapacityUnit;
  /** 0 < x <= 1. */
  readonly targetUtilization: number;
}

export const REQUESTS_CAPACITY: KvCapacitySettings = {
  unit: "requests",
  targetUtilization: DEFAULT_KV_TARGET_UTILIZATION,
};

/** Is `x` a usable `kv_target_utilization` (0 < x <= 1)? */
export function validTargetUtilization(x: number): boolean {
  return Number.isFinite(x) && x > 0 && x <= 1;
}

export interface FootprintInput {
  readonly promptTokens: number;
  /** Prompt tokens the worker's prefix cache already holds (0 when unknown). */
  readonly cachedPromptTokens?: number | undefined;
  /** Output predicted for the whole request (every choice). */
  readonly predictedOutputTokens: number;
  /** The request's own output limit (every choice), when it sets one: caps the prediction. */
  readonly maxOutputTokens?: number | undefined;
}

/** KV tokens a request holds at its end; at least 1 (a request always holds a block). */
export function requestFootprint(r: FootprintInput): number {
  const prompt = Math.max(0, r.promptTokens - Math.max(0, r.cachedPromptTokens ?? 0));
  const limit = r.maxOutputTokens ?? Number.POSITIVE_INFINITY;
  const output = Math.max(0, Math.min(r.predictedOutputTokens, limit));
  return Math.max(1, Math.ceil(prompt + output));
}

/** Weight of a new footprint in the mean: about the last 32 requests count. */
const MEAN_WEIGHT = 1 / 32;
/** The derived capacity is re-published when the mean moved this much since it last was. */
const MEAN_HYSTERESIS = 0.05;

/**
 * The pool's mean footprint of recent requests (an exponential mean, seeded by the first), taken
 * at arrival, so the capacity follows a change of mix before the new requests are admitted.
 * `published` is the value the derived capacity uses: it moves only when the mean drifted by
 * MEAN_HYSTERESIS, so the scheduler's capacity does not flap by one with every request.
 */
export class FootprintMean {
  private mean: number | undefined;
  private shown: number | undefined;

  /** Adds one footprint; returns true when the published mean moved (re-derive capacities). */
  observe(footprint: number): boolean {
    if (!(footprint > 0) || !Number.isFinite(footprint)) return false;
    this.mean = this.mean === undefined ? footprint : this.mean + (footprint - this.mean) * MEAN_WEIGHT;
    if (this.shown === undefined || Math.abs(this.mean - this.shown) > this.shown * MEAN_HYSTERESIS) {
      this.shown = this.mean;
      return true;
    }
    return false;
  }

  /** The mean capacities are derived from; undefined before the first request. */
  get published(): number | undefined {
    return this.shown;
  }

  /** The live mean (status). */
  get value(): number | undefined {
    return this.mean;
  }
}

/** A worker's token budget: KV capacity x target utilization (floored). */
export function kvBudgetTokens(kvCapacityTokens: number, targetUtilization: number): number {
  return Math.floor(kvCapacityTokens * targetUtilization);
}

/**
 * A worker's room in requests under kv_tokens: its budget / the mean footprint, at least 1 (a
 * worker always takes one request, however large), at most its max_running. Before any request
 * (no mean yet) its max_running.
 */
export function kvRequestRoom(
  budgetTokens: number,
  meanFootprint: number | undefined,
  maxRunning: number,
): number {
  if (meanFootprint === undefined || !(meanFootprint > 0)) return maxRunning;
  return Math.max(1, Math.min(maxRunning, Math.floor(budgetTokens / meanFootprint)));
}

/** What KV placement reads of a worker. */
export interface KvPlace {
  /** Token budget; undefined: the worker's engine does not report its KV (it counts requests). */
  readonly budgetTokens: number | undefined;
  /** Footprints of the requests this gateway has on it now. */
  readonly footprintTokens: number;
}

/** Does a request of `footprint` fit the worker's budget? An empty worker takes any request. */
export function fitsKv(w: KvPlace, footprint: number): boolean {
  if (w.budgetTokens === undefined) return true;
  return w.footprintTokens === 0 || w.footprintTokens + footprint <= w.budgetTokens;
}

/** Tokens left of the worker's budget (negative past it); +Infinity without a budget. */
export function kvHeadroom(w: KvPlace): number {
  return w.budgetTokens === undefined ? Number.POSITIVE_INFINITY : w.budgetTokens - w.footprintTokens;
}

/**
 * The candidates a request of `footprint` fits; when it fits none, the one with the most headroom
 * (the scheduler admitted it: it is placed, not held outside priority order).
 */
export function kvCandidates<W extends KvPlace>(candidates: readonly W[], footprint: number): readonly W[] {
  let fit = 0;
  for (const w of candidates) if (fitsKv(w, footprint)) fit++;
  if (fit === candidates.length) return candidates;
  if (fit > 0) return candidates.filter((w) => fitsKv(w, footprint));
  let best: W | undefined;
  for (const w of candidates) if (best === undefined || kvHeadroom(w) > kvHeadroom(best)) best = w;
  return best === undefined ? [] : [best];
}

/** The candidate with the most headroom that fits (else the most headroom); undefined when none. */
export function mostKvHeadroom<W extends KvPlace>(
  candidates: readonly W[],
  footprint: number,
): W | undefined {
  let best: W | undefined;
  for (const w of kvCandidates(candidates, footprint)) {
    if (best === undefined || kvHeadroom(w) > kvHeadroom(best)) best = w;
  }
  return best;
}

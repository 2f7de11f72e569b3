/**
 * Adaptive capacity: one controller per worker pool turns normalized latency into a concurrency
 * limit (issue 12, part 1). Pure and synchronous: no timers, no wall clock. The caller feeds
 * samples (`observe`), the in-flight level (`sampleUsage`) and closes each window with `tick()`,
 * which reads `clock.now()` only to measure elapsed time; under a ManualClock every run repeats.
 *
 * Signals. End-to-end time means nothing for LLM serving (a long answer is slow and healthy), so
 * only two normalized latencies count:
 *  - TPOT, time per output token: the window's p90 against one TPOT baseline;
 *  - TTFT per prompt-length bucket (prompt tokens < 256, < 1 Ki, < 4 Ki, < 16 Ki, more): each
 *    bucket's p90 against that bucket's own baseline, so a mix shift to long prompts is no signal.
 * ratio = max(TPOT p90 / TPOT baseline, max over buckets of p90 / bucket baseline), counting only a
 * store with >= minSamples samples; a store short of them carries over to the next window (at most
 * maxCarryWindows), so a pool with few completions per second still decides, less often.
 * gradient = 1 / ratio. Each store keeps at most sampleCap samples (reservoir sampling with a
 * fixed-seed PRNG): memory is bounded (7 stores) and runs are deterministic.
 *
 * The law, once per window (`tick`), first matching rule wins ("in use": the window's in-flight
 * peak >= utilization * limit, or queued work):
 *  0. draining: the in-flight peak is above the limit (the last decrease has not taken effect):
 *     hold; the window's samples and errors are dropped (they describe the old limit).
 *  1. overload: >= 1 worker 429/503/timeout: limit = floor(limit * overloadFactor), one decrease
 *     per window however many errors.
 *  2. slo: TPOT p90 > tpotSloMs or TTFT p90 (all prompts) > ttftSloMs: shrink with
 *     g = max(minGradient, min(gradient, slo / p90)): limit = floor(limit * (1 - smoothing * (1 - g))),
 *     and by at least sloMinDecrease; the n-th breach past breachMargin in a row (no window read
 *     within the SLOs between them) by at least min(sloMaxDecrease, n x sloMinDecrease): a breach
 *     that persists is no noise. Far above (p90 > sloFarAbove x slo), at least to
 *     limit * max(sloFarFloor, (1 - sloMinDecrease) * sloFarAbove * slo / p90): an overload many times the
 *     SLO (a cold start far past the knee) comes down in a few windows, not dozens.
 *  3. decrease: ratio > decreaseAbove: the same shrink with g = max(minGradient, gradient), so a
 *     step takes at most smoothing * (1 - minGradient) = 10%.
 *  4. increase: ratio <= increaseBelow and the limit is in use: limit += max(1, floor(limit * increaseStep)),
 *     twice that (at least 2) when the window before also increased with ratio <= 1 / increaseBelow:
 *     latency well under its reference is room, and a limit climbing back after an incident is not
 *     held to 5% a window; near its reference a limit still creeps.
 *  5. hold: the dead band increaseBelow < ratio <= decreaseAbove, an idle limit, or no signal.
 * Every decrease takes at least 1; the result is clamped to [minCapacity, maxCapacity].
 *
 * SLO band. With tpotSloMs, a window whose TPOT p90 is within sloBand of the set point
 * (sloSetPoint x tpotSloMs) is weighed, not obeyed: its excess (p90 / set point - 1, negative under
 * it) is added to the evidence, and rules 2 and 4 act only on evidence past sloBand: past +sloBand
 * an SLO cut of sloMinDecrease, past -sloBand an increase of increaseStep (no doubling); the evidence
 * then starts again from 0, and in between the limit holds (rule 3 still applies). One window's p90
 * near the SLO is mostly noise, and where TPOT is flat in concurrency a cut on every p90 over the
 * SLO and an increase on every one under it walk the limit at random. A window outside the band,
 * an overload or a TTFT breach clears the evidence, and the rules act at once.
 *
 * Breach ceiling. A worker overload, or an SLO missed by more than breachMargin (p90 > (1 +
 * breachMargin) x the SLO: not noise at the edge), marks the concurrency that ran: for
 * breachHoldMs no increase goes past one under it. The same level or a lower one breaching again
 * within 2 x breachHoldMs of the hold's end doubles the hold, up to breachHoldMaxMs. Past a knee the
 * steps are coarse (one more request can take TPOT from under the SLO to well over it), and rule 4
 * alone climbs back into the breach as soon as rule 2 has cut: a sawtooth with one window in two
 * over the SLO. A TPOT baseline fallen under 1 / increaseBelow of the one at the mark (an incident
 * over, another model) drops the ceiling, and so does a window run at or above its level within
 * the SLOs (a limit held at the floor through an incident that has ended).
 *
 * Baselines follow the window p90s as an EMA over elapsed clock time: down with half-life
 * baselineDownHalfLifeMs, up with baselineHalfLifeMs. They freeze in overload and SLO windows, so a
 * long incident above an SLO never becomes the new normal (and the TPOT baseline stays <= the SLO),
 * and in decrease windows, so an overload is not absorbed before the probe after
 * probeAfterDecreases tells load from a slower worker (a slower worker becomes the baseline there).
 *
 * Probes. A baseline measured at an overloaded operating point hides that overload for good, and
 * one that absorbs the controller's own increases drifts up; only a lower concurrency can tell. A
 * probe steps down, limit = floor(min(limit, in-flight peak) * probeStep), one step a window, while
 * each step costs less than probeSlack of the throughput (in-flight peak / TPOT p90): past the knee
 * a step cuts latency more than concurrency and goes on, below it the step is pure loss and stops.
 * The first step that stops the probe is undone, and its window's p90s become the baselines. A
 * cold start's undo goes back to the level that ran (its in-flight peak, with held-back slots),
 * not to the discovered capacity: the workers claim that, but it never ran.
 * While steps cost nothing (throughput within probeSlack, or higher), each goes twice as deep as the
 * one before, up to four steps (x0.66): each waits for a drain, and far past the knee the drains
 * are answers of a minute. A jump of more than 4 x probeSlack is a cliff's edge, and the next step
 * is single again; an overshoot under the knee is a loss, undone like any other.
 * A cold start compares windows measured at one level each: its first reference is not a window in
 * which in flight rose from under half its peak (the clients starting), and each step is judged
 * only by samples measured wholly after it took effect (the sample's `spanMs` began after in flight
 * was first reported within the new limit). Far past the knee an answer lasts many
 * windows, and one that began at the old concurrency would read the step as worthless, stop the
 * probe and lock the overload in as the baseline.
 * Probes run:
 *  - at cold start ("calibrating"): the limit starts at the discovered capacity (the workers'
 *    max_running_requests) clamped to the bounds, and only probe steps, overload and SLO rules
 *    apply until the first probe ends (stepping from the in-flight peak, a cold start also finds
 *    an overload when demand sits under the discovered capacity; an idle pool pays one window);
 *  - when the baseline looks stale ("probing"): probeAfterDecreases latency decreases without an
 *    increase between them (the latency does not come down: is it load? Such a probe runs in an
 *    overload, so its steps, like a cold start's, are judged only by samples measured wholly after
 *    they took effect), every probeIntervalMs, or on `recalibrate()`. A re-probe starts only in an
 *    in-use window with a TPOT signal, no error and no SLO breach, and gives up (the old baselines
 *    stay) at a window that is not so.
 * A TPOT p90 under 1 / decreaseAbove of its baseline in such a window (the baseline is too high: an
 * incident or a slowdown is over) re-bases TPOT there at once instead; that window's reading still
 * counts (room: rule 4).
 *
 * Bounds: a limit that would leave [minCapacity, maxCapacity] stays at the bound; the first such
 * window of an episode calls `onBound` (and `snapshot().bound` says which); probe steps do not
 * end an episode. Only the constructor throws (a ConfigError naming the YAML key).
 *
 * Defaults (option, YAML key, value):
 *   minCapacity            adaptive_min_capacity                 required, integer >= 1
 *   maxCapacity            adaptive_max_capacity                 required, integer >= min
 *   initialCapacity        initial_capacity (discovered, no YAML) required, finite >= 0, clamped
 *   tpotSloMs              tpot_slo_ms                           none (optional, > 0)
 *   ttftSloMs              ttft_slo_ms                           none (optional, > 0)
 *   windowMs               adaptive_window_ms                    1000
 *   baselineHalfLifeMs     adaptive_baseline_half_life_ms        60000 (baseline rising)
 *   baselineDownHalfLifeMs adaptive_baseline_down_half_life_ms   5000 (baseline falling)
 *   increaseBelow          adaptive_increase_below               1.1 (ratio "at baseline")
 *   decreaseAbove          adaptive_decrease_above               1.25 (dead band 1.1 .. 1.25)
 *   increaseStep           adaptive_increase_step                0.05 (+max(1, 5%))
 *   decreaseSmoothing      adaptive_decrease_smoothing           0.2
 *   minGradient            adaptive_min_gradient                 0.5
 *   overloadFactor         adaptive_overload_factor              0.8
 *   utilization            adaptive_utilization                  0.9
 *   minSamples             adaptive_min_samples                  10 (per store)
 *   maxCarryWindows        adaptive_max_carry_windows            30
 *   sampleCap              adaptive_sample_cap                   512 (per store; <= 65536)
 *   probeStep              adaptive_probe_step                   0.9
 *   probeSlack             adaptive_probe_slack                  0.05 (< 1 - probeStep)
 *   probeIntervalMs        adaptive_probe_interval_ms            300000 (0: never)
 *   probeAfterDecreases    adaptive_probe_after_decreases        5 (0: never)
 *   ttftFloorMs            adaptive_ttft_floor_ms                250 (TTFT ratios are taken against
 *                                                                max(baseline, floor): tens of ms of
 *                                                                prefill jitter are no overload)
 *   sloReference           adaptive_slo_reference                0.9 (with tpot_slo_ms, the TPOT ratio
 *                                                                is taken against max(baseline,
 *                                                                0.9 x tpot_slo_ms): TPOT rises with
 *                                                                the batch long before the knee, and
 *                                                                under the SLO that is no overload;
 *                                                                0 turns it off)
 *   sloReferenceCap        adaptive_slo_reference_cap            1.5 (that floor never rises above
 *                                                                1.5 x the baseline: a rise past it is
 *                                                                a knee, whatever room the SLO leaves)
 *   sloMinDecrease         adaptive_slo_min_decrease             0.1 (an SLO breach takes at least 10%
 *                                                                off: symmetric with the increases, so
 *                                                                noise cannot ratchet the limit up)
 *   sloMaxDecrease         adaptive_slo_max_decrease             0.3 (breaches in a row take 10%, 20%,
 *                                                                then 30% each; >= sloMinDecrease,
 *                                                                which it follows when unset)
 *   sloFarAbove            adaptive_slo_far_above                2 (p90 past 2x a ceiling: the cut is
 *                                                                proportional; >= 1)
 *   sloFarFloor            adaptive_slo_far_floor                0.5 (that cut keeps at least half
 *                                                                a window; > 0 and <= 1)
 *   breachHoldMs           adaptive_breach_hold_ms               30000 (a breached level binds
 *                                                                increases this long; 0: never)
 *   breachHoldMaxMs        adaptive_breach_hold_max_ms           300000 (the doubled hold's cap;
 *                                                                >= breachHoldMs)
 *   breachMargin           adaptive_breach_margin                0.1 (an SLO breach marks its level
 *                                                                when p90 > 1.1 x the SLO; >= 0)
 *   sloBand                adaptive_slo_band                     0.1 (p90 within 10% of the set point
 *                                                                is weighed over windows; 0: off; < 1)
 *   sloSetPoint            adaptive_slo_set_point                0.97 (the band's centre, x tpot_slo_ms;
 *                                                                > 0 and <= 1)
 */
import type { Clock } from "@sluice/scheduler/core/clock.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";

/**
 * One observation of a request. An `ok` sample carries a TTFT (with the prompt length that picks
 * its bucket), a TPOT, or both: a gateway may report TTFT at the first token and TPOT as the
 * stream progresses (chunk timing over the window, so it describes the current concurrency) or
 * once at the end ((duration - TTFT) / (output tokens - 1)).
 */
export type AdaptiveSample =
  | {
      kind: "ok";
      /** Dispatch to the worker -> first token, ms (the admission queue wait excluded). */
      ttftMs: number;
      promptTokens: number;
      /** Time per output token, ms; undefined when the answer had 0-1 output tokens. */
      tpotMs?: number | undefined;
      /** How long before this report its measurement began (as in the TPOT-only form). */
      spanMs?: number | undefined;
    }
  | {
      kind: "ok";
      tpotMs: number;
      ttftMs?: undefined;
      promptTokens?: number | undefined;
      /**
       * How long before this report the measured interval began (from the dispatch when the
       * sample has a TTFT, else from the start of the TPOT measurement). With it, a sample that
       * began before a cold-start probe step took effect is dropped: it describes the old
       * concurrency. Without it the sample always counts.
       */
      spanMs?: number | undefined;
    }
  /** The worker answered 429 or 503, or timed out. */
  | { kind: "overload" }
  /** Accepted so a caller can pass every outcome; they give no sample. */
  | { kind: "cancelled" }
  | { kind: "preempted" };

export type AdaptiveDecision = "increase" | "decrease" | "hold" | "overload" | "slo";

export interface AdaptiveBoundEvent {
  bound: "min" | "max";
  /** The limit in force (the bound). */
  limit: number;
  /** What the law wanted. */
  wanted: number;
}

export interface AdaptiveTuning {
  windowMs: number;
  baselineHalfLifeMs: number;
  baselineDownHalfLifeMs: number;
  increaseBelow: number;
  decreaseAbove: number;
  increaseStep: number;
  decreaseSmoothing: number;
  minGradient: number;
  overloadFactor: number;
  utilization: number;
  minSamples: number;
  maxCarryWindows: number;
  sampleCap: number;
  probeStep: number;
  probeSlack: number;
  probeIntervalMs: number;
  probeAfterDecreases: number;
  ttftFloorMs: number;
  sloReference: number;
  sloReferenceCap: number;
  sloMinDecrease: number;
  sloMaxDecrease: number;
  sloFarAbove: number;
  sloFarFloor: number;
  breachHoldMs: number;
  breachHoldMaxMs: number;
  breachMargin: number;
  sloBand: number;
  sloSetPoint: number;
}

export interface AdaptiveLimitOptions extends Partial<AdaptiveTuning> {
  minCapacity: number;
  maxCapacity: number;
  /** The discovered capacity (the workers' max_running_requests); clamped to the bounds. */
  initialCapacity: number;
  tpotSloMs?: number | undefined;
  ttftSloMs?: number | undefined;
  /** Called once when the limit gets pinned at a bound (again after it has left it). */
  onBound?: ((event: AdaptiveBoundEvent) => void) | undefined;
  /**
   * Delays the first periodic re-probe by this fraction of probeIntervalMs (0..1; default 0). A
   * fleet's per-worker controllers get different ones, so their probes, which step each limit
   * down, take turns instead of lowering the whole pool's limit at once.
   */
  probeOffset?: number | undefined;
}

interface ResolvedAdaptiveLimitOptions extends AdaptiveTuning {
  minCapacity: number;
  maxCapacity: number;
  initialCapacity: number;
  tpotSloMs: number | undefined;
  ttftSloMs: number | undefined;
}

export const ADAPTIVE_LIMIT_DEFAULTS: Readonly<AdaptiveTuning> = Object.freeze({
  windowMs: 1000,
  baselineHalfLifeMs: 60_000,
  baselineDownHalfLifeMs: 5000,
  increaseBelow: 1.1,
  decreaseAbove: 1.25,
  increaseStep: 0.05,
  decreaseSmoothing: 0.2,
  minGradient: 0.5,
  overloadFactor: 0.8,
  utilization: 0.9,
  minSamples: 10,
  maxCarryWindows: 30,
  sampleCap: 512,
  probeStep: 0.9,
  probeSlack: 0.05,
  probeIntervalMs: 300_000,
  probeAfterDecreases: 5,
  ttftFloorMs: 250,
  sloReference: 0.9,
  sloReferenceCap: 1.5,
  sloMinDecrease: 0.1,
  sloMaxDecrease: 0.3,
  sloFarAbove: 2,
  sloFarFloor: 0.5,
  breachHoldMs: 30_000,
  breachHoldMaxMs: 300_000,
  breachMargin: 0.1,
  sloBand: 0.1,
  sloSetPoint: 0.97,
});

/** The YAML key each option is read from; validation errors name these. */
export const ADAPTIVE_LIMIT_KEYS = Object.freeze({
  minCapacity: "adaptive_min_capacity",
  maxCapacity: "adaptive_max_capacity",
  initialCapacity: "initial_capacity",
  tpotSloMs: "tpot_slo_ms",
  ttftSloMs: "ttft_slo_ms",
  windowMs: "adaptive_window_ms",
  baselineHalfLifeMs: "adaptive_baseline_half_life_ms",
  baselineDownHalfLifeMs: "adaptive_baseline_down_half_life_ms",
  increaseBelow: "adaptive_increase_below",
  decreaseAbove: "adaptive_decrease_above",
  increaseStep: "adaptive_increase_step",
  decreaseSmoothing: "adaptive_decrease_smoothing",
  minGradient: "adaptive_min_gradient",
  overloadFactor: "adaptive_overload_factor",
  utilization: "adaptive_utilization",
  minSamples: "adaptive_min_samples",
  maxCarryWindows: "adaptive_max_carry_windows",
  sampleCap: "adaptive_sample_cap",
  probeStep: "adaptive_probe_step",
  probeSlack: "adaptive_probe_slack",
  probeIntervalMs: "adaptive_probe_interval_ms",
  probeAfterDecreases: "adaptive_probe_after_decreases",
  ttftFloorMs: "adaptive_ttft_floor_ms",
  sloReference: "adaptive_slo_reference",
  sloReferenceCap: "adaptive_slo_reference_cap",
  sloMinDecrease: "adaptive_slo_min_decrease",
  sloMaxDecrease: "adaptive_slo_max_decrease",
  sloFarAbove: "adaptive_slo_far_above",
  sloFarFloor: "adaptive_slo_far_floor",
  breachHoldMs: "adaptive_breach_hold_ms",
  breachHoldMaxMs: "adaptive_breach_hold_max_ms",
  breachMargin: "adaptive_breach_margin",
  sloBand: "adaptive_slo_band",
  sloSetPoint: "adaptive_slo_set_point",
} as const satisfies Record<keyof ResolvedAdaptiveLimitOptions, string>);

/**
 * The tuning constants' YAML keys with their options: every key but the bounds, the SLOs and the
 * discovered capacity. They are the keys of an `adaptive_tuning` block (gateway file, simulator).
 */
export const ADAPTIVE_TUNING_KEYS = Object.freeze(
  (Object.keys(ADAPTIVE_LIMIT_DEFAULTS) as (keyof AdaptiveTuning)[]).map(
    (option) => [option, ADAPTIVE_LIMIT_KEYS[option]] as const,
  ),
);

/** Largest sampleCap accepted (7 stores of 8-byte samples: 3.5 MiB per controller at most). */
const MAX_SAMPLE_CAP = 65_536;

/** Upper bounds (exclusive) of the TTFT prompt-length buckets; the last bucket is open. */
export const TTFT_BUCKET_BOUNDS: readonly number[] = Object.freeze([256, 1024, 4096, 16384]);

/** The TTFT bucket of a prompt of `promptTokens` tokens (0 .. TTFT_BUCKET_BOUNDS.length). */
export function ttftBucketOf(promptTokens: number): number {
  let i = 0;
  while (i < TTFT_BUCKET_BOUNDS.length && !(promptTokens < TTFT_BUCKET_BOUNDS[i]!)) i++;
  return i;
}

// ---------------------------------------------------------------------------------------------
// Validation (the same messages as src/core/config.ts; the core imports nothing but clock/errors)

function num(value: unknown, key: string): number {
  if (typeof value !== "number" || !Number.isFinite(value)) throw new ConfigError(key, "must be a number");
  return value;
}

function intAtLeast(value: unknown, key: string, min: number): number {
  const n = num(value, key);
  if (!Number.isSafeInteger(n)) throw new ConfigError(key, "must be an integer");
  if (n < min) throw new ConfigError(key, min === 1 ? "must be > 0" : `must be >= ${min}`);
  return n;
}

function positive(value: unknown, key: string): number {
  const n = num(value, key);
  if (!(n > 0)) throw new ConfigError(key, "must be > 0");
  return n;
}

function atLeastZero(value: unknown, key: string): number {
  const n = num(value, key);
  if (n < 0) throw new ConfigError(key, "must be >= 0");
  return n;
}

/** 0 <= n < 1. */
function share(value: unknown, key: string): number {
  const n = num(value, key);
  if (!(n >= 0 && n < 1)) throw new ConfigError(key, "must be >= 0 and < 1");
  return n;
}

/** n >= 1. */
function atLeastOne(value: unknown, key: string): number {
  const n = num(value, key);
  if (!(n >= 1)) throw new ConfigError(key, "must be >= 1");
  return n;
}

/** 0 <= n <= 1. */
function fraction(value: unknown, key: string): number {
  const n = num(value, key);
  if (!(n >= 0 && n <= 1)) throw new ConfigError(key, "must be >= 0 and <= 1");
  return n;
}

/** lo < n < hi (open), or lo < n <= hi when `closedHigh`. */
function between(value: unknown, key: string, lo: number, hi: number, closedHigh: boolean): number {
  const n = num(value, key);
  if (!(n > lo) || !(closedHigh ? n <= hi : n < hi)) {
    throw new ConfigError(key, `must be > ${lo} and ${closedHigh ? "<=" : "<"} ${hi}`);
  }
  return n;
}

/**
 * Validates the options and fills in the defaults. Throws a ConfigError naming the YAML key of the
 * first bad value (e.g. `adaptive_min_capacity: must be <= adaptive_max_capacity (10 > 5)`).
 */
export function resolveAdaptiveLimitOptions(options: AdaptiveLimitOptions): ResolvedAdaptiveLimitOptions {
  const K = ADAPTIVE_LIMIT_KEYS;
  const d = ADAPTIVE_LIMIT_DEFAULTS;
  const pick = <T extends keyof AdaptiveTuning>(k: T): unknown => options[k] ?? d[k];
  const minCapacity = intAtLeast(options.minCapacity, K.minCapacity, 1);
  const maxCapacity = intAtLeast(options.maxCapacity, K.maxCapacity, 1);
  if (minCapacity > maxCapacity) {
    throw new ConfigError(K.minCapacity, `must be <= ${K.maxCapacity} (${minCapacity} > ${maxCapacity})`);
  }
  const initialCapacity = atLeastZero(options.initialCapacity, K.initialCapacity);
  const tpotSloMs = options.tpotSloMs === undefined ? undefined : positive(options.tpotSloMs, K.tpotSloMs);
  const ttftSloMs = options.ttftSloMs === undefined ? undefined : positive(options.ttftSloMs, K.ttftSloMs);
  const increaseBelow = num(pick("increaseBelow"), K.increaseBelow);
  if (increaseBelow < 1) throw new ConfigError(K.increaseBelow, "must be >= 1");
  const decreaseAbove = num(pick("decreaseAbove"), K.decreaseAbove);
  if (!(decreaseAbove >= increaseBelow)) {
    throw new ConfigError(K.decreaseAbove, `must be >= ${K.increaseBelow} (${increaseBelow})`);
  }
  const minSamples = intAtLeast(pick("minSamples"), K.minSamples, 1);
  const sampleCap = intAtLeast(pick("sampleCap"), K.sampleCap, 1);
  if (sampleCap > MAX_SAMPLE_CAP) throw new ConfigError(K.sampleCap, `must be <= ${MAX_SAMPLE_CAP}`);
  if (sampleCap < minSamples) {
    throw new ConfigError(K.sampleCap, `must be >= ${K.minSamples} (${sampleCap} < ${minSamples})`);
  }
  const probeStep = between(pick("probeStep"), K.probeStep, 0, 1, false);
  const probeSlack = num(pick("probeSlack"), K.probeSlack);
  if (!(probeSlack >= 0 && probeSlack < 1 - probeStep)) {
    // A step in the flat region costs 1 - probeStep of the throughput: it must stop the probe.
    throw new ConfigError(
      K.probeSlack,
      `must be >= 0 and < 1 - ${K.probeStep} (${Number((1 - probeStep).toFixed(6))})`,
    );
  }
  const sloMinDecrease = share(pick("sloMinDecrease"), K.sloMinDecrease);
  // Unset, it is at least the minimum: raising adaptive_slo_min_decrease alone is no error.
  const sloMaxDecrease =
    options.sloMaxDecrease === undefined
      ? Math.max(d.sloMaxDecrease, sloMinDecrease)
      : share(options.sloMaxDecrease, K.sloMaxDecrease);
  if (sloMaxDecrease < sloMinDecrease) {
    throw new ConfigError(
      K.sloMaxDecrease,
      `must be >= ${K.sloMinDecrease} (${sloMaxDecrease} < ${sloMinDecrease})`,
    );
  }
  const breachHoldMs = atLeastZero(pick("breachHoldMs"), K.breachHoldMs);
  const breachHoldMaxMs = atLeastZero(pick("breachHoldMaxMs"), K.breachHoldMaxMs);
  if (breachHoldMaxMs < breachHoldMs) {
    throw new ConfigError(
      K.breachHoldMaxMs,
      `must be >= ${K.breachHoldMs} (${breachHoldMaxMs} < ${breachHoldMs})`,
    );
  }
  return {
    minCapacity,
    maxCapacity,
    initialCapacity,
    tpotSloMs,
    ttftSloMs,
    windowMs: positive(pick("windowMs"), K.windowMs),
    baselineHalfLifeMs: positive(pick("baselineHalfLifeMs"), K.baselineHalfLifeMs),
    baselineDownHalfLifeMs: positive(pick("baselineDownHalfLifeMs"), K.baselineDownHalfLifeMs),
    increaseBelow,
    decreaseAbove,
    increaseStep: between(pick("increaseStep"), K.increaseStep, 0, 1, true),
    decreaseSmoothing: between(pick("decreaseSmoothing"), K.decreaseSmoothing, 0, 1, true),
    minGradient: between(pick("minGradient"), K.minGradient, 0, 1, false),
    overloadFactor: between(pick("overloadFactor"), K.overloadFactor, 0, 1, false),
    utilization: between(pick("utilization"), K.utilization, 0, 1, true),
    minSamples,
    maxCarryWindows: intAtLeast(pick("maxCarryWindows"), K.maxCarryWindows, 1),
    sampleCap,
    probeStep,
    probeSlack,
    probeIntervalMs: atLeastZero(pick("probeIntervalMs"), K.probeIntervalMs),
    probeAfterDecreases: intAtLeast(pick("probeAfterDecreases"), K.probeAfterDecreases, 0),
    ttftFloorMs: atLeastZero(pick("ttftFloorMs"), K.ttftFloorMs),
    sloReference: fraction(pick("sloReference"), K.sloReference),
    sloReferenceCap: atLeastOne(pick("sloReferenceCap"), K.sloReferenceCap),
    sloMinDecrease,
    sloMaxDecrease,
    sloFarAbove: atLeastOne(pick("sloFarAbove"), K.sloFarAbove),
    sloFarFloor: between(pick("sloFarFloor"), K.sloFarFloor, 0, 1, true),
    breachHoldMs,
    breachHoldMaxMs,
    breachMargin: atLeastZero(pick("breachMargin"), K.breachMargin),
    sloBand: share(pick("sloBand"), K.sloBand),
    sloSetPoint: between(pick("sloSetPoint"), K.sloSetPoint, 0, 1, true),
  };
}

// ---------------------------------------------------------------------------------------------
// Bounded sample stores

/** A fixed-size uniform sample (Algorithm R) of the values offered since the last reset. */
class Reservoir {
  readonly values: Float64Array;
  /** Values retained (<= capacity). */
  size = 0;
  /** Values offered since the last reset. */
  seen = 0;
  /** Windows closed since the last reset without enough samples. */
  carried = 0;
  /** Baseline learnt from this store's p90s (undefined until the first one). */
  baseline: number | undefined = undefined;
  /** Clock time of the baseline's last update. */
  updatedAt = 0;
  /** Last p90 evaluated. */
  lastP90: number | undefined = undefined;

  constructor(capacity: number) {
    this.values = new Float64Array(capacity);
  }

  add(value: number, random: () => number): void {
    this.seen++;
    if (this.size < this.values.length) {
      this.values[this.size++] = value;
      return;
    }
    const j = Math.floor(random() * this.seen);
    if (j < this.values.length) this.values[j] = value;
  }

  reset(): void {
    this.size = 0;
    this.seen = 0;
    this.carried = 0;
  }

  /** The p90 (nearest rank) of the retained values, sorted in `scratch`. */
  p90(scratch: Float64Array): number {
    const sorted = scratch.subarray(0, this.size);
    sorted.set(this.values.subarray(0, this.size));
    sorted.sort();
    return sorted[Math.max(0, Math.ceil(0.9 * this.size) - 1)]!;
  }
}

// ---------------------------------------------------------------------------------------------
// The controller

export type AdaptivePhase = "calibrating" | "probing" | "tracking";

/** What the admin API and the metrics show. Latencies are the last evaluated values (ms). */
export interface AdaptiveLimitSnapshot {
  limit: number;
  minCapacity: number;
  maxCapacity: number;
  /** calibrating: the cold-start probe (no baselines yet); probing: a re-probe; tracking: the law. */
  phase: AdaptivePhase;
  tpotP90Ms: number | null;
  tpotBaselineMs: number | null;
  /** Max over the TTFT buckets of p90 / bucket baseline, last window with a TTFT signal. */
  ttftRatio: number | null;
  /** TTFT p90 over all prompts (the value ttftSloMs is held to). */
  ttftP90Ms: number | null;
  /** TTFT baseline per prompt-length bucket (null until learnt). */
  ttftBaselinesMs: Array<number | null>;
  /** max(TPOT ratio, TTFT ratio) of the last tracking window with a signal; gradient = 1 / ratio. */
  ratio: number | null;
  lastDecision: AdaptiveDecision;
  /** Windows closed so far. */
  windows: number;
  /** Increases by the law (rule 4). */
  increases: number;
  /** Decreases by the law (rules 1-3); of which: */
  decreases: number;
  overloadDecreases: number;
  sloDecreases: number;
  /** Probes that ended by setting the baselines (the cold start included). */
  probes: number;
  /** Probe steps down (their undo is not counted as an increase). */
  probeSteps: number;
  /** The last window left the baselines where they were (SLO breach or overload). */
  baselineFrozen: boolean;
  /** The bound the limit is pinned at, or null. */
  bound: "min" | "max" | null;
  /** Samples retained in the stores now (bounded by 7 x sampleCap). */
  storedSamples: number;
  /** `ok` samples with a negative or non-finite value (or no value at all), dropped. */
  invalidSamples: number;
  /** `ok` samples whose measurement began before a cold-start probe step took effect, dropped. */
  staleSamples: number;
  /** The level that last breached while increases stay under it (the breach ceiling), else null. */
  breachCeiling: number | null;
  /** Windows whose increase the breach ceiling held back. */
  ceilingHolds: number;
  /**
   * The SLO band's evidence (sum of p90 / set point - 1 over the windows in the band since it last
   * acted): past +adaptive_slo_band it cuts, past -adaptive_slo_band it grows. 0 without tpot_slo_ms.
   */
  sloEvidence: number;
  /**
   * Slots of the limit the scheduler's reservations held back, unused, from the next class in
   * line at the last window close (setHeldBack); counted as run while work waits.
   */
  heldBack: number;
}

const BUCKETS = TTFT_BUCKET_BOUNDS.length + 1;

/** The deepest probe step, in probeSteps (0.9^4 = 0.66 with the default step). */
const MAX_PROBE_DEPTH = 4;

/** What one closed window measured. */
interface WindowStats {
  now: number;
  limit: number;
  /** In-flight peak of the window. */
  peak: number;
  inUse: boolean;
  /** Work waited in the queue while the limit bound it. */
  queued: boolean;
  /** In flight rose from under half its peak during the window (e.g. the clients starting). */
  rampUp: boolean;
  overloads: number;
  tpotP90: number | undefined;
  bucketP90: Array<number | undefined>;
  sloBreach: boolean;
  /** min over the breached SLOs of slo / p90 (1 when none is breached). */
  sloGradient: number;
  /** The TTFT p90 (all prompts) is above ttftSloMs. */
  ttftBreach: boolean;
}

export class AdaptiveLimit {
  readonly options: Readonly<ResolvedAdaptiveLimitOptions>;
  private readonly clock: Clock;
  private readonly onBound: ((event: AdaptiveBoundEvent) => void) | undefined;
  private readonly random = prng(0x9e3779b9);
  private readonly scratch: Float64Array;

  private current: number;
  private pinned: "min" | "max" | null = null;

  private readonly tpot: Reservoir;
  /** TTFT per prompt-length bucket. */
  private readonly ttft: Reservoir[] = [];
  /** TTFT over all prompts, for ttftSloMs (no baseline). */
  private readonly ttftAll: Reservoir;
  private readonly allStores: Reservoir[];

  private windowStart: number;
  private windowOverloads = 0;
  /** Peak in-flight / queued reported in the window; -1 when nothing was reported. */
  private windowPeak = -1;
  /** Lowest in-flight of the window, from the level it started at. */
  private windowLow = 0;
  private windowQueued = -1;
  private lastInflight = 0;
  private lastQueued = 0;

  private phase: AdaptivePhase = "calibrating";
  /**
   * The probe step just taken: the level to undo it to (what ran before it, with the slots held
   * back for idle higher classes while work waited), the concurrency run and the TPOT p90 there.
   */
  private probePoint: { level: number; ran: number; p90: number } | undefined = undefined;
  /** A re-probe is due (recalibrate(), or a trigger that found the window unfit to start one). */
  private probeWanted = false;
  /** How many probeSteps the next probe step takes (1, 2 or 4): it doubles while steps cost nothing. */
  private probeDepth = 1;
  private nextProbeAt: number;
  /** Added once, to the first periodic re-probe's time (see AdaptiveLimitOptions.probeOffset). */
  private probeOffsetMs: number;
  /** Latency decreases since the last increase (holds do not reset it). */
  private consecutiveDecreases = 0;
  /** SLO breaches past breachMargin in a row (windows read within the SLOs end the run). */
  private breachStreak = 0;
  /**
   * The SLO band's evidence: the sum, over the windows in a row whose TPOT p90 fell within
   * sloBand of the set point, of p90 / (sloSetPoint x tpotSloMs) - 1 (see sloBandCall()).
   */
  private sloEvidence = 0;
  /** The running probe was started by probeAfterDecreases: its steps wait for fresh samples. */
  private freshProbe = false;
  /** The last window increased with latency well under the reference: the next increase is doubled. */
  private boostNext = false;
  /**
   * The last level that breached (markBreach): increases stay under it until `until`. `baseline`
   * is the TPOT baseline when it was marked.
   */
  private ceiling:
    | { level: number; until: number; holdMs: number; baseline: number | undefined }
    | undefined = undefined;
  private ceilingHolds = 0;
  /** Slots of this limit the scheduler holds back for idle higher classes (setHeldBack). */
  private heldBack = 0;

  private lastDecision: AdaptiveDecision = "hold";
  private lastRatio: number | undefined = undefined;
  private lastTtftRatio: number | undefined = undefined;
  private frozen = false;
  private windows = 0;
  private increases = 0;
  private decreases = 0;
  private overloadDecreases = 0;
  private sloDecreases = 0;
  private probes = 0;
  private probeSteps = 0;
  private invalidSamples = 0;
  private staleSamples = 0;
  /**
   * After a cold-start probe step: true until in flight is reported within the new limit (or a
   * window's peak is); `settledAt` is then that moment. A sample with a span that began before
   * it is stale.
   */
  private settling = false;
  private settledAt = Number.NEGATIVE_INFINITY;

  constructor(options: AdaptiveLimitOptions, clock: Clock) {
    this.options = Object.freeze(resolveAdaptiveLimitOptions(options));
    this.onBound = options.onBound;
    this.clock = clock;
    const cap = this.options.sampleCap;
    this.scratch = new Float64Array(cap);
    this.tpot = new Reservoir(cap);
    for (let i = 0; i < BUCKETS; i++) this.ttft.push(new Reservoir(cap));
    this.ttftAll = new Reservoir(cap);
    this.allStores = [this.tpot, ...this.ttft, this.ttftAll];
    this.windowStart = clock.now();
    this.nextProbeAt = Number.POSITIVE_INFINITY;
    const offset = options.probeOffset ?? 0;
    this.probeOffsetMs = offset > 0 && offset < 1 ? offset * this.options.probeIntervalMs : 0;
    this.current = this.options.minCapacity;
    this.setLimit(Math.floor(this.options.initialCapacity));
  }

  /** The concurrency limit in force: an integer in [minCapacity, maxCapacity]. */
  get limit(): number {
    return this.current;
  }

  /** Records one request's outcome. Cancelled and preempted requests give no sample. */
  observe(sample: AdaptiveSample): void {
    if (sample.kind === "overload") {
      this.windowOverloads++;
      return;
    }
    if (sample.kind !== "ok") return;
    const { ttftMs, tpotMs, promptTokens } = sample;
    const ttftOk =
      ttftMs === undefined || (ttftMs >= 0 && ttftMs < Number.POSITIVE_INFINITY && (promptTokens ?? -1) >= 0);
    const tpotOk = tpotMs === undefined || (tpotMs >= 0 && tpotMs < Number.POSITIVE_INFINITY);
    if (!ttftOk || !tpotOk || (ttftMs === undefined && tpotMs === undefined)) {
      this.invalidSamples++;
      return;
    }
    const span = sample.spanMs;
    if (span !== undefined && (this.settling || this.clock.now() - span < this.settledAt)) {
      this.staleSamples++;
      return;
    }
    if (ttftMs !== undefined) {
      this.ttft[ttftBucketOf(promptTokens!)]!.add(ttftMs, this.random);
      this.ttftAll.add(ttftMs, this.random);
    }
    if (tpotMs !== undefined) this.tpot.add(tpotMs, this.random);
  }

  /**
   * Reports the pool's in-flight requests and the admission queue behind it. Call it whenever
   * they change (or at least once per window); a window's peak decides whether the limit is in
   * use, and whether the last decrease has taken effect.
   */
  sampleUsage(inflight: number, queued = 0): void {
    const n = inflight > 0 ? inflight : 0;
    const q = queued > 0 ? queued : 0;
    this.lastInflight = n;
    this.lastQueued = q;
    if (n > this.windowPeak) this.windowPeak = n;
    if (n < this.windowLow) this.windowLow = n;
    if (this.settling && n <= this.current) {
      // The cold-start step has taken effect: what is dispatched from now on runs at the new
      // level (waiting for the end of a window whose peak is within it cost a pace mark a step).
      this.settling = false;
      this.settledAt = this.clock.now();
    }
    if (q > this.windowQueued) this.windowQueued = q;
  }

  /**
   * Reports the slots of the limit that the scheduler's reservations hold back, unused, from the
   * next class in line (0 when none waits); the next window's law counts them as run while work
   * waited (see track()). Call it before tick().
   */
  setHeldBack(slots: number): void {
    this.heldBack = slots > 0 && Number.isFinite(slots) ? slots : 0;
  }

  /** Asks for a probe at the next fit window (e.g. after a model change): the baselines are re-learnt. */
  recalibrate(): void {
    if (this.phase === "tracking") this.probeWanted = true;
  }

  /**
   * Closes the window when windowMs has passed since the last close, applies the law and returns
   * its decision; returns undefined (and changes nothing) when the window is not over yet.
   */
  tick(): AdaptiveDecision | undefined {
    const now = this.clock.now();
    const o = this.options;
    if (now - this.windowStart < o.windowMs) return undefined;
    this.windowStart = now;
    this.windows++;

    const limit = this.current;
    const peak = this.windowPeak >= 0 ? this.windowPeak : this.lastInflight;
    const queued = this.windowQueued >= 0 ? this.windowQueued : this.lastQueued;
    this.windowPeak = -1;
    const low = this.windowLow;
    this.windowLow = this.lastInflight;
    this.windowQueued = -1;
    const overloads = this.windowOverloads;
    this.windowOverloads = 0;
    this.frozen = false;

    if (peak > limit) {
      // Rule 0: the last decrease has not taken effect yet. The samples and errors of this window
      // describe the old limit, and the decrease that answers them is already made.
      for (const store of this.allStores) store.reset();
      return this.decided("hold");
    }
    if (this.settling) {
      // The step took effect during this window: from now on a sample must have been
      // measured entirely at the new concurrency (the ones reported so far were dropped).
      this.settling = false;
      this.settledAt = now;
    }

    // Evaluate every store with enough samples; the others carry over (up to maxCarryWindows).
    const tpotP90 = this.evaluate(this.tpot);
    const bucketP90 = this.ttft.map((store) => this.evaluate(store));
    const ttftAllP90 = this.evaluate(this.ttftAll);
    let sloGradient = 1;
    if (o.tpotSloMs !== undefined && tpotP90 !== undefined && tpotP90 > o.tpotSloMs) {
      sloGradient = Math.min(sloGradient, o.tpotSloMs / tpotP90);
    }
    const ttftBreach = o.ttftSloMs !== undefined && ttftAllP90 !== undefined && ttftAllP90 > o.ttftSloMs;
    if (ttftBreach) sloGradient = Math.min(sloGradient, o.ttftSloMs! / ttftAllP90!);
    const w: WindowStats = {
      now,
      limit,
      peak,
      inUse: queued > 0 || peak >= o.utilization * limit,
      queued: queued > 0,
      rampUp: low < peak / 2,
      overloads,
      tpotP90,
      bucketP90,
      sloBreach: sloGradient < 1,
      sloGradient,
      ttftBreach,
    };
    this.frozen = overloads > 0 || w.sloBreach;

    const cold = this.phase === "calibrating";
    const decision = this.phase !== "tracking" ? this.probeWindow(w) : this.track(w);
    if (this.current < limit && (cold || (this.phase === "probing" && this.freshProbe))) {
      // A cold start's step (and a re-probe's after probeAfterDecreases) is judged by samples
      // measured wholly at the new concurrency: far past the knee an answer takes many windows,
      // and one that began at the old concurrency would read the step as worthless (the probe
      // would stop and undo it, locking in the overload). What the stores carry over was
      // measured above the new limit.
      this.settling = true;
      for (const store of this.allStores) store.reset();
    }
    return this.decided(decision);
  }

  snapshot(): AdaptiveLimitSnapshot {
    const now = this.clock.now();
    let stored = 0;
    for (const store of this.allStores) stored += store.size;
    return {
      limit: this.current,
      minCapacity: this.options.minCapacity,
      maxCapacity: this.options.maxCapacity,
      phase: this.phase,
      tpotP90Ms: this.tpot.lastP90 ?? null,
      tpotBaselineMs: this.tpot.baseline ?? null,
      ttftRatio: this.lastTtftRatio ?? null,
      ttftP90Ms: this.ttftAll.lastP90 ?? null,
      ttftBaselinesMs: this.ttft.map((store) => store.baseline ?? null),
      ratio: this.lastRatio ?? null,
      lastDecision: this.lastDecision,
      windows: this.windows,
      increases: this.increases,
      decreases: this.decreases,
      overloadDecreases: this.overloadDecreases,
      sloDecreases: this.sloDecreases,
      probes: this.probes,
      probeSteps: this.probeSteps,
      baselineFrozen: this.frozen,
      bound: this.pinned,
      storedSamples: stored,
      invalidSamples: this.invalidSamples,
      staleSamples: this.staleSamples,
      breachCeiling: this.ceiling !== undefined && now < this.ceiling.until ? this.ceiling.level : null,
      ceilingHolds: this.ceilingHolds,
      sloEvidence: this.sloEvidence,
      heldBack: this.heldBack,
    };
  }

  // -------------------------------------------------------------------------------------------

  /** Rules 1-5 against the baselines, and the re-probe triggers. */
  private track(w: WindowStats): AdaptiveDecision {
    const o = this.options;
    // Ratios against the baselines (a bucket seen for the first time sets its own).
    let tpotRatio: number | undefined;
    const tpotBase = this.tpot.baseline;
    let rawTpotRatio: number | undefined;
    if (w.tpotP90 !== undefined && tpotBase !== undefined && tpotBase > 0) {
      rawTpotRatio = w.tpotP90 / tpotBase;
      // With an SLO, a TPOT that rises with the batch but stays well under the SLO is no overload.
      // ... but only up to a rise of sloReferenceCap over the baseline: past that the latency is
      // climbing steeply (a knee), whatever room the SLO leaves.
      const floor =
        o.tpotSloMs === undefined ? 0 : Math.min(o.tpotSloMs * o.sloReference, tpotBase * o.sloReferenceCap);
      const reference = Math.max(tpotBase, floor);
      tpotRatio = w.tpotP90 / reference;
    }
    let ttftRatio: number | undefined;
    for (let i = 0; i < BUCKETS; i++) {
      const p = w.bucketP90[i];
      if (p === undefined) continue;
      const store = this.ttft[i]!;
      if (store.baseline === undefined) {
        store.baseline = p;
        store.updatedAt = w.now;
      }
      // Against the floor when the baseline is below it: prefill jitter of tens of ms is no signal.
      const reference = Math.max(store.baseline, o.ttftFloorMs);
      const r = reference > 0 ? p / reference : 1;
      ttftRatio = ttftRatio === undefined ? r : Math.max(ttftRatio, r);
    }
    if (ttftRatio !== undefined) this.lastTtftRatio = ttftRatio;
    const ratio =
      tpotRatio === undefined
        ? ttftRatio
        : ttftRatio === undefined
          ? tpotRatio
          : Math.max(tpotRatio, ttftRatio);
    if (ratio !== undefined) this.lastRatio = ratio;

    // A re-probe, when due and this window can start one: in use, a TPOT signal, no error, no breach.
    const stuck = o.probeAfterDecreases > 0 && this.consecutiveDecreases >= o.probeAfterDecreases;
    if ((o.probeIntervalMs > 0 && w.now >= this.nextProbeAt) || stuck) this.probeWanted = true;
    else if (
      rawTpotRatio !== undefined &&
      rawTpotRatio < 1 / o.decreaseAbove &&
      w.inUse &&
      w.overloads === 0 &&
      !w.sloBreach
    ) {
      // TPOT well under its baseline while in use: the baseline is stale (an incident or a
      // slowdown is over), so it is re-learnt here, where the limit stands. A probe used to run
      // instead, and its steps, judged while latency was still falling, each read as free: at the
      // simulator's incident's end it took the limit from 31 to 20 before the climb began. This
      // window's own reading stands: latency well under its reference is room (rule 4).
      this.tpot.baseline = w.tpotP90!;
      this.tpot.updatedAt = w.now;
    }
    if (this.probeWanted && w.inUse && w.tpotP90 !== undefined && w.overloads === 0 && !w.sloBreach) {
      this.probeWanted = false;
      // A probe that asks "is it load?" runs in an overload, where answers are long: like a cold
      // start's, its steps are judged only by samples measured wholly after they took effect.
      this.freshProbe = stuck;
      this.consecutiveDecreases = 0;
      this.breachStreak = 0;
      this.sloEvidence = 0;
      this.boostNext = false; // the window before the next increase will be the probe's
      this.phase = "probing";
      return this.probeWindow(w);
    }

    const gradient = ratio === undefined ? 1 : 1 / ratio;
    // A decrease starts from what ran: the latency measured is that of the in-flight peak, and a
    // limit above it would take several steps before it binds at all.
    // Slots the scheduler held back for idle higher classes while work waited (its reservations
    // scale with the limit) count as run: else a breach of what the waiting class ran would cut the
    // limit to it, its share of that would be smaller still, and the limit would saw.
    const held = w.queued ? this.heldBack : 0;
    const ran = w.peak > 0 ? Math.min(w.limit, Math.floor(w.peak + held)) : w.limit;
    const band = this.sloBandCall(w);
    let decision: AdaptiveDecision;
    // A worker's overload, or an SLO missed by more than breachMargin (not noise at the edge),
    // marks the level that ran: increases stop under it for a while (the ceiling).
    if (w.overloads > 0 || w.sloGradient * (1 + o.breachMargin) < 1) this.markBreach(ran, w.now);
    else if (
      this.ceiling !== undefined &&
      ran >= this.ceiling.level &&
      !w.sloBreach &&
      w.tpotP90 !== undefined
    ) {
      // The level runs within the SLOs now (pinned at the floor through an incident that is over,
      // or tried again after its hold): the ceiling is history.
      this.ceiling = undefined;
    }
    if (w.overloads > 0) {
      decision = this.shrink(ran * o.overloadFactor, "overload");
    } else if (band === "cut") {
      decision = this.shrink(ran * (1 - o.sloMinDecrease), "slo");
    } else if (band !== undefined && ratio !== undefined && ratio > o.decreaseAbove) {
      // The latency's own gradient still speaks inside the band (a knee under the SLO).
      decision = this.shrink(this.shrunk(ran, gradient), "decrease");
    } else if (band === "hold" || (band === "room" && !w.inUse)) {
      decision = "hold";
    } else if (band === "room") {
      decision = this.stepUp(w, 1);
    } else if (w.sloBreach) {
      // At least sloMinDecrease: the increases take 5% a window on a low reading, so a breach that
      // took less would let noise ratchet the limit up into the SLO.
      const wanted = this.shrunk(ran, Math.min(gradient, w.sloGradient));
      // A breach past the margin that persists window after window is no noise: the n-th in a
      // row takes n x sloMinDecrease, up to sloMaxDecrease, so a limit far over a flat TPOT curve
      // (every worker 2x slower: the limit must fall 85%) does not come down 10% at a time.
      this.breachStreak = w.sloGradient * (1 + o.breachMargin) < 1 ? this.breachStreak + 1 : 0;
      const least = Math.max(
        o.sloMinDecrease,
        Math.min(o.sloMaxDecrease, this.breachStreak * o.sloMinDecrease),
      );
      const step = Math.min(wanted, ran * (1 - least));
      decision = this.shrink(Math.min(step, this.farCut(ran, w.sloGradient)), "slo");
    } else if (ratio === undefined) {
      decision = "hold";
    } else if (ratio > o.decreaseAbove) {
      decision = this.shrink(this.shrunk(ran, gradient), "decrease");
    } else if (ratio <= o.increaseBelow && w.inUse) {
      // After a window well under the reference, the next increase takes twice the step: a limit
      // climbing back after an incident (latency far under its baseline) is not held to 5% a
      // window, while one near its knee (ratio in 1/increaseBelow .. increaseBelow) still is.
      decision = this.stepUp(w, this.boostNext ? 2 : 1);
      if (decision === "increase") this.boostNext = ratio <= 1 / o.increaseBelow;
    } else {
      decision = "hold";
    }
    // "In a row" means without an increase between them. Holds do not break the run: with answers
    // many windows long most windows carry no signal, and a baseline absorbing an overload (60 s
    // half-life up) soon reads it in the dead band; either used to stop the count short of the
    // re-probe and leave the limit far past the knee until the periodic one.
    if (decision !== "slo" && w.tpotP90 !== undefined) this.breachStreak = 0; // a window read within the SLOs
    if (decision === "decrease") this.consecutiveDecreases++;
    else if (decision === "increase") this.consecutiveDecreases = 0;
    if (decision !== "increase") this.boostNext = false;

    // A window the law read as overload (decrease) is not followed either: a baseline that
    // absorbed it would soon read the overload as normal (the dead band, then increases) before
    // probeAfterDecreases asks whether it is load. The probe, not the drift, decides that.
    if (!this.frozen && decision !== "decrease") {
      this.follow(this.tpot, w.tpotP90, w.now);
      for (let i = 0; i < BUCKETS; i++) this.follow(this.ttft[i]!, w.bucketP90[i], w.now);
    }
    // A TPOT baseline fallen well under (1 / increaseBelow) the one the ceiling was marked at
    // means other conditions (an incident over, shorter answers): the ceiling is dropped.
    const c = this.ceiling;
    const base = this.tpot.baseline;
    if (c?.baseline !== undefined && base !== undefined && base * o.increaseBelow < c.baseline) {
      this.ceiling = undefined;
    }
    return decision;
  }

  /**
   * One window of a probe (phase calibrating or probing). Steps down while each step costs less
   * than probeSlack of the throughput; the first that does not is undone and sets the baselines.
   */
  private probeWindow(w: WindowStats): AdaptiveDecision {
    const o = this.options;
    const cold = this.phase === "calibrating";
    const fault = w.overloads > 0 || w.sloBreach;
    // A re-probe needs the limit in use (it starts in such a window). A cold start steps down from
    // the in-flight peak instead, so it also bites when demand sits under the discovered capacity.
    if (!fault && w.tpotP90 === undefined && (cold || w.inUse)) {
      return "hold"; // too few samples yet: they carry over and the probe waits for them
    }
    if (fault || w.tpotP90 === undefined || (!cold && !w.inUse)) {
      // Nothing to compare with. A cold start starts its steps again at the next fit window; a
      // re-probe gives up and keeps the baselines it had (a due probe is tried again later).
      this.probePoint = undefined;
      if (!cold) this.phase = "tracking";
      const base = w.peak > 0 ? Math.min(w.limit, w.peak) : w.limit;
      if (w.overloads > 0) return this.shrink(base * o.overloadFactor, "overload");
      if (w.sloBreach) {
        const step = this.shrunk(base, w.sloGradient);
        return this.shrink(Math.min(step, this.farCut(base, w.sloGradient)), "slo");
      }
      return "hold";
    }
    const p90 = w.tpotP90;
    const point = this.probePoint;
    // The cold start's first reference must be a window at its level: one that ramped up has
    // a p90 of fewer requests than its peak, and every step would then read as a loss.
    if (cold && point === undefined && w.rampUp) return "hold";
    const ran = w.peak > 0 ? Math.min(w.limit, w.peak) : w.limit;
    // Throughput of the window vs the one before the step (requests in flight / TPOT).
    const gain = point === undefined ? 1 : ran / p90 / (point.ran / point.p90);
    if (gain >= 1 - o.probeSlack && ran > o.minCapacity) {
      // A cold start's undo goes back to what ran, not to the limit: that limit is the discovered
      // capacity, a claim never run, and a worker whose demand ran 55 of 128 went back to 128
      // when its first step was undone, drew the routing's load past the knee (p99 TPOT 23 ms
      // at 90% of the fleet's knee) and took three SLO cuts to come down. Held-back slots count
      // as run, as in the law's decreases. A re-probe starts in use: its limit is what ran.
      const held = w.queued ? this.heldBack : 0;
      const level = cold ? Math.min(w.limit, Math.floor(ran + held)) : w.limit;
      this.probePoint = { level, ran, p90 };
      // Each step waits for the requests above the limit to finish, and far past the knee a
      // minute-long answer makes that a minute: while steps cost nothing (or raise the
      // throughput: latency falls faster than concurrency), the next goes twice as deep, up to
      // four steps (x0.66). A jump of more than 4 slacks is a cliff's edge: a deep step there would
      // land far under the knee, so the next is single again. Overshooting is cheap: the loss
      // stops the probe and undoes the step.
      if (point === undefined || gain >= 1 + 4 * o.probeSlack) this.probeDepth = 1;
      else this.probeDepth = Math.min(MAX_PROBE_DEPTH, this.probeDepth * 2);
      return this.shrink(
        Math.max(o.minCapacity, Math.floor(ran * o.probeStep ** this.probeDepth)),
        "decrease",
        true,
      );
    }
    // The last step bought nothing (or no step is left): this window's latency is the baseline.
    this.phase = "tracking";
    this.probePoint = undefined;
    this.probes++;
    this.consecutiveDecreases = 0;
    this.nextProbeAt =
      o.probeIntervalMs > 0 ? w.now + o.probeIntervalMs + this.probeOffsetMs : Number.POSITIVE_INFINITY;
    this.probeOffsetMs = 0;
    this.tpot.baseline = p90;
    this.tpot.updatedAt = w.now;
    for (let i = 0; i < BUCKETS; i++) {
      const p = w.bucketP90[i];
      if (p === undefined) continue;
      this.ttft[i]!.baseline = p;
      this.ttft[i]!.updatedAt = w.now;
    }
    if (point !== undefined && point.level > w.limit) return this.grow(point.level, true);
    return "hold";
  }

  /**
   * A breach at concurrency `ran` (an overload, or an SLO missed by more than breachMargin): that
   * level becomes the ceiling, and increases stop one under it for breachHoldMs. The same level
   * (or a lower one) breaching again soon after the hold ended doubles the hold, up to
   * breachHoldMaxMs: the level is tried again less and less often, so a limit whose next step
   * crosses the SLO (coarse steps past a knee) does not saw between the two for good.
   */
  private markBreach(ran: number, now: number): void {
    const o = this.options;
    if (o.breachHoldMs <= 0) return;
    const c = this.ceiling;
    const again = c !== undefined && ran <= c.level && now - c.until <= 2 * o.breachHoldMs;
    const holdMs = !again
      ? o.breachHoldMs
      : now >= c.until
        ? Math.min(o.breachHoldMaxMs, c.holdMs * 2)
        : c.holdMs;
    this.ceiling = { level: ran, until: now + holdMs, holdMs, baseline: this.tpot.baseline };
  }

  /** The highest limit an increase may reach now: one under the ceiling while it holds. */
  private ceilingCap(now: number): number {
    const c = this.ceiling;
    return c === undefined || now >= c.until ? Number.POSITIVE_INFINITY : c.level - 1;
  }

  /**
   * Rule 4's step, k times increaseStep (at least k), up to one under the breach ceiling; a hold
   * (counted in ceilingHolds) when the ceiling leaves no room.
   */
  private stepUp(w: WindowStats, k: number): AdaptiveDecision {
    const cap = this.ceilingCap(w.now);
    if (!(cap > w.limit)) {
      this.ceilingHolds++;
      return "hold";
    }
    return this.grow(
      Math.min(w.limit + Math.max(k, Math.floor(w.limit * this.options.increaseStep * k)), cap),
    );
  }

  /**
   * The SLO band. Near the TPOT SLO one window's p90 is mostly noise: from ten-odd samples it moves
   * by 5-10% window to window, and where the TPOT curve is flat in concurrency (the simulator's
   * incident: every worker 2x slower, its floor near the SLO) a cut on any p90 over the SLO and an
   * increase on any under it made the limit a random walk (a pool of 22-41 around 31). So a window
   * whose p90 lies within sloBand of the set point (sloSetPoint x tpotSloMs) adds its excess
   * (p90 / set point - 1, negative under it) to the evidence, and only evidence past sloBand acts:
   * "cut" (an SLO cut of sloMinDecrease) or "room" (an increase of increaseStep); in between the
   * limit holds. A window outside the band acts at once through the usual rules (undefined) and
   * clears the evidence, as do an overload and a TTFT breach; sloBand 0 turns the band off.
   */
  private sloBandCall(w: WindowStats): "cut" | "room" | "hold" | undefined {
    const o = this.options;
    // A window without a TPOT p90 (its samples carry over) changes nothing: most windows of a
    // pool with few completions per second are such.
    if (o.sloBand === 0 || o.tpotSloMs === undefined || w.tpotP90 === undefined) return undefined;
    if (w.overloads > 0 || w.ttftBreach) {
      this.sloEvidence = 0;
      return undefined;
    }
    const excess = w.tpotP90 / (o.sloSetPoint * o.tpotSloMs) - 1;
    if (!(Math.abs(excess) <= o.sloBand)) {
      this.sloEvidence = 0;
      return undefined;
    }
    this.sloEvidence += excess;
    if (this.sloEvidence > o.sloBand) {
      this.sloEvidence = 0;
      return "cut";
    }
    if (this.sloEvidence < -o.sloBand) {
      this.sloEvidence = 0;
      return "room";
    }
    return "hold";
  }

  /** The store's p90 when it holds >= minSamples (then it is reset); else carries it over. */
  private evaluate(store: Reservoir): number | undefined {
    if (store.size >= this.options.minSamples) {
      const p = store.p90(this.scratch);
      store.lastP90 = p;
      store.reset();
      return p;
    }
    if (store.size > 0 && ++store.carried >= this.options.maxCarryWindows) store.reset();
    return undefined;
  }

  /** Moves a baseline toward a window's p90: fast down, slow up, by elapsed time. */
  private follow(store: Reservoir, p90: number | undefined, now: number): void {
    if (p90 === undefined) return;
    const o = this.options;
    if (store.baseline === undefined) {
      store.baseline = p90;
    } else {
      const halfLife = p90 < store.baseline ? o.baselineDownHalfLifeMs : o.baselineHalfLifeMs;
      const alpha = 1 - 2 ** (-Math.max(0, now - store.updatedAt) / halfLife);
      store.baseline += alpha * (p90 - store.baseline);
    }
    store.updatedAt = now;
  }

  /**
   * Far above an SLO (p90 > sloFarAbove x the ceiling, i.e. `sloGradient` < 1 / sloFarAbove) a
   * breach's cut is proportional, so an overload many times the SLO (a cold start far past the
   * knee, where each answer takes a minute) takes a few windows instead of dozens: ran x
   * (1 - sloMinDecrease) x sloFarAbove x sloGradient, at least sloFarFloor of ran. It meets the
   * usual 10% step where p90 = sloFarAbove x the ceiling. Infinity (no bound) nearer the ceiling.
   * A TPOT that falls with concurrency lands at 1.8x the ceiling or under (it falls slower under a
   * knee), so the cut is conservative, and the floor only bounds a window's step. Each step waits
   * for the requests above the new limit to drain (at a cold start, answers of tens of seconds):
   * a quarter saves a drain where the limit is the worker's concurrency, but under reservations
   * the waiting class gets only its share of the cut limit and climbs back at the increase rule's
   * pace, so the default stays a half (docs/adaptive.md has both runs).
   */
  private farCut(ran: number, sloGradient: number): number {
    const o = this.options;
    if (!(sloGradient * o.sloFarAbove < 1)) return Number.POSITIVE_INFINITY;
    return ran * Math.max(o.sloFarFloor, (1 - o.sloMinDecrease) * o.sloFarAbove * sloGradient);
  }

  /** limit * (1 - smoothing * (1 - max(minGradient, gradient))). */
  private shrunk(limit: number, gradient: number): number {
    const o = this.options;
    return limit * (1 - o.decreaseSmoothing * (1 - Math.max(o.minGradient, Math.min(1, gradient))));
  }

  /**
   * A probe step (and its undo) is counted apart from the law's moves, and keeps a pinned bound
   * pinned: it is an excursion, not a move.
   */
  private shrink(wanted: number, kind: "decrease" | "overload" | "slo", probe = false): AdaptiveDecision {
    const limit = this.current;
    this.setLimit(Math.min(limit - 1, Math.floor(wanted)), probe);
    if (this.current < limit) {
      if (probe) this.probeSteps++;
      else this.decreases++;
      if (kind === "overload") this.overloadDecreases++;
      if (kind === "slo") this.sloDecreases++;
    }
    return kind;
  }

  private grow(wanted: number, probe = false): AdaptiveDecision {
    const limit = this.current;
    this.setLimit(wanted, probe);
    if (this.current > limit && !probe) this.increases++;
    return "increase";
  }

  /** Clamps to the bounds; reports the first clamp of an episode at a bound. */
  private setLimit(wanted: number, keepPin = false): void {
    const { minCapacity: min, maxCapacity: max } = this.options;
    const bound = wanted > max ? "max" : wanted < min ? "min" : null;
    const next = bound === "max" ? max : bound === "min" ? min : wanted;
    if (bound !== null) {
      if (this.pinned !== bound) {
        this.pinned = bound;
        this.onBound?.({ bound, limit: next, wanted });
      }
    } else if (!keepPin && next > min && next < max) {
      this.pinned = null;
    }
    this.current = next;
  }

  private decided(decision: AdaptiveDecision): AdaptiveDecision {
    this.lastDecision = decision;
    return decision;
  }
}

/**
 * Adaptive capacity: one controller per worker (or per pool) turns the engine's saturation signals
 * and the latency SLOs into a concurrency limit. Pure and synchronous: no timers, no wall clock.
 * The caller feeds samples (`observe`), the in-flight level (`sampleUsage`), the engine's reading
 * (`sampleEngine`) and closes each window with `tick()`, which reads `clock.now()` only to date
 * what it measured; under a ManualClock every run repeats. docs/adaptive.md has the law and the
 * reasons; the internal constants are in CONTROLLER below, each with its reason.
 *
 * The law, once per window (first matching rule wins):
 *  1. overload: a worker answered 429/503 or timed out: limit = 0.8 x min(limit, in-flight peak).
 *  2. engine: the engine queues what it was sent (waiting past a tolerance) or holds more KV than
 *     kv_target_utilization: cut to what it runs (in flight less waiting), or in proportion to the
 *     KV over its target. Engine signals are a measurement of saturation, not an inference.
 *  3. drain: in flight is still above a limit just cut: hold (what is measured is the old level).
 *  4. guards, once enough *fresh* samples are in (samples whose measurement began after the level
 *     in force took effect: a limit's effect shows only in requests that ran under it):
 *     - TPOT p90 above tpot_slo_ms, or TTFT p90 above ttft_slo_ms: cut toward the set point;
 *     - TPOT p90 under it, the limit in use, the engine with room: raise toward it (a step of
 *       assumed elasticity, half the way, at most x1.25).
 *  5. no tpot_slo_ms: the knee search. Levels measured in use are compared by throughput (mean in
 *     flight / TPOT p50); a raise that lost 20% steps back and caps raises there, a lower level as
 *     good looks lower still, one that lost steps back up; at a bound, with no raise to compare,
 *     it looks a fifth lower once a minute. Otherwise raise while in use and the
 *     engine has room (no engine signal either: the limit grows to the bounds, and only overloads
 *     and the search cut it; the gateway says at start that no time per token is promised).
 *  6. hold.
 * A cold start begins at a quarter of the reported capacity and doubles per decision while nothing
 * objects ("starting"): requests admitted early must not wait at an engine far past its knee, out of
 * reach of the classes' queue timeouts (issue 35 item 14).
 */
import type { Clock } from "@sluice/scheduler/core/clock.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { mulberry32 } from "@sluice/scheduler/core/random.js";
import { DEFAULT_KV_TARGET_UTILIZATION } from "./kv-budget.js";

/**
 * One observation of a request. An `ok` sample carries a TTFT, a TPOT, or both: a gateway reports
 * TTFT at the first token and TPOT as the stream goes (pace marks) or at its end.
 */
export type AdaptiveSample =
  | {
      kind: "ok";
      /** Dispatch to the worker -> first token, ms (the admission queue wait excluded). */
      ttftMs: number;
      promptTokens?: number | undefined;
      /** Time per output token, ms; undefined when the answer had 0-1 output tokens. */
      tpotMs?: number | undefined;
      /** How long before this report its measurement began; without it the sample always counts. */
      spanMs?: number | undefined;
    }
  | {
      kind: "ok";
      tpotMs: number;
      ttftMs?: undefined;
      promptTokens?: number | undefined;
      spanMs?: number | undefined;
    }
  /** The worker answered 429 or 503, or timed out. */
  | { kind: "overload" }
  /** Accepted so a caller can pass every outcome; they give no sample. */
  | { kind: "cancelled" }
  | { kind: "preempted" };

/** An engine's load as the controller reads it (a scrape carried forward by the caller's own requests). */
export interface EngineView {
  /** Requests the engine runs. */
  running: number;
  /** Requests queued inside the engine. */
  waiting: number;
  /** KV cache in use, 0..1 (may pass 1 on an estimate); undefined when not exported. */
  kvUtilization: number | undefined;
  /** Most requests it runs at once, when it says (max_num_seqs, max_running_requests). */
  maxRunning?: number | undefined;
}

export type AdaptiveDecision = "increase" | "decrease" | "hold" | "overload" | "slo" | "engine" | "knee";

export type AdaptivePhase = "starting" | "tracking";

export interface AdaptiveBoundEvent {
  bound: "min" | "max";
  /** The limit in force (the bound). */
  limit: number;
  /** What the law wanted. */
  wanted: number;
}

/** The operator's settings (YAML keys in ADAPTIVE_LIMIT_KEYS); the rest is CONTROLLER. */
export interface AdaptiveLimitOptions {
  minCapacity: number;
  maxCapacity: number;
  /** The discovered capacity (the workers' max_running_requests); the cold start begins under it. */
  initialCapacity: number;
  tpotSloMs?: number | undefined;
  ttftSloMs?: number | undefined;
  /** Engine KV use held at or under this share (0 < x <= 1); default DEFAULT_KV_TARGET_UTILIZATION. */
  kvTargetUtilization?: number | undefined;
  /** Called once when the limit gets pinned at a bound (again after it has left it). */
  onBound?: ((event: AdaptiveBoundEvent) => void) | undefined;
}

interface ResolvedAdaptiveLimitOptions {
  minCapacity: number;
  maxCapacity: number;
  initialCapacity: number;
  tpotSloMs: number | undefined;
  ttftSloMs: number | undefined;
  kvTargetUtilization: number;
  windowMs: number;
}

/** The YAML key each option is read from; validation errors name these. */
export const ADAPTIVE_LIMIT_KEYS = Object.freeze({
  minCapacity: "adaptive_min_capacity",
  maxCapacity: "adaptive_max_capacity",
  initialCapacity: "initial_capacity",
  tpotSloMs: "tpot_slo_ms",
  ttftSloMs: "ttft_slo_ms",
  kvTargetUtilization: "kv_target_utilization",
} as const);

/**
 * The controller's internal constants, in one place. None is a setting: each follows from how
 * engines and their signals behave, and docs/adaptive.md ("Constants") says why.
 */
export const CONTROLLER = Object.freeze({
  /** One decision a second: engine scrapes and pace marks arrive at about that rate. */
  windowMs: 1000,
  /**
   * Fresh samples a guard decision needs. A p90 of 20 per-request TPOTs moves by ~10% from one
   * draw to the next (prefill stalls land on some requests and not others); of 60, by ~5%.
   */
  minSamples: 60,
  /** ...unless this many windows passed since the level took effect (a quiet worker still decides). */
  patientWindows: 10,
  /** ...with at least this many. */
  fewSamples: 5,
  /** Samples kept per store (reservoir): memory is bounded, p90 stays exact enough. */
  sampleCap: 256,
  /**
   * The TPOT set point, x tpot_slo_ms: under the ceiling by the dead band and a little more, so one
   * draw's noise over the set point does not cross the ceiling. (0.95 and 1.0 did worse on the
   * adaptive scenarios: 35 and 34 of 42 bounds, against 36.)
   */
  setPoint: 0.97,
  /** p90 within this share of the set point holds the limit: one draw's noise is no reason to move. */
  deadBand: 0.03,
  /**
   * Share of the way to the level the elasticity puts at the set point taken per decision: the
   * p90 is a noisy draw, and half steps average it over decisions (a cold start takes full ones).
   */
  gain: 0.5,
  /** TPOT p90s are smoothed over this half-life for the snapshot's baseline (what TPOT is held at). */
  baselineHalfLifeMs: 30_000,
  /** An overload keeps 80%: the worker said no, however the latencies read. */
  overloadFactor: 0.8,
  /** The deepest cut of one decision: a p90 far over the SLO still halves at most per step. */
  maxCut: 0.5,
  /** The largest raise of one decision while tracking; a cold start doubles. */
  maxRaise: 1.25,
  /** Engine waiting tolerated: a request arriving between two engine steps waits one step. */
  waitingTolerance: 0.05,
  /** The limit is in use when the in-flight peak reaches this share of it (or work waits). */
  utilization: 0.9,
  /**
   * Elasticity of TPOT in concurrency near the knee (d ln TPOT / d ln c): a step toward the set
   * point is (set point / p90) ^ (1 / elasticity). The batch's step time is an intercept (weights
   * read once per step) plus a part that grows with the batch; at the knee the two are of one size.
   */
  elasticity: 0.5,
  /** The cold start's level, x the reported capacity. */
  startFraction: 0.25,
  /**
   * Without tpot_slo_ms, the knee search. A raise whose level keeps less than this share of the
   * throughput measured under the level before it went past the knee: back, and look below. (A
   * real engine's step time is affine in the batch, so its throughput does not fall with more
   * requests; one that falls 20% is an engine past a knee, or thrashing. The margin is wide so
   * that one draw's noise, and long prefills' weight on TPOT, seldom read as a knee: at 0.9-1.0
   * the Mooncake replay at 3x held 77-79% of the best fixed limit's goodput, at 0.8 86%.)
   */
  kneeLoss: 0.8,
  /** A lower level that keeps this share of the throughput is as good, for less latency: go lower. */
  kneeKeep: 0.95,
  /** Each step of the search down, x the level. */
  kneeProbe: 0.8,
  /**
   * TPOT elasticity, across a probe down that followed another, at which the search is on the flat
   * far side of the knee and halves instead of stepping a fifth.
   */
  kneeFar: 0.9,
  /**
   * ...up to this: a larger elasticity is the knee itself, between the two levels, not the flat
   * far side of it, and the next step is a fifth again.
   */
  kneeSharp: 2,
  /** Levels compared must differ by this much in concurrency (log): closer, noise decides. */
  kneeSpread: 0.05,
  /**
   * A level found past the knee caps raises this long, and one found short of it stops the
   * probes down; then the search may look again (the engine or the mix may have changed).
   */
  kneeMemoryMs: 60_000,
});

// ---------------------------------------------------------------------------------------------
// Validation

function num(value: unknown, key: string): number {
  if (typeof value !== "number" || !Number.isFinite(value)) throw new ConfigError(key, "must be a number");
  return value;
}

function intAtLeastOne(value: unknown, key: string): number {
  const n = num(value, key);
  if (!Number.isSafeInteger(n)) throw new ConfigError(key, "must be an integer");
  if (n < 1) throw new ConfigError(key, "must be > 0");
  return n;
}

function positiveOrUnset(value: unknown, key: string): number | undefined {
  if (value === undefined) return undefined;
  const n = num(value, key);
  if (!(n > 0)) throw new ConfigError(key, "must be > 0");
  return n;
}

/**
 * Validates the options and fills in the defaults. Throws a ConfigError naming the YAML key of the
 * first bad value (e.g. `adaptive_min_capacity: must be <= adaptive_max_capacity (10 > 5)`).
 */
export function resolveAdaptiveLimitOptions(options: AdaptiveLimitOptions): ResolvedAdaptiveLimitOptions {
  const K = ADAPTIVE_LIMIT_KEYS;
  const minCapacity = intAtLeastOne(options.minCapacity, K.minCapacity);
  const maxCapacity = intAtLeastOne(options.maxCapacity, K.maxCapacity);
  if (minCapacity > maxCapacity) {
    throw new ConfigError(K.minCapacity, `must be <= ${K.maxCapacity} (${minCapacity} > ${maxCapacity})`);
  }
  const initialCapacity = num(options.initialCapacity, K.initialCapacity);
  if (initialCapacity < 0) throw new ConfigError(K.initialCapacity, "must be >= 0");
  const kv = options.kvTargetUtilization ?? DEFAULT_KV_TARGET_UTILIZATION;
  if (!(num(kv, K.kvTargetUtilization) > 0 && kv <= 1)) {
    throw new ConfigError(K.kvTargetUtilization, "must be > 0 and <= 1");
  }
  return {
    minCapacity,
    maxCapacity,
    initialCapacity,
    tpotSloMs: positiveOrUnset(options.tpotSloMs, K.tpotSloMs),
    ttftSloMs: positiveOrUnset(options.ttftSloMs, K.ttftSloMs),
    kvTargetUtilization: kv,
    windowMs: CONTROLLER.windowMs,
  };
}

// ---------------------------------------------------------------------------------------------
// Samples

/** A bounded reservoir of one latency (fixed-seed replacement: deterministic runs). */
class Reservoir {
  private readonly values = new Float64Array(CONTROLLER.sampleCap);
  private seen = 0;
  private readonly random = mulberry32(0x9e3779b9);

  get size(): number {
    return Math.min(this.seen, this.values.length);
  }

  add(value: number): void {
    if (this.seen < this.values.length) this.values[this.seen] = value;
    else {
      // The replaced slot is uniform over the samples seen so far.
      const j = Math.floor(this.random() * (this.seen + 1));
      if (j < this.values.length) this.values[j] = value;
    }
    this.seen++;
  }

  clear(): void {
    this.seen = 0;
  }

  p90(): number | undefined {
    return this.quantile(0.9);
  }

  quantile(q: number): number | undefined {
    const n = this.size;
    if (n === 0) return undefined;
    const sorted = this.values.slice(0, n).sort();
    return sorted[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))]!;
  }
}

// ---------------------------------------------------------------------------------------------
// The controller

/** What the admin API and the metrics show. Latencies are the last decision's values (ms). */
export interface AdaptiveLimitSnapshot {
  limit: number;
  minCapacity: number;
  maxCapacity: number;
  /** starting: the cold start's doubling; tracking: the law. */
  phase: AdaptivePhase;
  tpotP90Ms: number | null;
  /** TPOT p90 smoothed over the decisions (30 s half-life): what the limit holds TPOT at. */
  tpotBaselineMs: number | null;
  ttftP90Ms: number | null;
  /** TTFT p90 / ttft_slo_ms at the last decision (null without the SLO or samples). */
  ttftRatio: number | null;
  /** max(TPOT p90 / its set point, TTFT ratio) at the last decision; over 1: above target. */
  ratio: number | null;
  /** The engine's waiting and KV use as last read (null without engine signals). */
  engineWaiting: number | null;
  engineKvUtilization: number | null;
  lastDecision: AdaptiveDecision;
  windows: number;
  increases: number;
  /** Decreases of every kind; of which: */
  decreases: number;
  overloadDecreases: number;
  sloDecreases: number;
  engineDecreases: number;
  /** Cuts of the knee search (no tpot_slo_ms): a raise that lost throughput, or a probe below it. */
  kneeDecreases: number;
  /** The level the knee search found past the knee, capping raises for a while (null: none). */
  kneeCeiling: number | null;
  /** The bound the limit is pinned at, or null. */
  bound: "min" | "max" | null;
  /** Samples retained now. */
  storedSamples: number;
  /** `ok` samples with a negative or non-finite value, dropped. */
  invalidSamples: number;
  /** Samples whose measurement began before the level in force took effect, dropped. */
  staleSamples: number;
  /** Slots the scheduler's reservations held back from waiting work at the last window close. */
  heldBack: number;
}

export class AdaptiveLimit {
  readonly options: Readonly<ResolvedAdaptiveLimitOptions>;
  private readonly onBound: ((event: AdaptiveBoundEvent) => void) | undefined;
  private current: number;
  private pinned: "min" | "max" | null = null;
  private phase: AdaptivePhase = "starting";

  private readonly tpot = new Reservoir();
  private readonly ttft = new Reservoir();
  /** TPOT p90 smoothed over decisions (the snapshot's baseline), and when it was last moved. */
  private baseline: { value: number; at: number } | undefined = undefined;
  /** When the level in force took effect (a cut: when in flight first came within it). */
  private settledAt: number;
  private draining = false;
  private windowsSettled = 0;
  private overloads = 0;
  /** In-flight peak of the window, and the levels reported since the level took effect. */
  private windowPeak = 0;
  private windowQueued = false;
  private levelSum = 0;
  private levelCount = 0;
  private lastInflight = 0;
  private heldBack = 0;
  private engine: EngineView | undefined = undefined;
  /**
   * The knee search (no tpot_slo_ms): the last level measured in use (limit, mean in flight, TPOT
   * p50), to compare the next with; and the level found past the knee, with when.
   */
  private kneePrev: { limit: number; conc: number; tpot: number } | undefined = undefined;
  private kneeCeiling: { limit: number; at: number } | undefined = undefined;
  private kneeFloor: { limit: number; at: number } | undefined = undefined;
  /** The level in force came from a probe down (not a step back from past the knee). */
  private kneeProbing = false;

  private last = {
    decision: "hold" as AdaptiveDecision,
    tpotP90: null as number | null,
    ttftP90: null as number | null,
    windows: 0,
    increases: 0,
    decreases: 0,
    overloadDecreases: 0,
    sloDecreases: 0,
    engineDecreases: 0,
    kneeDecreases: 0,
    invalid: 0,
    stale: 0,
  };

  constructor(
    options: AdaptiveLimitOptions,
    private readonly clock: Clock,
  ) {
    this.options = resolveAdaptiveLimitOptions(options);
    this.onBound = options.onBound;
    const { minCapacity, maxCapacity, initialCapacity } = this.options;
    const start = Math.ceil(Math.min(initialCapacity, maxCapacity) * CONTROLLER.startFraction);
    this.current = Math.min(maxCapacity, Math.max(minCapacity, start));
    // The cold start's level is the first: nothing measured under it is stale.
    this.settledAt = Number.NEGATIVE_INFINITY;
  }

  get limit(): number {
    return this.current;
  }

  observe(sample: AdaptiveSample): void {
    if (sample.kind === "overload") {
      this.overloads++;
      return;
    }
    if (sample.kind !== "ok") return;
    const values = [sample.tpotMs, sample.ttftMs];
    if (values.every((v) => v === undefined) || values.some((v) => v !== undefined && !(v >= 0 && v < 1e9))) {
      this.last.invalid++;
      return;
    }
    if (sample.spanMs !== undefined && this.clock.now() - sample.spanMs < this.settledAt) {
      this.last.stale++;
      return;
    }
    if (sample.tpotMs !== undefined) this.tpot.add(sample.tpotMs);
    if (sample.ttftMs !== undefined) this.ttft.add(sample.ttftMs);
  }

  /** The in-flight level now, and whether work waits in the admission queue while this limit binds. */
  sampleUsage(inflight: number, queued = 0): void {
    this.lastInflight = inflight;
    if (inflight > this.windowPeak) this.windowPeak = inflight;
    if (queued > 0) this.windowQueued = true;
    if (this.draining && inflight <= this.current) {
      // The cut took effect: what runs from now on runs under it.
      this.draining = false;
      this.settle();
    }
    if (!this.draining) {
      this.levelSum += inflight;
      this.levelCount++;
    }
  }

  /** The engine's load as last read (undefined: it exports nothing usable). */
  sampleEngine(view: EngineView | undefined): void {
    this.engine = view;
  }

  /** Slots the scheduler's reservations hold back, unused, from waiting work (counted as run). */
  setHeldBack(slots: number): void {
    this.heldBack = slots;
  }

  tick(): AdaptiveDecision | undefined {
    const decision = this.decide();
    this.last.windows++;
    this.last.decision = decision;
    this.windowPeak = this.lastInflight;
    this.windowQueued = false;
    this.overloads = 0;
    return decision;
  }

  snapshot(): AdaptiveLimitSnapshot {
    const { tpotSloMs, ttftSloMs, minCapacity, maxCapacity } = this.options;
    const l = this.last;
    const tpotRatio =
      tpotSloMs !== undefined && l.tpotP90 !== null ? l.tpotP90 / (CONTROLLER.setPoint * tpotSloMs) : null;
    const ttftRatio = ttftSloMs !== undefined && l.ttftP90 !== null ? l.ttftP90 / ttftSloMs : null;
    const ratios = [tpotRatio, ttftRatio].filter((r): r is number => r !== null);
    return {
      limit: this.current,
      minCapacity,
      maxCapacity,
      phase: this.phase,
      tpotP90Ms: l.tpotP90,
      tpotBaselineMs: this.baseline?.value ?? null,
      ttftP90Ms: l.ttftP90,
      ttftRatio,
      ratio: ratios.length > 0 ? Math.max(...ratios) : null,
      engineWaiting: this.engine?.waiting ?? null,
      engineKvUtilization: this.engine?.kvUtilization ?? null,
      lastDecision: l.decision,
      windows: l.windows,
      increases: l.increases,
      decreases: l.decreases,
      overloadDecreases: l.overloadDecreases,
      sloDecreases: l.sloDecreases,
      engineDecreases: l.engineDecreases,
      kneeDecreases: l.kneeDecreases,
      kneeCeiling: this.ceiling() ?? null,
      bound: this.pinned,
      storedSamples: this.tpot.size + this.ttft.size,
      invalidSamples: l.invalid,
      staleSamples: l.stale,
      heldBack: this.heldBack,
    };
  }

  // -------------------------------------------------------------------------------------------

  private decide(): AdaptiveDecision {
    const ran = Math.min(this.current, this.windowPeak);
    if (this.overloads > 0) return this.cut(Math.floor(ran * CONTROLLER.overloadFactor), "overload");
    const engineCut = this.engineCut();
    if (engineCut !== undefined) return this.cut(engineCut, "engine");
    if (this.draining) return "hold";
    this.windowsSettled++;
    const inUse =
      this.windowQueued || this.windowPeak + this.heldBack >= CONTROLLER.utilization * this.current;
    const { tpotSloMs, ttftSloMs } = this.options;
    const n = Math.max(this.tpot.size, this.ttft.size);
    const ready =
      n >= CONTROLLER.minSamples ||
      (this.windowsSettled >= CONTROLLER.patientWindows && n >= CONTROLLER.fewSamples);
    if (!ready) {
      // Nothing to judge latency by (answers without token counts): the engine alone decides.
      const blind = n === 0 && this.windowsSettled >= CONTROLLER.patientWindows;
      return blind && inUse && this.engineHasRoom() ? this.raiseWithRoom() : "hold";
    }
    // The level that ran while these samples were measured (mean of the reported levels). Cuts
    // start from it, not from it plus the slots the reservations held back (on the adaptive
    // scenarios, cuts from that sum met 32 of 42 bounds against 37).
    const level = this.levelCount > 0 ? this.levelSum / this.levelCount : ran;
    const tpotP90 = this.tpot.p90();
    // The knee search's measure, only where it runs (no TPOT SLO).
    const tpotP50 = tpotSloMs === undefined ? this.tpot.quantile(0.5) : undefined;
    const ttftP90 = this.ttft.p90();
    this.last.tpotP90 = tpotP90 ?? null;
    this.last.ttftP90 = ttftP90 ?? null;
    this.tpot.clear();
    this.ttft.clear();
    this.levelSum = 0;
    this.levelCount = 0;
    this.windowsSettled = 0;
    if (ttftSloMs !== undefined && ttftP90 !== undefined && ttftP90 > ttftSloMs) {
      const wanted = level * Math.max(CONTROLLER.maxCut, ttftSloMs / ttftP90);
      return this.cut(Math.min(this.current - 1, Math.floor(wanted)), "slo");
    }
    if (tpotSloMs === undefined || tpotP90 === undefined) {
      if (tpotSloMs === undefined && tpotP50 !== undefined) {
        const knee = this.kneeSearch(level, tpotP50, inUse);
        if (knee !== undefined) return knee;
      }
      const decision = inUse && this.engineHasRoom() ? this.raiseWithRoom() : "hold";
      return decision === "hold" && tpotSloMs === undefined && inUse ? this.kneeLookBelow() : decision;
    }
    this.follow(tpotP90);
    const target = CONTROLLER.setPoint * tpotSloMs;
    const error = Math.log(target / tpotP90);
    if (Math.abs(error) <= CONTROLLER.deadBand) {
      this.phase = "tracking";
      return "hold";
    }
    const gain = this.phase === "starting" ? 1 : CONTROLLER.gain;
    const step = Math.exp((gain * error) / CONTROLLER.elasticity);
    if (error < 0) {
      const wanted = Math.floor(Math.max(level * CONTROLLER.maxCut, level * step, 1));
      return this.cut(Math.min(this.current - 1, wanted), "slo");
    }
    if (!inUse || !this.engineHasRoom()) return "hold";
    // At most x1.25 a decision once tracking, however far under: past a knee TPOT may double with
    // a few requests more (a doubling from under the knee overshot to twice the SLO and back, on
    // and on, over real HTTP), so a climb after an incident takes half a minute.
    return this.raise(Math.min(this.current * Math.min(step, this.raiseFactor()), this.engineCeiling()));
  }

  private raiseWithRoom(): AdaptiveDecision {
    const wanted = Math.min(this.current * this.raiseFactor(), this.engineCeiling());
    const ceiling = this.ceiling();
    if (ceiling !== undefined && wanted >= ceiling) {
      // Under a level found past the knee: up to just below it, or hold where a step that short
      // could not be judged (the search compares levels kneeSpread apart or more).
      const below = ceiling - 1;
      return below >= this.current * Math.exp(CONTROLLER.kneeSpread) ? this.raise(below) : "hold";
    }
    return this.raise(wanted);
  }

  /**
   * Without tpot_slo_ms, nothing says how slow is too slow, but an engine past its knee says it
   * itself: more requests, less throughput (mean in flight / TPOT p50, Little's law). Each level
   * measured in use is compared with the one before it, and the search moves toward the better:
   * - went up and kept under kneeLoss of the throughput: back to the level before, which caps
   *   raises for kneeMemoryMs; the next comparison (down from the lost level) then looks below;
   * - went down and kept kneeKeep or more: as good for less latency, so a step lower;
   * - went down and lost: back up to the level before; probes stop above the lost one a while.
   * Otherwise (no level before, levels too close, or a raise that paid): undefined, and the raise
   * rule goes on. Any other cut forgets the level before: its move was not the search's.
   */
  private kneeSearch(conc: number, tpot: number, inUse: boolean): AdaptiveDecision | undefined {
    const prev = this.kneePrev;
    if (!inUse || conc <= 0 || tpot <= 0) {
      this.kneePrev = undefined;
      return undefined;
    }
    this.kneePrev = { limit: this.current, conc, tpot };
    if (prev === undefined) return undefined;
    const spread = Math.log(conc / prev.conc);
    if (Math.abs(spread) < CONTROLLER.kneeSpread) return undefined;
    const kept = conc / tpot / (prev.conc / prev.tpot);
    if (spread > 0) {
      if (kept >= CONTROLLER.kneeLoss || prev.limit >= this.current) return undefined;
      this.kneeCeiling = { limit: this.current, at: this.clock.now() };
      this.kneeProbing = false;
      return this.cut(prev.limit, "knee");
    }
    if (kept >= CONTROLLER.kneeKeep) {
      // A probe down that found TPOT falling as fast as the concurrency (elasticity near 1 or more)
      // is far past the knee, where throughput is flat: halve. Nearer, and right after a step
      // back (whose TPOT fell across the knee itself), a fifth.
      const elasticity = Math.log(tpot / prev.tpot) / spread;
      const far = this.kneeProbing && elasticity >= CONTROLLER.kneeFar && elasticity <= CONTROLLER.kneeSharp;
      const wanted = Math.floor(this.current * (far ? CONTROLLER.maxCut : CONTROLLER.kneeProbe));
      // Not down to a level already found worse: the search has bracketed the knee.
      const floor = this.remembered("floor");
      if (floor !== undefined && wanted <= floor) return undefined;
      const decision = this.cut(wanted, "knee");
      this.kneeProbing = true;
      return decision;
    }
    this.kneeProbing = false;
    if (prev.limit <= this.current) return undefined;
    this.kneeFloor = { limit: this.current, at: this.clock.now() };
    return this.raise(prev.limit);
  }

  /**
   * At a bound (the engine full, or adaptive_max_capacity), with no raise to compare, the search
   * cannot tell whether the knee is below: it looks a fifth lower, once per kneeMemoryMs (a look
   * that lost leaves a floor that long). A worker that advertises 64 and bends at 8 would
   * otherwise run 64 once a noisy comparison let a raise to its bound pass.
   */
  private kneeLookBelow(): AdaptiveDecision {
    const measured = this.kneePrev?.limit === this.current;
    const bracketed = this.remembered("floor") !== undefined || this.ceiling() !== undefined;
    if (!measured || bracketed || this.current <= this.options.minCapacity) return "hold";
    const decision = this.cut(Math.floor(this.current * CONTROLLER.kneeProbe), "knee");
    this.kneeProbing = false;
    return decision;
  }

  /** The knee search's ceiling while it is remembered. */
  private ceiling(): number | undefined {
    return this.remembered("ceiling");
  }

  /** A level the knee search found worse (above: past the knee; below: short of it), for a while. */
  private remembered(which: "ceiling" | "floor"): number | undefined {
    const mark = which === "ceiling" ? this.kneeCeiling : this.kneeFloor;
    if (mark === undefined) return undefined;
    if (this.clock.now() - mark.at < CONTROLLER.kneeMemoryMs) return mark.limit;
    if (which === "ceiling") this.kneeCeiling = undefined;
    else this.kneeFloor = undefined;
    return undefined;
  }

  /** No more than the engine can run: what it runs now and its free running slots, when it says. */
  private engineCeiling(): number {
    const e = this.engine;
    if (e?.maxRunning === undefined) return Number.POSITIVE_INFINITY;
    return Math.max(this.current, this.lastInflight + Math.max(0, e.maxRunning - e.running));
  }

  /** Moves the smoothed TPOT toward a decision's p90 (half-life baselineHalfLifeMs of clock time). */
  private follow(p90: number): void {
    const now = this.clock.now();
    if (this.baseline === undefined) {
      this.baseline = { value: p90, at: now };
      return;
    }
    const keep = 0.5 ** ((now - this.baseline.at) / CONTROLLER.baselineHalfLifeMs);
    this.baseline = { value: keep * this.baseline.value + (1 - keep) * p90, at: now };
  }

  private raiseFactor(): number {
    return this.phase === "starting" ? 2 : CONTROLLER.maxRaise;
  }

  /** A cut the engine asks for, or undefined: it queues what it was sent, or its KV is over target. */
  private engineCut(): number | undefined {
    const e = this.engine;
    if (e === undefined || this.draining) return undefined;
    const own = this.lastInflight;
    // A queue counts only where the engine is full: requests wait a few steps for their turn at
    // prefill (chunked prefill of long prompts) with slots and KV to spare, and cutting on that
    // took a Mooncake replay down to one or two requests a worker.
    if (e.waiting > Math.max(1, CONTROLLER.waitingTolerance * e.running) && this.engineFull(e)) {
      return Math.min(this.current - 1, Math.floor(own - e.waiting));
    }
    const kv = e.kvUtilization;
    const target = this.options.kvTargetUtilization;
    if (kv !== undefined && kv > target && own > 0) {
      return Math.min(this.current - 1, Math.floor((own * target) / kv));
    }
    return undefined;
  }

  /**
   * The engine runs all it can: its running slots are taken, or its KV is at its target. An engine
   * that says neither figure is full when requests queue inside it.
   */
  private engineFull(e: EngineView): boolean {
    if (e.kvUtilization === undefined && e.maxRunning === undefined) return e.waiting > 0;
    const slots = e.maxRunning !== undefined && e.running >= e.maxRunning;
    const kv = e.kvUtilization !== undefined && e.kvUtilization >= this.options.kvTargetUtilization;
    return slots || kv;
  }

  private engineHasRoom(): boolean {
    return this.engine === undefined || !this.engineFull(this.engine);
  }

  private cut(wanted: number, kind: "overload" | "slo" | "engine" | "knee"): AdaptiveDecision {
    this.phase = "tracking";
    const before = this.current;
    this.setLimit(Math.min(wanted, before - 1));
    if (this.current >= before) return "hold";
    if (kind !== "knee") {
      // A move the knee search did not make breaks its chain of comparisons.
      this.kneePrev = undefined;
      this.kneeProbing = false;
    }
    this.last.decreases++;
    if (kind === "overload") this.last.overloadDecreases++;
    else if (kind === "slo") this.last.sloDecreases++;
    else if (kind === "knee") this.last.kneeDecreases++;
    else this.last.engineDecreases++;
    // What was measured described the old level; the new one counts once in flight is within it.
    this.draining = this.lastInflight > this.current;
    this.settle();
    return kind;
  }

  private raise(wanted: number): AdaptiveDecision {
    const before = this.current;
    this.setLimit(Math.max(before + 1, Math.floor(wanted)));
    if (this.current <= before) return "hold";
    this.last.increases++;
    this.settle();
    return "increase";
  }

  /** A new level takes effect now: samples from before it are stale. */
  private settle(): void {
    this.settledAt = this.clock.now();
    this.tpot.clear();
    this.ttft.clear();
    this.levelSum = 0;
    this.levelCount = 0;
    this.windowsSettled = 0;
  }

  private setLimit(wanted: number): void {
    const { minCapacity, maxCapacity } = this.options;
    const next = Math.min(maxCapacity, Math.max(minCapacity, wanted));
    const bound = wanted < minCapacity ? "min" : wanted > maxCapacity ? "max" : null;
    if (bound !== null && this.pinned !== bound) this.onBound?.({ bound, limit: next, wanted });
    this.pinned = bound;
    this.current = next;
  }
}

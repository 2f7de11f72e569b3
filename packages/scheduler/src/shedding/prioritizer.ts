/**
 * Prioritized shedding, after failsafe-go's prioritizer: when the queue's predicted wait passes a
 * threshold, the lowest levels are refused at the door (503 load_shed) instead of waiting in vain.
 *
 * Levels: 100 per class, class-major, so every bulk level is below every default level, and so on:
 *   level = classRank * 100 + (99 - usageLevel)
 * classRank is bulk 0, default 1, interactive 2, system 3; usageLevel (0..99) is the tenant's share
 * of the class's recent token usage, heaviest highest, so inside a class the tenants that used the
 * most tokens recently are shed first. Usage decays with a half-life (default 60 s).
 *
 * Calibration, once per second (the caller runs calibrate()), from the queue's level histogram
 * and the histogram of the last period's arrivals (shed or not: the forecast of the next second's):
 *   rate   = recent completions per second (smoothed)
 *   bound  = maxQueueWaitMs, or without it the bound of the level's class (the gateway's default
 *            in adaptive mode: the class's queue_timeout, past which the wait is in vain anyway)
 *   budget = rate * (bound + 1 s): what may wait within the bound, plus what the next second serves
 *   from the top level down, add each level's queued requests and arrivals per second; at the
 *   first level L where the sum passes the budget, the room left admits a fraction a of L's
 *   arrivals, and threshold = L + 1 - a (nothing shed when the sum never passes it).
 * The threshold enters a class's levels only once the previous calibration refused every level
 * below that class, or those levels have nothing queued or arriving: a class is shed after the ones
 * below it, in time as well as in order.
 * An arrival below floor(threshold) is refused; one at floor(threshold) is refused with probability
 * threshold - floor(threshold) (a deterministic low-discrepancy draw, so runs repeat). The
 * fraction matters: with one tenant in a class every request has the same level, and a whole-level
 * threshold could only refuse all of them or none, a second of each, which let a second's burst
 * of arrivals in at a time and queued them for several seconds. With the fraction, the admitted
 * rate follows the completions and the wait stays near its bound.
 * Shedding starts when some class's predicted wait (the requests queued at or above its levels /
 * rate) passes its bound. An empty queue sheds nothing (the slots took every arrival, however
 * many). predicted wait = queued requests / rate, shown in status and used for Retry-After. With
 * no completion yet (rate 0), a queue that has stood a class's bound without one refuses that
 * class's levels (and those below), up to the highest level queued.
 * The threshold never passes SYSTEM_LEVEL (system is never shed), and, levels being class-major,
 * interactive is shed only once every bulk and default level is.
 *
 * CoDel-style sojourn check (optional, per class an operator marks sheddable): when a class's
 * smallest queue wait over a whole interval (default 1 s) stays above its target (default 500 ms),
 * the class's arrivals are refused until an interval's smallest wait falls under the target again.
 *
 * Pure: time comes from the injected Clock; no timers of its own.
 */
import type { PriorityClass } from "../core/class.js";
import type { Clock } from "../core/clock.js";
import { ConfigError } from "../core/errors.js";
import { GOLDEN_FRACTION } from "../core/random.js";

/** The first system level: never shed. */
export const SYSTEM_LEVEL = 300;

export interface PrioritizerOptions {
  /** Predicted queue wait above which levels are shed, one bound for every class. */
  maxQueueWaitMs?: number | undefined;
  /**
   * Without `maxQueueWaitMs`: each class's own bound (the gateway passes each class's
   * queue_timeout, the wait past which the request would be refused anyway).
   */
  classWaitMs?: Readonly<Record<PriorityClass, number>> | undefined;
  /** Half-life of the tenants' recent usage. */
  usageHalfLifeMs?: number;
  /** Classes with the CoDel-style sojourn check. */
  codelClasses?: PriorityClass[];
  /** CoDel target: smallest wait over an interval above this sheds the class. */
  codelTargetMs?: number;
  codelIntervalMs?: number;
  /** Tenants tracked per class (the lightest-used are forgotten first). */
  maxTenants?: number;
}

export interface PrioritizerStatus {
  /**
   * Arrivals below floor(threshold) are refused, and at floor(threshold) the fraction
   * threshold - floor(threshold) of them (0 = none).
   */
  threshold: number;
  /** The predicted wait past which each class's levels are shed. */
  boundsMs: Record<PriorityClass, number>;
  predictedWaitMs: number;
  completionsPerSec: number;
  queued: number;
  /** Classes whose CoDel check is shedding now. */
  codelShedding: PriorityClass[];
  shed: number;
}

interface UsageEntry {
  tokens: number;
  atMs: number;
}

/** Levels 0..399: 100 per class. */
const LEVELS = SYSTEM_LEVEL + 100;

const RANK_BASE: Record<PriorityClass, number> = {
  bulk: 0,
  default: 100,
  interactive: 200,
  system: SYSTEM_LEVEL,
};
const CLASSES_BY_RANK: readonly PriorityClass[] = ["bulk", "default", "interactive", "system"];

export class Prioritizer {
  private readonly halfLifeMs: number;
  private readonly codel: Set<PriorityClass>;
  private readonly codelTargetMs: number;
  private readonly codelIntervalMs: number;
  private readonly maxTenants: number;
  /** The wait bound of each class, by rank (bulk 0 .. system 3). */
  private readonly bounds: readonly number[];
  /** The last calibration that found the queue empty, or a completion (the clock at creation). */
  private lastProgressMs: number;
  private readonly usage = new Map<PriorityClass, Map<string, UsageEntry>>();
  /** Usage levels as of the last calibration: a Map lookup per request, not a scan. */
  private usageLevels = new Map<PriorityClass, Map<string, number>>();
  private completions = 0;
  private rate = 0;
  private lastCalibrationMs: number;
  private currentThreshold = 0;
  private predictedWait = 0;
  private queuedTotal = 0;
  private shedCount = 0;
  /** Per CoDel class: smallest wait this interval, the interval's start, and whether it sheds. */
  private readonly sojourn = new Map<PriorityClass, { min: number; since: number; shedding: boolean }>();
  /** Arrivals per level since the last calibration (levels are 0..399). */
  private arrivals = new Float64Array(LEVELS);
  /** The period before's, read by calibrate() while `arrivals` fills again (the two swap). */
  private lastArrivals = new Float64Array(LEVELS);
  /** Queued requests per level, rebuilt by each calibration. */
  private readonly queuedAt = new Float64Array(LEVELS);
  /** Draws for the threshold level's fraction: golden-ratio steps, evenly spread (and repeatable). */
  private draw = 0;

  constructor(
    options: PrioritizerOptions,
    private readonly clock: Clock,
  ) {
    const single = options.maxQueueWaitMs;
    if (single !== undefined || options.classWaitMs === undefined) {
      if (!(single !== undefined && single > 0))
        throw new ConfigError("load_shedding.max_queue_wait_ms", "must be > 0");
      this.bounds = CLASSES_BY_RANK.map(() => single);
    } else {
      const perClass = options.classWaitMs;
      this.bounds = CLASSES_BY_RANK.map((cls) => {
        const ms = perClass[cls];
        if (!(ms > 0)) throw new ConfigError(`classes.${cls}.queue_timeout_secs`, "must be > 0");
        return ms;
      });
    }
    this.halfLifeMs = options.usageHalfLifeMs ?? 60_000;
    if (!(this.halfLifeMs > 0)) throw new ConfigError("load_shedding.usage_half_life_secs", "must be > 0");
    this.codel = new Set(options.codelClasses ?? []);
    if (this.codel.has("system")) {
      throw new ConfigError("load_shedding.codel_classes", "system is never shed");
    }
    this.codelTargetMs = options.codelTargetMs ?? 500;
    this.codelIntervalMs = options.codelIntervalMs ?? 1000;
    if (!(this.codelTargetMs > 0)) throw new ConfigError("load_shedding.codel_target_ms", "must be > 0");
    if (!(this.codelIntervalMs > 0)) throw new ConfigError("load_shedding.codel_interval_ms", "must be > 0");
    this.maxTenants = options.maxTenants ?? 10_000;
    this.lastCalibrationMs = clock.now();
    this.lastProgressMs = this.lastCalibrationMs;
  }

  /** Arrivals below this level are refused. */
  get threshold(): number {
    return this.currentThreshold;
  }

  /** Tokens a tenant used in a class (at settlement), for its usage level. */
  recordUsage(cls: PriorityClass, tenant: string, tokens: number): void {
    if (!(tokens > 0)) return;
    let byTenant = this.usage.get(cls);
    if (byTenant === undefined) {
      byTenant = new Map();
      this.usage.set(cls, byTenant);
    }
    const now = this.clock.now();
    const entry = byTenant.get(tenant);
    if (entry === undefined) {
      if (byTenant.size >= this.maxTenants) this.forgetLightest(byTenant, now);
      byTenant.set(tenant, { tokens, atMs: now });
    } else {
      entry.tokens = this.decayed(entry, now) + tokens;
      entry.atMs = now;
    }
  }

  /** A request finished (served): feeds the completion rate. */
  recordCompletion(): void {
    this.completions++;
    this.lastProgressMs = this.clock.now();
  }

  /** A request left a class's queue after waiting `waitMs` (CoDel input). */
  recordQueueWait(cls: PriorityClass, waitMs: number): void {
    if (!this.codel.has(cls)) return;
    const now = this.clock.now();
    let s = this.sojourn.get(cls);
    if (s === undefined) {
      s = { min: waitMs, since: now, shedding: false };
      this.sojourn.set(cls, s);
      return;
    }
    if (now - s.since >= this.codelIntervalMs) this.closeInterval(s, now);
    if (waitMs < s.min) s.min = waitMs;
  }

  /** The level of a request of `tenant` in `cls`. */
  level(cls: PriorityClass, tenant: string): number {
    const base = RANK_BASE[cls];
    if (cls === "system") return base + 99;
    return base + 99 - (this.usageLevels.get(cls)?.get(tenant) ?? 0);
  }

  /**
   * True when a request at this level (of this class) is to be refused now. `keyDraw` (0..1), when
   * given, decides the threshold level's fraction instead of the running draw: the request is
   * refused when keyDraw >= the admitted share 1 - (threshold - floor(threshold)). Keyed shedding
   * passes its key's bucket, so a session is refused or let in whole, and a key the keyed
   * regulator refuses is among the first this cut refuses too (the stricter cut wins).
   */
  shouldShed(cls: PriorityClass, level: number, keyDraw?: number): boolean {
    if (cls === "system") return false;
    if (level >= 0 && level < LEVELS) this.arrivals[Math.floor(level)]!++;
    const s = this.sojourn.get(cls);
    const t = this.currentThreshold;
    const whole = Math.floor(t);
    let refuse = level < whole;
    if (!refuse && level < whole + 1 && t > whole) {
      if (keyDraw !== undefined) refuse = keyDraw >= 1 - (t - whole);
      else {
        this.draw = (this.draw + GOLDEN_FRACTION) % 1;
        refuse = this.draw < t - whole;
      }
    }
    if (!refuse && s !== undefined) {
      const now = this.clock.now();
      if (now - s.since >= this.codelIntervalMs) this.closeInterval(s, now);
      refuse = s.shedding;
    }
    if (refuse) this.shedCount++;
    return refuse;
  }

  /**
   * Recalibrates the threshold from the queue's level histogram: `queued` lists, for each queued
   * request or group of them, its level and how many.
   */
  calibrate(queued: Iterable<{ level: number; count: number }>): void {
    const now = this.clock.now();
    this.usageLevels = this.computeUsageLevels(now);
    const elapsed = Math.max(1, now - this.lastCalibrationMs);
    this.lastCalibrationMs = now;
    const observed = (this.completions * 1000) / elapsed;
    this.completions = 0;
    // Smoothed so one quiet second does not predict an endless wait.
    this.rate = this.rate === 0 ? observed : 0.5 * this.rate + 0.5 * observed;

    const queuedAt = this.queuedAt.fill(0);
    let total = 0;
    for (const { level, count } of queued) {
      if (!(count > 0) || !(level >= 0 && level < LEVELS)) continue;
      queuedAt[Math.floor(level)]! += count;
      total += count;
    }
    const arrivals = this.arrivals;
    this.arrivals = this.lastArrivals.fill(0);
    this.lastArrivals = arrivals;
    this.queuedTotal = total;
    this.predictedWait =
      total === 0 ? 0 : this.rate > 0 ? (total / this.rate) * 1000 : Number.POSITIVE_INFINITY;
    if (total === 0) this.lastProgressMs = now;
    if (total === 0 || (this.currentThreshold === 0 && !this.pastBound(queuedAt))) {
      // Nothing waits (the slots had room for every arrival, however many), or every class's wait
      // is within its bound and nothing is being shed: a short queue in a burst is no reason to start.
      this.currentThreshold = 0;
      return;
    }
    if (this.rate === 0) {
      // Nothing served yet, so no forecast: the evidence is how long the queue has stood without a
      // completion. Refuse the levels of the classes whose bound that time has reached, up to the
      // highest one queued (a higher level would go ahead of all of them).
      const stuckMs = now - this.lastProgressMs;
      let top = LEVELS - 1;
      while (top > 0 && queuedAt[top] === 0) top--;
      let reached = -1;
      for (let rank = 3; rank >= 0 && reached < 0; rank--) {
        if (this.bounds[rank]! <= stuckMs) reached = rank * 100 + 99;
      }
      this.currentThreshold = Math.min(Math.min(top, reached) + 1, SYSTEM_LEVEL);
      return;
    }
    const perSecond = 1000 / elapsed;
    let sum = 0;
    let threshold = 0;
    for (let level = LEVELS - 1; level >= 0; level--) {
      const arriving = arrivals[level]! * perSecond;
      const next = sum + queuedAt[level]! + arriving;
      // What may wait within this level's bound, plus what the next second serves.
      const budget = (this.rate * (this.bound(level) + 1000)) / 1000;
      if (next > budget) {
        const room = budget - sum - queuedAt[level]!;
        const admitted = room > 0 && arriving > 0 ? Math.min(1, room / arriving) : 0;
        threshold = level + 1 - admitted;
        break;
      }
      sum = next;
    }
    // A class is shed only after the classes below it: its arrivals are refused once every lower
    // level was refused for a period (or has nothing to shed). A forecast from one second at the
    // onset of a flood (the workers stalled on the burst's prefill, completions down to a tenth)
    // must not refuse interactive users while bulk was let in the second before.
    const base = Math.floor(threshold / 100) * 100;
    if (threshold > base && base > 0 && this.currentThreshold < base) {
      let below = 0;
      for (let level = 0; level < base; level++) below += queuedAt[level]! + arrivals[level]!;
      if (below > 0) threshold = base;
    }
    this.currentThreshold = Math.min(threshold, SYSTEM_LEVEL);
  }

  /** Seconds a refused client of `cls` should wait before retrying (its bound x 4 with no forecast). */
  retryAfterSecs(cls: PriorityClass): number {
    const wait = Number.isFinite(this.predictedWait)
      ? this.predictedWait
      : this.bounds[RANK_BASE[cls] / 100]! * 4;
    return Math.max(1, Math.min(60, Math.ceil(wait / 1000)));
  }

  status(): PrioritizerStatus {
    const codelShedding = [...this.sojourn].filter(([, s]) => s.shedding).map(([cls]) => cls);
    const boundsMs = {} as Record<PriorityClass, number>;
    CLASSES_BY_RANK.forEach((cls, rank) => {
      boundsMs[cls] = this.bounds[rank]!;
    });
    return {
      threshold: this.currentThreshold,
      boundsMs,
      predictedWaitMs: Number.isFinite(this.predictedWait) ? this.predictedWait : -1,
      completionsPerSec: this.rate,
      queued: this.queuedTotal,
      codelShedding,
      shed: this.shedCount,
    };
  }

  /** The wait bound of a level's class. */
  private bound(level: number): number {
    return this.bounds[Math.min(3, Math.floor(level / 100))]!;
  }

  /**
   * Does some class's predicted wait (the requests queued at or above its levels, over the
   * completion rate) pass its bound? With one bound for all, that is the whole queue's wait.
   */
  private pastBound(queuedAt: Float64Array): boolean {
    let ahead = 0;
    for (let rank = 3; rank >= 0; rank--) {
      let inClass = 0;
      for (let level = rank * 100; level < rank * 100 + 100; level++) inClass += queuedAt[level]!;
      ahead += inClass;
      if (inClass > 0 && (ahead * 1000) / this.rate > this.bounds[rank]!) return true;
    }
    return false;
  }

  private closeInterval(s: { min: number; since: number; shedding: boolean }, now: number): void {
    // An interval without a single wait (nothing of the class queued: it was all shed) is no
    // evidence of a standing queue: let the class in again and measure.
    s.shedding = Number.isFinite(s.min) && s.min > this.codelTargetMs;
    s.min = Number.POSITIVE_INFINITY;
    s.since = now;
  }

  private decayed(entry: UsageEntry, now: number): number {
    return entry.tokens * 0.5 ** ((now - entry.atMs) / this.halfLifeMs);
  }

  /** Per class, each tenant's decayed usage as a share of the heaviest tenant's, in 0..99. */
  private computeUsageLevels(now: number): Map<PriorityClass, Map<string, number>> {
    const out = new Map<PriorityClass, Map<string, number>>();
    for (const [cls, byTenant] of this.usage) {
      let heaviest = 0;
      const decayed = new Map<string, number>();
      for (const [tenant, entry] of byTenant) {
        const tokens = this.decayed(entry, now);
        decayed.set(tenant, tokens);
        if (tokens > heaviest) heaviest = tokens;
      }
      if (heaviest <= 0) continue;
      const levels = new Map<string, number>();
      for (const [tenant, tokens] of decayed)
        levels.set(tenant, Math.min(99, Math.floor((tokens / heaviest) * 99)));
      out.set(cls, levels);
    }
    return out;
  }

  private forgetLightest(byTenant: Map<string, UsageEntry>, now: number): void {
    let lightest: string | undefined;
    let least = Number.POSITIVE_INFINITY;
    for (const [tenant, entry] of byTenant) {
      const tokens = this.decayed(entry, now);
      if (tokens < least) {
        least = tokens;
        lightest = tenant;
      }
    }
    if (lightest !== undefined) byTenant.delete(lightest);
  }
}

/**
 * Keyed shedding, after kyo's admission regulator: an admission percentage regulated by queue
 * delay, and a deterministic decision per key. Inside one rotation window, at a given percentage, a
 * key (a session, else a tenant) is either served or refused, never half-served; a move of the
 * percentage changes the answer of only the keys whose buckets it crosses. The next window
 * reshuffles who is refused, so nobody is locked out for long.
 *
 * Control law, once per tick (the caller runs tick() every `intervalMs`):
 *   delay = the longest wait of the requests let in since the last tick; when none was let in,
 *           the longest wait of those that gave up (a queue timeout); 0 when neither
 *   delay > targetDelayMs, draining -> hold (the last cut is already emptying the queue)
 *   delay > targetDelayMs        -> percent -= max(1, percent * decreaseFraction)   (multiplicative),
 *                                   but not below SERVED_FLOOR x the served share (below)
 *   delay < targetDelayMs / 2    -> percent += increaseStep                         (additive)
 *   otherwise                    -> hold (the dead band keeps it from oscillating)
 *   percent stays within [minPercent, 100].
 * Draining: the delay fell since the last tick, fast enough to reach the target within
 * DRAIN_TICKS more ticks at that pace. A queue wait is measured as its request leaves the queue,
 * so it tells of the queue as it was when that request joined it: after a cut the waits stay
 * above the target until the queue built before the cut is gone. Cutting again on every such
 * tick took the percentage far below what the workers serve (over real HTTP, a sawtooth between
 * 17 and 45 % where 37 % keeps the worker at its knee). A wait that ended in a timeout is older
 * still (it joined a whole queue timeout ago), so it counts only when nobody was let in.
 * Served share: the requests of the keyed classes served since the last tick over those that
 * arrived (let in or refused), in percent; known when the caller reports both (arrived(),
 * served()). The workers are serving that share of the keys' traffic now, so a cut below
 * 0.9 x of it only idles them once the queue has drained; the 0.9 still drains it. A worker that
 * serves little (overloaded, or stalled) gives a low floor, and the cut goes as deep as it must.
 * Decision: reject(key) <=> bucket(key, window) >= percent * 100, where bucket is a 32-bit hash of
 * the key and the window index, reduced to 0..9999 (a resolution of 0.01 %). The prioritizer's
 * fractional cut of a keyed class uses the same bucket (load-shedding.ts), so the two shedders
 * refuse the same keys first and their cuts do not multiply.
 *
 * Defaults: targetDelayMs 2000, rotationWindowMs 600000 (10 minutes), decreaseFraction 0.1,
 * increaseStep 2, minPercent 0, intervalMs 1000.
 *
 * Pure: no timers, no wall clock; the time comes from the injected Clock.
 */
import type { Clock } from "../core/clock.js";
import { ConfigError } from "../core/errors.js";
import { fmix32, fnv1a } from "../core/hash.js";

export interface KeyedAdmissionOptions {
  /** Queue delay above which the admitted percentage falls. */
  targetDelayMs?: number;
  /** How long a key keeps its decision before the pattern rotates. */
  rotationWindowMs?: number;
  /** Fraction of the percentage removed per tick while the delay is above target. */
  decreaseFraction?: number;
  /** Percentage points added per tick while the delay is under half the target. */
  increaseStep?: number;
  /** The percentage never falls below this. */
  minPercent?: number;
}

const KEYED_ADMISSION_DEFAULTS: Required<KeyedAdmissionOptions> = {
  targetDelayMs: 2000,
  rotationWindowMs: 600_000,
  decreaseFraction: 0.1,
  increaseStep: 2,
  minPercent: 0,
};

export interface KeyedAdmissionStatus {
  /** Percentage of keys admitted now, 0..100. */
  percent: number;
  /** The rotation window's index (time / rotationWindowMs). */
  window: number;
  /** Highest delay seen since the last tick, ms. */
  delayMs: number;
  allowed: number;
  rejected: number;
}

/** The key's bucket in 0..9999 for one rotation window. */
export function keyBucket(key: string, window: number): number {
  // The window is mixed in before the finalizer, so each window orders the keys afresh.
  return fmix32(fnv1a(key) ^ fmix32(Math.imul(window + 1, 0x9e3779b1))) % 10_000;
}

/** Ticks within which a falling delay must reach the target for the regulator to hold. */
const DRAIN_TICKS = 5;
/** A delay under half the target that rose by more than this x the target since the last tick holds. */
const RISE_TOLERANCE = 0.05;
/** A cut stops at this fraction of the share of the keys' arrivals served in the last interval. */
const SERVED_FLOOR = 0.9;

function check(ok: boolean, key: string, message: string): void {
  if (!ok) throw new ConfigError(key, message);
}

export class KeyedAdmission {
  private readonly options: Required<KeyedAdmissionOptions>;
  private current = 100;
  private worstDelay = 0;
  /** Nobody was let in since the last tick: the longest wait that gave up instead. */
  private worstGaveUp = 0;
  private admittedSinceTick = false;
  /** The delay the last tick acted on. */
  private lastDelay = 0;
  /** Arrivals and served requests of the keyed classes since the last tick. */
  private arrivals = 0;
  private servedCount = 0;
  private allowedCount = 0;
  private rejectedCount = 0;

  constructor(
    options: KeyedAdmissionOptions,
    private readonly clock: Clock,
  ) {
    // Field by field: an option given as undefined takes its default.
    const d = KEYED_ADMISSION_DEFAULTS;
    const o: Required<KeyedAdmissionOptions> = {
      targetDelayMs: options.targetDelayMs ?? d.targetDelayMs,
      rotationWindowMs: options.rotationWindowMs ?? d.rotationWindowMs,
      decreaseFraction: options.decreaseFraction ?? d.decreaseFraction,
      increaseStep: options.increaseStep ?? d.increaseStep,
      minPercent: options.minPercent ?? d.minPercent,
    };
    check(
      Number.isFinite(o.targetDelayMs) && o.targetDelayMs > 0,
      "keyed_shedding.target_delay_ms",
      "must be > 0",
    );
    check(
      Number.isFinite(o.rotationWindowMs) && o.rotationWindowMs > 0,
      "keyed_shedding.rotation_window_secs",
      "must be > 0",
    );
    check(
      o.decreaseFraction > 0 && o.decreaseFraction < 1,
      "keyed_shedding.decrease_fraction",
      "must be between 0 and 1 (exclusive)",
    );
    check(o.increaseStep > 0 && o.increaseStep <= 100, "keyed_shedding.increase_step", "must be in (0, 100]");
    check(o.minPercent >= 0 && o.minPercent <= 100, "keyed_shedding.min_percent", "must be in [0, 100]");
    this.options = o;
  }

  /** Percentage of keys admitted now (100 = no shedding). */
  get percent(): number {
    return this.current;
  }

  /** The queue wait of a request let in (or the oldest waiter's age), ms. */
  observeDelay(delayMs: number): void {
    this.admittedSinceTick = true;
    if (delayMs > this.worstDelay) this.worstDelay = delayMs;
  }

  /** The queue wait of a request that left without a slot (timeout, cancel), ms. */
  observeGaveUp(delayMs: number): void {
    if (delayMs > this.worstGaveUp) this.worstGaveUp = delayMs;
  }

  /** A request of a keyed class arrived (let in or refused, by either shedder). */
  arrived(): void {
    this.arrivals++;
  }

  /** A request of a keyed class was served. */
  served(): void {
    this.servedCount++;
  }

  /** Moves the percentage by the law above; call once per interval. */
  tick(): void {
    const { targetDelayMs, decreaseFraction, increaseStep, minPercent } = this.options;
    const delay = this.admittedSinceTick ? this.worstDelay : this.worstGaveUp;
    const fall = this.lastDelay - delay;
    const servedShare = this.arrivals > 0 ? Math.min(100, (100 * this.servedCount) / this.arrivals) : 0;
    this.worstDelay = 0;
    this.worstGaveUp = 0;
    this.admittedSinceTick = false;
    this.lastDelay = delay;
    this.arrivals = 0;
    this.servedCount = 0;
    if (delay > targetDelayMs) {
      const draining = fall > 0 && delay - targetDelayMs <= DRAIN_TICKS * fall;
      if (!draining) {
        const cut = this.current - Math.max(1, this.current * decreaseFraction);
        const floor = Math.min(this.current, SERVED_FLOOR * servedShare);
        this.current = Math.max(minPercent, cut, floor);
      }
    } else if (delay < targetDelayMs / 2 && -fall <= RISE_TOLERANCE * targetDelayMs) {
      this.current = Math.min(100, this.current + increaseStep);
    }
  }

  /** The rotation window in force: from wall-clock time, so replicas agree on it. */
  get window(): number {
    return Math.floor(this.clock.epochMs() / this.options.rotationWindowMs);
  }

  /** True when this key is refused now; the same key gets the same answer for the whole window. */
  reject(key: string, bucket?: number): boolean {
    if (this.current >= 100) {
      this.allowedCount++;
      return false;
    }
    const refused = (bucket ?? keyBucket(key, this.window)) >= this.current * 100;
    if (refused) this.rejectedCount++;
    else this.allowedCount++;
    return refused;
  }

  /** The key's bucket (0..9999) in the window in force. */
  bucketOf(key: string): number {
    return keyBucket(key, this.window);
  }

  /** Milliseconds until the pattern rotates (a refused key's Retry-After is at most this). */
  msToRotation(): number {
    const w = this.options.rotationWindowMs;
    return w - (this.clock.epochMs() % w);
  }

  status(): KeyedAdmissionStatus {
    return {
      percent: this.current,
      window: this.window,
      delayMs: this.worstDelay,
      allowed: this.allowedCount,
      rejected: this.rejectedCount,
    };
  }
}

/**
 * Keyed shedding, after kyo's admission regulator: an admission percentage regulated by queue
 * delay, and a deterministic decision per key. Inside one rotation window a key (a session, else a
 * tenant) is either served or refused, never half-served; the next window reshuffles who is refused,
 * so nobody is locked out for long.
 *
 * Control law, once per tick (the caller runs tick() every `intervalMs`):
 *   delay = the highest queue delay observed since the last tick (0 when none)
 *   delay > targetDelayMs        -> percent -= max(1, percent * decreaseFraction)   (multiplicative)
 *   delay < targetDelayMs / 2    -> percent += increaseStep                         (additive)
 *   otherwise                    -> hold (the dead band keeps it from oscillating)
 *   percent stays within [minPercent, 100].
 * Decision: reject(key) <=> bucket(key, window) >= percent * 100, where bucket is a 32-bit hash of
 * the key and the window index, reduced to 0..9999 (a resolution of 0.01 %).
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

export const KEYED_ADMISSION_DEFAULTS: Required<KeyedAdmissionOptions> = {
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

function check(ok: boolean, key: string, message: string): void {
  if (!ok) throw new ConfigError(key, message);
}

export class KeyedAdmission {
  private readonly options: Required<KeyedAdmissionOptions>;
  private current = 100;
  private worstDelay = 0;
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

  /** A queue delay (a request's wait, or the oldest waiter's age), ms. */
  observeDelay(delayMs: number): void {
    if (delayMs > this.worstDelay) this.worstDelay = delayMs;
  }

  /** Moves the percentage by the law above; call once per interval. */
  tick(): void {
    const { targetDelayMs, decreaseFraction, increaseStep, minPercent } = this.options;
    const delay = this.worstDelay;
    this.worstDelay = 0;
    if (delay > targetDelayMs) {
      this.current = Math.max(minPercent, this.current - Math.max(1, this.current * decreaseFraction));
    } else if (delay < targetDelayMs / 2) {
      this.current = Math.min(100, this.current + increaseStep);
    }
  }

  /** The rotation window in force: from wall-clock time, so replicas agree on it. */
  get window(): number {
    return Math.floor(this.clock.epochMs() / this.options.rotationWindowMs);
  }

  /** True when this key is refused now; the same key gets the same answer for the whole window. */
  reject(key: string): boolean {
    if (this.current >= 100) {
      this.allowedCount++;
      return false;
    }
    const refused = keyBucket(key, this.window) >= this.current * 100;
    if (refused) this.rejectedCount++;
    else this.allowedCount++;
    return refused;
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

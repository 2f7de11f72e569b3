/**
 * Time source for the core. The scheduler never reads the wall clock or starts timers itself:
 * it asks its Clock, so tests and the simulator drive it with a ManualClock and no sleeping.
 */

export type TimerHandle = { readonly __timer: unique symbol } | object;

export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  /** Calls `fn` once, `delayMs` from now. */
  setTimer(fn: () => void, delayMs: number): TimerHandle;
  clearTimer(handle: TimerHandle): void;
  /**
   * Wall-clock epoch milliseconds, for calendar rules (budget periods, access windows). Required:
   * the core never falls back to `Date.now()`, so a test or simulation clock owns calendar time too.
   */
  epochMs(): number;
}

// Bound once: the global `performance` is a lazy getter, and now() runs twice per queued request.
const perf = globalThis.performance;

/** The process clock: performance.now() and unref'd timers (a pending timeout never keeps Node alive). */
export const realClock: Clock = {
  now: () => perf.now(),
  setTimer(fn, delayMs) {
    const t = setTimeout(fn, Math.max(0, delayMs));
    t.unref();
    return t;
  },
  clearTimer(handle) {
    clearTimeout(handle as NodeJS.Timeout);
  },
  epochMs: () => Date.now(),
};

interface ManualTimer {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/** A clock that moves only when told to; timers fire in time order during `advance`. */
export class ManualClock implements Clock {
  private current: number;
  private seq = 0;
  private timers: ManualTimer[] = [];

  constructor(startMs = 0) {
    this.current = startMs;
  }

  now(): number {
    return this.current;
  }

  /** The manual clock's time doubles as epoch ms: start it at e.g. Date.UTC(2026, 0, 31, 23, 59). */
  epochMs(): number {
    return this.current;
  }

  setTimer(fn: () => void, delayMs: number): TimerHandle {
    const timer: ManualTimer = {
      at: this.current + Math.max(0, delayMs),
      seq: this.seq++,
      fn,
      cancelled: false,
    };
    this.timers.push(timer);
    return timer;
  }

  clearTimer(handle: TimerHandle): void {
    (handle as ManualTimer).cancelled = true;
  }

  /** Number of timers still armed. */
  pendingTimers(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }

  /** Moves time forward by `ms`, firing every timer due on the way at its own instant. */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError(`advance(ms): ms must be >= 0, got ${ms}`);
    const target = this.current + ms;
    for (;;) {
      this.timers = this.timers.filter((t) => !t.cancelled);
      let next: ManualTimer | undefined;
      for (const t of this.timers) {
        if (
          t.at <= target &&
          (next === undefined || t.at < next.at || (t.at === next.at && t.seq < next.seq))
        ) {
          next = t;
        }
      }
      if (next === undefined) break;
      next.cancelled = true;
      this.current = Math.max(this.current, next.at);
      next.fn();
    }
    this.current = target;
  }

  /** Moves time to an absolute instant (never backwards). */
  advanceTo(ms: number): void {
    this.advance(Math.max(0, ms - this.current));
  }
}

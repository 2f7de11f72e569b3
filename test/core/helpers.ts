/** Shared helpers for the core tests: deterministic flushing, promise tracking, config shortcuts. */

import { ManualClock } from "@sluice/scheduler/core/clock.js";
import {
  BUILTIN_CLASS_DEFAULTS,
  type ClassOverrides,
  type ClassSettings,
} from "@sluice/scheduler/core/config.js";
import {
  type AcquireOptions,
  createScheduler,
  type Scheduler,
  type SchedulerOptions,
} from "@sluice/scheduler/core/engine.js";
import type { SchedulerPermit } from "@sluice/scheduler/core/inflight.js";
import type { AdmissionError, PriorityClass } from "../../src/index.js";

/** The scheduler as white-box tests see it: each permit with the engine's state (preempted, promoted...). */
export interface TestScheduler extends Omit<Scheduler, "acquire"> {
  acquire(options?: AcquireOptions): Promise<SchedulerPermit>;
}

/** createScheduler, typed for white-box tests: every permit it grants is a SchedulerPermit. */
export function createTestScheduler(options: SchedulerOptions): TestScheduler {
  return createScheduler(options) as TestScheduler;
}

/** Lets every pending microtask (and promise reaction chain) run, without touching the clock. */
export function flush(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

export interface Tracked<T> {
  readonly promise: Promise<T>;
  state: "pending" | "resolved" | "rejected";
  value: T | undefined;
  error: unknown;
  /** How many times a settle callback ran (must end at exactly 1). */
  settles: number;
}

/** Follows a promise's outcome synchronously-readable after a flush. */
export function track<T>(promise: Promise<T>): Tracked<T> {
  const t: Tracked<T> = { promise, state: "pending", value: undefined, error: undefined, settles: 0 };
  promise.then(
    (value) => {
      t.settles++;
      t.state = "resolved";
      t.value = value;
    },
    (error: unknown) => {
      t.settles++;
      t.state = "rejected";
      t.error = error;
    },
  );
  return t;
}

/** The resolved value of a tracked promise; fails the test when it is not resolved. */
export function permitOf<T>(t: Tracked<T>): T {
  if (t.state !== "resolved") throw new Error(`expected a resolved promise, state is ${t.state}`);
  return t.value as T;
}

/** The rejection of a tracked promise, as an AdmissionError-shaped object. */
export function errorOf(t: Tracked<unknown>): AdmissionError {
  if (t.state !== "rejected") throw new Error(`expected a rejected promise, state is ${t.state}`);
  return t.error as AdmissionError;
}

/** Every class with no reservation at all (a present block without reserved_per_slot means 0.0). */
export function noReservations(
  extra: Partial<Record<PriorityClass, Partial<ClassSettings>>> = {},
): ClassOverrides {
  // Preemption at once on arrival, too: the contract's mechanics, which these tests exercise.
  return {
    system: { reserved_floor: 0, preempt_after_secs: 0, ...extra.system },
    interactive: { reserved_floor: 0, preempt_after_secs: 0, ...extra.interactive },
    default: { reserved_floor: 0, preempt_after_secs: 0, ...extra.default },
    bulk: { reserved_floor: 0, preempt_after_secs: 0, ...extra.bulk },
  };
}

/**
 * The class settings with preemption at once on arrival (preempt_after_secs 0) for every class that
 * does not set it: the contract's reference behaviour, which the mechanics tests exercise. Absent
 * blocks are filled from the built-in defaults (a partial block would zero reserved_per_slot).
 */
export function preemptAtOnce(classes: ClassOverrides | undefined): ClassOverrides {
  const out: Record<string, Partial<ClassSettings>> = {};
  for (const cls of ["system", "interactive", "default", "bulk"] as const) {
    const block = classes?.[cls] ?? { ...BUILTIN_CLASS_DEFAULTS[cls] };
    out[cls] = { preempt_after_secs: 0, ...block };
  }
  return out;
}

/** A manual clock that refuses to fire more than 100 timers in one run (the fractional-deadline hang). */
export class GuardedClock extends ManualClock {
  fired = 0;
  override setTimer(fn: () => void, delayMs: number) {
    return super.setTimer(() => {
      if (++this.fired > 100) throw new Error("timer storm: the deadline keeps re-arming");
      fn();
    }, delayMs);
  }
}

/**
 * One clock timer kept at the earliest pending deadline. Arming a later deadline is a no-op (the
 * earlier wake-up will re-arm from the live state), so waiters cost no timer of their own.
 */
import type { Clock, TimerHandle } from "./clock.js";

export class DeadlineTimer {
  private handle: TimerHandle | undefined;
  private at = Number.POSITIVE_INFINITY;

  constructor(
    private readonly clock: Clock,
    private readonly onFire: () => void,
  ) {}

  /** Makes sure the timer fires no later than `at` (clock milliseconds). */
  arm(at: number): void {
    if (at >= this.at) return;
    if (this.handle !== undefined) this.clock.clearTimer(this.handle);
    this.at = at;
    this.handle = this.clock.setTimer(() => {
      this.handle = undefined;
      this.at = Number.POSITIVE_INFINITY;
      this.onFire();
    }, at - this.clock.now());
  }
}

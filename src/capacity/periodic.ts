/**
 * A task run every `periodMs` on an injected Clock, re-armed after each run (runs never overlap),
 * so a ManualClock drives it in tests and the simulator. Stopping is final.
 */
import type { Clock, TimerHandle } from "@sluice/scheduler/core/clock.js";

export class Periodic {
  private timer: TimerHandle | undefined;
  private stopped = false;

  constructor(
    private readonly clock: Clock,
    private readonly periodMs: number,
    private readonly run: () => void,
  ) {}

  start(): void {
    if (this.timer !== undefined || this.stopped) return;
    const round = (): void => {
      if (this.stopped) return;
      this.run();
      this.timer = this.clock.setTimer(round, this.periodMs);
    };
    this.timer = this.clock.setTimer(round, this.periodMs);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    this.timer = undefined;
  }
}

/**
 * Queues stay local: a request that waits is held by the replica it arrived on, as a promise, a
 * timeout and a cancel listener, while its ticket sits in the class's shared queue in Redis. The
 * dispatcher (a script run by whichever replica freed a slot) turns the ticket into a lease and
 * publishes it; this replica's subscriber resolves the waiter (wakeups.ts). Timeouts and client
 * cancels are decided here and sent to Redis (the cancel script), which also settles the race
 * with a grant that crossed them.
 */
import type { Clock, TimerHandle } from "@sluice/scheduler/core/clock.js";
import type { CancelSignal } from "@sluice/scheduler/core/signal.js";
import type { SharedHold } from "./budgets.js";
import type { SharedSlot } from "./slot.js";

export class RemoteWaiter {
  /** Resolved, rejected or handed to the local fallback: nothing more may happen to it. */
  done = false;
  /** Its ticket is in a shared queue (the admit script answered queued or claim). */
  queued = false;
  readonly enqueuedAt: number;
  resolve!: (slot: SharedSlot) => void;
  reject!: (error: Error) => void;
  readonly promise: Promise<SharedSlot>;
  timer: TimerHandle | undefined;
  onAbort: (() => void) | undefined;

  constructor(
    readonly id: string,
    readonly rank: number,
    readonly requestedRank: number,
    readonly tenant: string,
    readonly cost: number,
    readonly units: number,
    readonly weight: number,
    readonly priority: string | undefined,
    readonly signal: CancelSignal | undefined,
    readonly hold: SharedHold | undefined,
    clock: Clock,
  ) {
    this.enqueuedAt = clock.now();
    this.promise = new Promise<SharedSlot>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  /** Stops the timeout and the cancel listener (the waiter is leaving). */
  detach(clock: Clock): void {
    this.done = true;
    if (this.timer !== undefined) clock.clearTimer(this.timer);
    this.timer = undefined;
    if (this.onAbort !== undefined) this.signal?.removeEventListener("abort", this.onAbort);
    this.onAbort = undefined;
  }
}

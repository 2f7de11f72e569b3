/**
 * A per-worker circuit breaker, pure: it reads time from an injected clock and never arms a timer
 * itself (the worker pool arms one for the cooldown's end).
 *
 *   closed     every request may go. `failures` consecutive failures, or a failed share of at least
 *              `errorRatio` among at least `minRequests` requests in the last `windowSecs`, opens it.
 *   open       no request goes, and the worker's capacity leaves the pool's. After `cooldownSecs`
 *              it is half-open.
 *   half_open  at most `halfOpenRequests` requests in flight on the worker, real ones. The first
 *              success closes it; a failure opens it again for another cooldown.
 *
 * Two more ways in and out keep the breaker and the health checks in agreement. Reachability is
 * the health checks' to judge: a worker they take out is held open until they put it back, and a
 * refused connection opens the circuit at once until a health check passes (or the cooldown ends);
 * either way a passing check closes it. Failed requests are the breaker's to judge: a circuit they
 * opened waits for its cooldown and its trial requests while the health checks keep passing (if the
 * checks take the worker out meanwhile, it comes back closed when they put it back, as any worker
 * they bring back does). The health checks' verdict is always the circuit's: a worker they have out
 * is open, so both report the same thing.
 */
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { BreakerOptions } from "./options.js";

export type CircuitState = "closed" | "open" | "half_open";

/** `sluice_worker_circuit_state` values. */
export const CIRCUIT_STATE_VALUE: Readonly<Record<CircuitState, number>> = {
  closed: 0,
  open: 1,
  half_open: 2,
};

/** Why a circuit is open. */
type OpenReason = "failures" | "error_ratio" | "unreachable" | "health_check" | "trial_failed";

/** The error-ratio window in this many buckets: old outcomes leave a bucket at a time. */
const WINDOW_BUCKETS = 10;

export class CircuitBreaker {
  private current: CircuitState = "closed";
  private reason: OpenReason | undefined;
  private openedAt = 0;
  private consecutiveFailures = 0;
  private readonly bucketMs: number;
  private readonly successes = new Array<number>(WINDOW_BUCKETS).fill(0);
  private readonly failures = new Array<number>(WINDOW_BUCKETS).fill(0);
  private windowSuccesses = 0;
  private windowFailures = 0;
  /** The bucket (time / bucketMs) the last outcome went into. */
  private lastBucket = 0;

  constructor(
    private readonly options: BreakerOptions,
    private readonly clock: Pick<Clock, "now">,
  ) {
    this.bucketMs = Math.max(1, (options.windowSecs * 1000) / WINDOW_BUCKETS);
  }

  /** The state now: an open circuit whose cooldown is over is half-open (unless held by health checks). */
  get state(): CircuitState {
    if (this.current === "open" && this.reason !== "health_check") {
      if (this.clock.now() - this.openedAt >= this.options.cooldownSecs * 1000) this.current = "half_open";
    }
    return this.current;
  }

  /** Why the circuit is open (or was last opened). */
  get openReason(): OpenReason | undefined {
    return this.reason;
  }

  /** When an open circuit's cooldown ends (clock ms); undefined when it is not open or is held. */
  get cooldownEndsAt(): number | undefined {
    if (this.state !== "open" || this.reason === "health_check") return undefined;
    return this.openedAt + this.options.cooldownSecs * 1000;
  }

  /** Whether one more request may go to the worker, which has `inflight` requests on it now. */
  admits(inflight: number): boolean {
    const state = this.state;
    if (state === "closed") return true;
    return state === "half_open" && inflight < this.options.halfOpenRequests;
  }

  /** The capacity the worker contributes: all of it closed, the trials half-open, none open. */
  capacityOf(capacity: number): number {
    const state = this.state;
    if (state === "closed") return capacity;
    return state === "half_open" ? Math.min(capacity, this.options.halfOpenRequests) : 0;
  }

  /** A request succeeded; true when that changed the state (half-open -> closed). */
  recordSuccess(): boolean {
    const state = this.state;
    if (state === "half_open") {
      this.close();
      return true;
    }
    if (state === "closed") {
      this.consecutiveFailures = 0;
      this.rotate();
      this.successes[this.lastBucket % WINDOW_BUCKETS]!++;
      this.windowSuccesses++;
    }
    // Open: an answer to a request sent before the circuit opened says nothing new.
    return false;
  }

  /** A request failed; true when that opened the circuit. */
  recordFailure(): boolean {
    const state = this.state;
    if (state === "half_open") {
      this.open("trial_failed");
      return true;
    }
    if (state !== "closed") return false;
    this.consecutiveFailures++;
    this.rotate();
    this.failures[this.lastBucket % WINDOW_BUCKETS]!++;
    this.windowFailures++;
    const o = this.options;
    if (o.failures > 0 && this.consecutiveFailures >= o.failures) {
      this.open("failures");
      return true;
    }
    const total = this.windowSuccesses + this.windowFailures;
    if (o.errorRatio > 0 && total >= o.minRequests && this.windowFailures >= o.errorRatio * total) {
      this.open("error_ratio");
      return true;
    }
    return false;
  }

  /** The worker refused a connection: open now (unless already open); true when that changed the state. */
  tripUnreachable(): boolean {
    if (this.state === "open") return false;
    this.open("unreachable");
    return true;
  }

  /** The health checks took the worker out: open until they put it back. True when the state changed. */
  hold(): boolean {
    const changed = this.state !== "open" || this.reason !== "health_check";
    if (this.current !== "open") this.resetCounts();
    this.current = "open";
    this.reason = "health_check";
    this.openedAt = this.clock.now();
    return changed;
  }

  /**
   * A health check passed (`healthy`: the checks count the worker healthy again). A circuit held
   * by the health checks, or opened by a refused connection, closes; true when the state changed.
   */
  checkPassed(healthy: boolean): boolean {
    const state = this.state;
    if (state === "closed") return false;
    if (this.reason === "unreachable" || (this.reason === "health_check" && healthy)) {
      this.close();
      return true;
    }
    return false;
  }

  private open(reason: OpenReason): void {
    this.current = "open";
    this.reason = reason;
    this.openedAt = this.clock.now();
    this.resetCounts();
  }

  private close(): void {
    this.current = "closed";
    this.resetCounts();
  }

  private resetCounts(): void {
    this.consecutiveFailures = 0;
    this.successes.fill(0);
    this.failures.fill(0);
    this.windowSuccesses = 0;
    this.windowFailures = 0;
  }

  /** Moves the window to now: buckets older than the window are emptied. */
  private rotate(): void {
    const bucket = Math.floor(this.clock.now() / this.bucketMs);
    const stale = Math.min(bucket - this.lastBucket, WINDOW_BUCKETS);
    for (let k = 1; k <= stale; k++) {
      const i = (this.lastBucket + k) % WINDOW_BUCKETS;
      this.windowSuccesses -= this.successes[i]!;
      this.windowFailures -= this.failures[i]!;
      this.successes[i] = 0;
      this.failures[i] = 0;
    }
    if (bucket > this.lastBucket) this.lastBucket = bucket;
  }
}

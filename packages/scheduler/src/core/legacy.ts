/**
 * Legacy admission: what the gateway runs when the priority scheduler is disabled or failed
 * safe. A plain concurrency limit (-1 = unlimited) with a FIFO queue, a queue timeout, and an
 * optional token-bucket request rate. Its rejections carry their own codes
 * (`admission_queue_full`, `admission_queue_timeout`) and a Retry-After.
 */
import { type Clock, realClock } from "./clock.js";
import { DeadlineTimer } from "./deadline-timer.js";
import { AdmissionError, ClientCancelledError, ConfigError } from "./errors.js";
import type { CancelSignal } from "./signal.js";

/**
 * The legacy limiter's settings: the one shape, used by the CLI flags, the gateway options, the
 * in-process backend and the simulator (`Omit<LegacyLimiterOptions, "clock">` where the clock is
 * given elsewhere).
 */
export interface LegacyLimiterOptions {
  /** Concurrent requests allowed; -1 = unlimited. */
  maxConcurrentRequests: number;
  /** Waiters allowed beyond the limit (default 100). */
  queueSize?: number;
  /** Seconds a waiter may wait (default 60). */
  queueTimeoutSecs?: number;
  /** Optional request rate: tokens refilled per second, one per request, burst = the limit (or the rate). */
  rateLimitTokensPerSecond?: number | undefined;
  clock?: Clock;
}

/**
 * A legacy admission. It has the scheduler permit's holder-facing members that make sense without
 * classes (and every member of the gateway's `Slot`), so holders treat both alike.
 */
export interface LegacyPermit {
  readonly queueWaitMs: number;
  readonly admission: "fast" | "queued";
  /** No classes in legacy admission. */
  readonly requestedClass: undefined;
  /** No classes in legacy admission. */
  readonly effectiveClass: undefined;
  release(): void;
  /** Legacy admission never preempts: always true. */
  markFirstByte(): boolean;
  /** Legacy admission never preempts: the listener is never called. */
  onPreempt(listener: (error: Error) => void): void;
  /** No fair sharing in legacy admission: a no-op. */
  settle(actualCost: number): void;
}

export class LegacyQueueFullError extends AdmissionError {
  override readonly name = "LegacyQueueFullError";
  constructor(limit: number) {
    super("admission_queue_full", `the admission queue is full (${limit} waiting)`, {
      retryAfterSecs: 1,
    });
  }
}

export class LegacyQueueTimeoutError extends AdmissionError {
  override readonly name = "LegacyQueueTimeoutError";
  constructor(secs: number, retryAfterSecs: number) {
    super("admission_queue_timeout", `waited ${secs}s in the admission queue without admission`, {
      retryAfterSecs,
    });
  }
}

interface LegacyWaiter {
  enqueuedAt: number;
  resolve: (p: LegacyPermit) => void;
  reject: (e: Error) => void;
  signal: CancelSignal | undefined;
  onAbort: (() => void) | undefined;
  done: boolean;
}

class Grant implements LegacyPermit {
  readonly requestedClass = undefined;
  readonly effectiveClass = undefined;
  released = false;
  constructor(
    private readonly limiter: LegacyLimiter,
    readonly queueWaitMs: number,
    readonly admission: "fast" | "queued",
  ) {}
  release(): void {
    if (this.released) return;
    this.released = true;
    this.limiter.releaseSlot();
  }
  markFirstByte(): boolean {
    return true;
  }
  onPreempt(_listener: (error: Error) => void): void {}
  settle(_actualCost: number): void {}
}

export class LegacyLimiter {
  readonly maxConcurrent: number;
  readonly queueSize: number;
  readonly queueTimeoutMs: number;
  readonly rate: number | undefined;
  private readonly burst: number;
  private readonly clock: Clock;
  private running = 0;
  private bound = Number.POSITIVE_INFINITY;
  private tokens: number;
  private refilledAt: number;
  // FIFO as an array with a moving head: amortised O(1) without a linked list.
  private waiters: LegacyWaiter[] = [];
  private head = 0;
  private waiting = 0;
  private readonly timer: DeadlineTimer;
  private readonly stats = { admitted: 0, rejectedQueueFull: 0, rejectedQueueTimeout: 0, clientCancelled: 0 };

  constructor(options: LegacyLimiterOptions) {
    const max = options.maxConcurrentRequests;
    if (!Number.isInteger(max) || (max < 1 && max !== -1)) {
      throw new ConfigError(
        "max_concurrent_requests",
        `must be -1 (unlimited) or an integer >= 1, got ${max}`,
      );
    }
    const queueSize = options.queueSize ?? 100;
    if (!Number.isInteger(queueSize) || queueSize < 0) {
      throw new ConfigError("queue_size", `must be an integer >= 0, got ${queueSize}`);
    }
    const timeout = options.queueTimeoutSecs ?? 60;
    if (!(timeout > 0)) throw new ConfigError("queue_timeout_secs", `must be > 0, got ${timeout}`);
    const rate = options.rateLimitTokensPerSecond;
    if (rate !== undefined && !(rate > 0 && Number.isFinite(rate))) {
      throw new ConfigError("rate_limit_tokens_per_second", `must be a number > 0, got ${rate}`);
    }
    this.maxConcurrent = max;
    this.queueSize = queueSize;
    this.queueTimeoutMs = timeout * 1000;
    this.rate = rate;
    this.clock = options.clock ?? realClock;
    this.timer = new DeadlineTimer(this.clock, () => this.onTimer());
    this.burst = rate === undefined ? 0 : Math.max(1, max > 0 ? max : Math.ceil(rate));
    this.tokens = this.burst;
    this.refilledAt = this.clock.now();
  }

  get inflight(): number {
    return this.running;
  }

  /** Concurrent requests allowed now: maxConcurrent (-1: none) and the bound, whichever is lower. */
  get limit(): number {
    return Math.min(this.maxConcurrent === -1 ? Number.POSITIVE_INFINITY : this.maxConcurrent, this.bound);
  }

  /**
   * Bounds concurrency by a capacity that moves (adaptive capacity, `capacity_mode: adaptive`),
   * under max_concurrent_requests; undefined lifts it. A lower bound aborts nothing: the requests
   * running finish, and the queue waits until they are under it.
   */
  setBound(capacity: number | undefined): void {
    this.bound = capacity === undefined ? Number.POSITIVE_INFINITY : Math.max(0, Math.floor(capacity));
    this.drain();
  }

  get queued(): number {
    return this.waiting;
  }

  counters() {
    return { ...this.stats };
  }

  acquire(options: { signal?: CancelSignal | undefined } = {}): Promise<LegacyPermit> {
    const signal = options.signal;
    if (signal?.aborted) {
      this.stats.clientCancelled++;
      return Promise.reject(new ClientCancelledError(undefined, "admission_client_cancelled"));
    }
    if (this.waiting === 0 && this.canStart()) return Promise.resolve(this.start(0, "fast"));
    if (this.waiting >= this.queueSize) {
      this.stats.rejectedQueueFull++;
      return Promise.reject(new LegacyQueueFullError(this.queueSize));
    }
    return new Promise<LegacyPermit>((resolve, reject) => {
      const waiter: LegacyWaiter = {
        enqueuedAt: this.clock.now(),
        resolve,
        reject,
        signal,
        onAbort: undefined,
        done: false,
      };
      if (signal) {
        waiter.onAbort = () => this.cancel(waiter);
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      this.waiters.push(waiter);
      this.waiting++;
      this.timer.arm(waiter.enqueuedAt + this.queueTimeoutMs);
      this.armRefill();
    });
  }

  /** @internal */
  releaseSlot(): void {
    this.running--;
    this.drain();
  }

  private canStart(): boolean {
    if (this.running >= this.limit) return false;
    if (this.rate === undefined) return true;
    this.refill();
    return this.tokens >= 1;
  }

  private refill(): void {
    const now = this.clock.now();
    const elapsed = now - this.refilledAt;
    if (elapsed > 0) {
      this.tokens = Math.min(this.burst, this.tokens + (elapsed / 1000) * this.rate!);
      this.refilledAt = now;
    }
  }

  private start(waitMs: number, admission: "fast" | "queued"): LegacyPermit {
    this.running++;
    if (this.rate !== undefined) this.tokens -= 1;
    this.stats.admitted++;
    return new Grant(this, waitMs, admission);
  }

  private settle(waiter: LegacyWaiter): void {
    waiter.done = true;
    this.waiting--;
    if (waiter.signal && waiter.onAbort) waiter.signal.removeEventListener("abort", waiter.onAbort);
  }

  private nextWaiter(): LegacyWaiter | undefined {
    while (this.head < this.waiters.length) {
      const w = this.waiters[this.head]!;
      if (!w.done) return w;
      this.head++;
    }
    return undefined;
  }

  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.waiters.length) {
      this.waiters = this.waiters.slice(this.head);
      this.head = 0;
    }
  }

  private drain(): void {
    for (let w = this.nextWaiter(); w !== undefined && this.canStart(); w = this.nextWaiter()) {
      this.settle(w);
      this.head++;
      w.resolve(this.start(this.clock.now() - w.enqueuedAt, "queued"));
    }
    this.compact();
    this.armRefill();
  }

  /** Waiting on the rate alone: wake up when the next token is due (also right after queuing). */
  private armRefill(): void {
    if (this.rate === undefined || this.nextWaiter() === undefined) return;
    if (this.running >= this.limit) return;
    this.refill();
    this.timer.arm(this.clock.now() + Math.max(1, ((1 - this.tokens) / this.rate) * 1000));
  }

  private cancel(waiter: LegacyWaiter): void {
    if (waiter.done) return;
    this.settle(waiter);
    this.stats.clientCancelled++;
    const error = new ClientCancelledError(undefined, "admission_client_cancelled");
    error.queueWaitMs = this.clock.now() - waiter.enqueuedAt;
    waiter.reject(error);
  }

  private onTimer(): void {
    const now = this.clock.now();
    for (
      let w = this.nextWaiter();
      w !== undefined && w.enqueuedAt + this.queueTimeoutMs <= now;
      w = this.nextWaiter()
    ) {
      this.settle(w);
      this.head++;
      this.stats.rejectedQueueTimeout++;
      const error = new LegacyQueueTimeoutError(this.queueTimeoutMs / 1000, 1);
      error.queueWaitMs = now - w.enqueuedAt;
      w.reject(error);
    }
    this.drain();
    const next = this.nextWaiter();
    if (next !== undefined) this.timer.arm(next.enqueuedAt + this.queueTimeoutMs);
  }
}

export function createLegacyLimiter(options: LegacyLimiterOptions): LegacyLimiter {
  return new LegacyLimiter(options);
}

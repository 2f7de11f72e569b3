/**
 * The timing model: continuous batching with a bounded number of running requests.
 *
 * A Batcher holds the running set (at most maxRunningRequests) and a FIFO of waiters; a
 * Generation paces one request's tokens. Delays scale with the number running, like a real
 * engine whose step time grows with batch size:
 *   effective delay = base * (1 + batchSlowdown * (running - 1)),
 * and past an optional knee, by a further (1 + kneeSlowdown * (running - knee)).
 */

/** Something that occupies a running slot once admitted. */
export interface BatchEntry {
  /** Called (synchronously, by the Batcher) when the entry gets its running slot. */
  start(): void;
  /** Stops the entry and hands it back through finish(entry, "aborted"). */
  abort(): void;
}

type Outcome = "completed" | "aborted";

export class Batcher {
  // A Set is an insertion-ordered FIFO with O(1) removal of a waiter that disconnects.
  private readonly waiting = new Set<BatchEntry>();
  private readonly running = new Set<BatchEntry>();
  private draining = false;
  peakRunning = 0;
  completed = 0;
  aborted = 0;

  constructor(
    private readonly maxRunning: number,
    private readonly batchSlowdown: number,
    /** 0 = no knee. */
    private readonly knee = 0,
    private readonly kneeSlowdown = 0,
  ) {}

  get runningCount(): number {
    return this.running.size;
  }

  get waitingCount(): number {
    return this.waiting.size;
  }

  /** Queues an entry; it starts at once when a slot is free and nobody waits ahead of it. */
  enqueue(entry: BatchEntry): void {
    this.waiting.add(entry);
    this.drain();
  }

  /** Ends an entry, running or waiting, and hands its slot on. Finishing twice is a no-op. */
  finish(entry: BatchEntry, outcome: Outcome): void {
    if (!this.running.delete(entry) && !this.waiting.delete(entry)) return;
    if (outcome === "completed") this.completed++;
    else this.aborted++;
    this.drain();
  }

  /** Starts the counters afresh; the peak restarts at the number running now. */
  resetCounters(): void {
    this.peakRunning = this.running.size;
    this.completed = 0;
    this.aborted = 0;
  }

  /** Aborts every waiting and running entry (the worker is closing). */
  abortAll(): void {
    for (const entry of [...this.waiting, ...this.running]) entry.abort();
  }

  /** A base delay scaled by the current batch size. */
  scale(baseMs: number): number {
    if (baseMs === 0) return 0;
    const extra = Math.max(0, this.running.size - 1);
    const pastKnee = this.knee > 0 ? Math.max(0, this.running.size - this.knee) : 0;
    return baseMs * (1 + this.batchSlowdown * extra) * (1 + this.kneeSlowdown * pastKnee);
  }

  /**
   * Starts waiters while slots are free. Re-entrant calls (an entry that finishes inside its own
   * start(), as zero-delay requests do) return at once and the outer loop carries on, so a long
   * queue of instant requests never grows the stack.
   */
  private drain(): void {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.running.size < this.maxRunning) {
        const next = this.waiting.values().next();
        if (next.done) break;
        this.waiting.delete(next.value);
        this.running.add(next.value);
        if (this.running.size > this.peakRunning) this.peakRunning = this.running.size;
        next.value.start();
      }
    } finally {
      this.draining = false;
    }
  }
}

/** Where a Generation puts its tokens. */
export interface TokenSink {
  /** Emits output token `index`; false means the consumer is backpressured. */
  emit(index: number): boolean;
  /** Calls `resume` once the consumer can take more. */
  waitForDrain(resume: () => void): void;
  /** All tokens are out. */
  done(): void;
}

export interface Timing {
  ttftMs: number;
  tokenDelayMs: number;
}

/**
 * Paces one request: first token after the (scaled) TTFT, then one token per (scaled) token delay,
 * done right after the last token. Deadlines accumulate from the start rather than from each timer
 * firing, so timer lateness does not add up over a long output. Zero delays emit synchronously:
 * no timer at all for a worker configured to answer at once.
 */
export class Generation {
  private next = 0;
  private dueAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private cancelled = false;

  constructor(
    private readonly batcher: Batcher,
    private readonly timing: Timing,
    private readonly tokens: number,
    private readonly sink: TokenSink,
  ) {}

  start(): void {
    const ttft = this.batcher.scale(this.timing.ttftMs);
    this.dueAt = ttft > 0 ? performance.now() + ttft : 0;
    this.run();
  }

  /** Stops at once; no further sink calls. */
  cancel(): void {
    this.cancelled = true;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  private readonly run = (): void => {
    this.timer = undefined;
    // `now` is read only when a deadline is pending, keeping the zero-delay loop tight.
    let now = 0;
    while (!this.cancelled) {
      if (this.dueAt > now) {
        now = performance.now();
        if (this.dueAt > now) {
          this.timer = setTimeout(this.run, this.dueAt - now);
          return;
        }
      }
      const ok = this.next < this.tokens ? this.sink.emit(this.next++) : true;
      if (this.cancelled) return;
      if (this.next >= this.tokens) {
        this.cancelled = true;
        this.sink.done();
        return;
      }
      const delay = this.batcher.scale(this.timing.tokenDelayMs);
      // Deadlines chain from the previous one; the first timed one starts from the clock.
      if (delay > 0) this.dueAt = (this.dueAt > 0 ? this.dueAt : performance.now()) + delay;
      if (!ok) {
        this.sink.waitForDrain(this.resume);
        return;
      }
    }
  };

  // A slow reader must not get a burst of overdue tokens after it drains.
  private readonly resume = (): void => {
    if (this.cancelled) return;
    this.dueAt = Math.max(this.dueAt, performance.now());
    this.run();
  };
}

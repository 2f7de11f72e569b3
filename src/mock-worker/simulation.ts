/**
 * The timing model: continuous batching with a bounded number of running requests.
 *
 * A Batcher holds the running set (at most maxRunningRequests) and a FIFO of waiters; a
 * Generation paces one request's tokens. Delays scale with the number running, like a real
 * engine whose step time grows with batch size:
 *   effective delay = base * (1 + batchSlowdown * (running - 1)),
 * and past an optional knee, by a further (1 + kneeSlowdown * (running - knee)).
 *
 * With a KV cache (kv-cache.ts) the running set is also bounded by memory, as in vLLM's scheduler:
 * a waiter starts only when its tokens fit (the head of the queue blocks those behind it, FCFS),
 * and a running request whose next token does not fit preempts the newest running request, which
 * frees its KV and goes back to the front of the queue to be recomputed later (vLLM's RECOMPUTE
 * preemption; SGLang's retraction likewise returns a request to its waiting queue).
 */

import type { KvCache } from "./kv-cache.js";

/** Something that occupies a running slot once admitted. */
export interface BatchEntry {
  /** Called (synchronously, by the Batcher) when the entry gets its running slot. */
  start(): void;
  /** Stops the entry and hands it back through finish(entry, "aborted"). */
  abort(): void;
  /**
   * KV tokens the entry needs to (re)start: its prompt, the tokens it generated, and the next one.
   * Only a Batcher with a KV cache asks; an entry without it needs none.
   */
  kvTokens?(): number;
  /** Called by the Batcher when it takes the entry's KV away: stop generating, keep the progress. */
  preempt?(): void;
}

type Outcome = "completed" | "aborted";

export class Batcher {
  // A Set is an insertion-ordered FIFO with O(1) removal of a waiter that disconnects.
  private readonly waiting = new Set<BatchEntry>();
  /** Preempted entries, oldest preemption first: they go before every new arrival. */
  private readonly preempted: BatchEntry[] = [];
  // Insertion order is admission order: the last one is the newest, the first to be preempted.
  private readonly running = new Set<BatchEntry>();
  private draining = false;
  peakRunning = 0;
  completed = 0;
  aborted = 0;
  /** Times a running entry lost its KV to another's growth (or to its own). */
  preemptions = 0;

  constructor(
    private readonly maxRunning: number,
    private readonly batchSlowdown: number,
    /** 0 = no knee. */
    private readonly knee = 0,
    private readonly kneeSlowdown = 0,
    /** Without one, memory never limits the running set. */
    readonly kv?: KvCache,
  ) {}

  get runningCount(): number {
    return this.running.size;
  }

  get waitingCount(): number {
    return this.waiting.size + this.preempted.length;
  }

  /** Queues an entry; it starts at once when a slot is free and nobody waits ahead of it. */
  enqueue(entry: BatchEntry): void {
    this.waiting.add(entry);
    this.drain();
  }

  /** Ends an entry, running or waiting, and hands its slot on. Finishing twice is a no-op. */
  finish(entry: BatchEntry, outcome: Outcome): void {
    if (!this.running.delete(entry) && !this.waiting.delete(entry) && !this.leavePreempted(entry)) return;
    this.kv?.release(entry);
    if (outcome === "completed") this.completed++;
    else this.aborted++;
    this.drain();
  }

  /**
   * Makes room for a running entry to hold `tokens` KV tokens, preempting the newest running entries
   * until it fits. False when the entry itself was preempted (it was the newest): it waits again.
   * The freed KV goes to the grower only; waiters are not started here, as vLLM schedules no new
   * request in a step that preempted one.
   */
  grow(entry: BatchEntry, tokens: number): boolean {
    const kv = this.kv;
    if (kv === undefined || !this.running.has(entry)) return true;
    while (!kv.fits(entry, tokens)) {
      const newest = [...this.running].at(-1)!;
      this.preemptEntry(newest);
      if (newest === entry) return false;
    }
    kv.hold(entry, tokens);
    return true;
  }

  private preemptEntry(entry: BatchEntry): void {
    this.running.delete(entry);
    this.kv?.release(entry);
    this.preempted.push(entry);
    this.preemptions++;
    entry.preempt?.();
  }

  private leavePreempted(entry: BatchEntry): boolean {
    const i = this.preempted.indexOf(entry);
    if (i === -1) return false;
    this.preempted.splice(i, 1);
    return true;
  }

  /** Starts the counters afresh; the peak restarts at the number running now. */
  resetCounters(): void {
    this.peakRunning = this.running.size;
    this.completed = 0;
    this.aborted = 0;
    this.preemptions = 0;
  }

  /** Aborts every waiting and running entry (the worker is closing). */
  abortAll(): void {
    for (const entry of [...this.preempted, ...this.waiting, ...this.running]) entry.abort();
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
        const next = this.preempted[0] ?? this.waiting.values().next().value;
        if (next === undefined) break;
        // First come, first served: a head that does not fit holds back those behind it.
        const tokens = this.kv === undefined ? 0 : (next.kvTokens?.() ?? 0);
        if (this.kv !== undefined && !this.kv.fits(next, tokens)) break;
        if (this.preempted[0] === next) this.preempted.shift();
        else this.waiting.delete(next);
        this.kv?.hold(next, tokens);
        this.running.add(next);
        if (this.running.size > this.peakRunning) this.peakRunning = this.running.size;
        next.start();
      }
    } finally {
      this.draining = false;
    }
  }
}

/** Where a Generation puts its tokens. */
export interface TokenSink {
  /**
   * Makes room for output token `index` before it is generated; false means the generation was
   * stopped meanwhile (preempted) and must not go on.
   */
  reserve?(index: number): boolean;
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
    /** Tokens already generated before a preemption: the generation resumes after them. */
    from = 0,
  ) {
    this.next = from;
  }

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
      if (this.next < this.tokens && this.sink.reserve !== undefined && !this.sink.reserve(this.next)) return;
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

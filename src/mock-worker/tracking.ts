/**
 * What the worker itself observed, independent of any gateway's own bookkeeping:
 *
 * - open inference requests: received (headers in) and neither ended (last byte handed over)
 *   nor closed by the client. Waiting ones count: a real engine would hold them too. The time
 *   during which more than `maxRunningRequests` were open is measured in spells: total, count and
 *   longest, so a test can assert that a gateway never sends a worker more than its capacity;
 * - a bounded log of the requests received (inference requests, and any request carrying an
 *   `x-fuzz-id` or `x-request-id`), so a test can assert that a request a client saw rejected
 *   never reached a worker.
 */

/** One received request, as logged. */
export interface ReceivedRequest {
  /** The `x-fuzz-id` header, else `x-request-id`; undefined when neither was sent. */
  readonly id: string | undefined;
  readonly method: string;
  /** The request target as received (path and query). */
  readonly path: string;
  /** Epoch ms at which the headers arrived. */
  readonly at: number;
  /** Names of the headers received, lowercased, in order (at most the first 64). */
  readonly headerNames: readonly string[];
  /** The Authorization header received, if any (a gateway must not pass a client's key on). */
  readonly authorization: string | undefined;
  /** Body bytes read once the body completed; undefined while it is still arriving or when it never did. */
  bodyBytes: number | undefined;
}

/** The capacity counters, as reported by stats() and `GET /mock/stats`. */
export interface CapacityCounters {
  /** Inference requests open at the worker right now (running, waiting, or still uploading). */
  open: number;
  /** The most that were ever open at once. */
  openPeak: number;
  /** Total ms during which open inference requests exceeded maxRunningRequests (the current spell included). */
  overCapacityMs: number;
  /** Number of such spells (the current one included). */
  overCapacitySpells: number;
  /** The longest spell in ms (the current one included). */
  longestOverCapacityMs: number;
  /** ms since the counters started (worker start or resetStats()), for ratios. */
  trackedMs: number;
  /**
   * Ended spells by length: under 1 ms (races of an event-loop turn, e.g. a cancel and the next
   * request arriving together), 1-5 ms, 5-20 ms, 20-100 ms, 100 ms and more.
   */
  overCapacitySpellLengths: {
    under1ms: number;
    under5ms: number;
    under20ms: number;
    under100ms: number;
    longer: number;
  };
}

export class RequestTracker {
  private openCount = 0;
  private peak = 0;
  private closedSpellsMs = 0;
  private spells = 0;
  private longest = 0;
  private lengths = { under1ms: 0, under5ms: 0, under20ms: 0, under100ms: 0, longer: 0 };
  /** performance.now() when the current over-capacity spell began. */
  private spellStart: number | undefined;
  private startedAt = performance.now();
  private readonly log: ReceivedRequest[] = [];
  /** Next write position once the log is full (a ring). */
  private head = 0;
  private logged = 0;

  constructor(
    private capacity: number,
    private readonly logLimit: number,
  ) {}

  /** An inference request arrived; returns the (idempotent) function that closes it. */
  opened(): () => void {
    this.openCount++;
    if (this.openCount > this.peak) this.peak = this.openCount;
    if (this.openCount > this.capacity && this.spellStart === undefined) {
      this.spellStart = performance.now();
      this.spells++;
    }
    let closed = false;
    return () => {
      if (closed) return;
      closed = true;
      this.openCount--;
      if (this.openCount <= this.capacity) this.endSpell();
    };
  }

  private endSpell(): void {
    if (this.spellStart === undefined) return;
    const length = performance.now() - this.spellStart;
    this.spellStart = undefined;
    this.closedSpellsMs += length;
    if (length > this.longest) this.longest = length;
    if (length < 1) this.lengths.under1ms++;
    else if (length < 5) this.lengths.under5ms++;
    else if (length < 20) this.lengths.under20ms++;
    else if (length < 100) this.lengths.under100ms++;
    else this.lengths.longer++;
  }

  counters(): CapacityCounters {
    const now = performance.now();
    const current = this.spellStart === undefined ? 0 : now - this.spellStart;
    return {
      open: this.openCount,
      openPeak: this.peak,
      overCapacityMs: this.closedSpellsMs + current,
      overCapacitySpells: this.spells,
      longestOverCapacityMs: Math.max(this.longest, current),
      trackedMs: now - this.startedAt,
      overCapacitySpellLengths: { ...this.lengths },
    };
  }

  /** Starts the counters afresh (open requests stay open; peak restarts at the current count). */
  reset(): void {
    this.peak = this.openCount;
    this.closedSpellsMs = 0;
    this.longest = 0;
    this.spells = 0;
    this.lengths = { under1ms: 0, under5ms: 0, under20ms: 0, under100ms: 0, longer: 0 };
    this.spellStart = undefined;
    if (this.openCount > this.capacity) {
      this.spellStart = performance.now();
      this.spells = 1;
    }
    this.startedAt = performance.now();
    this.clearReceived();
  }

  /** Appends to the bounded log (the oldest entry goes once it is full). */
  record(entry: ReceivedRequest): void {
    this.logged++;
    if (this.logLimit <= 0) return;
    if (this.log.length < this.logLimit) {
      this.log.push(entry);
      return;
    }
    this.log[this.head] = entry;
    this.head = (this.head + 1) % this.logLimit;
  }

  /** The log, oldest first. */
  received(): ReceivedRequest[] {
    return this.head === 0 ? [...this.log] : [...this.log.slice(this.head), ...this.log.slice(0, this.head)];
  }

  /** Requests logged since the start (or the last clear), including those the bounded log dropped. */
  get receivedCount(): number {
    return this.logged;
  }

  clearReceived(): void {
    this.log.length = 0;
    this.head = 0;
    this.logged = 0;
  }
}

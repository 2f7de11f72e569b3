/**
 * Virtual time for the simulator: one event queue (a binary heap ordered by time, then by the
 * order events were scheduled) and a Clock over it that the real core uses for its timers.
 *
 * The core's `Clock` interface is all the scheduler sees, so the scheduler's own deadline timer
 * (queue timeouts, starvation marks) is an event in the same queue as arrivals and GPU steps: every
 * timeout fires at its exact instant, in a deterministic order, and nothing sleeps. (The core's
 * ManualClock would work too, but `advance` scans its timer list on every call and cannot say when
 * its next timer is due; sharing one heap is exact and O(log n).)
 */
import type { Clock, TimerHandle } from "@sluice/scheduler/core/clock.js";

export class SimEvent {
  dead = false;
  constructor(
    public t: number,
    public seq: number,
    public fn: () => void,
  ) {}
}

/** Events in (time, scheduling order). Cancelled events are dropped lazily when they surface. */
export class EventQueue {
  private heap: SimEvent[] = [];
  private seq = 0;

  get size(): number {
    return this.heap.length;
  }

  schedule(t: number, fn: () => void): SimEvent {
    const ev = new SimEvent(t, this.seq++, fn);
    const heap = this.heap;
    let i = heap.length;
    heap.push(ev);
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = heap[p]!;
      if (parent.t < t || (parent.t === t && parent.seq < ev.seq)) break;
      heap[i] = parent;
      i = p;
    }
    heap[i] = ev;
    return ev;
  }

  /** The next live event, removed from the queue; undefined when none is left. */
  pop(): SimEvent | undefined {
    for (;;) {
      const heap = this.heap;
      const top = heap[0];
      if (top === undefined) return undefined;
      const last = heap.pop()!;
      if (heap.length > 0) {
        let i = 0;
        const n = heap.length;
        for (;;) {
          const l = 2 * i + 1;
          if (l >= n) break;
          const r = l + 1;
          let c = l;
          const lc = heap[l]!;
          if (r < n) {
            const rc = heap[r]!;
            if (rc.t < lc.t || (rc.t === lc.t && rc.seq < lc.seq)) c = r;
          }
          const child = heap[c]!;
          if (last.t < child.t || (last.t === child.t && last.seq < child.seq)) break;
          heap[i] = child;
          i = c;
        }
        heap[i] = last;
      }
      if (!top.dead) return top;
    }
  }

  /** Time of the next live event, or +Infinity. */
  peekTime(): number {
    for (;;) {
      const top = this.heap[0];
      if (top === undefined) return Number.POSITIVE_INFINITY;
      if (!top.dead) return top.t;
      this.pop();
    }
  }
}

/** How late a scheduler timer fires after its deadline, ms (see SimClock.setTimer). */
const TIMER_SLACK_MS = 1e-6;

/** The core's Clock on virtual time: `now()` is the time of the event being processed. */
export class SimClock implements Clock {
  current = 0;
  constructor(
    readonly queue: EventQueue,
    /** Epoch milliseconds of virtual time 0 (calendar rules: budget periods, access windows). */
    readonly epochStartMs: number,
  ) {}

  now(): number {
    return this.current;
  }

  epochMs(): number {
    return this.epochStartMs + this.current;
  }

  /**
   * Timers fire TIMER_SLACK_MS after their deadline. The core and the legacy limiter arm a timer at
   * `enqueuedAt + timeout` and, when it fires, may test `now - enqueuedAt >= timeout`; at fractional
   * milliseconds the two differ by one ulp now and then, and a timer firing exactly on the deadline
   * would find nothing due and re-arm at the same instant forever. A nanosecond later is always past.
   */
  setTimer(fn: () => void, delayMs: number): TimerHandle {
    return this.queue.schedule(this.current + Math.max(0, delayMs) + TIMER_SLACK_MS, fn);
  }

  clearTimer(handle: TimerHandle): void {
    (handle as SimEvent).dead = true;
  }

  /** Schedules a simulator event at an absolute virtual time (never in the past). */
  at(t: number, fn: () => void): SimEvent {
    return this.queue.schedule(Math.max(t, this.current), fn);
  }
}

/**
 * Adaptive capacity: the CapacitySource that lets the adaptive controller (adaptive-limit.ts) set
 * the scheduler's capacity. It cold-starts from the discovered capacity, closes one controller
 * window per `windowMs` on the injected clock, and never goes above what the healthy workers
 * report (a dead worker's slots leave at once, whatever the controller thinks).
 *
 * Requests feed it through CapacityFeedback: queue and in-flight counts (is the limit in use?),
 * and one latency sample per served request (TTFT from dispatch, time per output token), or an
 * overload signal (a worker's 429/503, an upstream timeout). docs/adaptive.md has the law.
 */
import type { Clock } from "../core/clock.js";
import {
  type AdaptiveDecision,
  AdaptiveLimit,
  type AdaptiveLimitSnapshot,
  type AdaptiveSample,
  type AdaptiveTuning,
} from "./adaptive-limit.js";
import { Periodic } from "./periodic.js";
import { CapacityNotifier, type CapacitySource } from "./source.js";

/** What a request tells the capacity side as it goes. */
export interface CapacityFeedback {
  /** A request entered (+1) or left (-1) the admission queue. */
  queued(delta: number): void;
  /** A request took (+1) or gave back (-1) a slot. */
  inflight(delta: number): void;
  /** A served request's latency, or an overload signal. */
  sample(sample: AdaptiveSample): void;
}

export interface AdaptiveCapacityOptions extends Partial<AdaptiveTuning> {
  minCapacity?: number | undefined;
  /** Default: no bound above the discovered capacity. */
  maxCapacity?: number | undefined;
  tpotSloMs?: number | undefined;
  ttftSloMs?: number | undefined;
}

/** The believed ceiling of any fleet (see gateway/workers.ts): the default upper bound. */
const NO_BOUND = 16_384;

export interface AdaptiveCounters {
  increase: number;
  decrease: number;
}

export class AdaptiveCapacity implements CapacitySource, CapacityFeedback {
  readonly controller: AdaptiveLimit;
  private readonly notifier = new CapacityNotifier();
  private inflightNow = 0;
  private queuedNow = 0;
  private readonly windows: Periodic;
  /** Decisions by direction, for sluice_capacity_adjustments_total. */
  readonly adjustments: AdaptiveCounters = { increase: 0, decrease: 0 };

  constructor(
    private readonly discovered: CapacitySource,
    options: AdaptiveCapacityOptions,
    clock: Clock,
    onBound?: (bound: "min" | "max", limit: number, wanted: number) => void,
  ) {
    const { minCapacity, maxCapacity, tpotSloMs, ttftSloMs, ...tuning } = options;
    // Fields left undefined take the controller's defaults.
    const defined = Object.fromEntries(Object.entries(tuning).filter(([, v]) => v !== undefined));
    this.controller = new AdaptiveLimit(
      {
        ...defined,
        minCapacity: minCapacity ?? 1,
        maxCapacity: maxCapacity ?? Math.max(NO_BOUND, minCapacity ?? 1),
        initialCapacity: discovered.capacity,
        ...(tpotSloMs !== undefined ? { tpotSloMs } : {}),
        ...(ttftSloMs !== undefined ? { ttftSloMs } : {}),
        onBound: onBound ? (e) => onBound(e.bound, e.limit, e.wanted) : undefined,
      },
      clock,
    );
    discovered.subscribe(() => this.notifier.changed(this.capacity));
    this.windows = new Periodic(clock, this.controller.options.windowMs, () => this.closeWindow());
  }

  /** The controller's limit, never above what the healthy workers report. */
  get capacity(): number {
    return Math.min(this.controller.limit, this.discovered.capacity);
  }

  subscribe(listener: (capacity: number) => void): void {
    this.notifier.subscribe(listener);
  }

  /** Starts closing one window per windowMs. */
  start(): void {
    this.windows.start();
  }

  stop(): void {
    this.windows.stop();
  }

  /** Closes the current window (the timer's job; tests may call it after moving a ManualClock). */
  closeWindow(): AdaptiveDecision | undefined {
    this.report();
    const before = this.controller.limit;
    const decision = this.controller.tick();
    const after = this.controller.limit;
    if (after > before) this.adjustments.increase++;
    else if (after < before) this.adjustments.decrease++;
    this.notifier.changed(this.capacity);
    return decision;
  }

  queued(delta: number): void {
    this.queuedNow += delta;
    this.report();
  }

  inflight(delta: number): void {
    this.inflightNow += delta;
    this.report();
  }

  /**
   * Queued work shows the limit is in use only while the limit binds: at or above the workers'
   * capacity, the workers bind instead, and the limit must not climb on a queue it does not cause.
   */
  private report(): void {
    const binding = this.controller.limit < this.discovered.capacity;
    this.controller.sampleUsage(this.inflightNow, binding ? this.queuedNow : 0);
  }

  sample(sample: AdaptiveSample): void {
    this.controller.observe(sample);
  }

  snapshot(): AdaptiveLimitSnapshot & { capacity: number; inflight: number; queued: number } {
    return {
      ...this.controller.snapshot(),
      capacity: this.capacity,
      inflight: this.inflightNow,
      queued: this.queuedNow,
    };
  }
}

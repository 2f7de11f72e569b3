/**
 * Adaptive capacity: the CapacitySource that lets the adaptive controller (adaptive-limit.ts) set
 * the scheduler's capacity. It cold-starts from the discovered capacity, closes one controller
 * window per `windowMs` on the injected clock, and never goes above what the healthy workers
 * report (a dead worker's slots leave at once, whatever the controller thinks).
 *
 * One controller per worker when the caller lists its workers (`workers`): each learns its own
 * worker's latency from that worker's samples, cold-starts from that worker's report, and sets
 * how many requests routing may put on it (`AdaptiveWorker.adaptiveLimit`); the pool's capacity is
 * the sum over its healthy workers, clamped to the bounds. A worker slower than the rest (thermal
 * throttling, an older GPU, a noisy host) then gets fewer requests instead of dragging the whole
 * pool's limit down to what it alone can run. Without a worker list, one controller for the pool.
 *
 * Requests feed it through CapacityFeedback: queue and in-flight counts (is the limit in use?),
 * and one latency sample per served request (TTFT from dispatch, time per output token), or an
 * overload signal (a worker's 429/503, an upstream timeout), with the worker that served it.
 * docs/adaptive.md has the law.
 */
import { CLASSES_HIGH_TO_LOW, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { ClassSnapshot } from "@sluice/scheduler/core/events.js";
import { CapacityNotifier, type CapacitySource } from "../contracts/capacity-source.js";
import {
  type AdaptiveDecision,
  AdaptiveLimit,
  type AdaptiveLimitOptions,
  type AdaptiveLimitSnapshot,
  type AdaptivePhase,
  type AdaptiveSample,
  type EngineView,
} from "./adaptive-limit.js";
import { Periodic } from "./periodic.js";

/** What a request tells the capacity side as it goes. */
export interface CapacityFeedback {
  /** A request entered (+1) or left (-1) the admission queue. */
  queued(delta: number): void;
  /** A request took (+1) or gave back (-1) a slot. */
  inflight(delta: number): void;
  /**
   * A request was sent to a worker (its in-flight count moved): `worker` is its URL. Without it,
   * every worker's count is read again.
   */
  dispatched?(worker?: string): void;
  /** A served request's latency, or an overload signal; `worker` is the URL of the one that served it. */
  sample(sample: AdaptiveSample, worker?: string): void;
  /** How often a running stream reports its decode pace (a TPOT-only sample), ms. */
  readonly paceIntervalMs?: number;
}

/** A worker as adaptive capacity sees it (the gateway's Worker, the simulator's). */
export interface AdaptiveWorker {
  /** Stable identity (the URL). */
  readonly url: string;
  /** What it can take now by its report (max_running_requests; its trials when half-open). */
  readonly availableCapacity: number;
  /** Requests in flight on it. */
  readonly inflight: number;
  /** Set here: how many requests routing may put on it (undefined: no limit of ours). */
  adaptiveLimit: number | undefined;
  /** Its engine's load now (a scrape carried forward), when its engine exports one. */
  engineView?(): EngineView | undefined;
}

interface AdaptiveCapacityOptions {
  minCapacity?: number | undefined;
  /** Default: no bound above the discovered capacity. */
  maxCapacity?: number | undefined;
  tpotSloMs?: number | undefined;
  ttftSloMs?: number | undefined;
  /** Engine KV use the controllers hold each worker under (kv_target_utilization). */
  kvTargetUtilization?: number | undefined;
  /** The pool's healthy workers, for one controller each; absent: one controller for the pool. */
  workers?: (() => readonly AdaptiveWorker[]) | undefined;
}

/** The believed ceiling of any fleet (see gateway/workers.ts): the default upper bound. */
const NO_BOUND = 16_384;

export interface AdaptiveCounters {
  increase: number;
  decrease: number;
}

/**
 * The fewest tokens after a stream's last pace mark for its end to report a pace of its own (the
 * gateway's lease and the simulator alike). Over a few tokens one miscounted reads as a pace far
 * off: SSE events are not exactly tokens (a role chunk, a finish chunk), and a 4-token tail counted
 * as 3 reads a third slow, in every stream at once when a closed loop runs in step. The marks
 * covered the rest of the stream.
 */
export const PACE_MIN_TAIL_TOKENS = 16;

/** One worker's controller, in the pool's snapshot. */
interface AdaptiveWorkerSnapshot {
  worker: string;
  limit: number;
  reported: number;
  inflight: number;
  phase: AdaptivePhase;
  tpotP90Ms: number | null;
  tpotBaselineMs: number | null;
  ratio: number | null;
  engineWaiting: number | null;
  engineKvUtilization: number | null;
  /** The knee search's ceiling on this worker (no tpot_slo_ms), or null. */
  kneeCeiling: number | null;
  lastDecision: AdaptiveDecision;
}

type AdaptiveCapacitySnapshot = AdaptiveLimitSnapshot & {
  capacity: number;
  inflight: number;
  queued: number;
  /** One entry per worker controller (empty with one controller for the pool). */
  workers: AdaptiveWorkerSnapshot[];
};

/** The pool itself, as the one "worker" of a pool-wide controller. */
const POOL = "*";

interface Controlled {
  controller: AdaptiveLimit;
  /** The worker, or undefined for the pool-wide controller. */
  worker: AdaptiveWorker | undefined;
}

export class AdaptiveCapacity implements CapacitySource, CapacityFeedback {
  private readonly notifier = new CapacityNotifier();
  private inflightNow = 0;
  private queuedNow = 0;
  /** The admission queue's peak since the last window closed, read at releases (it started at queuedNow). */
  private queuedPeak = 0;
  private readonly windows: Periodic;
  private readonly controllers = new Map<string, Controlled>();
  private heldBackSource: (() => number) | undefined = undefined;
  private readonly listWorkers: (() => readonly AdaptiveWorker[]) | undefined;
  private readonly minCapacity: number;
  private readonly maxCapacity: number;
  private readonly base: Pick<AdaptiveLimitOptions, "tpotSloMs" | "ttftSloMs" | "kvTargetUtilization">;
  private readonly windowMs: number;
  /** The sum of the healthy workers' limits, clamped (kept between windows and worker changes). */
  private current = 0;
  /** An operator's pin is in force: the workers' limits are lifted (the pin is the only bound). */
  private pinned = false;
  /** A controller that never sees a sample: the snapshot's signals when no worker is healthy. */
  private idle: AdaptiveLimit | undefined;
  /**
   * Five windows: a stream longer than that reports its pace while it runs. Shorter segments carry
   * the prefill stalls of the requests joining the batch, and their p90 reads far above the
   * requests' own TPOT (in the simulator, marks every 0.5-2.5 s cut goodput by up to 15% and
   * missed 46-57 bounds over three seeds, against 29 at 5 s and 34 without marks).
   */
  readonly paceIntervalMs: number;
  /** Decisions by direction, for sluice_capacity_adjustments_total. */
  readonly adjustments: AdaptiveCounters = { increase: 0, decrease: 0 };

  constructor(
    private readonly discovered: CapacitySource,
    options: AdaptiveCapacityOptions,
    private readonly clock: Clock,
    private readonly onBound?: (bound: "min" | "max", limit: number, wanted: number) => void,
  ) {
    const { minCapacity, maxCapacity, tpotSloMs, ttftSloMs, kvTargetUtilization, workers } = options;
    this.listWorkers = workers;
    this.minCapacity = minCapacity ?? 1;
    this.maxCapacity = maxCapacity ?? Math.max(NO_BOUND, this.minCapacity);
    this.base = { tpotSloMs, ttftSloMs, kvTargetUtilization };
    // The pool-wide controller (or a probe of the options when there are workers): a bad option
    // throws here, at construction, naming its key.
    const first = this.create(
      undefined,
      this.minCapacity,
      this.maxCapacity,
      discovered.capacity,
      workers !== undefined,
    );
    if (workers === undefined) this.controllers.set(POOL, first);
    this.windowMs = first.controller.options.windowMs;
    this.paceIntervalMs = this.windowMs * 5;
    this.sync();
    this.current = this.sum();
    discovered.subscribe(() => this.refresh());
    this.windows = new Periodic(clock, this.windowMs, () => this.closeWindow());
  }

  /** The limit in force, never above what the healthy workers report. */
  get capacity(): number {
    return Math.min(this.current, this.discovered.capacity);
  }

  /**
   * The scheduler's reservations are sized at the fleet's size (what the healthy workers report,
   * under adaptive_max_capacity) and scaled down with the limit: taken at the limit, the absolute
   * floors (system 32, interactive 128 by default) would fill a limit near a knee of a few dozen
   * and lock default and bulk out.
   */
  get reservedAt(): number {
    return Math.max(this.capacity, Math.min(this.maxCapacity, this.discovered.capacity));
  }

  subscribe(listener: (capacity: number) => void): void {
    this.notifier.subscribe(listener);
  }

  /**
   * Where the slots that the scheduler's reservations hold back from waiting work come from
   * (heldBackOf over the admission snapshot); read once per window.
   */
  setHeldBack(source: () => number): void {
    this.heldBackSource = source;
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
    this.sync();
    this.report(this.queuedPeak);
    const before = this.current;
    let decision: AdaptiveDecision | undefined;
    const healthy = this.healthyControllers();
    const held = this.heldBackSource?.() ?? 0;
    // Each controller gets its part of what is held back, by its limit.
    let limits = 0;
    for (const c of healthy) limits += c.controller.limit;
    for (const c of healthy) c.controller.setHeldBack(limits > 0 ? (held * c.controller.limit) / limits : 0);

    for (const c of healthy) {
      const d = c.controller.tick();
      // The pool's decision: a decrease anywhere is the news, else an increase, else a hold.
      if (d !== undefined && (decision === undefined || rank(d) > rank(decision))) decision = d;
    }
    // The next window starts from the levels of now (its peak is at least those).
    this.queuedPeak = this.queuedNow;
    this.report(this.queuedNow);
    this.refresh();
    const after = this.current;
    if (after > before) this.adjustments.increase++;
    else if (after < before) this.adjustments.decrease++;
    return decision;
  }

  /*
   * The feedback below runs several times per request, so it costs O(1) whatever the fleet's size:
   * with one controller per worker, only the worker a request went to is sampled, and the queue's
   * peak is kept here and handed to every controller when the window closes (report()).
   */

  queued(delta: number): void {
    // Every request passes through the queue, most for no time at all: its level is read only
    // when a slot is released (below) or a window closes, so a request let in at once is not
    // "queued work" and an idle limit does not grow on it.
    this.queuedNow += delta;
  }

  inflight(delta: number): void {
    this.inflightNow += delta;
    // A release is when a waiting request would be let in: what is still queued now waited.
    if (delta < 0 && this.queuedNow > this.queuedPeak) this.queuedPeak = this.queuedNow;
    if (this.listWorkers === undefined) this.reportPool(delta < 0 ? this.queuedNow : 0);
  }

  dispatched(worker?: string): void {
    if (this.listWorkers === undefined) return;
    if (worker === undefined) {
      this.report(this.queuedNow);
      return;
    }
    // Only a dispatch raises a worker's count, so sampling it here catches the window's peak.
    const c = this.controllers.get(worker);
    if (c?.worker !== undefined) c.controller.sampleUsage(c.worker.inflight, 0);
  }

  /**
   * A pin lifts the workers' own limits (routing then bounds each worker by its report alone),
   * so a pin above their sum is served in full; unpinning puts them back.
   */
  overridden(pinned: boolean): void {
    this.pinned = pinned;
    this.refresh();
  }

  sample(sample: AdaptiveSample, worker?: string): void {
    const c = this.controllers.get(this.listWorkers === undefined ? POOL : (worker ?? ""));
    c?.controller.observe(sample);
  }

  snapshot(): AdaptiveCapacitySnapshot {
    const all = this.healthyControllers();
    const snaps = all.map((c) => c.controller.snapshot());
    // The pool's signals are those of its most loaded controller (the highest latency ratio).
    let lead = 0;
    for (let i = 1; i < snaps.length; i++) {
      if ((snaps[i]!.ratio ?? 0) > (snaps[lead]!.ratio ?? 0)) lead = i;
    }
    // No healthy worker: the signals of a controller that has seen nothing (made once).
    this.idle ??= this.create(undefined, this.minCapacity, this.maxCapacity, 0, true).controller;
    const head = snaps[lead] ?? this.idle.snapshot();
    const sumOf = (
      k:
        | "windows"
        | "increases"
        | "decreases"
        | "overloadDecreases"
        | "sloDecreases"
        | "engineDecreases"
        | "kneeDecreases"
        | "storedSamples"
        | "invalidSamples"
        | "staleSamples"
        | "heldBack",
    ) => snaps.reduce((s, x) => s + x[k], 0);
    const phase: AdaptivePhase = snaps.some((s) => s.phase === "starting") ? "starting" : "tracking";
    const capacity = this.capacity;
    // The ceiling in force: adaptive_max_capacity, or what the healthy workers report when that is
    // lower (when it is unset, always): the internal 16384 would read as a bound nobody set.
    const ceiling = Math.min(this.maxCapacity, Math.max(this.minCapacity, this.discovered.capacity));
    return {
      ...head,
      limit: capacity,
      minCapacity: this.minCapacity,
      maxCapacity: ceiling,
      phase,
      windows: this.listWorkers === undefined ? head.windows : Math.max(0, ...snaps.map((s) => s.windows)),
      increases: sumOf("increases"),
      decreases: sumOf("decreases"),
      overloadDecreases: sumOf("overloadDecreases"),
      sloDecreases: sumOf("sloDecreases"),
      engineDecreases: sumOf("engineDecreases"),
      kneeDecreases: sumOf("kneeDecreases"),
      storedSamples: sumOf("storedSamples"),
      invalidSamples: sumOf("invalidSamples"),
      staleSamples: sumOf("staleSamples"),
      heldBack: sumOf("heldBack"),
      bound: this.current <= this.minCapacity ? "min" : this.current >= ceiling ? "max" : head.bound,
      capacity,
      inflight: this.inflightNow,
      queued: this.queuedNow,
      workers: all.flatMap((c, i) =>
        c.worker === undefined
          ? []
          : [
              {
                worker: c.worker.url,
                limit: snaps[i]!.limit,
                reported: c.worker.availableCapacity,
                inflight: c.worker.inflight,
                phase: snaps[i]!.phase,
                tpotP90Ms: snaps[i]!.tpotP90Ms,
                tpotBaselineMs: snaps[i]!.tpotBaselineMs,
                ratio: snaps[i]!.ratio,
                engineWaiting: snaps[i]!.engineWaiting,
                engineKvUtilization: snaps[i]!.engineKvUtilization,
                kneeCeiling: snaps[i]!.kneeCeiling,
                lastDecision: snaps[i]!.lastDecision,
              },
            ],
      ),
    };
  }

  // -------------------------------------------------------------------------------------------

  private create(
    worker: AdaptiveWorker | undefined,
    min: number,
    max: number,
    initial: number,
    quiet = false,
  ): Controlled {
    const onBound = quiet ? undefined : this.onBound;
    const controller = new AdaptiveLimit(
      {
        ...this.base,
        minCapacity: min,
        maxCapacity: max,
        initialCapacity: initial,
        onBound: onBound ? (e) => onBound(e.bound, e.limit, e.wanted) : undefined,
      },
      this.clock,
    );
    return { controller, worker };
  }

  /** The pool-wide controller, or the controllers of the healthy workers (in the order first seen). */
  private healthyControllers(): Controlled[] {
    const workers = this.listWorkers?.();
    if (workers === undefined) return [this.controllers.get(POOL)!];
    const healthy = new Set(workers);
    const out: Controlled[] = [];
    for (const c of this.controllers.values())
      if (c.worker !== undefined && healthy.has(c.worker)) out.push(c);
    return out;
  }

  /**
   * One controller per listed worker, made the first time it is seen: it cold-starts from its
   * report, its ceiling is its report (and the pool's bound), and its floor is its share of the
   * pool's floor. A worker that leaves keeps its controller (it may come back).
   */
  private sync(): void {
    const workers = this.listWorkers?.();
    if (workers === undefined) return;
    let reported = 0;
    for (const w of workers) reported += w.availableCapacity;
    for (const w of workers) {
      const known = this.controllers.get(w.url);
      if (known !== undefined) {
        known.worker = w;
        continue;
      }
      const report = Math.max(1, w.availableCapacity);
      const share = reported > 0 ? w.availableCapacity / reported : 1 / workers.length;
      const max = Math.max(1, Math.min(report, this.maxCapacity));
      const min = Math.min(max, Math.max(1, Math.ceil(this.minCapacity * share)));
      this.controllers.set(w.url, this.create(w, min, max, report));
    }
  }

  /** The pool's limit: the healthy workers' limits summed (each under its report), clamped. */
  private sum(): number {
    const workers = this.listWorkers?.();
    if (workers === undefined) return this.controllers.get(POOL)!.controller.limit;
    let sum = 0;
    for (const w of workers) {
      const c = this.controllers.get(w.url);
      const limit = c === undefined ? w.availableCapacity : Math.min(c.controller.limit, w.availableCapacity);
      w.adaptiveLimit = this.pinned ? undefined : c?.controller.limit;
      sum += limit;
    }
    return Math.min(this.maxCapacity, Math.max(this.minCapacity, sum));
  }

  /** Workers or limits moved: recompute the pool's limit and tell the listeners. */
  private refresh(): void {
    this.sync();
    this.current = this.sum();
    this.notifier.changed(this.capacity, this.reservedAt);
  }

  /**
   * Every controller samples its in-flight count and `queued`. Queued work shows a limit is in use
   * only while it binds: at or above the worker's (or the pool's) reported capacity, the workers
   * bind instead, and the limit must not climb on a queue it does not cause.
   */
  private report(queued: number): void {
    const workers = this.listWorkers?.();
    if (workers === undefined) {
      this.reportPool(queued);
      return;
    }
    for (const w of workers) {
      const controller = this.controllers.get(w.url)?.controller;
      if (controller === undefined) continue;
      const binding = controller.limit < w.availableCapacity;
      controller.sampleUsage(w.inflight, binding ? queued : 0);
      controller.sampleEngine(w.engineView?.());
    }
  }

  private reportPool(queued: number): void {
    const controller = this.controllers.get(POOL)!.controller;
    const binding = controller.limit < this.discovered.capacity;
    controller.sampleUsage(this.inflightNow, binding ? queued : 0);
  }
}

/** Which decision speaks for the pool when its workers decide differently. */
function rank(d: AdaptiveDecision): number {
  return d === "hold" ? 0 : d === "increase" ? 1 : 2;
}

/**
 * Slots the scheduler holds back, unused, from the highest class that has work waiting (the one
 * next in line; lower classes wait behind it anyway): the reservations of the classes above it
 * less what they run. 0 when nothing waits, or in legacy admission (no classes).
 */
export function heldBackOf(classes: Readonly<Record<PriorityClass, ClassSnapshot>> | null): number {
  if (classes === null) return 0;
  let held = 0;
  for (const cls of CLASSES_HIGH_TO_LOW) {
    const c = classes[cls];
    if (c.queued > 0) return held;
    held += Math.max(0, c.reserved - c.inflight);
  }
  return 0;
}

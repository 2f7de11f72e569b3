/**
 * Shedding at the door, for the gateway and the simulator alike: the prioritizer (levels by class and
 * recent usage, a threshold calibrated from the queue) and keyed shedding (a percentage regulated by
 * queue delay, one answer per session per rotation window). Both recalibrate once per second on the
 * injected clock; check() is the per-request question, a few Map lookups.
 *
 * What each sheds: the prioritizer any class but system (interactive only once bulk and default
 * are shed, by construction of its levels); keyed shedding only the classes it lists (default bulk
 * and default; never system). docs/adaptive.md states both laws and every default.
 *
 * The prioritizer's queue is weighed by predicted output (accounting/output-prediction.ts): a
 * queued request counts its prediction over the mean prediction of the requests served, through
 * a noise band (bandedWeight), so its predicted wait is in served requests' worth of work.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { ClassSettingsTable } from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import {
  KeyedAdmission,
  type KeyedAdmissionOptions,
  type KeyedAdmissionStatus,
} from "@sluice/scheduler/shedding/keyed-admission.js";
import {
  Prioritizer,
  type PrioritizerOptions,
  type PrioritizerStatus,
} from "@sluice/scheduler/shedding/prioritizer.js";
import { Periodic } from "../capacity/periodic.js";

export interface KeyedSheddingOptions extends KeyedAdmissionOptions {
  /** The request header naming a session; without it the tenant is the key. */
  header?: string;
  /** Classes keyed shedding applies to (default bulk and default). */
  classes?: PriorityClass[];
}

export interface LoadSheddingOptions {
  /**
   * Prioritized shedding; off when absent or false (`resolveShedding` turns absent into the class
   * timeouts in adaptive mode, and fills in the bounds of a block that sets none).
   */
  prioritized?: PrioritizerOptions | false | undefined;
  /** Keyed shedding; off when absent. */
  keyed?: KeyedSheddingOptions | undefined;
}

export type ShedReason = "level" | "codel" | "keyed";

export type ShedVerdict =
  | { readonly shed: false }
  | { shed: true; reason: ShedReason; retryAfterSecs: number };

export interface LoadSheddingStatus {
  /** `maxQueueWaitMs` is the one bound configured, or null when each class has its own (`boundsMs`). */
  prioritized: (PrioritizerStatus & { maxQueueWaitMs: number | null }) | null;
  keyed: (KeyedAdmissionStatus & { header: string; classes: PriorityClass[] }) | null;
}

/**
 * The shedding options with the class table's help: a `load_shedding` block without
 * `max_queue_wait_ms` bounds each class's wait by its queue_timeout, and in adaptive mode an absent
 * block means exactly that (`load_shedding: false` turns it off). A limit that falls to the
 * workers' knee leaves requests queued that would wait past their timeout and get a 408 anyway;
 * refused at the door they get 503 load_shed at once, with Retry-After, and the ones that would
 * have been served are not touched. Static mode keeps the contract: no shedding unless configured.
 */
export function resolveShedding(
  options: LoadSheddingOptions | undefined,
  classes: ClassSettingsTable,
  adaptive: boolean,
): LoadSheddingOptions | undefined {
  const p = options?.prioritized;
  if (p === false || (p === undefined && !adaptive)) return options;
  if (p !== undefined && (p.maxQueueWaitMs !== undefined || p.classWaitMs !== undefined)) return options;
  const classWaitMs = {} as Record<PriorityClass, number>;
  for (const cls of Object.keys(classes) as PriorityClass[]) {
    classWaitMs[cls] = classes[cls].queue_timeout_secs * 1000;
  }
  return { ...options, prioritized: { ...p, classWaitMs } };
}

const PASS: ShedVerdict = Object.freeze({ shed: false });
/** Weight of one served request in the mean served prediction: about the last 20. */
const MEAN_WEIGHT = 0.05;

/**
 * A request's weight from its prediction over the served mean: one within a factor of NOISE_BAND
 * either way, and past it the ratio over the band's edge (continuous: 4x the mean counts 2, a
 * quarter counts a half). A p95 over a window of answers moves by tens of percent from one answer
 * to the next; weighing traffic whose requests all look alike by that noise moved the threshold
 * for nothing (in the simulator's adaptive-cold-start, interactive TPOT SLO attainment fell from
 * at least 95 % to 93.8 %). What the weight is for, long generations queued among short chats, is
 * far outside the band.
 */
export function bandedWeight(ratio: number): number {
  if (!(ratio > 0) || !Number.isFinite(ratio)) return 1;
  if (ratio > NOISE_BAND) return ratio / NOISE_BAND;
  if (ratio < 1 / NOISE_BAND) return ratio * NOISE_BAND;
  return 1;
}
const NOISE_BAND = 2;

/** Queued requests of one tenant in one class: all of them, and those with a predicted output. */
interface QueuedCell {
  n: number;
  predicted: number;
  predictedTokens: number;
}
const CALIBRATION_MS = 1000;

export class LoadShedding {
  readonly prioritizer: Prioritizer | undefined;
  readonly keyed: KeyedAdmission | undefined;
  readonly sessionHeader: string | undefined;
  private readonly keyedClasses: ReadonlySet<PriorityClass>;
  /**
   * Queued requests per class and tenant: the prioritizer's level histogram. A count is a mutable
   * cell, kept at 0 until the next calibration prunes it: a request queued and let in at once costs
   * one Map lookup each way, not a set and a delete.
   */
  private readonly queued = new Map<PriorityClass, Map<string, QueuedCell>>();
  /**
   * Predicted output tokens of a served request, a moving mean: the unit the queue is weighed in.
   * The completion rate counts served requests; a queued request with a prediction counts
   * predicted / mean of them, so a queue of long answers predicts a longer wait than as many
   * short ones. Predictions over predictions: a high quantile's bias cancels out, and a fleet whose
   * requests all look alike is weighed exactly as by count.
   */
  private meanServedPrediction = 0;
  private readonly calibration: Periodic;

  constructor(
    private readonly options: LoadSheddingOptions,
    clock: Clock,
  ) {
    this.calibration = new Periodic(clock, CALIBRATION_MS, () => this.calibrate());
    this.prioritizer = options.prioritized ? new Prioritizer(options.prioritized, clock) : undefined;
    const keyed = options.keyed;
    if (keyed !== undefined) {
      const classes = keyed.classes ?? ["bulk", "default"];
      if (classes.includes("system")) throw new ConfigError("keyed_shedding.classes", "system is never shed");
      this.keyedClasses = new Set(classes);
      this.keyed = new KeyedAdmission(keyed, clock);
      this.sessionHeader = (keyed.header ?? "x-session-id").toLowerCase();
    } else {
      this.keyedClasses = new Set();
    }
  }

  get enabled(): boolean {
    return this.prioritizer !== undefined || this.keyed !== undefined;
  }

  /** Starts the once-a-second calibration. */
  start(): void {
    if (this.enabled) this.calibration.start();
  }

  stop(): void {
    this.calibration.stop();
  }

  /** One calibration: the prioritizer's threshold from the queue, the keyed percentage from delay. */
  calibrate(): void {
    const p = this.prioritizer;
    if (p !== undefined) {
      const histogram: Array<{ level: number; count: number }> = [];
      for (const [cls, byTenant] of this.queued) {
        for (const [tenant, count] of byTenant) {
          if (count.n > 0) histogram.push({ level: p.level(cls, tenant), count: this.weight(count) });
          else byTenant.delete(tenant);
        }
      }
      p.calibrate(histogram);
    }
    this.keyed?.tick();
  }

  /** Should this arrival be refused at the door? `session` is the session header's value, if any. */
  check(cls: PriorityClass, tenant: string, session: string | undefined): ShedVerdict {
    if (cls === "system") return PASS;
    const p = this.prioritizer;
    const k = this.keyedClasses.has(cls) ? this.keyed : undefined;
    const key = session || tenant;
    // In a keyed class both cuts go by the key's bucket: one order of sessions, the stricter cut
    // wins. Each on its own draw, their refusals multiplied and fell inside admitted sessions.
    k?.arrived();
    // The hash only while either cuts (nothing is shed at 100 % and threshold 0, the common case).
    const cutting = k !== undefined && (k.percent < 100 || (p !== undefined && p.threshold > 0));
    const bucket = cutting ? k.bucketOf(key) : undefined;
    const level = p?.level(cls, tenant) ?? 0;
    if (p?.shouldShed(cls, level, bucket === undefined ? undefined : bucket / 10_000)) {
      const codel = p.threshold <= level;
      return { shed: true, reason: codel ? "codel" : "level", retryAfterSecs: p.retryAfterSecs(cls) };
    }
    if (k?.reject(key, bucket)) {
      return {
        shed: true,
        reason: "keyed",
        retryAfterSecs: Math.max(1, Math.min(86_400, Math.ceil(k.msToRotation() / 1000))),
      };
    }
    return PASS;
  }

  /**
   * A request of `tenant` entered (+1) or left (-1) the queue of `cls`; `predictedOutputTokens`:
   * its predicted output (accounting/output-prediction.ts), the same on entry and exit.
   */
  queue(cls: PriorityClass, tenant: string, delta: number, predictedOutputTokens?: number): void {
    if (this.prioritizer === undefined) return;
    let byTenant = this.queued.get(cls);
    if (byTenant === undefined) {
      byTenant = new Map();
      this.queued.set(cls, byTenant);
    }
    let count = byTenant.get(tenant);
    if (count === undefined) {
      if (!(delta > 0)) return;
      count = { n: 0, predicted: 0, predictedTokens: 0 };
      byTenant.set(tenant, count);
    }
    count.n = Math.max(0, count.n + delta);
    if (predictedOutputTokens !== undefined && predictedOutputTokens > 0) {
      count.predicted = Math.max(0, count.predicted + delta);
      count.predictedTokens =
        count.predicted === 0 ? 0 : Math.max(0, count.predictedTokens + delta * predictedOutputTokens);
    }
  }

  /**
   * A cell's queued requests in units of a served request: the predicted ones count their mean
   * prediction over the mean served prediction (bandedWeight), the others 1. Before any such
   * answer, each counts 1.
   */
  private weight(cell: QueuedCell): number {
    const mean = this.meanServedPrediction;
    if (!(mean > 0) || cell.predicted === 0) return cell.n;
    const unpredicted = Math.max(0, cell.n - cell.predicted);
    // The cell's mean prediction against the served mean, through the noise band.
    const ratio = cell.predictedTokens / cell.predicted / mean;
    return unpredicted + cell.predicted * bandedWeight(ratio);
  }

  /** How long a request of `cls` waited in the queue; `admitted`: it left with a slot. */
  queueWait(cls: PriorityClass, waitMs: number, admitted = true): void {
    this.prioritizer?.recordQueueWait(cls, waitMs);
    if (!this.keyedClasses.has(cls)) return;
    if (admitted) this.keyed?.observeDelay(waitMs);
    else this.keyed?.observeGaveUp(waitMs);
  }

  /**
   * A served request's tokens: usage levels and the completion rate; `predictedOutputTokens`, the
   * output it was predicted (when it had a prediction), the unit of the queue's weight.
   */
  served(cls: PriorityClass, tenant: string, tokens: number, predictedOutputTokens?: number): void {
    const predicted = predictedOutputTokens;
    if (predicted !== undefined && predicted > 0 && Number.isFinite(predicted)) {
      const mean = this.meanServedPrediction;
      this.meanServedPrediction = mean === 0 ? predicted : mean + MEAN_WEIGHT * (predicted - mean);
    }
    if (this.keyedClasses.has(cls)) this.keyed?.served();
    const p = this.prioritizer;
    if (p === undefined) return;
    p.recordCompletion();
    p.recordUsage(cls, tenant, tokens);
  }

  status(): LoadSheddingStatus {
    const p = this.prioritizer;
    const k = this.keyed;
    const po = this.options.prioritized;
    return {
      prioritized: p ? { ...p.status(), maxQueueWaitMs: (po ? po.maxQueueWaitMs : undefined) ?? null } : null,
      keyed: k ? { ...k.status(), header: this.sessionHeader!, classes: [...this.keyedClasses] } : null,
    };
  }
}

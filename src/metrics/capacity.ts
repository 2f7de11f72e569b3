/**
 * Metrics of adaptive capacity and shedding (docs/adaptive.md), read at scrape time from their
 * controllers: the limit and the signals it follows, its moves, and what was shed and why.
 */

import { PRIORITY_CLASSES, type PriorityClass } from "@sluice/scheduler/core/class.js";
import { Counter, Gauge, type Registry } from "prom-client";
import type { AdaptiveCounters } from "../capacity/adaptive.js";
import type { AdaptiveLimitSnapshot } from "../capacity/adaptive-limit.js";
import type { LoadSheddingStatus, ShedReason } from "../shedding/load-shedding.js";

const CAPACITY_METRIC_NAMES = {
  limit: "sluice_capacity_limit",
  tpotP90: "sluice_adaptive_tpot_p90_seconds",
  tpotBaseline: "sluice_adaptive_tpot_baseline_seconds",
  ttftP90: "sluice_adaptive_ttft_p90_seconds",
  ttftRatio: "sluice_adaptive_ttft_ratio",
  latencyRatio: "sluice_adaptive_latency_ratio",
  adjustments: "sluice_capacity_adjustments_total",
  shed: "sluice_load_shed_total",
  shedThreshold: "sluice_shed_threshold_level",
  predictedWait: "sluice_shed_predicted_queue_wait_seconds",
  keyedPercent: "sluice_keyed_admission_percent",
} as const;

const SHED_REASONS: readonly ShedReason[] = ["level", "codel", "keyed"];

interface CapacityMetricSources {
  /** The capacity limit in force: the adaptive controller's (bounded by the workers), else the capacity. */
  limit(): number;
  adaptive(): AdaptiveLimitSnapshot | undefined;
  adjustments(): AdaptiveCounters | undefined;
  shedding(): LoadSheddingStatus | undefined;
}

export interface CapacityMetrics {
  countShed(cls: PriorityClass, reason: ShedReason): void;
}

export function registerCapacityMetrics(registry: Registry, sources: CapacityMetricSources): CapacityMetrics {
  const registers = [registry];
  const gauge = (name: string, help: string, read: () => number | null | undefined) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        const value = read();
        this.set(value === null || value === undefined || !Number.isFinite(value) ? 0 : value);
      },
    });
  const secs = (ms: number | null | undefined) => (ms === null || ms === undefined ? undefined : ms / 1000);

  gauge(
    CAPACITY_METRIC_NAMES.limit,
    "Capacity limit in force (adaptive mode: the controller's, bounded by the workers).",
    () => sources.limit(),
  );
  gauge(CAPACITY_METRIC_NAMES.tpotP90, "Adaptive: p90 time per output token of the last window.", () =>
    secs(sources.adaptive()?.tpotP90Ms),
  );
  gauge(CAPACITY_METRIC_NAMES.tpotBaseline, "Adaptive: the time-per-output-token baseline.", () =>
    secs(sources.adaptive()?.tpotBaselineMs),
  );
  gauge(
    CAPACITY_METRIC_NAMES.ttftP90,
    "Adaptive: p90 time to first token (from dispatch) of the last window.",
    () => secs(sources.adaptive()?.ttftP90Ms),
  );
  gauge(
    CAPACITY_METRIC_NAMES.ttftRatio,
    "Adaptive: worst prompt-length bucket's TTFT p90 over its baseline.",
    () => sources.adaptive()?.ttftRatio,
  );
  gauge(
    CAPACITY_METRIC_NAMES.latencyRatio,
    "Adaptive: max(TPOT, TTFT) ratio to baseline; the gradient is its inverse.",
    () => sources.adaptive()?.ratio,
  );
  new Counter({
    name: CAPACITY_METRIC_NAMES.adjustments,
    help: "Adaptive capacity moves by direction (increase, decrease).",
    labelNames: ["direction"] as const,
    registers,
    collect() {
      const a = sources.adjustments();
      this.reset();
      this.inc({ direction: "increase" }, a?.increase ?? 0);
      this.inc({ direction: "decrease" }, a?.decrease ?? 0);
    },
  });
  const shed = new Counter({
    name: CAPACITY_METRIC_NAMES.shed,
    help: "Requests refused at the door with 503 load_shed, by effective class and reason (level, codel, keyed).",
    labelNames: ["class", "reason"] as const,
    registers,
  });
  for (const cls of PRIORITY_CLASSES) for (const reason of SHED_REASONS) shed.inc({ class: cls, reason }, 0);
  gauge(
    CAPACITY_METRIC_NAMES.shedThreshold,
    "Prioritized shedding: arrivals below this level are refused (0: none).",
    () => sources.shedding()?.prioritized?.threshold,
  );
  gauge(
    CAPACITY_METRIC_NAMES.predictedWait,
    "Prioritized shedding: predicted queue wait (queued / completions per second).",
    () => secs(sources.shedding()?.prioritized?.predictedWaitMs),
  );
  gauge(
    CAPACITY_METRIC_NAMES.keyedPercent,
    "Keyed shedding: percentage of keys admitted (100: no shedding).",
    () => {
      const keyed = sources.shedding()?.keyed;
      return keyed === null || keyed === undefined ? 100 : keyed.percent;
    },
  );

  // Label children per class and reason, so counting a shed request builds no label set.
  const children = new Map<string, { inc(): void }>();
  return {
    countShed(cls, reason) {
      const key = `${cls}:${reason}`;
      let child = children.get(key);
      if (child === undefined) {
        child = shed.labels(cls, reason);
        children.set(key, child);
      }
      child.inc();
    },
  };
}

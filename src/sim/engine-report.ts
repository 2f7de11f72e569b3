/**
 * What the engine itself saw (issue 39, "Proof"): per window, how long requests queued inside the
 * workers, how full their KV caches were while sluice had work queued, how often a full cache made
 * a worker preempt and recompute, the interactive TTFT p99 and goodput. Queueing belongs in sluice,
 * where priority and fairness apply; these figures say how much of it leaked into the engine.
 */
import { CLASS_RANK, PRIORITY_CLASSES, type PriorityClass } from "@sluice/scheduler/core/class.js";
import { meetsSlo } from "./capacity-report.js";
import { type Latency, latency, round } from "./report.js";
import type { RunResult } from "./run.js";
import type { Scenario } from "./scenario.js";

export interface EngineWindow {
  /** Requests (arriving in the window) whose last attempt reached a worker. */
  dispatched: number;
  /** Time those spent queued inside their worker (its waiting queue, preemptions included), ms. */
  queue_ms: Latency;
  /** Per class present: the p99 of that queue time, ms. */
  queue_p99_ms_by_class: Partial<Record<PriorityClass, number | null>>;
  /** Interactive TTFT p99 (arrival to first token), ms; null without interactive requests. */
  interactive_ttft_p99_ms: number | null;
  /** queue_ms.p99 / interactive_ttft_p99_ms (target <= 0.05). */
  queue_ttft_ratio: number | null;
  /** Time with work queued at the gateway (sluice saturated), s, sampled at each bucket's end. */
  saturated_s: number;
  /** Mean KV occupancy / KV capacity over the healthy workers, over those samples (target >= 0.7). */
  kv_utilization_at_saturation: number | null;
  /** Preemptions inside the workers on a full KV cache (each one a recompute of the request). */
  preemptions: number;
  /** Requests preempted inside a worker at least once. */
  preempted_requests: number;
  /** preemptions / dispatched (target <= 0.01). */
  preemption_share: number | null;
  /** Requests completed within their class's SLO, per second of the window. */
  goodput_rps: number;
}

/** The engine's figures over requests arriving in [fromMs, toMs) and buckets ending in (fromMs, toMs]. */
export function engineWindow(scenario: Scenario, run: RunResult, fromMs: number, toMs: number): EngineWindow {
  const log = run.log;
  const interactive = CLASS_RANK.interactive;
  const queue: number[] = [];
  const byClass: number[][] = PRIORITY_CLASSES.map(() => []);
  const ttft: number[] = [];
  let preemptions = 0;
  let preempted = 0;
  let good = 0;
  let seenInteractive = false;
  for (let i = 0; i < log.size; i++) {
    const a = log.arrival[i]!;
    if (a < fromMs || a >= toMs) continue;
    const cls = log.cls[i]!;
    if (cls === interactive) {
      seenInteractive = true;
      ttft.push(log.ttft[i]!);
    }
    if (meetsSlo(scenario, log, i)) good++;
    const q = log.engineQueue[i]!;
    if (Number.isNaN(q)) continue;
    queue.push(q);
    byClass[cls]!.push(q);
    const n = log.enginePreemptions[i]!;
    preemptions += n;
    if (n > 0) preempted++;
  }
  const queueMs = latency(Float64Array.from(queue));
  const queueByClass: EngineWindow["queue_p99_ms_by_class"] = {};
  PRIORITY_CLASSES.forEach((c, r) => {
    if (byClass[r]!.length > 0) queueByClass[c] = latency(Float64Array.from(byClass[r]!)).p99;
  });
  const ttftP99 = seenInteractive ? latency(Float64Array.from(ttft)).p99 : null;
  const { samples, kv } = saturatedKv(scenario, run, fromMs, toMs);
  const spanS = Math.max(0.001, (Math.min(toMs, scenario.durationMs) - fromMs) / 1000);
  return {
    dispatched: queue.length,
    queue_ms: queueMs,
    queue_p99_ms_by_class: queueByClass,
    interactive_ttft_p99_ms: ttftP99,
    queue_ttft_ratio:
      queueMs.p99 === null || ttftP99 === null || ttftP99 <= 0 ? null : round(queueMs.p99 / ttftP99, 4),
    saturated_s: round((samples * scenario.bucketMs) / 1000, 1),
    kv_utilization_at_saturation: samples > 0 ? round(kv / samples, 4) : null,
    preemptions,
    preempted_requests: preempted,
    preemption_share: queue.length > 0 ? round(preemptions / queue.length, 4) : null,
    goodput_rps: round(good / spanS),
  };
}

/**
 * The buckets ending in the window with requests queued at the gateway (any class, any pool): how
 * many, and the sum of the workers' mean KV occupancy at their ends.
 */
function saturatedKv(
  scenario: Scenario,
  run: RunResult,
  fromMs: number,
  toMs: number,
): { samples: number; kv: number } {
  const s = run.series;
  let samples = 0;
  let kv = 0;
  for (let b = 0; b < s.kv.length; b++) {
    const end = (b + 1) * scenario.bucketMs;
    if (end <= fromMs || end > toMs) continue;
    let queued = 0;
    for (const c of s.classes) queued += c.queued[b] ?? 0;
    if (queued === 0) continue;
    samples++;
    kv += s.kv[b] ?? 0;
  }
  return { samples, kv };
}

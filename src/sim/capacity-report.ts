/**
 * The report's capacity measures (issue 12: adaptive capacity and shedding), per window (the whole
 * run, then each phase), for every policy alike, static or adaptive:
 * - the limit: when it converged (stays within ±20% of its final median, the median over the
 *   window's second half), that median, its range, and the adaptive controller's TPOT baseline;
 * - goodput after convergence: requests arriving after the limit converged that completed within
 *   their class's SLO (`slo:`: TTFT from arrival, mean TPOT, end to end), per second;
 * - per class: the share of SLO windows (report.slo_window, 10 s) after convergence whose p99 TPOT
 *   is within the class's `tpot_ms`, the share shed at the door, and the requests shed in a report
 *   bucket in which a lower class got in (shed_inversions: 0 is "nothing shed while a lower class
 *   was let in").
 */
import { classOfRank, PRIORITY_CLASSES, type PriorityClass } from "@sluice/scheduler/core/class.js";
import { OUTCOME_INDEX, type RequestLog } from "./log.js";
import type { RunResult } from "./run.js";
import type { Scenario } from "./scenario.js";

interface CapacityClassWindow {
  goodput_rps: number;
  /** SLO windows after convergence with p99 TPOT within the class's tpot_ms, of those with a sample. */
  tpot_slo_attainment: number | null;
  slo_windows: number;
  shed_fraction: number | null;
  shed_inversions: number;
}

export interface CapacityWindow {
  from_s: number;
  to_s: number;
  /** Seconds from the window's start until the limit stays within ±20% of its final median. */
  convergence_s: number | null;
  limit: { final_median: number; min: number; max: number } | null;
  /** Median over the window of the TPOT baseline (adaptive runs; at each bucket, the workers' median). */
  tpot_baseline_ms: number | null;
  /** Requests arriving after convergence that met their class's SLO, per second, all classes. */
  goodput_rps: number;
  /** p99 TPOT of every request arriving in the window. */
  tpot_p99_ms: number | null;
  classes: Partial<Record<PriorityClass, CapacityClassWindow>>;
}

export interface SloWindows {
  window_s: number;
  t: number[];
  /** Per class, per window of completions: p99 TPOT (null: no sample) and completions. */
  classes: Partial<Record<PriorityClass, { tpot_p99_ms: (number | null)[]; completed: number[] }>>;
}

/** The band around the final median a converged limit stays in. */
const CONVERGENCE_BAND = 0.2;

function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  const r = Math.round(x * f) / f;
  return Object.is(r, -0) ? 0 : r;
}

/** Nearest-rank percentile of a sorted array. */
function rank(sorted: ArrayLike<number>, p: number): number {
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]!;
}

function median(values: number[]): number | null {
  const v = values.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  return v.length === 0 ? null : rank(v, 0.5);
}

/** Completed within its class's SLO (TTFT from arrival, mean TPOT, end to end). */
export function meetsSlo(scenario: Scenario, log: RequestLog, i: number): boolean {
  if (log.outcome[i] !== OUTCOME_INDEX.ok) return false;
  const slo = scenario.slo[classOfRank(log.cls[i]!)];
  const tpot = log.tpot[i]!;
  return (
    (slo.ttftMs === undefined || log.ttft[i]! <= slo.ttftMs) &&
    (slo.tpotMs === undefined || Number.isNaN(tpot) || tpot <= slo.tpotMs) &&
    (slo.e2eMs === undefined || log.e2e[i]! <= slo.e2eMs)
  );
}

/**
 * Convergence of a limit sampled once per bucket: the final median is the median over the second
 * half; convergence is the end of the last bucket outside ±20% of it (0 when none is).
 */
export function convergence(
  values: number[],
  bucketS: number,
): { convergence_s: number; final_median: number; min: number; max: number } | null {
  if (values.length === 0) return null;
  const med = median(values.slice(Math.floor(values.length / 2)))!;
  let last = -1;
  for (let i = 0; i < values.length; i++) {
    if (Math.abs(values[i]! - med) > CONVERGENCE_BAND * med) last = i;
  }
  return {
    convergence_s: round((last + 1) * bucketS),
    final_median: med,
    min: Math.min(...values),
    max: Math.max(...values),
  };
}

/** p99 TPOT per class per SLO window, by completion time. */
export function sloWindows(scenario: Scenario, run: RunResult, present: PriorityClass[]): SloWindows {
  const log = run.log;
  const w = scenario.sloWindowMs;
  const n = Math.ceil(run.endMs / w);
  const samples = present.map(() => Array.from({ length: n }, () => [] as number[]));
  for (let i = 0; i < log.size; i++) {
    if (log.outcome[i] !== OUTCOME_INDEX.ok || Number.isNaN(log.tpot[i]!)) continue;
    const k = present.indexOf(classOfRank(log.cls[i]!));
    const b = Math.min(n - 1, Math.floor((log.arrival[i]! + log.e2e[i]!) / w));
    samples[k]![b]!.push(log.tpot[i]!);
  }
  const classes: SloWindows["classes"] = {};
  present.forEach((c, k) => {
    classes[c] = {
      tpot_p99_ms: samples[k]!.map((s) =>
        s.length === 0
          ? null
          : round(
              rank(
                s.sort((a, b) => a - b),
                0.99,
              ),
            ),
      ),
      completed: samples[k]!.map((s) => s.length),
    };
  });
  return { window_s: w / 1000, t: Array.from({ length: n }, (_, i) => round((i * w) / 1000)), classes };
}

/** The capacity measures over one window [fromMs, toMs) of the arrivals (toMs capped at the duration). */
export function capacityWindow(
  scenario: Scenario,
  run: RunResult,
  present: PriorityClass[],
  slo: SloWindows,
  fromMs: number,
  toMsRaw: number,
): CapacityWindow {
  const toMs = Math.min(toMsRaw, scenario.durationMs);
  const bucketMs = scenario.bucketMs;
  const s = run.series;
  const first = Math.ceil(fromMs / bucketMs);
  const last = Math.ceil(toMs / bucketMs); // exclusive
  const limits: number[] = [];
  const baselines: number[] = [];
  for (let b = first; b < last && b < s.capacity.length; b++) {
    limits.push(s.capacity[b] ?? 0);
    if (s.tpotBaseline[b] !== undefined) baselines.push(s.tpotBaseline[b]!);
  }
  const conv = convergence(limits, bucketMs / 1000);
  const settled = fromMs + (conv?.convergence_s ?? 0) * 1000;
  const spanS = Math.max(0.001, (toMs - settled) / 1000);
  const log = run.log;
  const good = new Array<number>(PRIORITY_CLASSES.length).fill(0);
  const requests = new Array<number>(PRIORITY_CLASSES.length).fill(0);
  const shed = new Array<number>(PRIORITY_CLASSES.length).fill(0);
  const tpots: number[] = [];
  for (let i = 0; i < log.size; i++) {
    const a = log.arrival[i]!;
    if (a < fromMs || a >= toMs) continue;
    const r = log.cls[i]!;
    requests[r]!++;
    if (log.outcome[i] === OUTCOME_INDEX.load_shed) shed[r]!++;
    if (!Number.isNaN(log.tpot[i]!)) tpots.push(log.tpot[i]!);
    if (a >= settled && meetsSlo(scenario, log, i)) good[r]!++;
  }
  tpots.sort((x, y) => x - y);
  const classes: CapacityWindow["classes"] = {};
  for (const c of present) {
    const r = PRIORITY_CLASSES.indexOf(c);
    // SLO windows wholly after convergence and inside the window.
    const target = scenario.slo[c].tpotMs;
    const p99s = slo.classes[c]!.tpot_p99_ms;
    const w = scenario.sloWindowMs;
    let windows = 0;
    let within = 0;
    for (let k = Math.ceil(settled / w); (k + 1) * w <= toMs && k < p99s.length; k++) {
      const v = p99s[k];
      if (v === null || v === undefined) continue;
      windows++;
      if (target !== undefined && v <= target) within++;
    }
    let inversions = 0;
    const cs = s.classes[r]!;
    for (let b = first; b < last; b++) {
      const n = cs.shed[b] ?? 0;
      if (n === 0) continue;
      let lower = 0;
      for (let q = 0; q < r; q++) lower += s.classes[q]!.passed[b] ?? 0;
      if (lower > 0) inversions += n;
    }
    classes[c] = {
      goodput_rps: round(good[r]! / spanS),
      tpot_slo_attainment: target === undefined || windows === 0 ? null : round(within / windows, 4),
      slo_windows: windows,
      shed_fraction: requests[r]! > 0 ? round(shed[r]! / requests[r]!, 4) : null,
      shed_inversions: inversions,
    };
  }
  const baseline = median(baselines);
  return {
    from_s: round(fromMs / 1000),
    to_s: round(toMs / 1000),
    convergence_s: conv?.convergence_s ?? null,
    limit: conv && { final_median: conv.final_median, min: conv.min, max: conv.max },
    tpot_baseline_ms: baseline === null ? null : round(baseline),
    goodput_rps: round(good.reduce((x, y) => x + y, 0) / spanS),
    tpot_p99_ms: tpots.length === 0 ? null : round(rank(tpots, 0.99)),
    classes,
  };
}

/**
 * Turns runs into the report: per class and per tenant counts, rates, goodput and latency
 * percentiles (overall and per phase), fairness per class (token shares against weights, Jain's
 * index, the largest service gap beside the VTC bound), the lower classes' entitlement, worker
 * figures, the scenario's expectations checked, and the per-bucket time series; with several model
 * pools, the same per pool (admissions, queue wait, goodput, its queue over time).
 * Every number is rounded so the JSON is compact; nothing in it depends on wall time.
 */

import {
  CLASS_COUNT,
  classOfRank,
  PRIORITY_CLASSES,
  type PriorityClass,
} from "@sluice/scheduler/core/class.js";
import type { AdaptiveLimitSnapshot } from "../capacity/adaptive-limit.js";
import type { LoadSheddingStatus } from "../shedding/load-shedding.js";
import {
  type CapacityWindow,
  capacityWindow,
  meetsSlo,
  type SloWindows,
  sloWindows,
} from "./capacity-report.js";
import { type EngineWindow, engineWindow } from "./engine-report.js";
import { SUSTAINED_STRETCH_MS, stretchTime } from "./fairness.js";
import { OUTCOME_INDEX, OUTCOMES, type Outcome, REJECTIONS as REJECTION_CODES } from "./log.js";
import { type RunResult, tenantClasses, tenantWeight, windowsOf } from "./run.js";
import type { Expectation, PolicyName, Scenario } from "./scenario.js";

const REPORT_VERSION = 1;

export function round(x: number, digits = 3): number {
  if (!Number.isFinite(x)) return x;
  const f = 10 ** digits;
  const r = Math.round(x * f) / f;
  return Object.is(r, -0) ? 0 : r;
}

export interface Latency {
  n: number;
  mean: number | null;
  p50: number | null;
  p90: number | null;
  p99: number | null;
  max: number | null;
}

/** Nearest-rank percentiles over the finite values. */
export function latency(values: Float64Array): Latency {
  const v = values.filter((x) => !Number.isNaN(x)).sort();
  const n = v.length;
  if (n === 0) return { n, mean: null, p50: null, p90: null, p99: null, max: null };
  const at = (p: number) => round(v[Math.max(0, Math.ceil(p * n) - 1)]!);
  let sum = 0;
  for (let i = 0; i < n; i++) sum += v[i]!;
  return { n, mean: round(sum / n), p50: at(0.5), p90: at(0.9), p99: at(0.99), max: round(v[n - 1]!) };
}

/** Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 is perfectly even. */
export function jain(xs: number[]): number | null {
  if (xs.length === 0) return null;
  let s = 0;
  let s2 = 0;
  for (const x of xs) {
    s += x;
    s2 += x * x;
  }
  return s2 > 0 ? (s * s) / (xs.length * s2) : null;
}

interface GroupStats {
  requests: number;
  completed: number;
  rejected: Partial<Record<Outcome, number>>;
  failed: Partial<Record<Outcome, number>>;
  unfinished: number;
  throughput_rps: number;
  tokens_per_s: number;
  goodput_rps: number;
  goodput_tokens_per_s: number;
  slo_attainment: number | null;
  queue_wait_ms: Latency;
  ttft_ms: Latency;
  tpot_ms: Latency;
  e2e_ms: Latency;
  /**
   * Completed answers: |predicted − actual| / actual output tokens, the gateway's predictor
   * (accounting/output-prediction.ts) on the simulated clock; answers stopped at max_tokens left out.
   */
  output_prediction_error: Latency;
}

interface FairnessReport {
  tenants: Record<string, { weight: number; tokens: number; share: number | null; expected_share: number }>;
  backlogged_s: number;
  share_error: number | null;
  jain_index: number | null;
  service_gap: number;
  service_gap_between: [string, string] | null;
  /** The largest estimated cost of one request (L) and the most estimated tokens in flight (M). */
  vtc_l: number;
  vtc_m: number;
  vtc_bound: number;
  service_gap_vtc_ratio: number | null;
  /** The shares over the backlogged stretches of at least 10 s alone (SUSTAINED_STRETCH_MS). */
  sustained: { backlogged_s: number; shares: Record<string, number | null>; share_error: number | null };
}

export interface ExpectationResult {
  label: string;
  metric: string;
  class: PriorityClass | null;
  during: string | null;
  relative_to: string | null;
  min: number | null;
  max: number | null;
  value: number | null;
  pass: boolean;
  /** Present when the expectation names a model: measured in its pool. */
  model?: string;
}

/** A group's figures with the requests its admission gate let in (fast or after queueing). */
export type PoolStats = GroupStats & { admitted: number };

interface ControllerReport {
  limit: number;
  phase: string;
  tpot_baseline_ms: number | null;
  windows: number;
  increases: number;
  decreases: number;
  overload_decreases: number;
  slo_decreases: number;
  /** Cuts the engine's own signals asked for (its waiting queue, its KV use over target). */
  engine_decreases: number;
  /** Cuts of the knee search (no tpot_slo_ms): a raise that lost throughput, or a probe below. */
  knee_decreases: number;
}

/** One model pool under one policy (reports of scenarios with several pools). */
export interface PoolReport extends PoolStats {
  models: string[];
  /** Requests each of its workers received, by the model they asked for. */
  workers: Record<string, Record<string, number>>;
  classes: Partial<Record<PriorityClass, PoolStats>>;
  phases: Record<string, PoolStats & { classes: Partial<Record<PriorityClass, PoolStats>> }>;
  /** Per window (`all`, then each phase) and class with two tenants or more in the pool. */
  fairness: Record<string, Partial<Record<PriorityClass, FairnessReport>>>;
  /** Most requests queued for admission at a bucket's end. */
  queued_max: number;
  /** The pool's own capacity controller (sluice policies in adaptive mode), else null. */
  controller: ControllerReport | null;
  timeseries: { capacity: number[]; inflight: number[]; queued: number[] };
}

export interface PolicyReport {
  totals: GroupStats;
  classes: Partial<
    Record<
      PriorityClass,
      GroupStats & {
        starvation_promotions: number;
        /** Attempts clients re-sent after a refusal (tenants' `retry`). */
        retries: number;
        /** Prefill tokens the workers had computed for requests the scheduler then preempted. */
        preempted_prefill_tokens: number;
      }
    >
  >;
  tenants: Record<string, GroupStats & { weight: number; key: string }>;
  phases: Record<
    string,
    { from_s: number; to_s: number | null; classes: Partial<Record<PriorityClass, GroupStats>> }
  >;
  fairness: Record<string, Partial<Record<PriorityClass, FairnessReport>>>;
  entitlement: Record<string, Partial<Record<PriorityClass, number | null>>>;
  workers: {
    name: string;
    completed: number;
    kv_preemptions: number;
    kv_peak_tokens: number;
    /** Prompt tokens found in its prefix cache, and tokens its own KV preemptions made it compute again. */
    cached_prompt_tokens: number;
    recomputed_tokens: number;
    /** Time requests spent queued inside the worker, summed (ms), and the most queued there at once. */
    engine_wait_ms: number;
    engine_waiting_peak: number;
    busy_fraction: number;
    prefill_tokens: number;
    decode_tokens: number;
  }[];
  clamps: number;
  /** How capacity was set (static, or the adaptive controller) and what it did; shedding's counters. */
  capacity: {
    mode: "static" | "adaptive";
    windows: Record<string, CapacityWindow>;
    controller: ControllerReport | null;
    shedding: LoadSheddingStatus | null;
  };
  /**
   * Per window (`all`, then each phase): queueing inside the workers, their KV utilization while
   * sluice had work queued, their own preemptions, interactive TTFT p99 and goodput (engine-report.ts).
   */
  engine: Record<string, EngineWindow>;
  /** Per model pool, when the workers form more than one. */
  pools?: Record<string, PoolReport>;
  expectations: ExpectationResult[];
  timeseries: {
    bucket_s: number;
    t: number[];
    capacity: number[];
    kv_occupancy: number[];
    classes: Partial<
      Record<
        PriorityClass,
        {
          arrivals: number[];
          admitted: number[];
          completed: number[];
          rejected: number[];
          inflight: number[];
          queued: number[];
          wait_max_ms: number[];
          wait_mean_ms: number[];
          shed: number[];
        }
      >
    >;
    tenants: Record<string, { tokens_per_s: number[] }>;
    /** Adaptive runs: the workers' TPOT baselines and last TPOT p90s at each bucket's end (their medians). */
    tpot_baseline_ms?: (number | null)[];
    tpot_p90_ms?: (number | null)[];
    slo_windows: SloWindows;
  };
}

export interface Report {
  version: number;
  scenario: {
    name: string;
    file: string;
    description: string;
    seed: number;
    duration_s: number;
    workers: { name: string; profile: string; max_running: number; kv_tokens: number }[];
    capacity: number;
    routing: string;
    tenants: { name: string; key: string; weight: number; classes: PriorityClass[] }[];
    /** The model pools, when the workers form more than one: their models, workers and tenants. */
    pools?: { name: string; models: string[]; workers: string[]; tenants: string[] }[];
    phases: { name: string; from_s: number; to_s: number | null }[];
    policies: PolicyName[];
    /** Per class: what counts as goodput (TTFT from arrival, mean TPOT, end to end, ms). */
    slo: Partial<Record<PriorityClass, { ttft_ms?: number; tpot_ms?: number; e2e_ms?: number }>>;
    /** Capacity for the sluice policies (sluice-adaptive always adaptive) and shedding, as configured. */
    capacity_settings: {
      mode: "static" | "adaptive";
      adaptive_min_capacity: number;
      adaptive_max_capacity: number;
      tpot_slo_ms: number | null;
      ttft_slo_ms: number | null;
      load_shedding: boolean;
      keyed_shedding: boolean;
    };
  };
  policies: Partial<Record<PolicyName, PolicyReport>>;
}

function groupStats(
  run: RunResult,
  scenario: Scenario,
  pick: (i: number) => boolean,
  durationS: number,
): GroupStats {
  const log = run.log;
  let requests = 0;
  let completed = 0;
  let tokens = 0;
  let good = 0;
  let goodTokens = 0;
  let unfinished = 0;
  const counts = new Array<number>(OUTCOMES.length).fill(0);
  const idx: number[] = [];
  for (let i = 0; i < log.size; i++) {
    if (!pick(i)) continue;
    idx.push(i);
    requests++;
    const o = log.outcome[i]!;
    counts[o]!++;
    if (o === OUTCOME_INDEX.unfinished) unfinished++;
    if (o !== OUTCOME_INDEX.ok) continue;
    completed++;
    const t = log.prompt[i]! + log.output[i]!;
    tokens += t;
    if (meetsSlo(scenario, log, i)) {
      good++;
      goodTokens += t;
    }
  }
  const col = (a: Float64Array) => Float64Array.from(idx, (i) => a[i]!);
  const rejected: Partial<Record<Outcome, number>> = {};
  const failed: Partial<Record<Outcome, number>> = {};
  OUTCOMES.forEach((o, k) => {
    if (counts[k] === 0 || o === "ok" || o === "unfinished") return;
    if ((REJECTION_CODES as readonly string[]).includes(o)) rejected[o] = counts[k]!;
    else failed[o] = counts[k]!;
  });
  return {
    requests,
    completed,
    rejected,
    failed,
    unfinished,
    throughput_rps: round(completed / durationS),
    tokens_per_s: round(tokens / durationS, 1),
    goodput_rps: round(good / durationS),
    goodput_tokens_per_s: round(goodTokens / durationS, 1),
    slo_attainment: requests > 0 ? round(good / requests, 4) : null,
    queue_wait_ms: latency(col(log.wait)),
    ttft_ms: latency(col(log.ttft)),
    tpot_ms: latency(col(log.tpot)),
    e2e_ms: latency(col(log.e2e)),
    output_prediction_error: latency(col(log.predictionError)),
  };
}

/** Fairness in one group: `group` indexes run.groups (pool * CLASS_COUNT + class rank). */
function fairnessOf(
  run: RunResult,
  scenario: Scenario,
  windowIndex: number,
  group: number,
): FairnessReport | undefined {
  const g = run.groups[group]!;
  if (g.members.length < 2) return undefined;
  const w = g.windows[windowIndex]!;
  const names = g.members.map((t) => scenario.tenants[t]!.name);
  const service = g.spreadService(w.window);
  const total = service.reduce((a, b) => a + b, 0);
  const wsum = g.weights.reduce((a, b) => a + b, 0);
  const tenants: FairnessReport["tenants"] = {};
  let err: number | null = total > 0 ? 0 : null;
  const perWeight: number[] = [];
  g.members.forEach((_, m) => {
    const expected = g.weights[m]! / wsum;
    const share = total > 0 ? service[m]! / total : null;
    if (share !== null && err !== null) err = Math.max(err, Math.abs(share / expected - 1));
    perWeight.push(service[m]! / g.weights[m]!);
    tenants[names[m]!] = {
      weight: g.weights[m]!,
      tokens: Math.round(service[m]!),
      share: share === null ? null : round(share, 4),
      expected_share: round(expected, 4),
    };
  });
  const long = g.spreadService(w.window, SUSTAINED_STRETCH_MS);
  const longTotal = long.reduce((a, b) => a + b, 0);
  const shares: Record<string, number | null> = {};
  let longErr: number | null = longTotal > 0 ? 0 : null;
  g.members.forEach((_, m) => {
    const share = longTotal > 0 ? long[m]! / longTotal : null;
    shares[names[m]!] = share === null ? null : round(share, 4);
    if (share !== null && longErr !== null)
      longErr = Math.max(longErr, Math.abs(share / (g.weights[m]! / wsum) - 1));
  });
  const sustained = {
    backlogged_s: round(stretchTime(g.stretches, w.window, SUSTAINED_STRETCH_MS) / 1000, 1),
    shares,
    share_error: longErr === null ? null : round(longErr, 4),
  };
  const gap = w.largestGap();
  const wmin = Math.min(...g.weights);
  const bound = (2 * (g.maxEstimate + g.maxInflightEstimate)) / wmin;
  const j = total > 0 ? jain(perWeight) : null;
  return {
    tenants,
    backlogged_s: round(w.backloggedMs / 1000, 1),
    share_error: err === null ? null : round(err, 4),
    jain_index: j === null ? null : round(j, 4),
    service_gap: Math.round(gap.gap),
    service_gap_between: gap.a >= 0 ? [names[gap.a]!, names[gap.b]!] : null,
    vtc_l: g.maxEstimate,
    vtc_m: g.maxInflightEstimate,
    vtc_bound: Math.round(bound),
    service_gap_vtc_ratio: bound > 0 ? round(gap.gap / bound, 4) : null,
    sustained,
  };
}

function evaluate(e: Expectation, r: PolicyReport, pool: PoolReport | undefined): ExpectationResult {
  let value = measure(e.metric, e.cls, e.during, r, pool);
  if (e.relativeTo !== undefined && value !== null) {
    const base = measure(e.metric, e.cls, e.relativeTo === "all" ? undefined : e.relativeTo, r, pool);
    value = base === null || base === 0 ? null : round(value / base, 4);
  }
  const pass =
    value !== null && (e.min === undefined || value >= e.min) && (e.max === undefined || value <= e.max);
  return {
    label: e.label,
    metric: e.metric,
    class: e.cls ?? null,
    during: e.during ?? null,
    relative_to: e.relativeTo ?? null,
    min: e.min ?? null,
    max: e.max ?? null,
    value,
    pass,
    ...(e.model !== undefined ? { model: e.model } : {}),
  };
}

/** What a metric reads, for one class (or the fleet) over one window. */
interface Measured {
  stats: GroupStats | undefined;
  fair: FairnessReport | undefined;
  cap: CapacityWindow | undefined;
  capClass: CapacityWindow["classes"][PriorityClass];
  entitlement: number | null | undefined;
  fleet: boolean;
}

const MEASURES: Record<Expectation["metric"], (m: Measured) => number | null | undefined> = {
  weighted_share_error: (m) => m.fair?.share_error,
  jain_index: (m) => m.fair?.jain_index,
  service_gap_vtc_ratio: (m) => m.fair?.service_gap_vtc_ratio,
  queue_wait_p99_ms: (m) => m.stats?.queue_wait_ms.p99,
  queue_wait_p50_ms: (m) => m.stats?.queue_wait_ms.p50,
  ttft_p99_ms: (m) => m.stats?.ttft_ms.p99,
  e2e_p99_ms: (m) => m.stats?.e2e_ms.p99,
  rejected_fraction: ({ stats }) => {
    if (!stats || stats.requests === 0) return null;
    const sum = (o: Partial<Record<Outcome, number>>) => Object.values(o).reduce((a, b) => a + (b ?? 0), 0);
    return round((sum(stats.rejected) + sum(stats.failed) + stats.unfinished) / stats.requests, 4);
  },
  slo_attainment: (m) => m.stats?.slo_attainment,
  entitlement_ratio: (m) => m.entitlement,
  goodput_rps: (m) => (m.fleet ? m.cap?.goodput_rps : m.capClass?.goodput_rps),
  tpot_p99_ms: (m) => (m.fleet ? m.cap?.tpot_p99_ms : m.stats?.tpot_ms.p99),
  tpot_slo_attainment: (m) => m.capClass?.tpot_slo_attainment,
  shed_fraction: (m) => m.capClass?.shed_fraction,
  shed_inversions: (m) => m.capClass?.shed_inversions,
  convergence_secs: (m) => m.cap?.convergence_s,
  limit_median: (m) => m.cap?.limit?.final_median,
  tpot_baseline_ms: (m) => m.cap?.tpot_baseline_ms,
};

/**
 * A metric's value for one class (or the fleet) over a window (a phase, or the whole run); with a
 * pool, for the class (or all its classes) in that pool.
 */
function measure(
  metric: Expectation["metric"],
  cls: PriorityClass | undefined,
  during: string | undefined,
  r: PolicyReport,
  pool?: PoolReport | undefined,
): number | null {
  const win = during ?? "all";
  const cap = r.capacity.windows[win];
  if (pool !== undefined) {
    const scope = during === undefined ? pool : pool.phases[during];
    const stats = cls === undefined ? scope : scope?.classes[cls];
    const fair = cls === undefined ? undefined : pool.fairness[win]?.[cls];
    const m: Measured = {
      stats,
      fair,
      cap: undefined,
      capClass: undefined,
      entitlement: undefined,
      fleet: false,
    };
    return MEASURES[metric](m) ?? null;
  }
  const m: Measured =
    cls === undefined
      ? { stats: undefined, fair: undefined, cap, capClass: undefined, entitlement: undefined, fleet: true }
      : {
          stats: during ? r.phases[during]?.classes[cls] : r.classes[cls],
          fair: r.fairness[win]?.[cls],
          cap,
          capClass: cap?.classes[cls],
          entitlement: r.entitlement[win]?.[cls],
          fleet: false,
        };
  return MEASURES[metric](m) ?? null;
}

function policyReport(scenario: Scenario, run: RunResult): PolicyReport {
  const log = run.log;
  const durationS = scenario.durationMs / 1000;
  const windows = windowsOf(scenario);
  // A class is present when some pool's tenants send in it.
  const sent = (r: number) =>
    scenario.pools.some((_, k) => run.groups[k * CLASS_COUNT + r]!.members.length > 0);
  const classesPresent = PRIORITY_CLASSES.filter((_, r) => sent(r));
  const classes: PolicyReport["classes"] = {};
  for (const c of classesPresent) {
    const r = PRIORITY_CLASSES.indexOf(c);
    classes[c] = {
      ...groupStats(run, scenario, (i) => log.cls[i] === r, durationS),
      starvation_promotions: run.promotions[r] ?? 0,
      retries: run.retries[r] ?? 0,
      preempted_prefill_tokens: run.preemptedPrefillTokens[r] ?? 0,
    };
  }
  const tenants: PolicyReport["tenants"] = {};
  scenario.tenants.forEach((t, ti) => {
    tenants[t.name] = {
      key: t.key,
      weight: tenantWeight(scenario, t.key),
      ...groupStats(run, scenario, (i) => log.tenant[i] === ti, durationS),
    };
  });
  const phases: PolicyReport["phases"] = {};
  for (const ph of scenario.phases) {
    const to = Math.min(ph.toMs, scenario.durationMs);
    const span = Math.max(0.001, (to - ph.fromMs) / 1000);
    const pc: Partial<Record<PriorityClass, GroupStats>> = {};
    for (const c of classesPresent) {
      const r = PRIORITY_CLASSES.indexOf(c);
      pc[c] = groupStats(
        run,
        scenario,
        (i) => log.cls[i] === r && log.arrival[i]! >= ph.fromMs && log.arrival[i]! < ph.toMs,
        span,
      );
    }
    phases[ph.name] = {
      from_s: ph.fromMs / 1000,
      to_s: Number.isFinite(ph.toMs) ? ph.toMs / 1000 : null,
      classes: pc,
    };
  }
  const fairness: PolicyReport["fairness"] = {};
  const entitlement: PolicyReport["entitlement"] = {};
  windows.forEach((w, wi) => {
    // With several pools fairness is per pool (pools.<name>.fairness): tenants of different pools
    // never compete.
    const f: Partial<Record<PriorityClass, FairnessReport>> = {};
    for (let r = 0; r < CLASS_COUNT && scenario.pools.length === 1; r++) {
      const rep = fairnessOf(run, scenario, wi, r);
      if (rep) f[classOfRank(r)] = rep;
    }
    fairness[w.name] = f;
    const e: Partial<Record<PriorityClass, number | null>> = {};
    for (const x of run.entitlement) {
      if (x.window !== w.name || !sent(x.cls)) continue;
      e[classOfRank(x.cls)] = x.entitled > 0 ? round(x.inflight / x.entitled, 4) : null;
    }
    entitlement[w.name] = e;
  });
  const slo = sloWindows(scenario, run, classesPresent);
  const capWindows: PolicyReport["capacity"]["windows"] = {};
  const engine: PolicyReport["engine"] = {};
  for (const w of windows) {
    capWindows[w.name] = capacityWindow(scenario, run, classesPresent, slo, w.fromMs, w.toMs);
    engine[w.name] = engineWindow(scenario, run, w.fromMs, w.toMs);
  }
  // Per pool figures: reported with several pools, and read by expectations that name a model.
  const pools =
    scenario.pools.length > 1 || scenario.expectations.some((e) => e.model !== undefined)
      ? poolReports(scenario, run)
      : undefined;
  const poolOf = (model: string | undefined) =>
    model === undefined ? undefined : pools![scenario.pools.find((p) => p.models.includes(model))!.name];
  const report: PolicyReport = {
    totals: groupStats(run, scenario, () => true, durationS),
    classes,
    tenants,
    phases,
    fairness,
    entitlement,
    workers: run.workers.map((w) => ({
      name: w.name,
      completed: w.stats.completed,
      kv_preemptions: w.stats.kvPreemptions,
      kv_peak_tokens: w.stats.kvPeak,
      cached_prompt_tokens: w.stats.cachedTokens,
      recomputed_tokens: w.stats.recomputedTokens,
      engine_wait_ms: Math.round(w.stats.engineWaitMs),
      engine_waiting_peak: w.stats.engineWaitingPeak,
      busy_fraction: round(w.stats.busyMs / Math.max(1, run.endMs), 4),
      prefill_tokens: w.stats.prefillTokens,
      decode_tokens: w.stats.decodeTokens,
    })),
    clamps: run.clamps,
    capacity: {
      mode: run.capacity.mode,
      windows: capWindows,
      controller: controllerReport(run.capacity.controller),
      shedding: run.capacity.shedding ?? null,
    },
    engine,
    // Only with several pools, so a single-pool report keeps its exact shape.
    ...(scenario.pools.length > 1 ? { pools } : {}),
    expectations: [],
    timeseries: timeseries(scenario, run, classesPresent, slo),
  };

  report.expectations = scenario.expectations.map((e) => evaluate(e, report, poolOf(e.model)));
  return report;
}

function controllerReport(snap: AdaptiveLimitSnapshot | undefined): ControllerReport | null {
  if (!snap) return null;
  return {
    limit: snap.limit,
    phase: snap.phase,
    tpot_baseline_ms: snap.tpotBaselineMs === null ? null : round(snap.tpotBaselineMs),
    windows: snap.windows,
    increases: snap.increases,
    decreases: snap.decreases,
    overload_decreases: snap.overloadDecreases,
    slo_decreases: snap.sloDecreases,
    engine_decreases: snap.engineDecreases,
    knee_decreases: snap.kneeDecreases,
  };
}

function poolStats(
  run: RunResult,
  scenario: Scenario,
  pick: (i: number) => boolean,
  durationS: number,
): PoolStats {
  const wait = run.log.wait;
  let admitted = 0;
  for (let i = 0; i < run.log.size; i++) if (pick(i) && !Number.isNaN(wait[i]!)) admitted++;
  const { requests, ...rest } = groupStats(run, scenario, pick, durationS);
  return { requests, admitted, ...rest };
}

/** Per model pool: its requests' figures (overall, per class, per phase), its workers' models, its queue. */
function poolReports(scenario: Scenario, run: RunResult): Record<string, PoolReport> {
  const log = run.log;
  const durationS = scenario.durationMs / 1000;
  const out: Record<string, PoolReport> = {};
  scenario.pools.forEach((p, k) => {
    const present = PRIORITY_CLASSES.filter((_, r) => {
      for (let i = 0; i < log.size; i++) if (log.pool[i] === k && log.cls[i] === r) return true;
      return false;
    });
    const inPool = (i: number) => log.pool[i] === k;
    const perClass = (pick: (i: number) => boolean, spanS: number) => {
      const classes: Partial<Record<PriorityClass, PoolStats>> = {};
      for (const c of present) {
        const r = PRIORITY_CLASSES.indexOf(c);
        classes[c] = poolStats(run, scenario, (i) => pick(i) && log.cls[i] === r, spanS);
      }
      return classes;
    };
    const phases: PoolReport["phases"] = {};
    for (const ph of scenario.phases) {
      const to = Math.min(ph.toMs, scenario.durationMs);
      const span = Math.max(0.001, (to - ph.fromMs) / 1000);
      const pick = (i: number) => inPool(i) && log.arrival[i]! >= ph.fromMs && log.arrival[i]! < ph.toMs;
      phases[ph.name] = { ...poolStats(run, scenario, pick, span), classes: perClass(pick, span) };
    }
    const workers: PoolReport["workers"] = {};
    for (const w of p.workers) workers[run.workers[w]!.name] = run.workers[w]!.models;
    const fairness: PoolReport["fairness"] = {};
    windowsOf(scenario).forEach((w, wi) => {
      const f: Partial<Record<PriorityClass, FairnessReport>> = {};
      for (let r = 0; r < CLASS_COUNT; r++) {
        const rep = fairnessOf(run, scenario, wi, k * CLASS_COUNT + r);
        if (rep) f[classOfRank(r)] = rep;
      }
      fairness[w.name] = f;
    });
    const series = run.pools[k]!.series;
    const n = run.series.t.length;
    const fit = (a: number[]) => Array.from({ length: n }, (_, i) => a[i] ?? 0);
    out[p.name] = {
      models: [...p.models],
      workers,
      ...poolStats(run, scenario, inPool, durationS),
      classes: perClass(inPool, durationS),
      phases,
      fairness,
      queued_max: Math.max(0, ...series.queued),
      controller: controllerReport(run.pools[k]!.capacity?.controller),
      timeseries: {
        capacity: fit(series.capacity),
        inflight: fit(series.inflight),
        queued: fit(series.queued),
      },
    };
  });
  return out;
}

function timeseries(
  scenario: Scenario,
  run: RunResult,
  present: PriorityClass[],
  slo: SloWindows,
): PolicyReport["timeseries"] {
  const s = run.series;
  const n = s.t.length;
  const bucketS = scenario.bucketMs / 1000;
  const fit = (a: number[], f: (x: number) => number = (x) => x) =>
    Array.from({ length: n }, (_, i) => round(f(a[i] ?? 0)));
  const classes: PolicyReport["timeseries"]["classes"] = {};
  for (const c of present) {
    const x = s.classes[PRIORITY_CLASSES.indexOf(c)]!;
    classes[c] = {
      arrivals: fit(x.arrivals),
      admitted: fit(x.admitted),
      completed: fit(x.completed),
      rejected: fit(x.rejected),
      inflight: fit(x.inflight),
      queued: fit(x.queued),
      wait_max_ms: fit(x.waitMaxMs),
      wait_mean_ms: Array.from({ length: n }, (_, i) => {
        const k = x.admitted[i] ?? 0;
        return k > 0 ? round((x.waitSumMs[i] ?? 0) / k) : 0;
      }),
      shed: fit(x.shed),
    };
  }
  const tenants: PolicyReport["timeseries"]["tenants"] = {};
  scenario.tenants.forEach((t, i) => {
    tenants[t.name] = { tokens_per_s: fit(s.tenants[i]!.tokens, (x) => x / bucketS) };
  });
  const adaptive =
    run.capacity.mode === "adaptive"
      ? {
          tpot_baseline_ms: Array.from({ length: n }, (_, i) => nullable(s.tpotBaseline[i])),
          tpot_p90_ms: Array.from({ length: n }, (_, i) => nullable(s.tpotP90[i])),
        }
      : {};
  return {
    bucket_s: bucketS,
    t: Array.from({ length: n }, (_, i) => round(i * bucketS)),
    capacity: fit(s.capacity),
    kv_occupancy: fit(s.kv, (x) => round(x, 4)),
    classes,
    tenants,
    ...adaptive,
    slo_windows: slo,
  };
}

function nullable(x: number | undefined): number | null {
  return x === undefined || Number.isNaN(x) ? null : round(x);
}

export function buildReport(scenario: Scenario, runs: RunResult[]): Report {
  const classesOf = tenantClasses(scenario);
  const policies: Report["policies"] = {};
  for (const run of runs) policies[run.policy] = policyReport(scenario, run);
  const capacity = scenario.capacityPin ?? scenario.workers.reduce((s, w) => s + w.profile.maxRunning, 0);
  return {
    version: REPORT_VERSION,
    scenario: {
      name: scenario.name,
      file: scenario.file,
      description: scenario.description,
      seed: scenario.seed,
      duration_s: scenario.durationMs / 1000,
      workers: scenario.workers.map((w) => ({
        name: w.name,
        profile: w.profileName,
        max_running: w.profile.maxRunning,
        kv_tokens: w.profile.kvTokens,
      })),
      capacity,
      routing: scenario.routing,
      tenants: scenario.tenants.map((t, i) => ({
        name: t.name,
        key: t.key,
        weight: tenantWeight(scenario, t.key),
        classes: classesOf[i]!.map((r) => classOfRank(r)),
      })),
      ...(scenario.pools.length > 1
        ? {
            pools: scenario.pools.map((p) => ({
              name: p.name,
              models: [...p.models],
              workers: p.workers.map((w) => scenario.workers[w]!.name),
              tenants: scenario.tenants.filter((t) => p.models.includes(t.model)).map((t) => t.name),
            })),
          }
        : {}),
      phases: scenario.phases.map((p) => ({
        name: p.name,
        from_s: p.fromMs / 1000,
        to_s: Number.isFinite(p.toMs) ? p.toMs / 1000 : null,
      })),
      policies: runs.map((r) => r.policy),
      slo: Object.fromEntries(
        PRIORITY_CLASSES.filter((c) => Object.values(scenario.slo[c]).some((v) => v !== undefined)).map(
          (c) => {
            const x = scenario.slo[c];
            const out: { ttft_ms?: number; tpot_ms?: number; e2e_ms?: number } = {};
            if (x.ttftMs !== undefined) out.ttft_ms = x.ttftMs;
            if (x.tpotMs !== undefined) out.tpot_ms = x.tpotMs;
            if (x.e2eMs !== undefined) out.e2e_ms = x.e2eMs;
            return [c, out];
          },
        ),
      ),
      capacity_settings: {
        mode: scenario.capacity.mode,
        adaptive_min_capacity: scenario.capacity.minCapacity,
        adaptive_max_capacity: scenario.capacity.maxCapacity,
        tpot_slo_ms: scenario.capacity.tpotSloMs ?? null,
        ttft_slo_ms: scenario.capacity.ttftSloMs ?? null,
        load_shedding: Boolean(scenario.shedding?.prioritized),
        keyed_shedding: scenario.shedding?.keyed !== undefined,
      },
    },
    policies,
  };
}

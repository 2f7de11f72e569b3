/**
 * The dashboard snapshot: one JSON document with everything the page shows, built on the server
 * from the sources /metrics reads (the admission backend's snapshot, the capacity sources, the
 * prom-client counters, the budget book), so its numbers are the exported ones:
 *
 *   gateway     admission and capacity mode, capacity (discovered, pinned, adaptive limit),
 *               shedding, workers, totals                      (sluice_capacity, sluice_workers_healthy, ...)
 *   classes     fleet totals per class: in flight, queued, queue limit, reservation, headroom,
 *               pressure, busy share                           (smg_scheduler_inflight, _queue_depth, ...)
 *   pools       per model pool: capacity, workers, in flight, queued, and its own per-class rows
 *                                                              (sluice_pool_*{model})
 *   outcomes    responses per second by status over the last OUTCOME_WINDOW_MS, with totals
 *                                                              (sluice_http_requests_total{status})
 *               and by error code (the outcome records)
 *   queue_wait  p50/p90/p99 per class and overall, over WAIT_WINDOW_MS and since start
 *                                                              (smg_scheduler_queue_wait_seconds)
 *   tenants     token share over TENANT_WINDOW_MS against weight share, tokens, budgets
 *                                                              (sluice_tenant_tokens_total, sluice_budget_remaining)
 *   rejections  refused or cut requests grouped by code, tenant and pool, and the latest ones
 *   ledger, last_hour   the ledger's state, and the last hour (last-hour.ts)
 */

import type { BudgetRemaining } from "@sluice/scheduler/core/budgets.js";
import { CLASSES_HIGH_TO_LOW, classOfRank, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { TenantPolicy } from "@sluice/scheduler/core/config.js";
import type { ClassSnapshot } from "@sluice/scheduler/core/events.js";
import type { AdmissionSnapshot } from "../contracts/admission-backend.js";
import type { PoolView } from "../contracts/pool-view.js";
import type { TenantCounts } from "../gateway/tenancy/tenant-activity.js";
import type { LedgerStatus, RecentUsageRead } from "../ledger/writer.js";
import { QUEUE_WAIT_BUCKETS } from "../metrics/registry.js";
import { type LastHour, lastHour } from "./last-hour.js";
import type { LiveMinutes } from "./live-minutes.js";
import type { Rejection, RejectionGroup } from "./rejections.js";
import {
  type CounterSample,
  histogramQuantile,
  increase,
  increaseBuckets,
  type SampleRing,
} from "./samples.js";

export const OUTCOME_WINDOW_MS = 5_000;
export const WAIT_WINDOW_MS = 60_000;
export const TENANT_WINDOW_MS = 60_000;
/** Tenant rows sent at most (the busiest first). */
const TENANT_ROWS = 50;

/** What the snapshot reads: the gateway's live parts (DashboardParts in src/gateway/admin/dashboard-port.ts). */
export interface DashboardSources {
  admission: {
    readonly mode: "scheduler" | "legacy";
    readonly fallbackReason: string | undefined;
    snapshot(): AdmissionSnapshot;
  };
  capacity: { readonly capacity: number; readonly underlying: number; readonly pinned: number | undefined };
  workers: { readonly healthyCount: number; readonly workers: ReadonlyArray<{ readonly healthy: boolean }> };
  /** The adaptive capacity controller, when `capacity_mode: adaptive` (with model pools: the largest pool's). */
  readonly adaptive: { snapshot(): { limit: number; phase: string } } | undefined;
  /** Shedding at the door, when configured (with model pools: the largest pool's). */
  readonly shedding:
    | {
        status(): {
          prioritized: { threshold: number; predictedWaitMs: number; codelShedding: string[] } | null;
          keyed: { percent: number } | null;
        };
      }
    | undefined;
  activity: { snapshot(): Map<string, TenantCounts> };
  budgets: { remaining(tenant: string): BudgetRemaining };
  /** The tenant policies in force (weights, budget limits). */
  policies(): ReadonlyMap<string, TenantPolicy>;
  ledger: { status(): LedgerStatus; recentUsage(): RecentUsageRead } | undefined;
  /** The model pools, in the order they formed (the demo's table and /metrics' `model` label name them). */
  pools(): readonly PoolView[];
}

interface SheddingView {
  /** off: not configured; idle: configured, admitting everything; shedding: refusing some arrivals. */
  state: "off" | "idle" | "shedding";
  /** One line for the header. */
  text: string;
  threshold_level: number | null;
  keyed_percent: number | null;
}

export interface ClassRow {
  class: PriorityClass;
  inflight: number;
  queued: number;
  queue_limit: number;
  reserved: number;
  headroom: number;
  /** The scheduler's capacity pressure (smg_scheduler_class_capacity_pressure): the worst of queue and slot pressure. */
  pressure: number;
  /** This class's own in flight / the capacity (0 in flight = 0). */
  busy: number;
}

export interface PoolRow {
  /** The pool's name: its first model, `*` for the catch-all pool (the `model` label of sluice_pool_*). */
  name: string;
  models: string[];
  capacity: number;
  workers: number;
  healthy_workers: number;
  inflight: number;
  queued: number;
  utilization: number;
  /** Null when admission is fleet-wide (legacy): no per-pool classes. */
  classes: ClassRow[] | null;
}

interface Percentiles {
  count: number;
  p50_ms: number | null;
  p90_ms: number | null;
  p99_ms: number | null;
}

interface BudgetUse {
  budget: "tokens_per_minute" | "budget_tokens" | "budget_cost_usd";
  limit: number;
  used: number;
  remaining: number;
}

interface TenantRow {
  /** The tenant key, or `other` for the tenants past the metrics' top N. */
  tenant: string;
  /** Fair-share weight (1 without a policy); null for `other`. */
  weight: number | null;
  /** weight / the weights of the tenants that used tokens in the window; null when idle. */
  weight_share: number | null;
  /** Tokens in the window / all tokens in the window; null when none were used. */
  token_share: number | null;
  tokens_per_sec: number;
  tokens_total: number;
  inflight: number;
  queued: number;
  budgets: BudgetUse[];
}

export interface ChartPoint {
  ts_ms: number;
  /** Responses per second by status over the interval since the previous sample. */
  by_status: Record<string, number>;
}

export interface DashboardSnapshot {
  ts_ms: number;
  gateway: {
    admission_mode: "scheduler" | "legacy";
    fallback_reason: string | null;
    capacity_mode: "static" | "adaptive";
    capacity: number;
    discovered_capacity: number;
    pinned_capacity: number | null;
    adaptive_limit: number | null;
    adaptive_phase: string | null;
    shedding: SheddingView;
    healthy_workers: number;
    workers: number;
    inflight: number;
    queued: number;
    utilization: number;
  };
  /** Fleet totals per class; null in legacy admission (no classes). */
  classes: ClassRow[] | null;
  pools: PoolRow[];
  outcomes: {
    window_secs: number | null;
    rate_total: number | null;
    by_status: Array<{ status: string; rate: number | null; total: number }>;
    by_code: Array<{ code: string; status: number; rate: number | null; total: number }>;
    point: ChartPoint | null;
  };
  queue_wait: {
    window_secs: number | null;
    rows: Array<{ class: PriorityClass | "all"; window: Percentiles; total: Percentiles }>;
  };
  tenants: { window_secs: number | null; rows: TenantRow[] };
  rejections: { kept: number; total: number; groups: RejectionGroup[]; rows: Rejection[] };
  ledger: LedgerStatus | null;
  last_hour: LastHour;
}

const round = (n: number, digits = 3) => {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
};

function shedding(sources: DashboardSources): SheddingView {
  const status = sources.shedding?.status();
  if (status === undefined) return { state: "off", text: "off", threshold_level: null, keyed_percent: null };
  const threshold = status.prioritized?.threshold ?? null;
  const keyed = status.keyed?.percent ?? null;
  const parts: string[] = [];
  if (threshold !== null && threshold > 0) {
    // A level is class rank * 100 + 99 - usage level (docs/adaptive.md).
    parts.push(
      `below level ${Number(threshold.toFixed(2))} (${classOfRank(Math.min(3, Math.floor(threshold / 100)))})`,
    );
  }
  for (const cls of status.prioritized?.codelShedding ?? []) parts.push(`${cls} (standing queue)`);
  if (keyed !== null && keyed < 100) parts.push(`keyed: ${round(keyed, 1)}% of keys admitted`);
  return parts.length === 0
    ? { state: "idle", text: "admitting all", threshold_level: threshold, keyed_percent: keyed }
    : {
        state: "shedding",
        text: `shedding ${parts.join(", ")}`,
        threshold_level: threshold,
        keyed_percent: keyed,
      };
}

function percentiles(cumulative: readonly number[] | undefined): Percentiles {
  const q = (p: number) => {
    const v = cumulative === undefined ? null : histogramQuantile(QUEUE_WAIT_BUCKETS, cumulative, p);
    return v === null ? null : round(v * 1000);
  };
  return { count: cumulative?.at(-1) ?? 0, p50_ms: q(0.5), p90_ms: q(0.9), p99_ms: q(0.99) };
}

function sumBuckets(all: Iterable<number[]>): number[] | undefined {
  let out: number[] | undefined;
  for (const b of all) out = out === undefined ? [...b] : out.map((v, i) => v + (b[i] ?? 0));
  return out;
}

function secondsBetween(now: CounterSample, base: CounterSample | undefined): number | null {
  return base === undefined || now.tMs <= base.tMs ? null : (now.tMs - base.tMs) / 1000;
}

function budgetUse(policy: TenantPolicy | undefined, remaining: BudgetRemaining): BudgetUse[] {
  if (policy === undefined) return [];
  const out: BudgetUse[] = [];
  const add = (budget: BudgetUse["budget"], limit: number | undefined) => {
    const left = remaining[budget];
    if (limit === undefined || left === undefined) return;
    out.push({ budget, limit, used: round(Math.max(0, limit - left), 6), remaining: round(left, 6) });
  };
  add("tokens_per_minute", policy.tokens_per_minute);
  add("budget_tokens", policy.budget_tokens);
  add("budget_cost_usd", policy.budget_cost_usd);
  return out;
}

function tenantRows(sources: DashboardSources, now: CounterSample, ring: SampleRing) {
  const base = ring.base(now.tMs, TENANT_WINDOW_MS);
  const secs = secondsBetween(now, base);
  const used = increase(now.tokens, base?.tokens);
  const policies = sources.policies();
  const activity = sources.activity.snapshot();
  const names = new Set<string>([...now.tokens.keys(), ...policies.keys(), ...activity.keys()]);
  const weightOf = (tenant: string) => (tenant === "other" ? null : (policies.get(tenant)?.weight ?? 1));
  let windowTokens = 0;
  let activeWeight = 0;
  for (const [tenant, n] of used) {
    if (n <= 0) continue;
    windowTokens += n;
    activeWeight += weightOf(tenant) ?? 0;
  }
  const rows: TenantRow[] = [...names].map((tenant) => {
    const n = used.get(tenant) ?? 0;
    const weight = weightOf(tenant);
    const counts = activity.get(tenant);
    return {
      tenant,
      weight,
      weight_share: n > 0 && weight !== null && activeWeight > 0 ? round(weight / activeWeight, 4) : null,
      token_share: windowTokens > 0 ? round(n / windowTokens, 4) : null,
      tokens_per_sec: secs === null ? 0 : round(n / secs, 2),
      tokens_total: now.tokens.get(tenant) ?? 0,
      inflight: counts?.inflight ?? 0,
      queued: counts?.queued ?? 0,
      budgets: tenant === "other" ? [] : budgetUse(policies.get(tenant), sources.budgets.remaining(tenant)),
    };
  });
  rows.sort(
    (a, b) =>
      b.tokens_per_sec - a.tokens_per_sec ||
      b.inflight + b.queued - (a.inflight + a.queued) ||
      b.tokens_total - a.tokens_total ||
      a.tenant.localeCompare(b.tenant),
  );
  return { window_secs: secs, rows: rows.slice(0, TENANT_ROWS) };
}

function classRows(
  classes: Record<PriorityClass, ClassSnapshot> | null,
  capacity: number,
): ClassRow[] | null {
  if (classes === null) return null;
  return CLASSES_HIGH_TO_LOW.map((cls) => {
    const c = classes[cls];
    return {
      class: cls,
      inflight: c.inflight,
      queued: c.queued,
      queue_limit: c.queueLimit,
      reserved: c.reserved,
      headroom: c.headroom,
      pressure: round(c.capacityPressure, 4),
      busy: capacity > 0 ? round(c.inflight / capacity, 4) : 0,
    };
  });
}

/** One pool's row, counted as sluice_pool_* counts it. */
export function poolRow(p: PoolView): PoolRow {
  const capacity = p.capacity.capacity;
  const snap = p.sharedAdmission ? undefined : p.admission.snapshot();
  // With the fleet-wide legacy limiter the admission counts are the fleet's: count the pool's workers.
  const inflight = snap?.inflight ?? p.workers.members.reduce((n, w) => n + w.inflight, 0);
  const queued = snap?.queued ?? 0;
  return {
    name: p.name,
    models: [...p.models],
    capacity,
    workers: p.workers.members.length,
    healthy_workers: p.workers.healthy.length,
    inflight,
    queued,
    utilization: capacity > 0 ? round(inflight / capacity, 4) : 0,
    classes: classRows(snap?.classes ?? null, capacity),
  };
}

/** The chart's point for `now`: rates by status since the previous sample. */
export function chartPoint(now: CounterSample, previous: CounterSample | undefined): ChartPoint | null {
  const secs = secondsBetween(now, previous);
  if (secs === null) return null;
  const by: Record<string, number> = {};
  for (const [status, n] of increase(now.statuses, previous?.statuses)) by[status] = round(n / secs, 2);
  return { ts_ms: now.tMs, by_status: by };
}

/**
 * Builds the snapshot for the sample `now` (read just before), with the windows' bases from `ring`
 * (samples older than `now`) and `previous` (the sample before `now`, for the chart's point).
 */
export function buildSnapshot(
  sources: DashboardSources,
  now: CounterSample,
  ring: SampleRing,
  previous: CounterSample | undefined,
  rejections: {
    kept: number;
    total: number;
    groups: RejectionGroup[];
    rows: Rejection[];
    codeStatus: Map<string, number>;
  },
  live: LiveMinutes,
): DashboardSnapshot {
  const admission = sources.admission.snapshot();
  const adaptive = sources.adaptive?.snapshot();

  const outcomeBase = ring.base(now.tMs, OUTCOME_WINDOW_MS);
  const outcomeSecs = secondsBetween(now, outcomeBase);
  const rate = (n: number) => (outcomeSecs === null ? null : round(n / outcomeSecs, 2));
  const statusUp = increase(now.statuses, outcomeBase?.statuses);
  const codeUp = increase(now.codes, outcomeBase?.codes);
  let totalUp = 0;
  for (const n of statusUp.values()) totalUp += n;

  const waitBase = ring.base(now.tMs, WAIT_WINDOW_MS);
  const waitWindow = increaseBuckets(now.waits, waitBase?.waits);
  const classes = [...CLASSES_HIGH_TO_LOW];
  const waitRows = [
    {
      class: "all" as const,
      window: percentiles(sumBuckets(waitWindow.values())),
      total: percentiles(sumBuckets(now.waits.values())),
    },
    ...classes.map((cls) => ({
      class: cls,
      window: percentiles(waitWindow.get(cls)),
      total: percentiles(now.waits.get(cls)),
    })),
  ];

  return {
    ts_ms: now.tMs,
    gateway: {
      admission_mode: sources.admission.mode,
      fallback_reason: sources.admission.fallbackReason ?? null,
      capacity_mode: adaptive === undefined ? "static" : "adaptive",
      capacity: sources.capacity.capacity,
      discovered_capacity: sources.capacity.underlying,
      pinned_capacity: sources.capacity.pinned ?? null,
      adaptive_limit: adaptive?.limit ?? null,
      adaptive_phase: adaptive?.phase ?? null,
      shedding: shedding(sources),
      healthy_workers: sources.workers.healthyCount,
      workers: sources.workers.workers.length,
      inflight: admission.inflight,
      queued: admission.queued,
      utilization: round(admission.utilization, 4),
    },
    classes: classRows(admission.classes, sources.capacity.capacity),
    pools: sources.pools().map(poolRow),
    outcomes: {
      window_secs: outcomeSecs,
      rate_total: rate(totalUp),
      by_status: [...now.statuses]
        .sort(([a], [b]) => Number(a) - Number(b))
        .map(([status, total]) => ({ status, rate: rate(statusUp.get(status) ?? 0), total })),
      by_code: [...now.codes]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([code, total]) => ({
          code,
          status: rejections.codeStatus.get(code) ?? 0,
          rate: rate(codeUp.get(code) ?? 0),
          total,
        })),
      point: chartPoint(now, previous),
    },
    queue_wait: { window_secs: secondsBetween(now, waitBase), rows: waitRows },
    tenants: tenantRows(sources, now, ring),
    rejections: {
      kept: rejections.kept,
      total: rejections.total,
      groups: rejections.groups,
      rows: rejections.rows,
    },
    ledger: sources.ledger?.status() ?? null,
    last_hour: lastHour(sources.ledger?.recentUsage(), live, now.tMs),
  };
}

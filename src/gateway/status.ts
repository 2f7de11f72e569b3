/**
 * What the gateway reports of itself: the admin status document (`GET /api/v1/status`) and the
 * readiness answer (`GET /readiness`).
 */
import type { BudgetBook } from "@sluice/scheduler/core/budgets.js";
import type { SharedState } from "../admission/redis/index.js";
import type { LedgerWriter } from "../ledger/writer.js";
import type { ModelPool } from "./fleet/model-pools.js";
import type { GatewayOptions } from "./options.js";
import type { Fleet } from "./start-pools.js";
import type { TenantActivity } from "./tenancy/tenant-activity.js";

interface StatusSources {
  readonly options: GatewayOptions;
  readonly fleet: Fleet;
  readonly activity: TenantActivity;
  readonly budgets: BudgetBook;
  readonly ledger: LedgerWriter | undefined;
  readonly shared: SharedState | undefined;
}

/** The admin status document: per class, per tenant, per worker and per pool. */
export function gatewayStatus(sources: StatusSources): Record<string, unknown> {
  const { options, fleet, activity, budgets, ledger, shared } = sources;
  const { admission, capacity, workers, pools } = fleet;
  const snapshot = admission.snapshot();
  const perTenant: Record<string, unknown> = {};
  const counts = activity.snapshot();
  for (const t of new Set([...counts.keys(), ...budgets.tenants()])) {
    const c = counts.get(t) ?? { inflight: 0, queued: 0 };
    perTenant[t] = { ...c, budget_remaining: budgets.remaining(t) };
  }
  const mainPool = fleet.mainPool();
  return {
    admission_mode: admission.mode,
    fallback_reason: admission.fallbackReason ?? null,
    fallback_code: admission.fallbackCode ?? null,
    capacity: capacity.capacity,
    discovered_capacity: capacity.underlying,
    pinned_capacity: capacity.pinned ?? null,
    healthy_workers: workers.healthyCount,
    workers: workers.workers.map((w) => ({
      url: w.url,
      // Routable: passing its health checks and its circuit not open (the two never disagree).
      healthy: w.routable,
      circuit: w.breaker.state,
      capacity: w.capacity,
      inflight: w.inflight,
      // Output tokens per event of its streams (adaptive capacity's pace; 1 unless learned or reported).
      tokens_per_event: Number(w.tokensPerEvent.value.toFixed(3)),
      models: w.served.kind === "models" ? w.served.models : w.served.kind,
      pool: w.group?.name ?? null,
      // Its engine (docs/capacity.md): as configured, as recognised, and its last reading.
      engine: w.engine ?? null,
      engine_setting: w.engineSetting,
      engine_signals: workers.engines.statusOf(w),
      // Capacity in KV tokens (docs/capacity.md): the unit its room counts in now ("requests" when
      // its pool counts requests or its engine reports no KV capacity), and its footprint vs budget.
      capacity_unit: w.capacityUnit,
      room: w.engineRoom,
      kv_footprint_tokens: w.footprintTokens,
      kv_budget_tokens: w.budgetTokens ?? null,
    })),
    inflight: snapshot.inflight,
    queued: snapshot.queued,
    classes: snapshot.classes,
    tenants: perTenant,
    capacity_mode: options.capacity?.mode === "adaptive" ? "adaptive" : "static",
    adaptive: mainPool?.adaptive?.snapshot() ?? null,
    shedding: mainPool?.shedding?.status() ?? null,
    default_model: options.defaultModel ?? null,
    pools: Object.fromEntries(pools.all.map((p) => [p.name, poolStatus(p)])),
    ledger: ledger?.status() ?? null,
    ...shared?.statusFields(),
  };
}

function poolStatus(p: ModelPool): Record<string, unknown> {
  const snap = p.admission.snapshot();
  return {
    models: p.models,
    workers: p.workers.members.map((w) => w.url),
    healthy_workers: p.workers.healthy.length,
    capacity: p.capacity.capacity,
    discovered_capacity: p.capacity.underlying,
    pinned_capacity: p.capacity.pinned ?? null,
    capacity_unit: p.workers.kv.unit,
    kv_target_utilization: p.workers.kv.unit === "kv_tokens" ? p.workers.kv.targetUtilization : null,
    // The mean footprint the workers' rooms are derived from (kv_tokens; null before any request).
    mean_footprint_tokens:
      p.workers.kv.unit === "kv_tokens" && p.workers.footprints.published !== undefined
        ? Math.round(p.workers.footprints.published)
        : null,
    admission_mode: p.admission.mode,
    fallback_reason: p.admission.fallbackReason ?? null,
    fallback_code: p.admission.fallbackCode ?? null,
    inflight: p.sharedAdmission ? p.workers.members.reduce((n, w) => n + w.inflight, 0) : snap.inflight,
    queued: p.sharedAdmission ? null : snap.queued,
    classes: p.sharedAdmission ? null : snap.classes,
    adaptive: p.adaptive?.snapshot() ?? null,
    shedding: p.shedding?.status() ?? null,
  };
}

/**
 * `GET /readiness`: ready while some worker is healthy and the gateway is not draining. A scheduler
 * that fell back to legacy admission stays ready (the contract's fail-safe), and says why here.
 */
export function readiness(
  fleet: Fleet,
  draining: boolean,
): { status: number; body: Record<string, unknown> } {
  const ready = fleet.workers.healthyCount > 0 && !draining;
  return {
    status: ready ? 200 : 503,
    body: {
      status: ready ? "ready" : draining ? "draining" : "not_ready",
      admission_mode: fleet.admission.mode,
      fallback_reason: fleet.admission.fallbackReason ?? null,
      fallback_code: fleet.admission.fallbackCode ?? null,
      healthy_workers: fleet.workers.healthyCount,
      capacity: fleet.capacity.capacity,
    },
  };
}

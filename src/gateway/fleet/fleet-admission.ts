/**
 * The fleet's admission as one: the model pools' admission backends read as totals. The contract's
 * `smg_scheduler_*` gauges, the admin status and `Gateway.admission` read this, so a gateway with
 * one pool looks exactly as it did before pools, and one with several reports fleet totals (per pool
 * figures are the `sluice_pool_*` series).
 */
import { CLASSES_HIGH_TO_LOW, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { TenantPolicy } from "@sluice/scheduler/core/config.js";
import type { ClassSnapshot, SchedulerCounters } from "@sluice/scheduler/core/events.js";
import type {
  AdmissionBackend,
  AdmissionMode,
  AdmissionSnapshot,
} from "../../contracts/admission-backend.js";
import type { FallbackCode } from "../../contracts/scheduler-fallback.js";

type FleetView = Pick<
  AdmissionBackend,
  "mode" | "fallbackReason" | "fallbackCode" | "classify" | "snapshot" | "counters" | "setTenantPolicies"
>;

export class FleetAdmission implements FleetView {
  constructor(
    /** The distinct admission backends now (a shared legacy backend appears once). */
    private readonly backends: () => readonly AdmissionBackend[],
    /** The mode when no pool exists yet: scheduler when enabled and its file loaded. */
    private readonly idleMode: AdmissionMode,
    private readonly idleReason: string | undefined,
    private readonly idleCode: FallbackCode | undefined = undefined,
  ) {}

  /**
   * Scheduler while any pool runs the scheduler; legacy when every pool runs legacy admission
   * (disabled, or each failed safe). A pool that alone failed safe shows in `fallbackReason` and in
   * its own status.
   */
  get mode(): AdmissionMode {
    const all = this.backends();
    if (all.length === 0) return this.idleMode;
    return all.some((b) => b.mode === "scheduler") ? "scheduler" : "legacy";
  }

  get fallbackReason(): string | undefined {
    for (const b of this.backends()) if (b.fallbackReason !== undefined) return b.fallbackReason;
    return this.backends().length === 0 ? this.idleReason : undefined;
  }

  get fallbackCode(): FallbackCode | undefined {
    for (const b of this.backends()) if (b.fallbackCode !== undefined) return b.fallbackCode;
    return this.backends().length === 0 ? this.idleCode : undefined;
  }

  classify(priority: string | undefined, tenant: string) {
    for (const b of this.backends()) {
      const c = b.classify(priority, tenant);
      if (c !== undefined) return c;
    }
    return undefined;
  }

  setTenantPolicies(policies: ReadonlyMap<string, TenantPolicy>, defaultMaxClass: PriorityClass): void {
    for (const b of this.backends()) b.setTenantPolicies(policies, defaultMaxClass);
  }

  snapshot(): AdmissionSnapshot {
    const all = this.backends();
    let capacity = 0;
    let inflight = 0;
    let queued = 0;
    for (const b of all) {
      const s = b.snapshot();
      capacity += s.capacity;
      inflight += s.inflight;
      queued += s.queued;
    }
    const utilization = capacity > 0 ? inflight / capacity : 0;
    if (this.mode === "legacy") return { capacity, inflight, queued, utilization, classes: null };
    const classes = {} as Record<PriorityClass, ClassSnapshot>;
    for (const cls of CLASSES_HIGH_TO_LOW) {
      classes[cls] = { inflight: 0, queued: 0, queueLimit: 0, reserved: 0, headroom: 0, capacityPressure: 0 };
    }
    for (const b of all) {
      const s = b.snapshot().classes;
      if (s === null) continue;
      for (const cls of CLASSES_HIGH_TO_LOW) {
        const t = classes[cls];
        const c = s[cls];
        t.inflight += c.inflight;
        t.queued += c.queued;
        t.queueLimit += c.queueLimit;
        t.reserved += c.reserved;
        t.headroom += c.headroom;
        // The worst pool's pressure: a total would hide one pool at its limit.
        t.capacityPressure = Math.max(t.capacityPressure, c.capacityPressure);
      }
    }
    return { capacity, inflight, queued, utilization, classes };
  }

  counters(): SchedulerCounters | undefined {
    let total: SchedulerCounters | undefined;
    for (const b of this.backends()) {
      const c = b.counters();
      if (c === undefined) continue;
      if (total === undefined) {
        total = structuredClone(c);
        continue;
      }
      total.clamps += c.clamps;
      total.unknownPriority += c.unknownPriority;
      for (const cls of CLASSES_HIGH_TO_LOW) {
        total.starvationPromotions[cls] += c.starvationPromotions[cls];
        const adm = total.admissions[cls] as Record<string, number>;
        for (const [k, v] of Object.entries(c.admissions[cls])) adm[k] = (adm[k] ?? 0) + v;
        for (const by of CLASSES_HIGH_TO_LOW) total.preemptions[cls][by] += c.preemptions[cls][by];
      }
    }
    return total;
  }
}

/**
 * The synthetic workload: a seeded task mix (class, tenant, cost) shared by every contender, so
 * each one sees exactly the same sequence of requests.
 */
import { BUILTIN_CLASS_DEFAULTS } from "@sluice/scheduler/core/config.js";
import { mulberry32 } from "@sluice/scheduler/core/random.js";
import {
  type ClassOverrides,
  PRIORITY_CLASSES,
  type PriorityClass,
  type TenantPolicy,
} from "../../src/index.js";

export { mulberry32 };

/** Rank order (bulk 0 .. system 3), as the engine ranks them. */
export const CLASS_NAMES: readonly PriorityClass[] = ["bulk", "default", "interactive", "system"];
export const TENANT_COUNT = 16;
/** `count` tenant names: tenant-0, tenant-1, ... */
export function tenantNames(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `tenant-${i}`);
}

export const TENANTS: readonly string[] = tenantNames(TENANT_COUNT);
export const MAX_COST = 512;

/** The tenants (16 by default) with weights 1..4 (cycling), all allowed up to `system` so nothing is clamped. */
export function tenantPolicies(tenants: readonly string[] = TENANTS): Record<string, TenantPolicy> {
  const out: Record<string, TenantPolicy> = {};
  tenants.forEach((t, i) => {
    out[t] = { max_class: "system", weight: 1 + (i % 4) };
  });
  return out;
}

/** The built-in reservations, with every class's queue large enough that a bench never fills it. */
export function sluiceClasses(queueSize = 1_000_000): ClassOverrides {
  const out: ClassOverrides = {};
  for (const cls of PRIORITY_CLASSES) {
    const d = BUILTIN_CLASS_DEFAULTS[cls];
    out[cls] = {
      reserved_floor: d.reserved_floor,
      reserved_per_slot: d.reserved_per_slot,
      queue_size: queueSize,
    };
  }
  return out;
}

export interface Workload {
  readonly size: number;
  /** Class rank 0..3 per task. */
  readonly cls: Uint8Array;
  /** Tenant index 0..15 per task. */
  readonly tenant: Uint8Array;
  /** Estimated cost 1..512 per task. */
  readonly cost: Uint16Array;
}

/** Classes uniformly at random, tenants uniformly at random, costs uniform in 1..512. */
export function makeWorkload(size: number, seed = 0x5eed): Workload {
  const rand = mulberry32(seed);
  const cls = new Uint8Array(size);
  const tenant = new Uint8Array(size);
  const cost = new Uint16Array(size);
  for (let i = 0; i < size; i++) {
    cls[i] = Math.floor(rand() * CLASS_NAMES.length);
    tenant[i] = Math.floor(rand() * TENANT_COUNT);
    cost[i] = 1 + Math.floor(rand() * MAX_COST);
  }
  return { size, cls, tenant, cost };
}

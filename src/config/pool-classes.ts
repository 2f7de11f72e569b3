/**
 * A model pool's classes: the priority YAML's, with the gateway YAML's `pools.<model>.classes` on top
 * (per class, per key). Keyed by any model of the pool; when several of its models have an entry,
 * the alphabetically first wins. The gateway and `sluice check-config` both read this.
 */
import { CLASSES_HIGH_TO_LOW } from "@sluice/scheduler/core/class.js";
import type { ClassOverrides, ClassSettingsTable } from "@sluice/scheduler/core/config.js";

export interface PoolClasses {
  readonly classes: ClassSettingsTable;
  /** The `pools` entry applied, if any. */
  readonly entry: string | undefined;
  /** Other models of the pool with an entry of their own, which is not applied. */
  readonly ignored: readonly string[];
}

export function poolClasses(
  base: ClassSettingsTable,
  models: readonly string[],
  overrides: Readonly<Record<string, ClassOverrides>> | undefined,
): PoolClasses {
  const keyed = models.filter((m) => overrides?.[m] !== undefined).sort();
  if (keyed.length === 0) return { classes: base, entry: undefined, ignored: [] };
  const entry = keyed[0]!;
  const override = overrides![entry]!;
  const out = { ...base };
  for (const cls of CLASSES_HIGH_TO_LOW) {
    const block = override[cls];
    if (block !== undefined && block !== null) out[cls] = { ...base[cls], ...block };
  }
  return { classes: out, entry, ignored: keyed.slice(1) };
}

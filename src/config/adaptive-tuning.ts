/**
 * The `adaptive_tuning` block (gateway file, simulator scenario) held the latency-only adaptive
 * controller's thirty constants. The controller that follows the engine's signals has none an
 * operator sets (issue 39 §4): a file that still has the block fails with this message instead of
 * "unknown key", so an operator upgrading learns what replaced it.
 */
import { ConfigError } from "@sluice/scheduler/core/errors.js";

export const ADAPTIVE_TUNING_REMOVED =
  "removed: the adaptive controller has no tuning constants any more (it follows the engines' waiting queue and KV use, with the SLOs as guards; docs/adaptive.md); delete the block. Its settings are adaptive_min_capacity, adaptive_max_capacity, tpot_slo_ms, ttft_slo_ms and kv_target_utilization";

/** Throws when `value` (an `adaptive_tuning` block) is present; `where` names it. */
export function rejectAdaptiveTuning(value: unknown, where: string): void {
  if (value === undefined) return;
  throw new ConfigError(where, ADAPTIVE_TUNING_REMOVED);
}

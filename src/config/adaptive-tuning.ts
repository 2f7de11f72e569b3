/**
 * The `adaptive_tuning` block, in the gateway file and in a simulator scenario: the adaptive
 * controller's tuning constants by YAML key (every `adaptive_*` key of the defaults table at the
 * top of src/capacity/adaptive-limit.ts). Numbers only here; their ranges are the controller's own
 * (resolveAdaptiveLimitOptions), so the two cannot drift.
 */
import { z } from "zod";
import { ADAPTIVE_TUNING_KEYS, type AdaptiveTuning } from "../capacity/adaptive-limit.js";

export const adaptiveTuningSchema = z.strictObject(
  Object.fromEntries(
    ADAPTIVE_TUNING_KEYS.map(([, key]) => [key, z.number({ error: "must be a number" }).optional()]),
  ),
  // Only the block's own type; an unknown key keeps its issue (reported as "unknown key").
  { error: (issue) => (issue.code === "invalid_type" ? "must be a mapping" : undefined) },
);

/** The block's values by option name; keys it leaves out take the controller's defaults. */
export function tuningOptions(block: Readonly<Record<string, number | undefined>>): Partial<AdaptiveTuning> {
  const tuning: Partial<AdaptiveTuning> = {};
  for (const [option, key] of ADAPTIVE_TUNING_KEYS) {
    const value = block[key];
    if (value !== undefined) tuning[option] = value;
  }
  return tuning;
}

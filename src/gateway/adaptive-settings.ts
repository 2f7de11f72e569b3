import type { Logger } from "pino";
import type { CapacityOptions } from "./options.js";

/** The adaptive controller's settings given while capacity_mode is static (they do nothing there). */
export function adaptiveSettingsWithoutEffect(capacity: CapacityOptions | undefined): string[] {
  if (capacity === undefined || capacity.mode === "adaptive") return [];
  const given: string[] = [];
  if (capacity.maxCapacity !== undefined) given.push("adaptive_max_capacity");
  if (capacity.tpotSloMs !== undefined) given.push("tpot_slo_ms");
  if (capacity.ttftSloMs !== undefined) given.push("ttft_slo_ms");
  return given;
}

/**
 * Accepted (a file shared by gateways in both modes stays valid) but said: an operator who set an
 * SLO or the controller's constants and forgot the mode would otherwise think them in force.
 */
export function warnOfAdaptiveSettingsWithoutEffect(
  capacity: CapacityOptions | undefined,
  logger: Logger,
): void {
  const idle = adaptiveSettingsWithoutEffect(capacity);
  if (idle.length === 0) return;
  logger.warn(
    { settings: idle },
    `${idle.join(", ")}: no effect while capacity_mode is static (--capacity-mode adaptive turns the controller on)`,
  );
}

/**
 * Adaptive mode without tpot_slo_ms: the controllers follow the engines' waiting queues and KV use
 * (and workers' 429/503), and search for each engine's knee by throughput, with no time per token
 * promised (docs/adaptive.md, rule 5). Said at start, so an operator who meant to promise one sees
 * that none is held.
 */
export function warnOfAdaptiveWithoutGuards(capacity: CapacityOptions | undefined, logger: Logger): void {
  if (capacity?.mode !== "adaptive" || capacity.tpotSloMs !== undefined) return;
  logger.info(
    "adaptive capacity without tpot_slo_ms: each worker's controller follows its engine's waiting queue and KV use (and 429/503) and stops where more requests stop adding throughput (the knee search); no time per token is promised: set tpot_slo_ms for that (docs/adaptive.md)",
  );
}

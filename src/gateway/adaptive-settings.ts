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
 * Adaptive mode with neither SLO: the controllers follow the engines' waiting queues and KV use
 * only (and workers' 429/503), so a worker whose engine exports neither runs at its reported
 * capacity. Said at start: an operator may expect latency to be watched too.
 */
export function warnOfAdaptiveWithoutGuards(capacity: CapacityOptions | undefined, logger: Logger): void {
  if (capacity?.mode !== "adaptive") return;
  if (capacity.tpotSloMs !== undefined || capacity.ttftSloMs !== undefined) return;
  logger.warn(
    "adaptive capacity without tpot_slo_ms or ttft_slo_ms follows only the engines' waiting queues, their KV use and workers' 429/503: a worker whose engine exports no signals runs at its reported capacity (docs/adaptive.md)",
  );
}

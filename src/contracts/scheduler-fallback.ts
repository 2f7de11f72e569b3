/**
 * Why an enabled priority scheduler fell back to legacy admission: a short, stable code (the
 * `sluice_scheduler_fallback{reason}` label, the status documents' `fallback_code`) and the
 * message an operator reads (`fallback_reason`).
 */
import { CLASSES_HIGH_TO_LOW } from "@sluice/scheduler/core/class.js";
import { type ClassSettingsTable, requiredReservation } from "@sluice/scheduler/core/config.js";
import { ConfigError, ReservationsExceedCapacityError } from "@sluice/scheduler/core/errors.js";

export const FALLBACK_CODES = ["config_missing", "config_invalid", "reservations_exceed_capacity"] as const;
export type FallbackCode = (typeof FALLBACK_CODES)[number];

/** The priority YAML could not be loaded: missing (unreadable) or invalid. */
export class SchedulerFileError extends ConfigError {
  override readonly name = "SchedulerFileError";
  constructor(
    readonly fallbackCode: Exclude<FallbackCode, "reservations_exceed_capacity">,
    path: string,
    reason: string,
  ) {
    super(path, reason);
  }
}

/** The code of the error a scheduler could not be built with. */
export function fallbackCodeOf(err: unknown): FallbackCode {
  if (err instanceof ReservationsExceedCapacityError) return "reservations_exceed_capacity";
  if (err instanceof SchedulerFileError) return err.fallbackCode;
  return "config_invalid";
}

/**
 * How to make the reservations fit, in words an operator can act on: the keys to lower (largest
 * reservation first, each by as much as is still in excess), or the capacity to add.
 */
export function reservationFix(classes: ClassSettingsTable, capacity: number): string {
  const reserved = CLASSES_HIGH_TO_LOW.map((cls) => ({
    cls,
    r: requiredReservation(classes[cls], capacity),
  }));
  const total = reserved.reduce((n, c) => n + c.r, 0);
  let excess = total - capacity;
  if (excess <= 0) return "";
  const changes: string[] = [];
  for (const { cls, r } of [...reserved].sort((a, b) => b.r - a.r)) {
    if (excess <= 0 || r === 0) continue;
    const target = r - Math.min(r, excess);
    excess -= r - target;
    const settings = classes[cls];
    if (settings.reserved_floor > target) changes.push(`classes.${cls}.reserved_floor to at most ${target}`);
    if (Math.ceil(settings.reserved_per_slot * capacity) > target) {
      const share = Math.floor((target / capacity) * 1000) / 1000;
      changes.push(`classes.${cls}.reserved_per_slot to at most ${share}`);
    }
  }
  return `lower ${changes.join(" and ")} for a fleet of ${capacity} (reservations total ${total}), or add workers (capacity ${total} or more)`;
}

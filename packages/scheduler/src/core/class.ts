/**
 * Priority classes, the lenient `x-smg-priority` header parser and the tenant clamp.
 *
 * Classes are ranked numerically (bulk 0 < default 1 < interactive 2 < system 3) so the
 * engine can index per-class arrays and compare classes without string work on the hot path.
 */

export const PRIORITY_CLASSES = ["bulk", "default", "interactive", "system"] as const;
export type PriorityClass = (typeof PRIORITY_CLASSES)[number];

/** Classes from highest to lowest: the dispatcher's scan order. */
export const CLASSES_HIGH_TO_LOW: readonly PriorityClass[] = ["system", "interactive", "default", "bulk"];

export const CLASS_COUNT = 4;

/** Numeric rank of a class; higher is more important. */
export const CLASS_RANK: Readonly<Record<PriorityClass, number>> = {
  bulk: 0,
  default: 1,
  interactive: 2,
  system: 3,
};

export function classOfRank(rank: number): PriorityClass {
  const cls = PRIORITY_CLASSES[rank];
  if (cls === undefined) throw new RangeError(`no priority class has rank ${rank}`);
  return cls;
}

function isPriorityClass(value: unknown): value is PriorityClass {
  return value === "bulk" || value === "default" || value === "interactive" || value === "system";
}

interface ParsedPriority {
  readonly class: PriorityClass;
  /** True when a value was given but is not a class name (including the empty string). */
  readonly unknown: boolean;
}

const MISSING: ParsedPriority = { class: "default", unknown: false };
const UNKNOWN: ParsedPriority = { class: "default", unknown: true };
const EXACT: Readonly<Record<PriorityClass, ParsedPriority>> = {
  bulk: { class: "bulk", unknown: false },
  default: { class: "default", unknown: false },
  interactive: { class: "interactive", unknown: false },
  system: { class: "system", unknown: false },
};

/**
 * Parses an `x-smg-priority` value. Case-insensitive, surrounding whitespace trimmed.
 * Missing -> default; empty or unrecognised -> default and reported as unknown, so a typo
 * never fails admission.
 */
export function parsePriority(value: string | null | undefined): ParsedPriority {
  if (value === undefined || value === null) return MISSING;
  // Fast path: the exact lowercase names need no allocation.
  const exact = isPriorityClass(value) ? EXACT[value] : undefined;
  if (exact !== undefined) return exact;
  const normalized = value.trim().toLowerCase();
  return isPriorityClass(normalized) ? EXACT[normalized] : UNKNOWN;
}

/** Effective class = min(requested, ceiling): the clamp only ever moves a request down. */
export function clamp(requested: PriorityClass, maxClass: PriorityClass): PriorityClass {
  return CLASS_RANK[requested] <= CLASS_RANK[maxClass] ? requested : maxClass;
}

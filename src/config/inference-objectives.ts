/**
 * The Gateway API Inference Extension's request inputs, as sluice reads them (docs/kubernetes.md):
 * `inference_objectives` names each InferenceObjective a gateway in front may send in
 * `x-gateway-inference-objective` with its integer priority (the `spec.priority` of the cluster's
 * InferenceObjective resources), and `inference_objective_classes` maps a priority onto sluice's
 * four classes by lower bounds. Both are YAML blocks of the `--config` file, read only when
 * `--inference-gateway-headers` is on. Errors name the file and the key.
 */
import { ConfigError } from "@sluice/scheduler/core/errors.js";

/** The lowest priority of each class above `bulk` (null: no priority maps to it); below `default` is `bulk`. */
export interface PriorityThresholds {
  readonly system: number | null;
  readonly interactive: number | null;
  readonly default: number | null;
}

/** What a trusted inference gateway's headers mean: objective names and the priority -> class table. */
export interface InferenceGatewaySettings {
  /** Objective name -> its priority (names the header may carry). */
  readonly objectives: ReadonlyMap<string, number>;
  readonly classes: PriorityThresholds;
}

/**
 * The default table: negative priorities are sheddable (the extension's rule), so `bulk`; 0 (the
 * priority of an objective that sets none) is `default`; any positive priority is `interactive`;
 * 1000 and above is `system`, left to the operator's own traffic.
 */
export const DEFAULT_PRIORITY_THRESHOLDS: PriorityThresholds = { system: 1000, interactive: 1, default: 0 };

/** The range of the objective's priority: a Kubernetes `int` field is 32-bit. */
export const MIN_PRIORITY = -2147483648;
export const MAX_PRIORITY = 2147483647;

/** An InferenceObjective's name is a Kubernetes object name (a DNS-1123 subdomain). */
export const OBJECTIVE_NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

const THRESHOLD_KEYS = ["system", "interactive", "default"] as const;

function isPriority(value: unknown): value is number {
  return (
    typeof value === "number" && Number.isInteger(value) && value >= MIN_PRIORITY && value <= MAX_PRIORITY
  );
}

/** `inference_objectives`: a mapping of objective name to integer priority (absent: none). */
function readObjectives(value: unknown, where: string): Map<string, number> {
  const objectives = new Map<string, number>();
  if (value === undefined || value === null) return objectives;
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new ConfigError(where, "must be a mapping of objective name to integer priority");
  }
  for (const [name, priority] of Object.entries(value)) {
    if (!OBJECTIVE_NAME.test(name)) {
      throw new ConfigError(
        `${where}.${name}`,
        "must be an InferenceObjective name (lowercase letters, digits, - and .)",
      );
    }
    if (!isPriority(priority)) {
      throw new ConfigError(`${where}.${name}`, `must be an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}`);
    }
    objectives.set(name, priority);
  }
  return objectives;
}

/** `inference_objective_classes`: lower bounds; an omitted class keeps its default, null turns it off. */
function readThresholds(value: unknown, where: string): PriorityThresholds {
  if (value === undefined || value === null) return DEFAULT_PRIORITY_THRESHOLDS;
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new ConfigError(
      where,
      "must be a mapping of system, interactive and default to their lowest priority",
    );
  }
  const out: Record<string, number | null> = { ...DEFAULT_PRIORITY_THRESHOLDS };
  for (const [key, bound] of Object.entries(value)) {
    if (!(THRESHOLD_KEYS as readonly string[]).includes(key)) {
      const hint = key === "bulk" ? " (bulk is every priority below default's bound)" : "";
      throw new ConfigError(
        `${where}.${key}`,
        `unknown class; expected one of system, interactive, default${hint}`,
      );
    }
    if (bound !== null && !isPriority(bound)) {
      throw new ConfigError(
        `${where}.${key}`,
        `must be an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}, or null`,
      );
    }
    out[key] = bound;
  }
  // Higher classes need strictly higher bounds, or a lower class would never be reached.
  let above: { key: string; bound: number } | undefined;
  for (const key of THRESHOLD_KEYS) {
    const bound = out[key] ?? null;
    if (bound === null) continue;
    if (above !== undefined && bound >= above.bound) {
      throw new ConfigError(
        `${where}.${key}`,
        `must be below ${above.key}'s bound (${above.bound}); got ${bound}`,
      );
    }
    above = { key, bound };
  }
  return out as unknown as PriorityThresholds;
}

/** Reads both blocks from the `--config` file; `path` names the file in errors. */
export function fileInferenceGateway(
  file: Readonly<Record<string, unknown>>,
  path: string | undefined,
): InferenceGatewaySettings {
  return {
    objectives: readObjectives(file.inference_objectives, `${path}: inference_objectives`),
    classes: readThresholds(file.inference_objective_classes, `${path}: inference_objective_classes`),
  };
}

/** The class of a priority: the highest class whose bound it reaches, else `bulk`. */
export function classForPriority(
  priority: number,
  thresholds: PriorityThresholds,
): "system" | "interactive" | "default" | "bulk" {
  for (const key of THRESHOLD_KEYS) {
    const bound = thresholds[key];
    if (bound !== null && priority >= bound) return key;
  }
  return "bulk";
}

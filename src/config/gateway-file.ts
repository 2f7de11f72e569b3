/**
 * The gateway's `--config` file: a YAML mapping holding any option by its key (the option table,
 * src/config/gateway-option-table.ts) and the blocks that have no flag (`workers`, `api_keys`,
 * `pricing`, `pools`, `load_shedding`, `keyed_shedding`, `adaptive_tuning`,
 * `trusted_tenant_header`, `inference_objectives`, `inference_objective_classes`). Errors name the
 * file and the key.
 */
import { readFileSync } from "node:fs";
import type { ClassOverrides, Pricing } from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import type { CapacityUnit } from "../capacity/kv-budget.js";
import type { LoadSheddingOptions } from "../shedding/load-shedding.js";
import { rejectAdaptiveTuning } from "./adaptive-tuning.js";
import {
  apiKeysSchema,
  keyedSheddingSchema,
  loadSheddingSchema,
  poolsSchema,
  workersSchema,
} from "./gateway-file-schemas.js";
import { GATEWAY_OPTIONS, OPTION_KEYS } from "./gateway-option-table.js";
import type { ApiKeySpec } from "./gateway-settings.js";
import { pricingSchema } from "./pricing.js";

export type GatewayFile = Readonly<Record<string, unknown>>;

const BLOCK_KEYS = new Set([
  "workers",
  "api_keys",
  "trusted_tenant_header",
  "inference_objectives",
  "inference_objective_classes",
  "pricing",
  "load_shedding",
  "keyed_shedding",
  "adaptive_tuning",
  "pools",
]);

/** Reads and checks the --config file; errors name the key. */
export function loadGatewayFile(path: string): GatewayFile {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(
      "--config",
      `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(path, `invalid YAML: ${(err as Error).message.split("\n")[0]}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc)) throw new ConfigError(path, "must be a YAML mapping");
  const known = new Set<string>(OPTION_KEYS.filter((key) => GATEWAY_OPTIONS[key].inFile));
  for (const key of Object.keys(doc)) {
    if (key === "config")
      throw new ConfigError(`${path}: config`, "a config file cannot name another config file");
    if (!known.has(key) && !BLOCK_KEYS.has(key)) throw new ConfigError(`${path}: ${key}`, "unknown key");
  }
  return doc as GatewayFile;
}

/**
 * A block checked by its schema, or undefined when absent (or null, unless the block's schema must
 * see null to refuse it); errors name the key inside it.
 */
function block<T>(
  file: GatewayFile,
  key: string,
  schema: z.ZodType<T>,
  path: string | undefined,
  nullIsAbsent = true,
): T | undefined {
  const value = file[key];
  if (value === undefined || (value === null && nullIsAbsent)) return undefined;
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const at = issue.path.length > 0 ? `${key}.${issue.path.join(".")}` : key;
    throw new ConfigError(`${path}: ${at}`, issue.message);
  }
  return parsed.data;
}

/** The `workers` block as written (URLs not yet checked). */
export function fileWorkers(file: GatewayFile, path: string | undefined): z.infer<typeof workersSchema> {
  return block(file, "workers", workersSchema, path, false) ?? [];
}

/** The `pools` block: per-pool class overrides. */
export function filePools(file: GatewayFile, path: string | undefined): Record<string, ClassOverrides> {
  const pools = block(file, "pools", poolsSchema, path) ?? {};
  const out: Record<string, ClassOverrides> = {};
  for (const [model, entry] of Object.entries(pools)) out[model] = (entry.classes ?? {}) as ClassOverrides;
  return out;
}

/** The `pools` block's capacity keys, per model that sets any (`pools.<model>.capacity_unit`, `kv_target_utilization`). */
export function filePoolCapacity(
  file: GatewayFile,
  path: string | undefined,
): Record<string, { unit?: CapacityUnit; targetUtilization?: number }> {
  const pools = block(file, "pools", poolsSchema, path) ?? {};
  const out: Record<string, { unit?: CapacityUnit; targetUtilization?: number }> = {};
  for (const [model, entry] of Object.entries(pools)) {
    if (entry.capacity_unit === undefined && entry.kv_target_utilization === undefined) continue;
    out[model] = {
      ...(entry.capacity_unit !== undefined ? { unit: entry.capacity_unit } : {}),
      ...(entry.kv_target_utilization !== undefined
        ? { targetUtilization: entry.kv_target_utilization }
        : {}),
    };
  }
  return out;
}

/** The `load_shedding` and `keyed_shedding` blocks. */
export function fileShedding(file: GatewayFile, path: string | undefined): LoadSheddingOptions {
  const shedding: LoadSheddingOptions = {};
  // `load_shedding: false` turns off what adaptive mode would otherwise shed by default.
  const p = file.load_shedding === false ? false : block(file, "load_shedding", loadSheddingSchema, path);
  if (p === false) shedding.prioritized = false;
  else if (p !== undefined) {
    shedding.prioritized = {
      maxQueueWaitMs: p.max_queue_wait_ms,
      usageHalfLifeMs: p.usage_half_life_secs === undefined ? undefined : p.usage_half_life_secs * 1000,
      codelClasses: p.codel_classes,
      codelTargetMs: p.codel_target_ms,
      codelIntervalMs: p.codel_interval_ms,
    };
  }
  const k = block(file, "keyed_shedding", keyedSheddingSchema, path);
  if (k !== undefined) {
    shedding.keyed = {
      header: k.header,
      classes: k.classes,
      targetDelayMs: k.target_delay_ms,
      rotationWindowMs: k.rotation_window_secs === undefined ? undefined : k.rotation_window_secs * 1000,
      decreaseFraction: k.decrease_fraction,
      increaseStep: k.increase_step,
      minPercent: k.min_percent,
    };
  }
  return shedding;
}

/** `adaptive_tuning`: removed (src/config/adaptive-tuning.ts says why); present, it stops startup. */
export function checkNoAdaptiveTuning(file: GatewayFile, path: string | undefined): void {
  rejectAdaptiveTuning(file.adaptive_tuning, `${path}: adaptive_tuning`);
}

/** `trusted_tenant_header`: a header name, or null (the default) for none. */
export function fileTrustedTenantHeader(file: GatewayFile, path: string | undefined): string | null {
  const trusted = file.trusted_tenant_header;
  if (trusted === undefined || trusted === null) return null;
  if (typeof trusted !== "string" || trusted.trim() === "") {
    throw new ConfigError(`${path}: trusted_tenant_header`, "must be a header name or null");
  }
  return trusted;
}

/** The parts of the --config file a reload re-reads: api_keys and pricing. */
export function reloadableParts(
  file: GatewayFile,
  path: string | undefined,
): { apiKeys: ApiKeySpec[]; pricing: Pricing } {
  const apiKeys = block(file, "api_keys", apiKeysSchema, path, false) ?? [];
  const pricing = block(file, "pricing", pricingSchema, path) ?? {};
  return { apiKeys, pricing };
}

/** Re-reads api_keys and pricing from the --config file (for reload). */
export function reloadGatewayFile(path: string): { apiKeys: ApiKeySpec[]; pricing: Pricing } {
  return reloadableParts(loadGatewayFile(path), path);
}

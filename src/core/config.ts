/**
 * Scheduler configuration: the per-class knobs, the tenant policies, the built-in defaults table
 * of the contract, and validation whose errors name the offending key
 * (`classes.bulk.queue_timeout_secs: must be > 0`).
 */
import { parse as parseYamlText } from "yaml";
import { z } from "zod";
import { parseAccessWindow } from "./access-window.js";
import { CLASS_RANK, PRIORITY_CLASSES, type PriorityClass } from "./class.js";
import { ConfigError } from "./errors.js";

export interface ClassSettings {
  /** Minimum slots reserved for the class. */
  reserved_floor: number;
  /** Share of live capacity reserved on top of the floor: max(floor, ceil(share * capacity)). */
  reserved_per_slot: number;
  /** Per-class queue depth; an arrival beyond it gets 429. */
  queue_size: number;
  /** How long a waiter may queue before 408. */
  queue_timeout_secs: number;
  /** Head-of-queue age past which the dispatcher promotes a waiter ignoring reservations. */
  starvation_threshold_secs: number;
  /** Whether arrivals of this class may preempt a lower-class request before its first byte. */
  can_preempt: boolean;
}

export type ClassSettingsTable = Readonly<Record<PriorityClass, Readonly<ClassSettings>>>;

/** The contract's built-in defaults, used for any class (or field) the YAML leaves out. */
export const BUILTIN_CLASS_DEFAULTS: ClassSettingsTable = Object.freeze({
  system: Object.freeze({
    reserved_floor: 32,
    reserved_per_slot: 0.0,
    queue_size: 64,
    queue_timeout_secs: 30,
    starvation_threshold_secs: 5,
    can_preempt: true,
  }),
  interactive: Object.freeze({
    reserved_floor: 128,
    reserved_per_slot: 0.25,
    queue_size: 256,
    queue_timeout_secs: 30,
    starvation_threshold_secs: 5,
    can_preempt: true,
  }),
  default: Object.freeze({
    reserved_floor: 0,
    reserved_per_slot: 0.1,
    queue_size: 512,
    queue_timeout_secs: 60,
    starvation_threshold_secs: 30,
    can_preempt: false,
  }),
  bulk: Object.freeze({
    reserved_floor: 0,
    reserved_per_slot: 0.0,
    queue_size: 1024,
    queue_timeout_secs: 300,
    starvation_threshold_secs: 120,
    can_preempt: false,
  }),
});

export type BudgetPeriod = "day" | "month";

export interface TenantPolicy {
  /** Highest class the tenant may be admitted under. */
  max_class?: PriorityClass | undefined;
  /** Fair-share weight inside a class (default 1). */
  weight?: number | undefined;
  /** Per-minute token bucket: capacity and refill per minute (429 token_budget_exceeded). */
  tokens_per_minute?: number | undefined;
  /** Term budget in tokens per budget_period (403 tenant_budget_exhausted). */
  budget_tokens?: number | undefined;
  /** Term budget in USD per budget_period, priced by `pricing` (403 tenant_budget_exhausted). */
  budget_cost_usd?: number | undefined;
  /** UTC period of the term budgets (default month). */
  budget_period?: BudgetPeriod | undefined;
  /** Model allowlist; absent = every model (403 model_not_allowed). */
  models?: string[] | undefined;
  /** false = suspended (403 tenant_inactive). */
  active?: boolean | undefined;
  /** When the tenant may send requests, e.g. "Mon-Fri 08:00-20:00 UTC" (403 tenant_inactive outside). */
  access_windows?: string[] | undefined;
}

const classEnum = z.enum(PRIORITY_CLASSES, {
  error: () => `must be one of ${PRIORITY_CLASSES.join(", ")}`,
});

const nonNegativeInt = z
  .number({ error: "must be a number" })
  .int("must be an integer")
  .min(0, "must be >= 0");
const positiveSecs = z.number({ error: "must be a number" }).gt(0, "must be > 0");

export const classSettingsSchema = z.strictObject({
  reserved_floor: nonNegativeInt.optional(),
  reserved_per_slot: z
    .number({ error: "must be a finite number >= 0" })
    .min(0, "must be a finite number >= 0")
    .optional(),
  queue_size: nonNegativeInt.optional(),
  queue_timeout_secs: positiveSecs.optional(),
  starvation_threshold_secs: positiveSecs.optional(),
  can_preempt: z.boolean({ error: "must be true or false" }).optional(),
});

/** The keys of a tenant policy that the core scheduler reads; other layers extend this shape. */
export const tenantPolicyShape = {
  max_class: classEnum.optional(),
  weight: z.number({ error: "must be a number" }).gt(0, "must be > 0").optional(),
  tokens_per_minute: z.number({ error: "must be a number" }).gt(0, "must be > 0").optional(),
  budget_tokens: z.number({ error: "must be a number" }).min(0, "must be >= 0").optional(),
  budget_cost_usd: z.number({ error: "must be a number" }).min(0, "must be >= 0").optional(),
  budget_period: z.enum(["day", "month"], { error: () => "must be day or month" }).optional(),
  models: z
    .array(z.string({ error: "must be a model name" }), { error: "must be a list of model names" })
    .optional(),
  active: z.boolean({ error: "must be true or false" }).optional(),
  access_windows: z
    .array(
      z.string({ error: 'must be a window such as "Mon-Fri 08:00-20:00 UTC"' }).superRefine((text, ctx) => {
        try {
          parseAccessWindow(text);
        } catch (err) {
          ctx.addIssue({ code: "custom", message: (err as Error).message });
        }
      }),
      { error: "must be a list of windows" },
    )
    .optional(),
};

/** `pricing` in the gateway YAML: USD per million tokens, per model. */
export const pricingSchema = z.record(
  z.string(),
  z.strictObject({
    input_per_mtok: z.number({ error: "must be a number" }).min(0, "must be >= 0"),
    output_per_mtok: z.number({ error: "must be a number" }).min(0, "must be >= 0"),
  }),
);
export type Pricing = z.infer<typeof pricingSchema>;

export const tenantPolicySchema = z.strictObject(tenantPolicyShape);

export const schedulerFileSchema = z.strictObject({
  classes: z
    .strictObject({
      system: classSettingsSchema.nullish(),
      interactive: classSettingsSchema.nullish(),
      default: classSettingsSchema.nullish(),
      bulk: classSettingsSchema.nullish(),
    })
    .nullish(),
  tenant_policies: z.record(z.string(), tenantPolicySchema.nullish()).nullish(),
});

export type SchedulerFileConfig = z.infer<typeof schedulerFileSchema>;
export type ClassOverrides = Partial<Record<PriorityClass, Partial<ClassSettings> | null | undefined>>;

/** Turns the first zod issue into a ConfigError naming the key. */
export function toConfigError(error: z.ZodError, prefix = ""): ConfigError {
  const issue = error.issues[0];
  if (issue === undefined) return new ConfigError(prefix, "invalid");
  const path = [prefix, ...issue.path.map(String)].filter((p) => p !== "").join(".");
  if (issue.code === "unrecognized_keys") {
    const key = issue.keys[0] ?? "";
    const at = path ? `${path}.${key}` : key;
    // The mapping of class names, not any key that happens to end in "classes" (a tenant "auth:classes").
    if (issue.path.at(-1) === "classes" && issue.path.at(-2) !== "tenant_policies") {
      return new ConfigError(at, `unknown class (expected one of ${PRIORITY_CLASSES.join(", ")})`);
    }
    return new ConfigError(at, "unknown key");
  }
  return new ConfigError(path, issue.message);
}

/**
 * Resolves the per-class settings: built-in defaults with the YAML's per-class fields on top.
 * As in the contract, `reserved_per_slot` omitted from a class block that is present means 0.0
 * (purely absolute); every other omitted field keeps the class's built-in default.
 */
export function resolveClassSettings(overrides: ClassOverrides | null | undefined): ClassSettingsTable {
  const table = {} as Record<PriorityClass, ClassSettings>;
  for (const cls of PRIORITY_CLASSES) {
    const base = BUILTIN_CLASS_DEFAULTS[cls];
    const raw = overrides?.[cls];
    let override: Partial<ClassSettings> | undefined;
    if (raw !== undefined && raw !== null) {
      const parsed = classSettingsSchema.safeParse(raw);
      if (!parsed.success) throw toConfigError(parsed.error, `classes.${cls}`);
      override = parsed.data;
    }
    table[cls] = override
      ? {
          reserved_floor: override.reserved_floor ?? base.reserved_floor,
          reserved_per_slot: override.reserved_per_slot ?? 0,
          queue_size: override.queue_size ?? base.queue_size,
          queue_timeout_secs: override.queue_timeout_secs ?? base.queue_timeout_secs,
          starvation_threshold_secs: override.starvation_threshold_secs ?? base.starvation_threshold_secs,
          can_preempt: override.can_preempt ?? base.can_preempt,
        }
      : { ...base };
  }
  if (overrides) {
    for (const key of Object.keys(overrides)) {
      if (!(key in CLASS_RANK)) {
        throw new ConfigError(
          `classes.${key}`,
          `unknown class (expected one of ${PRIORITY_CLASSES.join(", ")})`,
        );
      }
    }
  }
  return table;
}

/** Validates a tenant policy map (keys are tenant keys such as `auth:acme`). */
export function resolveTenantPolicies(
  raw: Record<string, unknown> | null | undefined,
): ReadonlyMap<string, TenantPolicy> {
  const out = new Map<string, TenantPolicy>();
  if (!raw) return out;
  for (const [tenant, value] of Object.entries(raw)) {
    const parsed = tenantPolicySchema.safeParse(value ?? {});
    if (!parsed.success) throw toConfigError(parsed.error, `tenant_policies.${tenant}`);
    out.set(tenant, parsed.data);
  }
  return out;
}

export interface SchedulerFileSettings {
  classes: ClassSettingsTable;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
}

/**
 * Parses and validates the `--priority-scheduler-config` document (`classes`, `tenant_policies`).
 * An empty document means built-in defaults and no tenant policies.
 */
export function parseSchedulerConfig(doc: unknown): SchedulerFileSettings {
  if (doc === null || doc === undefined) {
    return { classes: resolveClassSettings(undefined), tenantPolicies: new Map() };
  }
  if (typeof doc !== "object" || Array.isArray(doc)) {
    throw new ConfigError("", "the priority scheduler config must be a YAML mapping");
  }
  const parsed = schedulerFileSchema.safeParse(doc);
  if (!parsed.success) throw toConfigError(parsed.error);
  return {
    classes: resolveClassSettings(parsed.data.classes as ClassOverrides),
    tenantPolicies: resolveTenantPolicies(parsed.data.tenant_policies ?? undefined),
  };
}

/** Parses YAML text into the scheduler settings; syntax errors name the line. */
export function parseSchedulerYaml(text: string): SchedulerFileSettings {
  let doc: unknown;
  try {
    doc = parseYamlText(text);
  } catch (err) {
    throw new ConfigError("", `invalid YAML: ${(err as Error).message.split("\n")[0]}`);
  }
  return parseSchedulerConfig(doc);
}

/**
 * Effective reservation per class at a capacity, before any clamping:
 * max(reserved_floor, ceil(reserved_per_slot * capacity)).
 */
export function requiredReservation(settings: Readonly<ClassSettings>, capacity: number): number {
  return Math.max(settings.reserved_floor, Math.ceil(settings.reserved_per_slot * capacity));
}

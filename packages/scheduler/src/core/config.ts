/**
 * Scheduler configuration: the per-class knobs, the tenant policies, the built-in defaults table
 * of the contract, and validation of a plain, already-parsed object whose errors name the
 * offending key (`classes.bulk.queue_timeout_secs: must be > 0`).
 *
 * No parsing library here: YAML and the file schemas live in src/config/ (zod), beside the CLI's
 * config loading. The messages below are the same ones the file schemas give, so a value is
 * reported alike whether it came from a YAML file or from `createScheduler` options
 * (test/core/config.test.ts checks that the two agree).
 */
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
  /**
   * A can_preempt class's wait target: a waiter preempts only once it has queued this long with no
   * slot freed (0 = at once on arrival, the contract's reference behaviour). Preemption throws a
   * victim's prefill away, so it is kept for waiters that would otherwise miss the target.
   */
  preempt_after_secs: number;
  /**
   * Largest share of all admissions that this class's promoted waiters may take while a higher
   * class has waiters (0..1): promotion lets a class progress, never overtake (docs/design.md).
   */
  starvation_max_share: number;
}

export type ClassSettingsTable = Readonly<Record<PriorityClass, Readonly<ClassSettings>>>;

/**
 * sluice's own key (the contract has no bound on promotion): while higher classes wait, a class's
 * promoted waiters take at most a tenth of the admissions, which is also the minimum a starving
 * class is guaranteed under sustained overload.
 */
const DEFAULT_STARVATION_MAX_SHARE = 0.1;

/** sluice's own key: how long a can_preempt waiter waits for a freed slot before it preempts. */
const DEFAULT_PREEMPT_AFTER_SECS = 0.25;

/** The contract's built-in defaults, used for any class (or field) the YAML leaves out. */
export const BUILTIN_CLASS_DEFAULTS: ClassSettingsTable = Object.freeze({
  system: Object.freeze({
    reserved_floor: 32,
    reserved_per_slot: 0.0,
    queue_size: 64,
    queue_timeout_secs: 30,
    starvation_threshold_secs: 5,
    can_preempt: true,
    preempt_after_secs: DEFAULT_PREEMPT_AFTER_SECS,
    starvation_max_share: DEFAULT_STARVATION_MAX_SHARE,
  }),
  interactive: Object.freeze({
    reserved_floor: 128,
    reserved_per_slot: 0.25,
    queue_size: 256,
    queue_timeout_secs: 30,
    starvation_threshold_secs: 5,
    can_preempt: true,
    preempt_after_secs: DEFAULT_PREEMPT_AFTER_SECS,
    starvation_max_share: DEFAULT_STARVATION_MAX_SHARE,
  }),
  default: Object.freeze({
    reserved_floor: 0,
    reserved_per_slot: 0.1,
    queue_size: 512,
    queue_timeout_secs: 60,
    starvation_threshold_secs: 30,
    can_preempt: false,
    preempt_after_secs: DEFAULT_PREEMPT_AFTER_SECS,
    starvation_max_share: DEFAULT_STARVATION_MAX_SHARE,
  }),
  bulk: Object.freeze({
    reserved_floor: 0,
    reserved_per_slot: 0.0,
    queue_size: 1024,
    queue_timeout_secs: 300,
    starvation_threshold_secs: 120,
    can_preempt: false,
    preempt_after_secs: DEFAULT_PREEMPT_AFTER_SECS,
    starvation_max_share: DEFAULT_STARVATION_MAX_SHARE,
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
  /** Per-minute request bucket: capacity and refill per minute (429 request_rate_exceeded). */
  requests_per_minute?: number | undefined;
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

/** `pricing` in the gateway YAML: USD per million tokens, per model. */
interface ModelPrice {
  input_per_mtok: number;
  output_per_mtok: number;
}
export type Pricing = Record<string, ModelPrice>;

/** Per-class overrides on top of the built-in defaults (the YAML's `classes` shape). */
export type ClassOverrides = Partial<Record<PriorityClass, Partial<ClassSettings> | null | undefined>>;

/** The keys of a class block, in the order they are checked. */
export const CLASS_SETTING_KEYS = [
  "reserved_floor",
  "reserved_per_slot",
  "queue_size",
  "queue_timeout_secs",
  "starvation_threshold_secs",
  "can_preempt",
  "preempt_after_secs",
  "starvation_max_share",
] as const satisfies readonly (keyof ClassSettings)[];

/** The keys of a tenant policy, in the order they are checked. */
export const TENANT_POLICY_KEYS = [
  "max_class",
  "weight",
  "tokens_per_minute",
  "requests_per_minute",
  "budget_tokens",
  "budget_cost_usd",
  "budget_period",
  "models",
  "active",
  "access_windows",
] as const satisfies readonly (keyof TenantPolicy)[];

/** The messages every validator of these settings gives (the file schemas in src/config too). */
export const CONFIG_MESSAGES = {
  mapping: "must be a mapping",
  number: "must be a number",
  integer: "must be an integer",
  atLeastZero: "must be >= 0",
  aboveZero: "must be > 0",
  share: "must be a finite number >= 0",
  fraction: "must be a number from 0 to 1",
  boolean: "must be true or false",
  className: `must be one of ${PRIORITY_CLASSES.join(", ")}`,
  period: "must be day or month",
  models: "must be a list of model names",
  model: "must be a model name",
  windows: "must be a list of windows",
  window: 'must be a window such as "Mon-Fri 08:00-20:00 UTC"',
  unknownKey: "unknown key",
  unknownClass: `unknown class (expected one of ${PRIORITY_CLASSES.join(", ")})`,
} as const;

const M = CONFIG_MESSAGES;

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A finite number (NaN and infinities are not numbers here, as in the file schemas). */
function finite(value: unknown, path: string): number {
  if (typeof value !== "number" || !Number.isFinite(value)) throw new ConfigError(path, M.number);
  return value;
}

function nonNegativeInt(value: unknown, path: string): number {
  const n = finite(value, path);
  if (!Number.isSafeInteger(n)) throw new ConfigError(path, M.integer);
  if (n < 0) throw new ConfigError(path, M.atLeastZero);
  return n;
}

function positive(value: unknown, path: string): number {
  const n = finite(value, path);
  if (!(n > 0)) throw new ConfigError(path, M.aboveZero);
  return n;
}

function nonNegative(value: unknown, path: string): number {
  const n = finite(value, path);
  if (n < 0) throw new ConfigError(path, M.atLeastZero);
  return n;
}

function bool(value: unknown, path: string): boolean {
  if (typeof value !== "boolean") throw new ConfigError(path, M.boolean);
  return value;
}

/** Throws for the first key of `raw` outside `known` (checked after the known keys, as zod does). */
function rejectUnknownKeys(raw: Record<string, unknown>, known: readonly string[], path: string): void {
  for (const key of Object.keys(raw)) {
    if (!known.includes(key)) throw new ConfigError(path ? `${path}.${key}` : key, M.unknownKey);
  }
}

/**
 * Validates one class block (`classes.<class>`): every field optional, no other key. Returns a
 * copy holding only the fields that were given.
 */
export function validateClassBlock(raw: unknown, path: string): Partial<ClassSettings> {
  if (!isMapping(raw)) throw new ConfigError(path, M.mapping);
  const out: Partial<ClassSettings> = {};
  const at = (key: string) => `${path}.${key}`;
  if (raw.reserved_floor !== undefined)
    out.reserved_floor = nonNegativeInt(raw.reserved_floor, at("reserved_floor"));
  if (raw.reserved_per_slot !== undefined) {
    const share = raw.reserved_per_slot;
    if (typeof share !== "number" || !Number.isFinite(share) || share < 0) {
      throw new ConfigError(at("reserved_per_slot"), M.share);
    }
    out.reserved_per_slot = share;
  }
  if (raw.queue_size !== undefined) out.queue_size = nonNegativeInt(raw.queue_size, at("queue_size"));
  if (raw.queue_timeout_secs !== undefined) {
    out.queue_timeout_secs = positive(raw.queue_timeout_secs, at("queue_timeout_secs"));
  }
  if (raw.starvation_threshold_secs !== undefined) {
    out.starvation_threshold_secs = positive(raw.starvation_threshold_secs, at("starvation_threshold_secs"));
  }
  if (raw.can_preempt !== undefined) out.can_preempt = bool(raw.can_preempt, at("can_preempt"));
  if (raw.preempt_after_secs !== undefined) {
    out.preempt_after_secs = nonNegative(raw.preempt_after_secs, at("preempt_after_secs"));
  }
  if (raw.starvation_max_share !== undefined) {
    const share = raw.starvation_max_share;
    if (typeof share !== "number" || !(share >= 0 && share <= 1)) {
      throw new ConfigError(at("starvation_max_share"), M.fraction);
    }
    out.starvation_max_share = share;
  }
  rejectUnknownKeys(raw, CLASS_SETTING_KEYS, path);
  return out;
}

/** Validates one tenant policy (`tenant_policies.<tenant>`); null or absent is an empty policy. */
export function validateTenantPolicy(raw: unknown, path: string): TenantPolicy {
  if (raw === null || raw === undefined) return {};
  if (!isMapping(raw)) throw new ConfigError(path, M.mapping);
  const out: TenantPolicy = {};
  const at = (key: string) => `${path}.${key}`;
  if (raw.max_class !== undefined) {
    if (typeof raw.max_class !== "string" || !isClassName(raw.max_class)) {
      throw new ConfigError(at("max_class"), M.className);
    }
    out.max_class = raw.max_class;
  }
  if (raw.weight !== undefined) out.weight = positive(raw.weight, at("weight"));
  if (raw.tokens_per_minute !== undefined) {
    out.tokens_per_minute = positive(raw.tokens_per_minute, at("tokens_per_minute"));
  }
  if (raw.requests_per_minute !== undefined) {
    out.requests_per_minute = positive(raw.requests_per_minute, at("requests_per_minute"));
  }
  if (raw.budget_tokens !== undefined)
    out.budget_tokens = nonNegative(raw.budget_tokens, at("budget_tokens"));
  if (raw.budget_cost_usd !== undefined) {
    out.budget_cost_usd = nonNegative(raw.budget_cost_usd, at("budget_cost_usd"));
  }
  if (raw.budget_period !== undefined) {
    if (raw.budget_period !== "day" && raw.budget_period !== "month") {
      throw new ConfigError(at("budget_period"), M.period);
    }
    out.budget_period = raw.budget_period;
  }
  if (raw.models !== undefined) {
    const models = raw.models;
    if (!Array.isArray(models)) throw new ConfigError(at("models"), M.models);
    models.forEach((model, i) => {
      if (typeof model !== "string") throw new ConfigError(`${at("models")}.${i}`, M.model);
    });
    out.models = [...(models as string[])];
  }
  if (raw.active !== undefined) out.active = bool(raw.active, at("active"));
  if (raw.access_windows !== undefined) {
    const windows = raw.access_windows;
    if (!Array.isArray(windows)) throw new ConfigError(at("access_windows"), M.windows);
    windows.forEach((text, i) => {
      const where = `${at("access_windows")}.${i}`;
      if (typeof text !== "string") throw new ConfigError(where, M.window);
      try {
        parseAccessWindow(text);
      } catch (err) {
        throw new ConfigError(where, (err as Error).message);
      }
    });
    out.access_windows = [...(windows as string[])];
  }
  rejectUnknownKeys(raw, TENANT_POLICY_KEYS, path);
  return out;
}

function isClassName(value: string): value is PriorityClass {
  return Object.hasOwn(CLASS_RANK, value);
}

/**
 * Resolves the per-class settings: built-in defaults with the given per-class fields on top, each
 * validated. As in the contract, `reserved_per_slot` omitted from a class block that is present
 * means 0.0 (purely absolute); every other omitted field keeps the class's built-in default. A
 * complete table (every field of every class) resolves to itself.
 */
export function resolveClassSettings(
  overrides: ClassOverrides | ClassSettingsTable | null | undefined,
): ClassSettingsTable {
  if (overrides !== null && overrides !== undefined && !isMapping(overrides)) {
    throw new ConfigError("classes", M.mapping);
  }
  const raw = (overrides ?? {}) as Record<string, unknown>;
  const table = {} as Record<PriorityClass, ClassSettings>;
  for (const cls of PRIORITY_CLASSES) {
    const base = BUILTIN_CLASS_DEFAULTS[cls];
    const block = raw[cls];
    const override =
      block === undefined || block === null ? undefined : validateClassBlock(block, `classes.${cls}`);
    table[cls] = override
      ? {
          reserved_floor: override.reserved_floor ?? base.reserved_floor,
          reserved_per_slot: override.reserved_per_slot ?? 0,
          queue_size: override.queue_size ?? base.queue_size,
          queue_timeout_secs: override.queue_timeout_secs ?? base.queue_timeout_secs,
          starvation_threshold_secs: override.starvation_threshold_secs ?? base.starvation_threshold_secs,
          can_preempt: override.can_preempt ?? base.can_preempt,
          preempt_after_secs: override.preempt_after_secs ?? base.preempt_after_secs,
          starvation_max_share: override.starvation_max_share ?? base.starvation_max_share,
        }
      : { ...base };
  }
  for (const key of Object.keys(raw)) {
    if (!isClassName(key)) throw new ConfigError(`classes.${key}`, M.unknownClass);
  }
  return table;
}

/** Validates a tenant policy map (keys are tenant keys such as `auth:acme`). */
export function resolveTenantPolicies(
  raw: ReadonlyMap<string, unknown> | Record<string, unknown> | null | undefined,
): ReadonlyMap<string, TenantPolicy> {
  const out = new Map<string, TenantPolicy>();
  if (raw === null || raw === undefined) return out;
  const entries = raw instanceof Map ? raw.entries() : Object.entries(raw);
  for (const [tenant, value] of entries) {
    out.set(tenant, validateTenantPolicy(value, `tenant_policies.${tenant}`));
  }
  return out;
}

/**
 * Effective reservation per class at a capacity, before any clamping:
 * max(reserved_floor, ceil(reserved_per_slot * capacity)).
 */
export function requiredReservation(settings: Readonly<ClassSettings>, capacity: number): number {
  return Math.max(settings.reserved_floor, Math.ceil(settings.reserved_per_slot * capacity));
}

/** The priority-scheduler settings once a file (or any source) has been parsed and validated. */
export interface SchedulerFileSettings {
  classes: ClassSettingsTable;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
}

/**
 * Scenario files: the YAML schema (zod, every error naming its key like the rest of sluice's
 * configuration, e.g. `scenario.yaml: tenants.0.arrival.rate: must be > 0`) and its resolution into
 * what the simulator runs: workers with their profiles, tenants with their samplers' specs, phases
 * as timed effects, and the policy, read with the gateway's own parsers so a scenario can point at
 * production files (`policy.scheduler_config`, `policy.gateway_config`).
 * docs/simulate.md documents every key.
 */
import { readFileSync } from "node:fs";
import { basename, dirname, isAbsolute, resolve } from "node:path";
import { PRIORITY_CLASSES, type PriorityClass } from "@sluice/scheduler/core/class.js";
import {
  type ClassSettingsTable,
  type Pricing,
  requiredReservation,
  resolveTenantPolicies,
  type TenantPolicy,
} from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { resolveAdaptiveLimitOptions } from "../capacity/adaptive-limit.js";
import {
  CAPACITY_UNITS,
  DEFAULT_KV_TARGET_UTILIZATION,
  type KvCapacitySettings,
  validTargetUtilization,
} from "../capacity/kv-budget.js";
import { rejectAdaptiveTuning } from "../config/adaptive-tuning.js";
import { pricingSchema } from "../config/pricing.js";
import { parseSchedulerConfig, parseSchedulerYaml } from "../config/scheduler-file.js";
import { formPools } from "../gateway/fleet/pool-formation.js";
import { LoadShedding, type LoadSheddingOptions, resolveShedding } from "../shedding/load-shedding.js";
import { EventQueue, SimClock } from "./clock.js";
import { type KvPolicy, PROFILE_NAMES, WORKER_PROFILES, type WorkerProfile } from "./profiles.js";
import { alignReplays, loadReplay, type ReplayTrace } from "./replay.js";
import { type LengthSpec, loadTrace, type Trace } from "./workload.js";

export const POLICY_NAMES = ["fifo", "strict", "sluice", "sluice-adaptive"] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];
/** The policies a scenario runs when it lists none. */
const DEFAULT_POLICIES: readonly PolicyName[] = ["fifo", "strict", "sluice"];
/** Policies that run sluice's core (budgets, the tenant policy, shedding, adaptive capacity). */
export const SLUICE_POLICIES: readonly PolicyName[] = ["sluice", "sluice-adaptive"];

export const CAPACITY_MODES = ["static", "adaptive"] as const;
export type CapacityMode = (typeof CAPACITY_MODES)[number];

const ROUTINGS = ["least_loaded", "round_robin", "power_of_two"] as const;
export type Routing = (typeof ROUTINGS)[number];

const METRICS = [
  "weighted_share_error",
  "jain_index",
  "service_gap_vtc_ratio",
  "queue_wait_p99_ms",
  "queue_wait_p50_ms",
  "ttft_p99_ms",
  "e2e_p99_ms",
  "rejected_fraction",
  "slo_attainment",
  "entitlement_ratio",
  "goodput_rps",
  "tpot_p99_ms",
  "tpot_slo_attainment",
  "shed_fraction",
  "shed_inversions",
  "convergence_secs",
  "limit_median",
  "tpot_baseline_ms",
] as const;
export type MetricName = (typeof METRICS)[number];
/** Metrics of the whole fleet: an expectation gives no class. */
const FLEET_METRICS: readonly MetricName[] = ["convergence_secs", "limit_median", "tpot_baseline_ms"];
/** Metrics over every class when an expectation gives none. */
const ANY_CLASS_METRICS: readonly MetricName[] = ["goodput_rps", "tpot_p99_ms"];
/** Fairness among a class's tenants, kept per model pool. */
const FAIRNESS_METRICS: readonly MetricName[] = [
  "weighted_share_error",
  "jain_index",
  "service_gap_vtc_ratio",
];
/** Metrics an expectation may measure in one model's pool (`model:`); without a class, over its classes. */
const POOL_METRICS: readonly MetricName[] = [
  ...FAIRNESS_METRICS,
  "queue_wait_p99_ms",
  "queue_wait_p50_ms",
  "ttft_p99_ms",
  "e2e_p99_ms",
  "rejected_fraction",
  "slo_attainment",
  "tpot_p99_ms",
];

// --- schema ------------------------------------------------------------------------------------

const UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };

/** Seconds: a number, or a string such as "500ms", "90s", "10m", "1.5h", "1d". */
const secs = z.union([z.number({ error: "must be a duration" }), z.string()]).transform((v, ctx) => {
  if (typeof v === "number") {
    if (!Number.isFinite(v) || v < 0) {
      ctx.addIssue({ code: "custom", message: "must be a duration >= 0 (seconds, or e.g. 90s, 10m, 1h)" });
      return z.NEVER;
    }
    return v;
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(v);
  if (!m) {
    ctx.addIssue({
      code: "custom",
      message: `must be a duration (seconds, or e.g. 90s, 10m, 1h), got "${v}"`,
    });
    return z.NEVER;
  }
  return Number(m[1]) * UNITS[m[2] ?? "s"]!;
});
const positiveSecs = secs.refine((v) => v > 0, "must be > 0");

const num = () => z.number({ error: "must be a number" });
const posNum = () => num().gt(0, "must be > 0");
const nonNegNum = () => num().min(0, "must be >= 0");
const posInt = () => num().int("must be an integer").min(1, "must be >= 1");
const nonNegInt = () => num().int("must be an integer").min(0, "must be >= 0");
const modelName = () => z.string({ error: "must be a model name" }).min(1, "must not be empty");
const classEnum = z.enum(PRIORITY_CLASSES, {
  error: () => `must be one of ${PRIORITY_CLASSES.join(", ")}`,
});

const lengthSchema = z.preprocess(
  (v) => (typeof v === "number" ? { dist: "fixed", value: v } : v),
  z.discriminatedUnion(
    "dist",
    [
      z.strictObject({ dist: z.literal("fixed"), value: posInt() }),
      z
        .strictObject({ dist: z.literal("uniform"), min: posInt(), max: posInt() })
        .refine((d) => d.min <= d.max, { message: "must be >= min", path: ["max"] }),
      z.strictObject({
        dist: z.literal("lognormal"),
        median: posNum(),
        sigma: nonNegNum(),
        min: posInt().optional(),
        max: posInt().optional(),
      }),
      z.strictObject({
        dist: z.literal("normal"),
        mean: posNum(),
        stddev: nonNegNum(),
        min: posInt().optional(),
        max: posInt().optional(),
      }),
    ],
    { error: "must be a token count or {dist: fixed | uniform | lognormal | normal, ...}" },
  ),
);

const arrivalSchema = z.discriminatedUnion(
  "process",
  [
    z.strictObject({ process: z.literal("poisson"), rate: posNum() }),
    z.strictObject({ process: z.literal("bursty"), rate: posNum(), on: positiveSecs, off: positiveSecs }),
    z.strictObject({ process: z.literal("closed"), users: posInt(), think: secs }),
    z.strictObject({
      process: z.literal("replay"),
      path: z.string({ error: "must be a file path" }).min(1, "must be a file path"),
      timestamp: z.string().min(1).optional(),
      timestamp_unit: z.enum(["s", "ms"], { error: () => "must be s or ms" }).optional(),
      prompt_tokens: z.string({ error: "must be a column name" }).min(1).optional(),
      output_tokens: z.string({ error: "must be a column name" }).min(1).optional(),
      prefix_blocks: z.string({ error: "must be a column name" }).min(1).optional(),
      prefix_block_tokens: posInt().optional(),
      speed: posNum().optional(),
      start: secs.optional(),
      split: z
        .strictObject({ of: num().int("must be an integer").min(2, "must be >= 2"), part: nonNegInt() })
        .refine((v) => v.part < v.of, { message: "must be < of", path: ["part"] })
        .optional(),
    }),
  ],
  { error: "must be {process: poisson | bursty | closed | replay, ...}" },
);

/** What a client does with a refusal: re-send it (issue 36), after the Retry-After or a backoff. */
const retrySchema = z.strictObject({
  statuses: z
    .array(
      num()
        .int("must be an integer")
        .min(400, "must be an HTTP status >= 400")
        .max(599, "must be an HTTP status <= 599"),
      {
        error: "must be a list of HTTP statuses",
      },
    )
    .optional(),
  max_attempts: posInt().optional(),
  honor_retry_after: z.boolean({ error: "must be true or false" }).optional(),
});

const tenantSchema = z.strictObject({
  name: z
    .string({ error: "must be a string" })
    .regex(/^[A-Za-z0-9_.:-]+$/, "must be letters, digits, '_', '.', ':' or '-'"),
  key: z.string({ error: "must be a string" }).min(1, "must not be empty").optional(),
  weight: posNum().optional(),
  max_class: classEnum.optional(),
  tenant_policy: z
    .record(z.string(), z.unknown(), { error: "must be a mapping (a tenant policy)" })
    .optional(),
  class: classEnum.optional(),
  classes: z.record(classEnum, nonNegNum(), { error: "must map class names to shares" }).optional(),
  arrival: arrivalSchema,
  retry: retrySchema.optional(),
  diurnal: z
    .strictObject({
      period: positiveSecs,
      amplitude: num().min(0, "must be between 0 and 1").max(1, "must be between 0 and 1"),
      peak: secs.optional(),
    })
    .optional(),
  prompt_tokens: lengthSchema.optional(),
  output_tokens: lengthSchema.optional(),
  trace: z
    .union([
      z.string(),
      z.strictObject({ path: z.string(), order: z.enum(["random", "sequential"]).optional() }),
    ])
    .optional(),
  max_tokens: lengthSchema.optional(),
  prompt_estimate_error: num()
    .min(0, "must be between 0 and 0.9")
    .max(0.9, "must be between 0 and 0.9")
    .optional(),
  patience: positiveSecs.optional(),
  sessions: posInt().optional(),
  model: modelName().optional(),
});

const workerRef = z.union([nonNegInt(), z.string()]);

const workerGroupSchema = z.strictObject({
  count: posInt().optional(),
  profile: z.enum(PROFILE_NAMES as [string, ...string[]], {
    error: () => `must be one of ${PROFILE_NAMES.join(", ")}`,
  }),
  name: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, "must be letters, digits, '_', '.' or '-'")
    .optional(),
  max_running: posInt().optional(),
  kv_tokens: posInt().optional(),
  max_batched_tokens: posInt().optional(),
  beta: z
    .tuple([posNum(), nonNegNum(), nonNegNum()], { error: "must be [beta0, beta1, beta2] in microseconds" })
    .optional(),
  kv_policy: z.enum(["recompute", "reserve"], { error: () => "must be recompute or reserve" }).optional(),
  attention: z.boolean({ error: "must be true or false" }).optional(),
  models: z
    .array(modelName(), { error: "must be a list of model names" })
    .min(1, "must list at least one model")
    .optional(),
});

const phaseSchema = z.strictObject({
  name: z.string().optional(),
  at: secs,
  until: secs.optional(),
  rate: z
    .strictObject({
      tenants: z.array(z.string()).min(1, "must name at least one tenant"),
      multiplier: nonNegNum().optional(),
      rate: nonNegNum().optional(),
    })
    .refine((r) => (r.multiplier === undefined) !== (r.rate === undefined), {
      message: "give exactly one of multiplier and rate",
    })
    .optional(),
  slowdown: z
    .strictObject({ workers: z.array(workerRef).min(1, "must name at least one worker"), factor: posNum() })
    .optional(),
  fail: z.strictObject({ workers: z.array(workerRef).min(1, "must name at least one worker") }).optional(),
  capacity: nonNegInt().optional(),
});

const sloSchema = z.strictObject({
  ttft_ms: posNum().optional(),
  tpot_ms: posNum().optional(),
  e2e_ms: posNum().optional(),
});

const expectSchema = z
  .strictObject({
    metric: z.enum(METRICS, { error: () => `must be one of ${METRICS.join(", ")}` }),
    class: classEnum.optional(),
    during: z.string().optional(),
    relative_to: z.string().optional(),
    max: num().optional(),
    min: num().optional(),
    label: z.string().optional(),
    model: modelName().optional(),
  })
  .refine((e) => e.max !== undefined || e.min !== undefined, { message: "give max or min" });

const sheddableClass = z.enum(["bulk", "default", "interactive"], {
  error: () => "must be bulk, default or interactive (system is never shed)",
});

/** The gateway's `load_shedding` block (prioritized shedding), same keys. */
const loadSheddingSchema = z.strictObject({
  max_queue_wait_ms: posNum().optional(),
  usage_half_life_secs: posNum().optional(),
  codel_classes: z.array(sheddableClass, { error: "must be a list of classes" }).optional(),
  codel_target_ms: posNum().optional(),
  codel_interval_ms: posNum().optional(),
});

/** The gateway's `keyed_shedding` block, same keys. */
const keyedSheddingSchema = z.strictObject({
  header: z.string({ error: "must be a header name" }).min(1, "must be a header name").optional(),
  classes: z.array(sheddableClass, { error: "must be a list of classes" }).optional(),
  target_delay_ms: posNum().optional(),
  rotation_window_secs: posNum().optional(),
  decrease_fraction: posNum().lt(1, "must be < 1").optional(),
  increase_step: posNum().max(100, "must be <= 100").optional(),
  min_percent: num().min(0, "must be >= 0").max(100, "must be <= 100").optional(),
});

/** Issue 12's gateway keys (capacity mode, adaptive bounds and SLOs, shedding), in `policy:` and the gateway file. */
function capacitySchemaShape() {
  return {
    // Removed; kept in the shape so its error says what replaced it (config/adaptive-tuning.ts).
    adaptive_tuning: z.unknown().optional(),
    capacity_mode: z
      .enum(CAPACITY_MODES, { error: () => `must be one of ${CAPACITY_MODES.join(", ")}` })
      .optional(),
    adaptive_min_capacity: posInt().optional(),
    adaptive_max_capacity: posInt().optional(),
    tpot_slo_ms: posNum().optional(),
    ttft_slo_ms: posNum().optional(),
    load_shedding: z
      .union([z.literal(false, { error: "must be false or a mapping" }), loadSheddingSchema])
      .optional(),
    keyed_shedding: keyedSheddingSchema.optional(),
    capacity_unit: z
      .enum(CAPACITY_UNITS, { error: () => `must be one of ${CAPACITY_UNITS.join(", ")}` })
      .optional(),
    kv_target_utilization: num().refine(validTargetUtilization, "must be a number > 0 and <= 1").optional(),
  };
}

const policySchema = z.strictObject({
  scheduler_config: z.string().optional(),
  scheduler: z.unknown().optional(),
  gateway_config: z.string().optional(),
  default_max_class: classEnum.optional(),
  capacity: posInt().optional(),
  legacy: z
    .strictObject({
      max_concurrent_requests: num()
        .int("must be an integer")
        .refine((n) => n === -1 || n >= 1, "must be -1 (unlimited) or an integer >= 1")
        .optional(),
      queue_size: nonNegInt().optional(),
      queue_timeout_secs: posNum().optional(),
    })
    .optional(),
  strict: z.strictObject({ wakeup_ms: nonNegNum().optional() }).optional(),
  pricing: pricingSchema.optional(),
  ...capacitySchemaShape(),
});

const scenarioSchema = z.strictObject({
  name: z.string().optional(),
  description: z.string().optional(),
  seed: nonNegInt().optional(),
  duration: positiveSecs.optional(),
  drain: secs.optional(),
  start: z
    .string()
    .refine((s) => !Number.isNaN(Date.parse(s)), "must be an ISO date, e.g. 2026-01-05T00:00:00Z")
    .optional(),
  workers: z.array(workerGroupSchema).min(1, "must list at least one worker"),
  default_model: modelName().optional(),
  routing: z.enum(ROUTINGS, { error: () => `must be one of ${ROUTINGS.join(", ")}` }).optional(),
  tenants: z.array(tenantSchema).min(1, "must list at least one tenant"),
  phases: z.array(phaseSchema).optional(),
  policy: policySchema.optional(),
  policies: z
    .array(z.enum(POLICY_NAMES, { error: () => `must be one of ${POLICY_NAMES.join(", ")}` }))
    .min(1, "must list at least one policy")
    .optional(),
  slo: z.partialRecord(classEnum, sloSchema, { error: "must map class names to SLOs" }).optional(),
  expect: z.array(expectSchema).optional(),
  report: z.strictObject({ bucket: positiveSecs.optional(), slo_window: positiveSecs.optional() }).optional(),
});

/** The first zod issue as a ConfigError naming `label: path`. */
function issueError(error: z.ZodError, label: string, doc: unknown): ConfigError {
  let issue = error.issues[0]!;
  let parts = issue.path.map(String);
  let value: unknown = doc;
  for (let i = 0; i < issue.path.length; i++) {
    if (value === null || typeof value !== "object") {
      // A shorthand the schema expanded (a bare token count for {dist: fixed, value}): name what was written.
      parts = parts.slice(0, i);
      break;
    }
    value = (value as Record<PropertyKey, unknown>)[issue.path[i] as PropertyKey];
  }
  let message = issue.message;
  if (issue.code === "invalid_union" && !("discriminator" in issue) && value !== undefined) {
    // A plain union (e.g. a duration: seconds or "10m"): report the complaint of the branch that
    // took the value's shape (one inside it, as for a mapping with a bad key), else the first's.
    const firsts = issue.errors.map((e) => e[0]).filter((e) => e !== undefined);
    issue = firsts.find((e) => e.path.length > 0 || e.code === "unrecognized_keys") ?? firsts[0] ?? issue;
    parts.push(...issue.path.map(String));
    message = issue.message;
  }
  if (issue.code === "unrecognized_keys") {
    parts.push(issue.keys[0] ?? "");
    message = "unknown key";
  } else if (value === undefined && (issue.code === "invalid_type" || issue.code === "invalid_union")) {
    message = "is required";
  } else if (issue.code === "invalid_union" && "discriminator" in issue) {
    message = `must be one of ${(issue as unknown as { options: unknown[] }).options.join(", ")}`;
  } else if (issue.code === "invalid_type" && message.startsWith("Invalid input")) {
    message = `must be ${article(String(issue.expected))}`;
  }
  const path = parts.join(".");
  return new ConfigError(path ? `${label}: ${path}` : label, message);
}

function article(expected: string): string {
  const noun = expected === "object" ? "mapping" : expected === "array" ? "list" : expected;
  return /^[aeiou]/.test(noun) ? `an ${noun}` : `a ${noun}`;
}

/** A readable default label for an expectation, e.g. "interactive p99 queue wait <= 100 ms during flood". */
function expectationLabel(
  metric: MetricName,
  cls: PriorityClass | undefined,
  min: number | undefined,
  max: number | undefined,
  during: string | undefined,
  relativeTo?: string | undefined,
  model?: string | undefined,
): string {
  const pc = (v: number) => `${Math.round(v * 1000) / 10}%`;
  const msf = (v: number) => `${v} ms`;
  const labels: Record<MetricName, [string, (v: number) => string]> = {
    weighted_share_error: ["token shares off their weights by", pc],
    jain_index: ["Jain's index over tokens/weight", String],
    service_gap_vtc_ratio: ["largest service gap, in VTC bounds,", (v) => `${v}x`],
    queue_wait_p99_ms: ["p99 queue wait", msf],
    queue_wait_p50_ms: ["median queue wait", msf],
    ttft_p99_ms: ["p99 time to first token", msf],
    e2e_p99_ms: ["p99 end-to-end latency", msf],
    rejected_fraction: ["rejected or failed", pc],
    slo_attainment: ["requests within SLO", pc],
    entitlement_ratio: ["slots held, of its entitlement,", pc],
    goodput_rps: ["goodput after convergence", (v) => `${v} req/s`],
    tpot_p99_ms: ["p99 time per output token", msf],
    tpot_slo_attainment: ["SLO windows after convergence with p99 TPOT within SLO", pc],
    shed_fraction: ["shed at the door", pc],
    shed_inversions: ["requests shed while a lower class got in", String],
    convergence_secs: ["capacity limit converged (within 20% of its final median) in", (v) => `${v} s`],
    limit_median: ["capacity limit, median over the second half,", String],
    tpot_baseline_ms: ["adaptive TPOT baseline, median,", msf],
  };
  const [what, fmt0] = labels[metric];
  const fmt = relativeTo === undefined ? fmt0 : (v: number) => `${v}x`;
  const bounds = [min !== undefined ? `>= ${fmt(min)}` : "", max !== undefined ? `<= ${fmt(max)}` : ""]
    .filter(Boolean)
    .join(" and ");
  const rel =
    relativeTo === undefined ? "" : ` (relative to ${relativeTo === "all" ? "the whole run" : relativeTo})`;
  const who = model === undefined ? (cls ?? "fleet") : `${model} ${cls ?? "(all classes)"}`;
  return `${who} ${what}${rel} ${bounds}${during ? ` during ${during}` : ""}`;
}

// --- resolution --------------------------------------------------------------------------------

interface ResolvedWorker {
  name: string;
  profileName: string;
  profile: WorkerProfile;
  /** The models it serves (`models`, else the default model). */
  models: string[];
}

/** A model pool: the workers that serve a connected group of models (gateway/pool-formation.ts). */
interface ScenarioPool {
  /** Its alphabetically first model. */
  name: string;
  /** Sorted. */
  models: string[];
  /** Indexes into `workers`, ascending. */
  workers: number[];
}

export interface ResolvedTenant {
  name: string;
  key: string;
  /** Requested classes (x-smg-priority) with their probabilities, in class order. */
  mix: { cls: PriorityClass; p: number }[];
  arrival:
    | { process: "poisson"; rate: number }
    | { process: "bursty"; rate: number; onMs: number; offMs: number }
    | { process: "closed"; users: number; thinkMs: number }
    | { process: "replay"; trace: ReplayTrace; speed: number; startMs: number };
  /** Re-sending refused requests (undefined: the client gives up at the first refusal). */
  retry: RetryPolicy | undefined;
  diurnal: { periodMs: number; amplitude: number; peakMs: number } | undefined;
  prompt: LengthSpec | undefined;
  output: LengthSpec | undefined;
  trace: { trace: Trace; order: "random" | "sequential" } | undefined;
  maxTokens: LengthSpec | undefined;
  promptEstimateError: number;
  patienceMs: number | undefined;
  /** Session ids its requests carry (the keyed-shedding header), or undefined for none. */
  sessions: number | undefined;
  /** The model its requests ask for (`model`, else the default model). */
  model: string;
  /** The body's `model` as the tenant sends it (undefined: none, routed by the default model). */
  modelNamed: string | undefined;
}

interface RetryPolicy {
  statuses: number[];
  /** Attempts in all, the first included. */
  maxAttempts: number;
  honorRetryAfter: boolean;
}

/** Retry defaults: a client that re-sends 429 and 503 up to three attempts, after the Retry-After. */
const RETRY_DEFAULTS: RetryPolicy = { statuses: [429, 503], maxAttempts: 3, honorRetryAfter: true };

export interface ResolvedPhase {
  name: string;
  fromMs: number;
  toMs: number;
  rate: { tenants: string[]; multiplier?: number | undefined; rate?: number | undefined } | undefined;
  slowdown: { workers: number[]; factor: number } | undefined;
  fail: { workers: number[] } | undefined;
  capacity: number | undefined;
}

export interface Expectation {
  metric: MetricName;
  /** Undefined: the fleet (FLEET_METRICS) or every class (ANY_CLASS_METRICS). */
  cls: PriorityClass | undefined;
  during: string | undefined;
  /** The value is divided by the same metric over this phase ("all": the whole run). */
  relativeTo: string | undefined;
  max: number | undefined;
  min: number | undefined;
  label: string;
  /** Measured in this model's pool only (POOL_METRICS). */
  model: string | undefined;
}

interface Slo {
  ttftMs?: number | undefined;
  tpotMs?: number | undefined;
  e2eMs?: number | undefined;
}

export interface Scenario {
  /** File label used in errors and reports (the file's base name). */
  file: string;
  name: string;
  description: string;
  seed: number;
  durationMs: number;
  /** How long after the last arrival the run may continue to let queued and running work finish. */
  drainMs: number;
  epochStartMs: number;
  workers: ResolvedWorker[];
  /** What workers that list no `models` serve, and tenants that name none ask for. */
  defaultModel: string;
  /** The model pools the workers form, sorted by name (one for a scenario that names no models). */
  pools: ScenarioPool[];
  routing: Routing;
  tenants: ResolvedTenant[];
  phases: ResolvedPhase[];
  classes: ClassSettingsTable;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
  defaultMaxClass: PriorityClass;
  pricing: Pricing;
  /** A fixed scheduler capacity instead of the sum of healthy workers' max_running. */
  capacityPin: number | undefined;
  legacy: { maxConcurrentRequests: number | undefined; queueSize: number; queueTimeoutSecs: number };
  strict: { wakeupMs: number };
  policies: PolicyName[];
  slo: Record<PriorityClass, Slo>;
  expectations: Expectation[];
  bucketMs: number;
  /** The windows SLO attainment and per-window p99 TPOT are measured over (report.slo_window). */
  sloWindowMs: number;
  /** Capacity for the sluice policies: the mode `sluice` runs (`sluice-adaptive` is always adaptive). */
  capacity: CapacitySettings;
  /** Shedding at the door for the sluice policies; undefined when neither block is given. */
  shedding: LoadSheddingOptions | undefined;
}

interface CapacitySettings {
  mode: CapacityMode;
  /** Resolved bounds (adaptive_max_capacity defaults to the fleet's reported capacity). */
  minCapacity: number;
  maxCapacity: number;
  tpotSloMs: number | undefined;
  ttftSloMs: number | undefined;
  /** `capacity_unit` and `kv_target_utilization` (the sluice policies). */
  kv: KvCapacitySettings;
}

export interface ScenarioOverrides {
  seed?: number | undefined;
  /** Seconds: arrivals stop here instead of at the scenario's duration (phases keep their times). */
  durationSecs?: number | undefined;
  policies?: PolicyName[] | undefined;
  /** Multiplies every replay's speed (`--speed`). */
  speed?: number | undefined;
}

/** The model of workers that list no `models` and tenants that name none, when `default_model` is not given. */
const DEFAULT_MODEL = "default";

const DEFAULT_SLO: Record<PriorityClass, Slo> = {
  system: { ttftMs: 1000, tpotMs: 100 },
  interactive: { ttftMs: 2000, tpotMs: 100 },
  default: { ttftMs: 10000, tpotMs: 200 },
  bulk: {},
};

function readText(path: string, label: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(label, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? err}`);
  }
}

/** Loads, validates and resolves a scenario file. Relative paths inside resolve against its directory. */
export function loadScenario(path: string, overrides: ScenarioOverrides = {}): Scenario {
  const file = basename(path);
  const text = readText(path, file);
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(file, `invalid YAML: ${(err as Error).message.split("\n")[0]}`);
  }
  return resolveScenario(doc, { file, baseDir: dirname(resolve(path)) }, overrides);
}

/** Validates and resolves a scenario document (already parsed from YAML). */
export function resolveScenario(
  doc: unknown,
  where: { file: string; baseDir: string },
  overrides: ScenarioOverrides = {},
): Scenario {
  const { file, baseDir } = where;
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    throw new ConfigError(file, "must be a YAML mapping");
  }
  const parsed = scenarioSchema.safeParse(doc);
  if (!parsed.success) throw issueError(parsed.error, file, doc);
  const s = parsed.data;
  const at = (p: string) => `${file}: ${p}`;
  const rel = (p: string) => (isAbsolute(p) ? p : resolve(baseDir, p));

  // `duration` may be left out when tenants replay traces: arrivals then run to the last replayed row.
  let durationMs = (overrides.durationSecs ?? s.duration ?? 0) * 1000;

  // Workers: groups expand to w0, w1, ... (or <name>-0, <name>-1 for a named group).
  const defaultModel = s.default_model ?? DEFAULT_MODEL;
  const workers: ResolvedWorker[] = [];
  s.workers.forEach((g, gi) => {
    const models = g.models ?? [defaultModel];
    const dup = models.findIndex((m, j) => models.indexOf(m) !== j);
    if (dup >= 0) throw new ConfigError(at(`workers.${gi}.models.${dup}`), `duplicate model ${models[dup]}`);
    const base = WORKER_PROFILES[g.profile]!;
    const profile: WorkerProfile = {
      beta0: g.beta?.[0] ?? base.beta0,
      beta1: g.beta?.[1] ?? base.beta1,
      beta2: g.beta?.[2] ?? base.beta2,
      maxRunning: g.max_running ?? base.maxRunning,
      kvTokens: g.kv_tokens ?? base.kvTokens,
      maxBatchedTokens: g.max_batched_tokens ?? base.maxBatchedTokens,
      kvPolicy: (g.kv_policy as KvPolicy | undefined) ?? base.kvPolicy,
      // `attention: false`: the step model without the context terms (scenarios tuned before issue 36).
      attnDecodeUs: g.attention === false ? 0 : base.attnDecodeUs,
      attnPrefillUs: g.attention === false ? 0 : base.attnPrefillUs,
    };
    const count = g.count ?? 1;
    for (let i = 0; i < count; i++) {
      const name = g.name !== undefined ? `${g.name}-${i}` : `w${workers.length}`;
      workers.push({ name, profileName: g.profile, profile, models });
    }
  });
  // Pools form as in the gateway: models that share a worker share a pool.
  const pools: ScenarioPool[] = formPools(workers.map((w) => ({ kind: "models", models: w.models }))).map(
    (p) => ({ name: p.name, models: p.models, workers: p.workers }),
  );
  const poolNames = pools.map((p) => p.name).join(", ");
  const workerIndex = (ref: string | number, path: string): number => {
    if (typeof ref === "number") {
      if (ref >= workers.length)
        throw new ConfigError(at(path), `no worker ${ref} (there are ${workers.length})`);
      return ref;
    }
    const i = workers.findIndex((w) => w.name === ref);
    if (i < 0) {
      throw new ConfigError(at(path), `no worker named ${ref} (${workers.map((w) => w.name).join(", ")})`);
    }
    return i;
  };

  // Policy: the priority-scheduler YAML (file or inline) and the gateway's options.
  const pol = s.policy ?? {};
  let gatewayFile: Record<string, unknown> = {};
  let gatewayDir = baseDir;
  if (pol.gateway_config !== undefined) {
    const p = rel(pol.gateway_config);
    gatewayDir = dirname(p);
    let g: unknown;
    try {
      g = parseYaml(readText(p, at("policy.gateway_config")));
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ConfigError(
        at("policy.gateway_config"),
        `${p}: invalid YAML: ${(err as Error).message.split("\n")[0]}`,
      );
    }
    if (g !== null && g !== undefined) {
      if (typeof g !== "object" || Array.isArray(g)) {
        throw new ConfigError(at("policy.gateway_config"), `${p}: must be a YAML mapping`);
      }
      gatewayFile = g as Record<string, unknown>;
    }
  }
  const gw = gatewaySettings(gatewayFile, at("policy.gateway_config"));
  if (pol.scheduler !== undefined && pol.scheduler_config !== undefined) {
    throw new ConfigError(at("policy.scheduler"), "give scheduler or scheduler_config, not both");
  }
  let settings: ReturnType<typeof parseSchedulerConfig>;
  if (pol.scheduler !== undefined) {
    try {
      settings = parseSchedulerConfig(pol.scheduler);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      throw new ConfigError(at(err.path ? `policy.scheduler.${err.path}` : "policy.scheduler"), err.reason);
    }
  } else {
    const key = pol.scheduler_config !== undefined ? "policy.scheduler_config" : "policy.gateway_config";
    const p =
      pol.scheduler_config !== undefined
        ? rel(pol.scheduler_config)
        : gw.schedulerConfig !== undefined
          ? isAbsolute(gw.schedulerConfig)
            ? gw.schedulerConfig
            : resolve(gatewayDir, gw.schedulerConfig)
          : undefined;
    try {
      settings = p === undefined ? parseSchedulerConfig(null) : parseSchedulerYaml(readText(p, at(key)));
    } catch (err) {
      if (!(err instanceof ConfigError) || err.message.startsWith(`${file}:`)) throw err;
      throw new ConfigError(at(key), `${p}: ${err.message}`);
    }
  }

  // Tenants: scenario weight / max_class are merged into the policy's tenant_policies.
  const names = new Set<string>();
  const policies: Record<string, TenantPolicy> = Object.fromEntries(settings.tenantPolicies);
  const tenants: ResolvedTenant[] = s.tenants.map((t, i) => {
    const path = `tenants.${i}`;
    if (names.has(t.name)) throw new ConfigError(at(`${path}.name`), `duplicate tenant ${t.name}`);
    names.add(t.name);
    const key = t.key ?? `auth:${t.name}`;
    if (t.tenant_policy !== undefined) {
      try {
        resolveTenantPolicies({ [key]: t.tenant_policy });
      } catch (err) {
        const e = err as ConfigError;
        const sub = e.path.slice(`tenant_policies.${key}`.length + 1);
        throw new ConfigError(
          at(`${path}.tenant_policy${sub ? `.${sub}` : ""}`),
          e.message.slice(e.path.length + 2),
        );
      }
      policies[key] = { ...(policies[key] ?? {}), ...(t.tenant_policy as TenantPolicy) };
    }
    if (t.weight !== undefined || t.max_class !== undefined) {
      const merged: TenantPolicy = { ...(policies[key] ?? {}) };
      if (t.weight !== undefined) merged.weight = t.weight;
      if (t.max_class !== undefined) merged.max_class = t.max_class;
      policies[key] = merged;
    }
    if (t.class !== undefined && t.classes !== undefined) {
      throw new ConfigError(at(`${path}.classes`), "give class or classes, not both");
    }
    const rawMix = t.classes ?? { [t.class ?? "default"]: 1 };
    const total = Object.values(rawMix).reduce((a, b) => a + (b ?? 0), 0);
    if (!(total > 0)) throw new ConfigError(at(`${path}.classes`), "the shares must add up to more than 0");
    const mix = PRIORITY_CLASSES.filter((c) => (rawMix[c] ?? 0) > 0).map((c) => ({
      cls: c,
      p: rawMix[c]! / total,
    }));
    let trace: ResolvedTenant["trace"];
    const a = t.arrival;
    if (a.process === "replay") {
      // Sizes come from the replayed rows.
      for (const k of ["trace", "prompt_tokens", "output_tokens", "max_tokens"] as const) {
        if (t[k] !== undefined) {
          throw new ConfigError(
            at(`${path}.${k}`),
            "a replay takes its sizes from the trace: leave this out",
          );
        }
      }
    } else if (t.trace !== undefined) {
      if (t.prompt_tokens !== undefined || t.output_tokens !== undefined) {
        throw new ConfigError(at(`${path}.trace`), "give trace or prompt_tokens/output_tokens, not both");
      }
      const spec = typeof t.trace === "string" ? { path: t.trace } : t.trace;
      trace = { trace: loadTrace(rel(spec.path), at(`${path}.trace`)), order: spec.order ?? "random" };
    } else {
      if (t.prompt_tokens === undefined)
        throw new ConfigError(at(`${path}.prompt_tokens`), "is required (or give trace)");
      if (t.output_tokens === undefined)
        throw new ConfigError(at(`${path}.output_tokens`), "is required (or give trace)");
    }
    const arrival: ResolvedTenant["arrival"] =
      a.process === "poisson"
        ? { process: "poisson", rate: a.rate }
        : a.process === "bursty"
          ? { process: "bursty", rate: a.rate, onMs: a.on * 1000, offMs: a.off * 1000 }
          : a.process === "closed"
            ? { process: "closed", users: a.users, thinkMs: a.think * 1000 }
            : {
                process: "replay",
                trace: loadReplay(
                  rel(a.path),
                  {
                    path: a.path,
                    timestamp: a.timestamp,
                    timestampUnit: a.timestamp_unit,
                    promptTokens: a.prompt_tokens,
                    outputTokens: a.output_tokens,
                    prefixBlocks: a.prefix_blocks,
                    prefixBlockTokens: a.prefix_block_tokens ?? 512,
                    speed: a.speed ?? 1,
                    startMs: (a.start ?? 0) * 1000,
                    split: a.split,
                  },
                  at(`${path}.arrival.path`),
                ),
                speed: (a.speed ?? 1) * (overrides.speed ?? 1),
                startMs: (a.start ?? 0) * 1000,
              };
    if (t.diurnal !== undefined && (a.process === "closed" || a.process === "replay")) {
      throw new ConfigError(at(`${path}.diurnal`), "applies to open-loop arrivals (poisson, bursty) only");
    }
    // A model no worker serves is simulated (its requests end model_not_found); leaving the model
    // out when no worker serves the default one is a mistake in the scenario.
    if (t.model === undefined && !pools.some((p) => p.models.includes(defaultModel))) {
      throw new ConfigError(
        at(`${path}.model`),
        `is required: no worker serves the default model ${defaultModel} (the pools are ${poolNames}); name a model or set default_model`,
      );
    }
    return {
      name: t.name,
      key,
      mix,
      arrival,
      retry: t.retry && {
        statuses: t.retry.statuses ?? RETRY_DEFAULTS.statuses,
        maxAttempts: t.retry.max_attempts ?? RETRY_DEFAULTS.maxAttempts,
        honorRetryAfter: t.retry.honor_retry_after ?? RETRY_DEFAULTS.honorRetryAfter,
      },
      diurnal: t.diurnal && {
        periodMs: t.diurnal.period * 1000,
        amplitude: t.diurnal.amplitude,
        peakMs: (t.diurnal.peak ?? 0) * 1000,
      },
      prompt: t.prompt_tokens as LengthSpec | undefined,
      output: t.output_tokens as LengthSpec | undefined,
      trace,
      maxTokens: t.max_tokens as LengthSpec | undefined,
      promptEstimateError: t.prompt_estimate_error ?? 0,
      patienceMs: t.patience !== undefined ? t.patience * 1000 : undefined,
      sessions: t.sessions,
      model: t.model ?? defaultModel,
      modelNamed: t.model,
    };
  });
  const replays = tenants.flatMap((t) => (t.arrival.process === "replay" ? [t.arrival.trace] : []));
  if (overrides.speed !== undefined && replays.length === 0) {
    throw new ConfigError(
      file,
      "--speed scales replayed traces, and no tenant replays one (arrival.process: replay)",
    );
  }
  // A trace read twice (two tenants on one file) is aligned once.
  alignReplays([...new Set(replays)]);
  if (overrides.durationSecs === undefined && s.duration === undefined) {
    let last = 0;
    for (const t of tenants) {
      if (t.arrival.process !== "replay") {
        // Only replays have an end of their own.
        throw new ConfigError(at("duration"), "is required");
      }
      const tr = t.arrival.trace;
      const span = (tr.t[tr.order[tr.order.length - 1]!]! - t.arrival.startMs) / t.arrival.speed;
      last = Math.max(last, span);
    }
    // Just past the last row, so it arrives.
    durationMs = Math.floor(last) + 1;
  }
  let tenantPolicies: ReadonlyMap<string, TenantPolicy>;
  try {
    tenantPolicies = resolveTenantPolicies(policies as Record<string, unknown>);
  } catch (err) {
    throw new ConfigError(
      at((err as ConfigError).path || "tenants"),
      (err as Error).message.replace(/^.*?: /, ""),
    );
  }

  // Phases.
  const phaseNames = new Set<string>();
  const phases: ResolvedPhase[] = (s.phases ?? []).map((p, i) => {
    const path = `phases.${i}`;
    const name = p.name ?? `phase${i}`;
    if (phaseNames.has(name)) throw new ConfigError(at(`${path}.name`), `duplicate phase ${name}`);
    phaseNames.add(name);
    const fromMs = p.at * 1000;
    const toMs = p.until !== undefined ? p.until * 1000 : Number.POSITIVE_INFINITY;
    if (!(toMs > fromMs)) throw new ConfigError(at(`${path}.until`), "must be after at");
    if (
      p.name === undefined &&
      p.rate === undefined &&
      p.slowdown === undefined &&
      p.fail === undefined &&
      p.capacity === undefined
    ) {
      // A named phase without effects is a window to measure (`during:`); an unnamed one is a mistake.
      throw new ConfigError(at(path), "give at least one of rate, slowdown, fail, capacity (or a name)");
    }
    if (p.rate) {
      p.rate.tenants.forEach((n, j) => {
        const t = tenants.find((x) => x.name === n);
        if (!t) throw new ConfigError(at(`${path}.rate.tenants.${j}`), `no tenant named ${n}`);
        if (t.arrival.process === "closed") {
          throw new ConfigError(
            at(`${path}.rate.tenants.${j}`),
            `tenant ${n} is closed-loop (its load is set by users and think)`,
          );
        }
        if (t.arrival.process === "replay") {
          throw new ConfigError(
            at(`${path}.rate.tenants.${j}`),
            `tenant ${n} replays a trace (its load is the trace's; scale it with arrival.speed)`,
          );
        }
      });
    }
    if (p.capacity !== undefined && pools.length > 1) {
      throw new ConfigError(
        at(`${path}.capacity`),
        `pins one capacity, and the workers form several model pools (${poolNames}), each with its own`,
      );
    }
    return {
      name,
      fromMs,
      toMs,
      rate: p.rate,
      slowdown: p.slowdown && {
        workers: p.slowdown.workers.map((w, j) => workerIndex(w, `${path}.slowdown.workers.${j}`)),
        factor: p.slowdown.factor,
      },
      fail: p.fail && { workers: p.fail.workers.map((w, j) => workerIndex(w, `${path}.fail.workers.${j}`)) },
      capacity: p.capacity,
    };
  });

  // The reservations must fit the capacity the schedulers start with, as at the gateway's startup.
  const policyNames = overrides.policies ?? s.policies ?? [...DEFAULT_POLICIES];
  if (pol.capacity !== undefined && pools.length > 1) {
    throw new ConfigError(
      at("policy.capacity"),
      `pins one capacity, and the workers form several model pools (${poolNames}), each with its own`,
    );
  }
  const capacityOf = (ws: readonly number[]) =>
    ws.reduce((sum, w) => sum + workers[w]!.profile.maxRunning, 0);
  const startCapacity = pol.capacity ?? capacityOf(workers.map((_, i) => i));
  const reservationsFit = (capacity: number, whose: string) => {
    const reserved = PRIORITY_CLASSES.map((c) => requiredReservation(settings.classes[c], capacity));
    const totalReserved = reserved.reduce((a, b) => a + b, 0);
    if (totalReserved <= capacity) return;
    const parts = [...PRIORITY_CLASSES]
      .reverse()
      .map((c) => `${c} ${reserved[PRIORITY_CLASSES.indexOf(c)]}`)
      .join(", ");
    throw new ConfigError(
      at("policy"),
      `the classes' reservations total ${totalReserved} (${parts}), more than ${whose} capacity of ${capacity}: the gateway would fall back to legacy admission; lower reserved_floor / reserved_per_slot or add workers`,
    );
  };
  // strict has one scheduler for the fleet (the reference has no pools); sluice one per pool.
  if (pools.length === 1) {
    if (policyNames.some((p) => p !== "fifo")) reservationsFit(startCapacity, "the fleet's");
  } else {
    if (policyNames.includes("strict")) reservationsFit(startCapacity, "the fleet's");
    if (policyNames.some((p) => SLUICE_POLICIES.includes(p))) {
      for (const p of pools) reservationsFit(capacityOf(p.workers), `pool ${p.name}'s`);
    }
  }

  const slo = { ...DEFAULT_SLO };
  for (const [cls, v] of Object.entries(s.slo ?? {})) {
    if (v) slo[cls as PriorityClass] = { ttftMs: v.ttft_ms, tpotMs: v.tpot_ms, e2eMs: v.e2e_ms };
  }

  const capacity = capacitySettings(pol, gw.capacity, startCapacity, policyNames, at);
  const adaptiveRuns =
    policyNames.includes("sluice-adaptive") ||
    (capacity.mode === "adaptive" && policyNames.includes("sluice"));
  if (pools.length > 1 && adaptiveRuns) {
    // Each pool has its own controller, bounded by the pool's reported capacity.
    for (const p of pools) {
      const c = capacityOf(p.workers);
      if (capacity.minCapacity > Math.min(c, capacity.maxCapacity)) {
        throw new ConfigError(
          keyPath(pol, "adaptive_min_capacity", at),
          `must be <= each pool's reported capacity (${capacity.minCapacity} > ${c}, pool ${p.name}), the bound of its adaptive limit`,
        );
      }
    }
  }
  const shedding = sheddingSettings(pol, gw.capacity, at, settings.classes);

  const expectations: Expectation[] = (s.expect ?? []).map((e, i) => {
    if (e.during !== undefined && !phaseNames.has(e.during)) {
      throw new ConfigError(at(`expect.${i}.during`), `no phase named ${e.during}`);
    }
    if (e.relative_to !== undefined && e.relative_to !== "all" && !phaseNames.has(e.relative_to)) {
      throw new ConfigError(at(`expect.${i}.relative_to`), `no phase named ${e.relative_to}`);
    }
    if (e.class !== undefined && FLEET_METRICS.includes(e.metric)) {
      throw new ConfigError(at(`expect.${i}.class`), `${e.metric} is measured over the fleet: give no class`);
    }
    if (e.model !== undefined) {
      if (!POOL_METRICS.includes(e.metric)) {
        throw new ConfigError(
          at(`expect.${i}.model`),
          `${e.metric} is measured over the fleet, not per model`,
        );
      }
      if (!pools.some((p) => p.models.includes(e.model!))) {
        throw new ConfigError(
          at(`expect.${i}.model`),
          `no worker serves ${e.model} (the pools are ${poolNames})`,
        );
      }
    } else if (pools.length > 1 && FAIRNESS_METRICS.includes(e.metric)) {
      throw new ConfigError(
        at(`expect.${i}.model`),
        `is required for ${e.metric}: fair shares are kept per model pool (${poolNames})`,
      );
    }
    const classOptional =
      FLEET_METRICS.includes(e.metric) ||
      ANY_CLASS_METRICS.includes(e.metric) ||
      (e.model !== undefined && !FAIRNESS_METRICS.includes(e.metric));
    if (e.class === undefined && !classOptional) {
      throw new ConfigError(at(`expect.${i}.class`), `is required for ${e.metric}`);
    }
    return {
      metric: e.metric,
      cls: e.class,
      during: e.during,
      relativeTo: e.relative_to,
      max: e.max,
      min: e.min,
      label: e.label ?? expectationLabel(e.metric, e.class, e.min, e.max, e.during, e.relative_to, e.model),
      model: e.model,
    };
  });

  return {
    file,
    name: s.name ?? file.replace(/\.ya?ml$/, ""),
    description: s.description ?? "",
    seed: overrides.seed ?? s.seed ?? 1,
    durationMs,
    drainMs: (s.drain ?? 600) * 1000,
    epochStartMs: Date.parse(s.start ?? "2026-01-05T00:00:00Z"),
    workers,
    defaultModel,
    pools,
    routing: s.routing ?? "least_loaded",
    tenants,
    phases,
    classes: settings.classes,
    tenantPolicies,
    defaultMaxClass: pol.default_max_class ?? gw.defaultMaxClass ?? "default",
    pricing: pol.pricing ?? gw.pricing ?? {},
    capacityPin: pol.capacity,
    legacy: {
      maxConcurrentRequests: pol.legacy?.max_concurrent_requests ?? gw.legacy.maxConcurrentRequests,
      queueSize: pol.legacy?.queue_size ?? gw.legacy.queueSize ?? 100,
      queueTimeoutSecs: pol.legacy?.queue_timeout_secs ?? gw.legacy.queueTimeoutSecs ?? 60,
    },
    strict: { wakeupMs: pol.strict?.wakeup_ms ?? 1 },
    policies: policyNames,
    slo,
    expectations,
    bucketMs: (s.report?.bucket ?? 1) * 1000,
    sloWindowMs: (s.report?.slo_window ?? 10) * 1000,
    capacity,
    shedding,
  };
}

/**
 * The parts of a gateway `--config` file the simulator uses: the priority-scheduler file, the
 * default max class, the legacy admission settings and pricing. Other keys (ports, workers' URLs,
 * API keys, ...) are accepted and ignored, so a production file can be used as it is.
 */
function gatewaySettings(file: Record<string, unknown>, label: string) {
  const shape = z.object({
    priority_scheduler_config: z.string().optional(),
    priority_scheduler_default_max_class: classEnum.optional(),
    max_concurrent_requests: num()
      .int("must be an integer")
      .refine((n) => n === -1 || n >= 1, "must be -1 (unlimited) or an integer >= 1")
      .optional(),
    queue_size: nonNegInt().optional(),
    queue_timeout_secs: posNum().optional(),
    pricing: pricingSchema.optional(),
    ...capacitySchemaShape(),
  });
  const parsed = shape.safeParse(file);
  if (!parsed.success) throw issueError(parsed.error, label, file);
  const g = parsed.data;
  const capacity: CapacityKeys = {
    adaptive_tuning: g.adaptive_tuning,
    capacity_mode: g.capacity_mode,
    adaptive_min_capacity: g.adaptive_min_capacity,
    adaptive_max_capacity: g.adaptive_max_capacity,
    tpot_slo_ms: g.tpot_slo_ms,
    ttft_slo_ms: g.ttft_slo_ms,
    load_shedding: g.load_shedding,
    keyed_shedding: g.keyed_shedding,
    capacity_unit: g.capacity_unit,
    kv_target_utilization: g.kv_target_utilization,
  };
  return {
    capacity,
    schedulerConfig: g.priority_scheduler_config,
    defaultMaxClass: g.priority_scheduler_default_max_class,
    legacy: {
      maxConcurrentRequests: g.max_concurrent_requests,
      queueSize: g.queue_size,
      queueTimeoutSecs: g.queue_timeout_secs,
    },
    pricing: g.pricing,
  };
}

const capacityKeysSchema = z.object(capacitySchemaShape());
type CapacityKeys = z.infer<typeof capacityKeysSchema>;

/** Where a capacity key was given: `policy.<key>`, else the gateway file. */
function keyPath(pol: CapacityKeys, key: keyof CapacityKeys, at: (p: string) => string): string {
  return pol[key] !== undefined ? at(`policy.${key}`) : `${at("policy.gateway_config")}: ${key}`;
}

/**
 * The capacity the sluice policies run with: `policy.*` over the gateway file's keys, validated by
 * the controller's own option checks (a bad value names its key).
 */
function capacitySettings(
  pol: CapacityKeys & { capacity?: number | undefined },
  gw: CapacityKeys,
  fleetCapacity: number,
  policies: readonly PolicyName[],
  at: (p: string) => string,
): CapacitySettings {
  const mode = pol.capacity_mode ?? gw.capacity_mode ?? "static";
  const adaptiveRuns =
    policies.includes("sluice-adaptive") || (mode === "adaptive" && policies.includes("sluice"));
  if (adaptiveRuns && pol.capacity !== undefined) {
    throw new ConfigError(
      at("policy.capacity"),
      "pins the capacity: give it or adaptive capacity (capacity_mode: adaptive, the sluice-adaptive policy), not both",
    );
  }
  const minCapacity = pol.adaptive_min_capacity ?? gw.adaptive_min_capacity ?? 1;
  const maxGiven = pol.adaptive_max_capacity ?? gw.adaptive_max_capacity;
  const maxCapacity = maxGiven ?? fleetCapacity;
  const tpotSloMs = pol.tpot_slo_ms ?? gw.tpot_slo_ms;
  const ttftSloMs = pol.ttft_slo_ms ?? gw.ttft_slo_ms;
  rejectAdaptiveTuning(pol.adaptive_tuning, at("policy.adaptive_tuning"));
  rejectAdaptiveTuning(gw.adaptive_tuning, `${at("policy.gateway_config")}: adaptive_tuning`);
  if (maxGiven === undefined && minCapacity > maxCapacity) {
    throw new ConfigError(
      keyPath(pol, "adaptive_min_capacity", at),
      `must be <= the fleet's reported capacity (${minCapacity} > ${fleetCapacity}), adaptive_max_capacity's default`,
    );
  }
  try {
    resolveAdaptiveLimitOptions({
      minCapacity,
      maxCapacity,
      initialCapacity: fleetCapacity,
      tpotSloMs,
      ttftSloMs,
    });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    throw new ConfigError(keyPath(pol, err.path as keyof CapacityKeys, at), err.reason);
  }
  // Capacity in KV tokens (docs/capacity.md): the simulated gateway counts as the gateway would.
  const kv: KvCapacitySettings = {
    unit: pol.capacity_unit ?? gw.capacity_unit ?? "requests",
    targetUtilization: pol.kv_target_utilization ?? gw.kv_target_utilization ?? DEFAULT_KV_TARGET_UTILIZATION,
  };
  return { mode, minCapacity, maxCapacity, tpotSloMs, ttftSloMs, kv };
}

/** The shedding blocks as LoadShedding options, checked by its constructor (errors name the key). */
function sheddingSettings(
  pol: CapacityKeys,
  gw: CapacityKeys,
  at: (p: string) => string,
  classes: ClassSettingsTable,
): LoadSheddingOptions | undefined {
  const p = pol.load_shedding ?? gw.load_shedding;
  const k = pol.keyed_shedding ?? gw.keyed_shedding;
  if (p === undefined && k === undefined) return undefined;
  let options: LoadSheddingOptions = {};
  if (p === false) options.prioritized = false;
  else if (p !== undefined) {
    options.prioritized = {
      maxQueueWaitMs: p.max_queue_wait_ms,
      ...(p.usage_half_life_secs !== undefined ? { usageHalfLifeMs: p.usage_half_life_secs * 1000 } : {}),
      ...(p.codel_classes !== undefined ? { codelClasses: p.codel_classes } : {}),
      ...(p.codel_target_ms !== undefined ? { codelTargetMs: p.codel_target_ms } : {}),
      ...(p.codel_interval_ms !== undefined ? { codelIntervalMs: p.codel_interval_ms } : {}),
    };
  }
  if (k !== undefined) {
    options.keyed = {
      ...(k.header !== undefined ? { header: k.header } : {}),
      ...(k.classes !== undefined ? { classes: k.classes } : {}),
      ...(k.target_delay_ms !== undefined ? { targetDelayMs: k.target_delay_ms } : {}),
      ...(k.rotation_window_secs !== undefined ? { rotationWindowMs: k.rotation_window_secs * 1000 } : {}),
      ...(k.decrease_fraction !== undefined ? { decreaseFraction: k.decrease_fraction } : {}),
      ...(k.increase_step !== undefined ? { increaseStep: k.increase_step } : {}),
      ...(k.min_percent !== undefined ? { minPercent: k.min_percent } : {}),
    };
  }
  // A block without max_queue_wait_ms bounds each class's wait by its queue_timeout.
  options = resolveShedding(options, classes, false)!;
  try {
    new LoadShedding(options, new SimClock(new EventQueue(), 0));
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const [block, key] = err.path.split(".") as [keyof CapacityKeys, string];
    throw new ConfigError(`${keyPath(pol, block, at)}.${key}`, err.reason);
  }
  return options;
}

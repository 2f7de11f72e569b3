/**
 * The zod schemas of the `--config` file's blocks that have no flag: `workers`, `api_keys`, `pools`,
 * `load_shedding` and `keyed_shedding` (`pricing` and `adaptive_tuning` are shared with simulator
 * scenarios and live in their own files). Messages say what a value must be; the caller names the key.
 */
import { z } from "zod";
import { ENGINE_CHOICES } from "../capacity/engine-signals/engine-kind.js";
import { CAPACITY_UNITS, validTargetUtilization } from "../capacity/kv-budget.js";
import { schedulerFileSchema } from "./scheduler-file.js";

const sheddableClass = z.enum(["bulk", "default", "interactive"], {
  error: () => "must be bulk, default or interactive (system is never shed)",
});
const positive = () => z.number({ error: "must be a number" }).gt(0, "must be > 0");

export const loadSheddingSchema = z.strictObject({
  max_queue_wait_ms: positive().optional(),
  usage_half_life_secs: positive().optional(),
  codel_classes: z.array(sheddableClass).optional(),
  codel_target_ms: positive().optional(),
  codel_interval_ms: positive().optional(),
});

export const keyedSheddingSchema = z.strictObject({
  header: z.string().min(1, "must be a header name").optional(),
  classes: z.array(sheddableClass).optional(),
  target_delay_ms: positive().optional(),
  rotation_window_secs: positive().optional(),
  decrease_fraction: positive().lt(1, "must be < 1").optional(),
  increase_step: positive().max(100, "must be <= 100").optional(),
  min_percent: z
    .number({ error: "must be a number" })
    .min(0, "must be >= 0")
    .max(100, "must be <= 100")
    .optional(),
});

export const workersSchema = z.array(
  z.strictObject({
    url: z.string(),
    capacity: z.number().int("must be an integer").min(1, "must be >= 1").optional(),
    api_key: z.string().min(1, "must be a non-empty string").optional(),
    engine: z.enum(ENGINE_CHOICES, { error: `must be one of ${ENGINE_CHOICES.join(", ")}` }).optional(),
    models: z
      .array(z.string().min(1, "must be a model name").max(256, "must be at most 256 characters"), {
        error: "must be a list of model names",
      })
      .min(1, "must name at least one model (leave it out to use what the worker reports)")
      .optional(),
  }),
);

/**
 * Per-pool settings, keyed by any model of the pool: overrides of the priority YAML's classes, and
 * the pool's capacity unit and KV target (docs/capacity.md).
 */
export const poolsSchema = z.record(
  z.string().min(1, "must be a model name"),
  z.strictObject({
    classes: schedulerFileSchema.shape.classes,
    capacity_unit: z
      .enum(CAPACITY_UNITS, { error: `must be one of ${CAPACITY_UNITS.join(", ")}` })
      .optional(),
    kv_target_utilization: z
      .number({ error: "must be a number > 0 and <= 1" })
      .refine(validTargetUtilization, "must be a number > 0 and <= 1")
      .optional(),
  }),
  { error: "must be a mapping of model name to {classes, capacity_unit, kv_target_utilization}" },
);

export const apiKeysSchema = z.array(z.strictObject({ sha256: z.string(), tenant: z.string() }));

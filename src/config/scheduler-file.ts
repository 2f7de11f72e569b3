/**
 * The `--priority-scheduler-config` file: YAML text to validated scheduler settings.
 *
 * The zod schemas describe the file (types, ranges, no unknown key) with the core's messages; the
 * result then goes through the core's own validation (`resolveClassSettings`,
 * `resolveTenantPolicies` in src/core/config.ts), which every `createScheduler` caller gets too.
 * The core itself imports neither yaml nor zod.
 */

import { parseAccessWindow } from "@sluice/scheduler/core/access-window.js";
import { PRIORITY_CLASSES } from "@sluice/scheduler/core/class.js";
import {
  CONFIG_MESSAGES as M,
  resolveClassSettings,
  resolveTenantPolicies,
  type SchedulerFileSettings,
} from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { parse as parseYamlText } from "yaml";
import { z } from "zod";
import { toConfigError } from "./zod-errors.js";

const classEnum = z.enum(PRIORITY_CLASSES, { error: () => M.className });

const nonNegativeInt = z.number({ error: M.number }).int(M.integer).min(0, M.atLeastZero);
const positiveSecs = z.number({ error: M.number }).gt(0, M.aboveZero);

export const classSettingsSchema = z.strictObject(
  {
    reserved_floor: nonNegativeInt.optional(),
    reserved_per_slot: z.number({ error: M.share }).min(0, M.share).optional(),
    queue_size: nonNegativeInt.optional(),
    queue_timeout_secs: positiveSecs.optional(),
    starvation_threshold_secs: positiveSecs.optional(),
    can_preempt: z.boolean({ error: M.boolean }).optional(),
    preempt_after_secs: z.number({ error: M.number }).min(0, M.atLeastZero).optional(),
    starvation_max_share: z.number({ error: M.fraction }).min(0, M.fraction).max(1, M.fraction).optional(),
  },
  { error: M.mapping },
);

/** The keys of a tenant policy that the core reads; other layers may extend this shape. */
const tenantPolicyShape = {
  max_class: classEnum.optional(),
  weight: z.number({ error: M.number }).gt(0, M.aboveZero).optional(),
  tokens_per_minute: z.number({ error: M.number }).gt(0, M.aboveZero).optional(),
  requests_per_minute: z.number({ error: M.number }).gt(0, M.aboveZero).optional(),
  budget_tokens: z.number({ error: M.number }).min(0, M.atLeastZero).optional(),
  budget_cost_usd: z.number({ error: M.number }).min(0, M.atLeastZero).optional(),
  budget_period: z.enum(["day", "month"], { error: () => M.period }).optional(),
  models: z.array(z.string({ error: M.model }), { error: M.models }).optional(),
  active: z.boolean({ error: M.boolean }).optional(),
  access_windows: z
    .array(
      z.string({ error: M.window }).superRefine((text, ctx) => {
        try {
          parseAccessWindow(text);
        } catch (err) {
          ctx.addIssue({ code: "custom", message: (err as Error).message });
        }
      }),
      { error: M.windows },
    )
    .optional(),
};

export const tenantPolicySchema = z.strictObject(tenantPolicyShape, { error: M.mapping });

export const schedulerFileSchema = z.strictObject({
  classes: z
    .strictObject(
      {
        system: classSettingsSchema.nullish(),
        interactive: classSettingsSchema.nullish(),
        default: classSettingsSchema.nullish(),
        bulk: classSettingsSchema.nullish(),
      },
      { error: M.mapping },
    )
    .nullish(),
  tenant_policies: z.record(z.string(), tenantPolicySchema.nullish(), { error: M.mapping }).nullish(),
});

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
    classes: resolveClassSettings(parsed.data.classes),
    tenantPolicies: resolveTenantPolicies(parsed.data.tenant_policies),
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

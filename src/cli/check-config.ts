/**
 * `sluice check-config [--config F] [--priority-scheduler-config F] [--capacity N]`: validates the
 * gateway file and the priority-scheduler file offline, as the gateway would read them (with the
 * same environment), and prints the effective per-class table at the fleet's capacity: the given
 * one, else the workers' configured capacities. Exit 0: no problem; 1: problems, each listed with
 * its file, line and key; 2: the command line itself is wrong.
 *
 * A problem is anything that would stop the gateway, or make it fall back to legacy admission
 * (which it survives, but without priorities): a CI step can run this before a deploy.
 */

import { CLASSES_HIGH_TO_LOW, type PriorityClass } from "@sluice/scheduler/core/class.js";
import { type ClassSettingsTable, requiredReservation } from "@sluice/scheduler/core/config.js";
import { ConfigError, ReservationsExceedCapacityError } from "@sluice/scheduler/core/errors.js";
import { Slots } from "@sluice/scheduler/core/slots.js";
import { InvalidArgumentError } from "commander";
import type { OptionValues } from "../config/gateway-option-table.js";
import type { GatewaySettings } from "../config/gateway-settings.js";
import type { Environment } from "../config/option-layers.js";
import { loadSchedulerFile } from "../config/policy-file.js";
import { poolClasses } from "../config/pool-classes.js";
import { resolveGatewaySettings } from "../config/resolve-gateway-settings.js";
import { reservationFix } from "../contracts/scheduler-fallback.js";
import { UNREPORTED_WORKER_CAPACITY } from "../gateway/fleet/workers.js";
import { renderConfigCheck } from "./config-check-table.js";
import { quietCommand } from "./ledger.js";

export interface ConfigCheckInput {
  configPath?: string | undefined;
  schedulerPath?: string | undefined;
  /** The fleet's capacity to check at (`--capacity`). */
  capacity?: number | undefined;
  env: Environment;
}

/** One table: the fleet's classes, or a model pool's with its `pools` entry applied. */
export interface ClassTable {
  readonly title: string;
  readonly capacity: number;
  readonly classes: ClassSettingsTable;
  /** Slots reserved per class at `capacity` (before any fit: what the settings ask for). */
  readonly reserved: Readonly<Record<PriorityClass, number>>;
  readonly fits: boolean;
}

export interface ConfigCheck {
  readonly configPath: string | undefined;
  readonly schedulerPath: string | undefined;
  /** How the admission would run: the priority scheduler, or legacy admission (its limit). */
  readonly admission: string | undefined;
  /** The capacity checked at, and where it came from; undefined when there is none to go by. */
  readonly capacity: { readonly slots: number; readonly from: string } | undefined;
  readonly tables: readonly ClassTable[];
  /** What would stop the gateway or make it fall back, each naming file, line and key. */
  readonly problems: readonly string[];
  /** What an operator should know, that is not wrong. */
  readonly notes: readonly string[];
}

export async function checkConfig(input: ConfigCheckInput): Promise<ConfigCheck> {
  const problems: string[] = [];
  const notes: string[] = [];
  let settings: GatewaySettings | undefined;
  try {
    const commandLine: Partial<OptionValues> = {};
    if (input.configPath !== undefined) commandLine.config = input.configPath;
    settings = resolveGatewaySettings({ commandLine, env: input.env, requireWorkers: false });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(err.message);
  }
  const schedulerPath = input.schedulerPath ?? settings?.priorityScheduler.configPath;
  let classes: ClassSettingsTable | undefined;
  let tenants = 0;
  try {
    const file = await loadSchedulerFile(schedulerPath);
    classes = file.classes;
    tenants = file.tenantPolicies.size;
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(err.message);
  }

  const capacity = fleetCapacity(input.capacity, settings, notes);
  const tables: ClassTable[] = [];
  if (classes !== undefined && capacity !== undefined) {
    tables.push(classTable("the fleet", classes, capacity.slots, problems, schedulerPath));
    for (const [model, overrides] of Object.entries(settings?.pools ?? {})) {
      const pool = poolCapacity(model, settings!, capacity.slots);
      const merged = poolClasses(classes, [model], { [model]: overrides }).classes;
      const title = `the pool of ${model}${pool.from === "" ? "" : ` (${pool.from})`}`;
      tables.push(classTable(title, merged, pool.slots, problems, `${settings!.configPath}: pools.${model}`));
    }
  }

  let admission: string | undefined;
  if (settings !== undefined) {
    const p = settings.priorityScheduler;
    if (!p.enabled) {
      const limit = settings.legacy.maxConcurrentRequests;
      const inFlight = limit < 0 ? "no in-flight limit" : `at most ${limit} in flight`;
      admission = `legacy (priority_scheduler_enabled false), ${inFlight}, queue ${settings.legacy.queueSize}`;
      if (classes !== undefined)
        notes.push("the classes below apply once priority_scheduler_enabled is true");
    } else {
      admission =
        problems.length === 0 ? "the priority scheduler" : "legacy admission (a fallback: see the problems)";
      if (p.strict) notes.push("priority_scheduler_strict is on: a fallback stops the gateway (exit 2)");
    }
    if (settings.capacity.mode === "adaptive") {
      notes.push(
        "capacity_mode adaptive: the limit moves under the fleet's size; reservations are sized at the fleet's size and scale down with the limit",
      );
    }
    if (settings.workers.length === 0) {
      notes.push("no worker in the file or the environment: give them with --worker-urls when starting");
    }
  }
  if (classes !== undefined && tenants > 0)
    notes.push(`${tenants} tenant polic${tenants === 1 ? "y" : "ies"}`);
  return {
    configPath: settings?.configPath ?? input.configPath,
    schedulerPath,
    admission,
    capacity,
    tables,
    problems,
    notes,
  };
}

/** `--capacity`, else the sum of the workers' capacities (configured, else what one reporting none gets). */
function fleetCapacity(
  given: number | undefined,
  settings: GatewaySettings | undefined,
  notes: string[],
): ConfigCheck["capacity"] {
  if (given !== undefined) return { slots: given, from: "--capacity" };
  const workers = settings?.workers ?? [];
  if (workers.length === 0) {
    notes.push("no capacity to check the reservations at: pass --capacity N (the fleet's total slots)");
    return undefined;
  }
  const unknown = workers.filter((w) => w.capacity === undefined).length;
  const slots = workers.reduce((n, w) => n + (w.capacity ?? UNREPORTED_WORKER_CAPACITY), 0);
  if (unknown === 0) return { slots, from: `the ${workers.length} workers' configured capacity` };
  notes.push(
    `${unknown} of ${workers.length} workers have no configured capacity: counted as ${UNREPORTED_WORKER_CAPACITY} each, what the gateway gives a worker that reports none; pass --capacity N for your fleet's`,
  );
  return {
    slots,
    from: `${workers.length} workers, ${unknown} of them counted as ${UNREPORTED_WORKER_CAPACITY}`,
  };
}

/** A pool's capacity: its workers' (those listing the model, all configured), else the fleet's. */
function poolCapacity(
  model: string,
  settings: GatewaySettings,
  fleet: number,
): { slots: number; from: string } {
  const serving = settings.workers.filter((w) => w.models?.includes(model));
  if (serving.length > 0 && serving.every((w) => w.capacity !== undefined)) {
    const slots = serving.reduce((n, w) => n + w.capacity!, 0);
    return { slots, from: `${serving.length} worker${serving.length === 1 ? "" : "s"}` };
  }
  return { slots: fleet, from: "checked at the fleet's capacity: its workers' is not configured" };
}

function classTable(
  title: string,
  classes: ClassSettingsTable,
  capacity: number,
  problems: string[],
  where: string | undefined,
): ClassTable {
  const reserved = Object.fromEntries(
    CLASSES_HIGH_TO_LOW.map((cls) => [cls, requiredReservation(classes[cls], capacity)]),
  ) as Record<PriorityClass, number>;
  let fits = true;
  try {
    Slots.assertFits(classes, capacity);
  } catch (err) {
    if (!(err instanceof ReservationsExceedCapacityError)) throw err;
    fits = false;
    const fix = reservationFix(classes, capacity);
    const file = where ?? "the built-in classes (no --priority-scheduler-config)";
    problems.push(`${file}: ${err.message}: ${title} would fall back to legacy admission; ${fix}`);
  }
  return { title, capacity, classes, reserved, fits };
}

function positiveInteger(raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < 1) {
    throw new InvalidArgumentError(`must be a whole number of slots >= 1 (got "${raw}")`);
  }
  return n;
}

/** Thrown when the check found problems: they are printed, and the process exits with `code`. */
export class CheckFailed extends Error {
  override readonly name = "CheckFailed";
  constructor(readonly exitCode: number) {
    super("the configuration has problems");
  }
}

export async function runCheckConfigCli(argv: string[], env: Environment = process.env): Promise<void> {
  const cmd = quietCommand("sluice check-config")
    .description(
      "validate the gateway file and the priority-scheduler file offline, and print the effective per-class table (exit 1 on any problem)",
    )
    .option("--config <path>", "the gateway's YAML file (as `sluice --config`)")
    .option(
      "--priority-scheduler-config <path>",
      "the priority scheduler's YAML (default: the --config file's priority_scheduler_config, else the built-in classes)",
    )
    .option(
      "--capacity <slots>",
      "the fleet's capacity to check at (default: the workers' configured capacity)",
      positiveInteger,
    )
    .option("--json", "print the check as JSON");
  cmd.action(
    async (options: {
      config?: string;
      prioritySchedulerConfig?: string;
      capacity?: number;
      json?: boolean;
    }) => {
      const check = await checkConfig({
        configPath: options.config,
        schedulerPath: options.prioritySchedulerConfig,
        capacity: options.capacity,
        env,
      });
      process.stdout.write(options.json ? `${JSON.stringify(check, null, 2)}\n` : renderConfigCheck(check));
      if (check.problems.length > 0) throw new CheckFailed(1);
    },
  );
  await cmd.parseAsync(argv, { from: "user" });
}

/**
 * One model pool's parts: its own capacity (adaptive or discovered, pinnable), admission (its own
 * scheduler, or the fleet-wide legacy limiter) and shedding at its door.
 */
import type { Clock } from "@sluice/scheduler/core/clock.js";
import {
  BUILTIN_CLASS_DEFAULTS,
  type ClassOverrides,
  type ClassSettingsTable,
  type SchedulerFileSettings,
} from "@sluice/scheduler/core/config.js";
import type { Logger } from "pino";
import { createInProcessBackend, type InProcessOptions } from "../admission/in-process.js";
import type { SharedState } from "../admission/redis/index.js";
import { AdaptiveCapacity, heldBackOf } from "../capacity/adaptive.js";
import { type KvCapacitySettings, REQUESTS_CAPACITY } from "../capacity/kv-budget.js";
import { PinnableCapacity } from "../capacity/pinned.js";
import { poolClasses } from "../config/pool-classes.js";
import type { AdmissionBackend } from "../contracts/admission-backend.js";
import type { SluiceMetrics } from "../metrics/index.js";
import { LoadShedding, resolveShedding } from "../shedding/load-shedding.js";
import type { PoolFactory } from "./fleet/model-pools.js";
import type { LivePolicy } from "./live-policy.js";
import type { GatewayOptions, KvCapacityOptions } from "./options.js";

export interface PoolFactoryParts {
  readonly options: GatewayOptions;
  readonly clock: Clock;
  readonly metrics: SluiceMetrics;
  readonly policy: LivePolicy;
  /** The priority YAML (always loaded when there is no fleet-wide legacy limiter). */
  readonly policyFile: SchedulerFileSettings | undefined;
  readonly shared: SharedState | undefined;
  /** The fleet-wide legacy limiter, when admission is legacy. */
  readonly fleetLegacy: AdmissionBackend | undefined;
  /** Capacity a new pool's scheduler is checked against while it has no healthy worker. */
  readonly fallbackCapacity: number;
  /** The fleet's capacity (the pools' sum), for the fleet-wide legacy limiter. */
  fleetCapacity(): number;
}

export function poolFactory(parts: PoolFactoryParts): PoolFactory {
  const { options, clock, metrics, policy, shared, fleetLegacy } = parts;
  const defaultMaxClass = options.priorityScheduler.defaultMaxClass;
  return (name, models, group, discovered) => {
    const poolLogger = options.logger.child({ pool: name });
    const capacityOptions = options.capacity;
    // The pool's capacity unit (kv_tokens: its workers' rooms come from their KV budgets), and the
    // KV use its adaptive controllers hold each engine under.
    group.kv = kvSettingsOfPool(options.kvCapacity, models);
    // Adaptive capacity cold-starts from what discovery found; a pin still wins over it.
    const adaptive =
      capacityOptions?.mode === "adaptive"
        ? new AdaptiveCapacity(
            discovered,
            {
              minCapacity: capacityOptions.minCapacity,
              maxCapacity: capacityOptions.maxCapacity,
              tpotSloMs: capacityOptions.tpotSloMs,
              ttftSloMs: capacityOptions.ttftSloMs,
              kvTargetUtilization: group.kv.targetUtilization,
              // One controller per worker: each gets its own limit, which routing respects.
              workers: () => group.healthy,
            },
            clock,
            (bound, limit, wanted) =>
              poolLogger.warn(
                { bound, limit, wanted },
                `adaptive capacity held at its ${bound} bound (${limit})`,
              ),
          )
        : undefined;
    if (group.kv.unit === "kv_tokens") {
      poolLogger.info(
        { capacity_unit: group.kv.unit, kv_target_utilization: group.kv.targetUtilization },
        "pool capacity counted in KV tokens",
      );
    }
    const capacity = new PinnableCapacity(adaptive ?? discovered);
    // A pin lifts the workers' rooms (WorkerGroup.pin): this pool's, or the fleet's in Redis.
    group.pin = () => capacity.pinned ?? shared?.redisBackend(name)?.pinnedCapacity;
    let admission = fleetLegacy;
    const classes =
      admission === undefined
        ? classesOfPool(parts.policyFile!.classes, models, options.pools, poolLogger)
        : undefined;
    if (admission === undefined) {
      // The startup check (reservations fit) runs on a real capacity: the fleet's size the
      // reservations are sized at (under adaptive capacity, not the cold start's lower limit); a
      // pool that has no healthy worker yet is checked against the fallback, then set to what it has.
      const sizedAt = capacity.reservedAt ?? capacity.capacity;
      const create =
        shared === undefined
          ? createInProcessBackend
          : (o: InProcessOptions) => shared.backend({ ...o, pool: name });
      admission = create({
        enabled: true,
        defaultMaxClass,
        classes: classes!,
        tenantPolicies: policy.tenantPolicies,
        capacity: sizedAt > 0 ? sizedAt : parts.fallbackCapacity,
        legacy: options.legacy,
        observer: metrics.observer,
        clock,
        logger: poolLogger,
        quiet: true,
      });
      if (capacity.capacity !== admission.snapshot().capacity || capacity.reservedAt !== undefined) {
        admission.setCapacity(capacity.capacity, capacity.reservedAt);
      }
    }
    const backend = admission;
    adaptive?.setHeldBack(() => heldBackOf(backend.snapshot().classes));
    let shedding: LoadShedding | undefined;
    // Legacy admission has no classes of its own: the built-in ones check the block (it stays off).
    const sheddingOptions = resolveShedding(
      options.shedding,
      classes ?? BUILTIN_CLASS_DEFAULTS,
      adaptive !== undefined,
    );
    if (sheddingOptions !== undefined) {
      const candidate = new LoadShedding(sheddingOptions, clock);
      const configured = Boolean(options.shedding?.prioritized) || options.shedding?.keyed !== undefined;
      if (candidate.enabled && backend.mode === "scheduler") shedding = candidate;
      else if (candidate.enabled && configured) {
        // Only what the operator asked for: adaptive mode's default shedding is quietly off here.
        poolLogger.warn("load shedding needs the priority scheduler; it is off while admission is legacy");
      }
    }
    let last = capacity.capacity;
    capacity.subscribe((c) => {
      poolLogger.info({ capacity: c, previous: last, healthy: group.healthy.length }, "capacity changed");
      last = c;
      // The fleet-wide legacy limiter keeps the fleet's capacity for its snapshot.
      if (backend !== fleetLegacy) backend.setCapacity(c, capacity.reservedAt);
      else fleetLegacy.setCapacity(parts.fleetCapacity());
    });
    adaptive?.start();
    shedding?.start();
    return {
      name,
      models: [],
      workers: group,
      admission: backend,
      sharedAdmission: backend === fleetLegacy,
      capacity,
      adaptive,
      shedding,
      stop() {
        adaptive?.stop();
        shedding?.stop();
      },
    };
  };
}

/** A pool's capacity unit and KV target: its first model's `pools` entry over the fleet's default. */
function kvSettingsOfPool(kv: KvCapacityOptions | undefined, models: readonly string[]): KvCapacitySettings {
  const fleet = kv?.fleet ?? REQUESTS_CAPACITY;
  const entry = models.map((m) => kv?.pools[m]).find((e) => e !== undefined);
  return {
    unit: entry?.unit ?? fleet.unit,
    targetUtilization: entry?.targetUtilization ?? fleet.targetUtilization,
  };
}

/** A pool's classes (src/config/pool-classes.ts); a second model's entry is logged, not applied. */
function classesOfPool(
  base: ClassSettingsTable,
  models: readonly string[],
  overrides: Record<string, ClassOverrides> | undefined,
  logger: Logger,
): ClassSettingsTable {
  const { classes, entry, ignored } = poolClasses(base, models, overrides);
  if (ignored.length > 0) {
    logger.warn(
      { models: [entry, ...ignored], used: entry },
      `several models of one pool have a pools entry; using pools.${entry}`,
    );
  }
  return classes;
}

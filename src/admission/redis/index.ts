/**
 * Redis mode, assembled: the fleet membership (connections, wake-ups, metrics), the budget store
 * and the admission backend of the default pool. The gateway calls `startSharedState` instead of
 * building the in-process backend when `--state-url` is set.
 *
 * The priority scheduler is what becomes shared. With the scheduler disabled (or failed safe:
 * a bad YAML, reservations that do not fit), admission falls back to the in-process legacy limiter,
 * per replica, as without Redis, and a WARN says so; budgets are shared either way.
 */

import type { Clock } from "@sluice/scheduler/core/clock.js";
import { type Pricing, resolveClassSettings, type TenantPolicy } from "@sluice/scheduler/core/config.js";
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import type { AdmissionBackend, AdmissionRequest, Slot } from "../../contracts/admission-backend.js";
import { createInProcessBackend, type InProcessOptions } from "../in-process.js";
import { RedisAdmissionBackend } from "./backend.js";
import { SharedBudgetBook, SharedHold } from "./budgets.js";
import { RedisFleet } from "./fleet.js";
import type { StateOptions } from "./options.js";

export { RedisAdmissionBackend } from "./backend.js";
export { SharedBudgetBook } from "./budgets.js";
export { RedisFleet } from "./fleet.js";
export * from "./options.js";

interface SharedStateOptions {
  state: StateOptions;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
  pricing: Pricing;
  clock: Clock;
  logger: Logger;
  registry?: Registry | undefined;
  onBudgetRejection?: ((tenant: string, code: string) => void) | undefined;
}

/** What one pool's backend is built from: the in-process backend's options, plus its pool name. */
type PoolBackendOptions = Omit<InProcessOptions, "clock" | "logger" | "quiet"> & {
  pool: string;
  logger?: Logger | undefined;
};

export interface SharedState {
  readonly fleet: RedisFleet;
  readonly budgets: SharedBudgetBook;
  /**
   * The admission backend of one pool: shared through Redis, or (scheduler disabled or failed
   * safe) the in-process legacy limiter with shared budgets.
   */
  backend(options: PoolBackendOptions): AdmissionBackend;
  /** The Redis backend of a pool, when it has one (pin and status). */
  redisBackend(pool: string): RedisAdmissionBackend | undefined;
  /** The in-process legacy limiter (scheduler disabled), reserving shared budgets first. */
  legacy(options: InProcessOptions): AdmissionBackend;
  /** The fleet's capacity: the pools' capacities as agreed in Redis (undefined: no Redis backend). */
  fleetCapacity(): number | undefined;
  /** The admin status fields Redis mode sets: the fleet's capacity and pin, and `state`. */
  statusFields(): Record<string, unknown>;
  /** The admin status's shared-state part: this replica, the fleet's replicas and their leases. */
  status(): Record<string, unknown>;
  close(): Promise<void>;
}

/** Connects to Redis (a Redis that does not answer yet is the fail mode's business, not an error). */
export async function startSharedState(options: SharedStateOptions): Promise<SharedState> {
  const { logger, state } = options;
  const fleet = new RedisFleet(state, logger, options.registry);
  const budgets = new SharedBudgetBook({
    policies: options.tenantPolicies,
    pricing: options.pricing,
    clock: options.clock,
    client: fleet.connection.client,
    keys: fleet.keys,
    up: () => fleet.connection.up,
    failed: (err) => fleet.connection.failed(err),
    replicas: () => fleet.replicasAlive,
    onRoundTrip: (_op, seconds) => fleet.metrics?.roundTrip("budget", seconds),
  });
  await fleet.start();
  const startFields = {
    url: fleet.redactedUrl,
    replica: fleet.replicaToken,
    failMode: state.failMode,
    leaseTtlSecs: state.leaseTtlSecs,
  };
  if (fleet.connection.up) logger.info(startFields, "shared state: connected to Redis");
  else {
    // A mistyped --state-url looks exactly like this: say which URL, and what runs meanwhile.
    logger.warn(
      startFields,
      `shared state: Redis at ${fleet.redactedUrl} is not answering (check --state-url); until it does, fail mode ${state.failMode} applies`,
    );
  }
  // What is left of each budget, for status and metrics (the admission path never waits on it).
  const refresh = setInterval(
    () => {
      if (fleet.connection.up && !budgets.isLocal) budgets.refresh().catch(() => {});
    },
    Math.max(250, (state.leaseTtlSecs * 1000) / 4),
  );
  refresh.unref();
  if (fleet.connection.up) await budgets.refresh().catch(() => {});

  const backends = new Map<string, RedisAdmissionBackend>();
  let warnedLegacy = false;
  const shared: SharedState = {
    fleet,
    budgets,
    backend(pool: PoolBackendOptions): AdmissionBackend {
      const poolLogger = pool.logger ?? logger;
      const legacy = (loadError: Error | undefined) =>
        reservingBudgets(
          createInProcessBackend({ ...pool, loadError, clock: options.clock, logger: poolLogger }),
          budgets,
        );
      if (!pool.enabled) {
        if (!warnedLegacy)
          logger.warn(
            "shared state: the priority scheduler is disabled, so legacy admission stays per replica",
          );
        warnedLegacy = true;
        return legacy(undefined);
      }
      try {
        if (pool.loadError !== undefined) throw pool.loadError;
        const backend = new RedisAdmissionBackend({
          fleet,
          pool: pool.pool,
          classes: resolveClassSettings(pool.classes),
          tenantPolicies: pool.tenantPolicies,
          defaultMaxClass: pool.defaultMaxClass,
          capacity: pool.capacity,
          observer: pool.observer,
          clock: options.clock,
          logger: poolLogger,
          budgets,
          onBudgetRejection: options.onBudgetRejection,
        });
        backend
          .start()
          .catch((err: unknown) => poolLogger.error({ err }, "shared state: joining the fleet failed"));
        backends.set(pool.pool, backend);
        return backend;
      } catch (err) {
        // The in-process backend logs the fallback, its code and how to fix it.
        return legacy(err as Error);
      }
    },
    redisBackend: (pool) => backends.get(pool),
    legacy: (inProcess) => {
      fleet.legacyAdmission = true;
      return reservingBudgets(createInProcessBackend(inProcess), budgets);
    },
    fleetCapacity() {
      if (backends.size === 0) return undefined;
      let sum = 0;
      for (const b of backends.values()) sum += b.snapshot().capacity;
      return sum;
    },
    statusFields() {
      const only = backends.size === 1 ? backends.values().next().value : undefined;
      return {
        ...(backends.size > 0 ? { capacity: shared.fleetCapacity() } : {}),
        ...(only !== undefined ? { pinned_capacity: only.pinnedCapacity ?? null } : {}),
        state: shared.status(),
      };
    },
    status() {
      const first = backends.values().next().value;
      const pools = Object.fromEntries(
        [...backends].map(([name, b]) => {
          const { replicas: _replicas, ...pool } = b.statusExtra();
          return [name, pool];
        }),
      );
      return {
        backend: "redis",
        url: fleet.redactedUrl,
        key_prefix: state.keyPrefix,
        replica_id: state.replicaId,
        replica_token: fleet.replicaToken,
        fail_mode: state.failMode,
        lease_ttl_secs: state.leaseTtlSecs,
        redis_up: fleet.connection.up,
        local_fallback: fleet.localFallback,
        replicas: first?.statusExtra().replicas ?? [],
        pools,
      };
    },
    async close() {
      clearInterval(refresh);
      for (const backend of backends.values()) await backend.close();
      await fleet.close();
    },
  };
  return shared;
}

/**
 * Legacy admission in Redis mode: budgets are still shared, so the request's hold is reserved (one
 * round trip) before the in-process limiter admits it.
 */
function reservingBudgets(backend: AdmissionBackend, budgets: SharedBudgetBook): AdmissionBackend {
  const acquire = backend.acquire.bind(backend);
  backend.acquire = async (request: AdmissionRequest): Promise<Slot> => {
    const hold = request.hold;
    if (hold instanceof SharedHold && !hold.reserved && !hold.settled) {
      // The gateway's id for the request (unique), never the client's X-Request-Id.
      if (request.requestId !== undefined) hold.requestId = request.requestId;
      if (budgets.isLocal) hold.delegate = budgets.reserveLocally(hold);
      else await budgets.reserve(hold);
    }
    return acquire(request);
  };
  return backend;
}

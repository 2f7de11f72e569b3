/**
 * `PUT` and `DELETE /api/v1/capacity`: pins (or unpins) the capacity of a model's pool, else of
 * the only pool (400 when there are several). With shared state the pin goes to Redis and applies
 * to every replica (docs/replicas.md).
 */
import type { Logger } from "pino";
import type { SharedState } from "../../admission/redis/index.js";
import { GatewayError } from "../../contracts/gateway-error.js";
import type { FleetCapacity } from "../fleet/fleet-capacity.js";
import type { ModelPools } from "../fleet/model-pools.js";
import type { AdminHandlers } from "./admin.js";

export function pinCapacityHandler(
  pools: ModelPools,
  capacity: FleetCapacity,
  shared: SharedState | undefined,
  logger: Logger,
): AdminHandlers["pinCapacity"] {
  return (pin, model) => {
    const pool = model === undefined ? undefined : pools.find(model);
    if (model !== undefined && pool === undefined) {
      throw new GatewayError("model_not_found", `no model pool serves "${model}"`, { param: "model" });
    }
    const pinned = shared?.redisBackend((pool ?? pools.all[0])?.name ?? "");
    if (pinned !== undefined && (pool !== undefined || pools.all.length === 1)) {
      const result = pinned.pinCapacity(pin);
      logger.info({ pool: pinned.pool, pinned: pin ?? null }, "fleet capacity set by admin API");
      return { model: pinned.pool, ...result, fleet_capacity: shared!.fleetCapacity() };
    }
    if (pool === undefined) {
      try {
        capacity.setPin(pin);
      } catch (err) {
        throw new GatewayError("invalid_capacity", (err as Error).message, { param: "model" });
      }
    } else pool.capacity.setPin(pin);
    const target = pool ?? pools.all[0]!;
    logger.info(
      { pool: target.name, pinned: pin ?? null, capacity: target.capacity.capacity },
      "capacity set by admin API",
    );
    // The contract's shape, plus the pool when the call named a model.
    const answer = { capacity: target.capacity.capacity, pinned: target.capacity.pinned };
    return model === undefined ? answer : { model: target.name, ...answer };
  };
}

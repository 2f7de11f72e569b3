/**
 * The model pools over the discovered workers, and the fleet-wide views of them: admission (the
 * pools' backends read as totals) and capacity (their sum). Then the health checks start.
 */
import type { AdmissionBackend } from "../contracts/admission-backend.js";
import { FleetAdmission } from "./fleet/fleet-admission.js";
import { FleetCapacity } from "./fleet/fleet-capacity.js";
import { type ModelPool, ModelPools } from "./fleet/model-pools.js";
import type { WorkerPool } from "./fleet/workers.js";
import { type PoolFactoryParts, poolFactory } from "./pool-factory.js";
import type { ShutdownList } from "./shutdown.js";

export interface Fleet {
  readonly workers: WorkerPool;
  readonly pools: ModelPools;
  readonly admission: FleetAdmission;
  readonly capacity: FleetCapacity;
  /**
   * The pool with the most capacity (the only one, in a single-model fleet): the fleet-wide views
   * of adaptive capacity and shedding read it; per pool figures are in the admin status.
   */
  mainPool(): ModelPool | undefined;
}

export function startPools(
  parts: Omit<PoolFactoryParts, "fleetCapacity">,
  workers: WorkerPool,
  stops: ShutdownList,
): Fleet {
  const { options, fleetLegacy } = parts;
  // The factory reads the pools only when a pool's capacity changes, after they exist.
  const createPool = poolFactory({ ...parts, fleetCapacity: () => capacity.capacity });
  const pools = new ModelPools(workers, createPool, options.logger, options.defaultModel);
  const capacity = new FleetCapacity(() => pools.all);
  stops.add("pools", () => pools.stop());
  const backends = (): AdmissionBackend[] =>
    fleetLegacy !== undefined ? [fleetLegacy] : pools.all.map((p) => p.admission);
  const admission = new FleetAdmission(
    backends,
    fleetLegacy?.mode ?? "scheduler",
    fleetLegacy?.fallbackReason,
    fleetLegacy?.fallbackCode,
  );
  pools.refresh();
  workers.onChange(() => pools.refresh());
  workers.start();
  return {
    workers,
    pools,
    admission,
    capacity,
    mainPool() {
      let best: ModelPool | undefined;
      for (const p of pools.all)
        if (best === undefined || p.capacity.capacity > best.capacity.capacity) best = p;
      return best;
    },
  };
}

/**
 * The fleet's capacity as one number: the sum of the model pools' capacities. Pinning through it
 * (`PUT /api/v1/capacity` without `model`) pins the only pool; with several pools the caller must
 * name one (docs/gateway.md, "Model pools").
 */
import type { ModelPool } from "./model-pools.js";

export class FleetCapacity {
  constructor(private readonly pools: () => readonly ModelPool[]) {}

  /** The capacity in force, summed over pools. */
  get capacity(): number {
    let sum = 0;
    for (const p of this.pools()) sum += p.capacity.capacity;
    return sum;
  }

  /** What the pools would have without pins. */
  get underlying(): number {
    let sum = 0;
    for (const p of this.pools()) sum += p.capacity.underlying;
    return sum;
  }

  /** The pin of the only pool; undefined with no pin, or with several pools. */
  get pinned(): number | undefined {
    const all = this.pools();
    return all.length === 1 ? all[0]!.capacity.pinned : undefined;
  }

  /** Pins (or unpins) the only pool; throws when there is not exactly one. */
  setPin(capacity: number | undefined): void {
    const all = this.pools();
    if (all.length !== 1) {
      throw new Error(
        all.length === 0
          ? "no model pool exists yet (no worker has said what it serves)"
          : `several model pools (${all.map((p) => p.name).join(", ")}): name one with "model"`,
      );
    }
    all[0]!.capacity.setPin(capacity);
  }
}

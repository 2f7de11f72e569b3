/**
 * Capacity in KV tokens for the simulated gateway (`policy.capacity_unit: kv_tokens`), with the
 * gateway's own code (src/capacity/kv-budget.ts): each request's footprint taken at arrival feeds
 * the pool's mean footprint, a worker's room in requests is its KV budget / that mean (bounded by
 * its max_running), the gate's capacity is the sum over its healthy workers, and a request goes to a
 * worker whose budget it fits. One per gate; the sluice policies only (fifo and strict stand for
 * gateways that count requests).
 */
import {
  FootprintMean,
  type KvCapacitySettings,
  type KvPlace,
  kvBudgetTokens,
  kvCandidates,
  kvRequestRoom,
  requestFootprint,
} from "../capacity/kv-budget.js";
import type { Worker } from "./worker.js";

/** A worker as KV placement reads it. */
interface Placed extends KvPlace {
  readonly worker: Worker;
}

export class SimKvCapacity {
  private readonly footprints = new FootprintMean();
  /** Footprints of the requests sent to each worker and not yet ended. */
  private readonly inUse = new Map<Worker, number>();

  constructor(private readonly settings: KvCapacitySettings) {}

  /** A request's footprint: its prompt (as the gateway estimates it) and its predicted output, capped by its limit. */
  footprintOf(
    promptTokens: number,
    predictedOutputTokens: number,
    maxOutputTokens: number | undefined,
  ): number {
    return requestFootprint({ promptTokens, predictedOutputTokens, maxOutputTokens });
  }

  /** A request arrived; true when the published mean moved (re-apply the gate's capacity). */
  observe(footprint: number): boolean {
    return this.footprints.observe(footprint);
  }

  budgetOf(worker: Worker): number {
    return kvBudgetTokens(worker.profile.kvTokens, this.settings.targetUtilization);
  }

  /** The gate's capacity in requests: the sum over its healthy workers of their KV-derived rooms. */
  capacityOf(workers: readonly Worker[]): number {
    let sum = 0;
    for (const w of workers) {
      if (w.up) sum += kvRequestRoom(this.budgetOf(w), this.footprints.published, w.profile.maxRunning);
    }
    return sum;
  }

  /** Narrows `candidates` to those a request of `footprint` fits (else the one with the most headroom). */
  candidates(candidates: readonly Worker[], footprint: number): Worker[] {
    const placed: Placed[] = candidates.map((worker) => ({
      worker,
      budgetTokens: this.budgetOf(worker),
      footprintTokens: this.inUse.get(worker) ?? 0,
    }));
    return kvCandidates(placed, footprint).map((p) => p.worker);
  }

  dispatched(worker: Worker, footprint: number): void {
    this.inUse.set(worker, (this.inUse.get(worker) ?? 0) + footprint);
  }

  ended(worker: Worker, footprint: number): void {
    this.inUse.set(worker, (this.inUse.get(worker) ?? 0) - footprint);
  }

  /** Footprint in use on `worker` (tests, reports). */
  footprintOn(worker: Worker): number {
    return this.inUse.get(worker) ?? 0;
  }
}

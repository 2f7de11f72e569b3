/**
 * What the layers below the gateway may read of a model pool (docs/gateway.md, "Model pools"): its
 * name and models, its capacity, its admission's snapshot and counters, and its workers' counts.
 * The gateway's own ModelPool satisfies it; metrics read pools through it, never through the
 * gateway.
 */
import type { AdmissionBackend } from "./admission-backend.js";

/** How admitted requests' waits for a worker with room ended, counted per pool. */
interface RoomWaitCounts {
  /** Waiting now. */
  readonly now: number;
  readonly dispatched: number;
  readonly timeout: number;
  readonly cancelled: number;
  readonly noWorker: number;
}

interface PoolWorkersView {
  readonly members: readonly { readonly inflight: number }[];
  readonly healthy: readonly unknown[];
  readonly roomWaits: RoomWaitCounts;
}

export interface PoolView {
  /** Its alphabetically first model when it formed, or `*` (the catch-all pool). */
  readonly name: string;
  /** The models it serves now (sorted; empty for `*`). */
  readonly models: readonly string[];
  /** Admission is the fleet-wide legacy limiter, shared by every pool (scheduler disabled). */
  readonly sharedAdmission: boolean;
  readonly capacity: { readonly capacity: number };
  readonly admission: Pick<AdmissionBackend, "snapshot" | "counters">;
  readonly workers: PoolWorkersView;
}

/**
 * What a request holds in Redis mode: a lease (its id is also its fencing token), or a permit of
 * the local fallback while Redis is away, or both once a fallback admission was adopted on rejoin.
 * Read-only to its holder, like every Slot.
 *
 * The first byte and a preemption race on one local transition: the victim's replica decides,
 * whatever replica the preemptor is on, so marking the first byte costs no round trip (the mark
 * reaches Redis with the next heartbeat or the release; until then a claim on a lease that already
 * streams is refused by its replica).
 */

import type { BudgetHold } from "@sluice/scheduler/core/budgets.js";
import { classOfRank, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Permit } from "@sluice/scheduler/core/inflight.js";
import type { Slot } from "../../contracts/admission-backend.js";

export interface SlotOwner {
  /** Called once, when the holder releases (the owner batches the settle that follows). */
  releaseSlot(slot: SharedSlot): void;
  /** The slot had its first byte: it is no longer a preemption victim. */
  firstByte(slot: SharedSlot): void;
}

export class SharedSlot implements Slot {
  /** In Redis (false: admitted by the local fallback, not adopted yet). */
  leased: boolean;
  /** The epoch of the Redis state the lease lives in. */
  epoch: string | undefined;
  /** The fallback's permit, when the local fallback admitted it. */
  local: Permit | undefined;
  /** The budget hold that rides on this slot's release, if any. */
  hold: BudgetHold | undefined;
  /** The actual cost reported by the holder (tokens), once known. */
  actualCost: number | undefined;
  firstByteMarked = false;
  preempted = false;
  released = false;
  private listener: ((error: Error) => void) | undefined;
  private preemptError: Error | undefined;

  constructor(
    private readonly owner: SlotOwner,
    readonly id: string,
    readonly rank: number,
    readonly requestedRank: number,
    readonly tenant: string,
    /** Fair-share units charged at admission: cost / weight. */
    readonly units: number,
    readonly weight: number,
    readonly admission: "fast" | "queued",
    readonly queueWaitMs: number,
    leased: boolean,
  ) {
    this.leased = leased;
  }

  get requestedClass(): PriorityClass {
    return classOfRank(this.requestedRank);
  }

  get effectiveClass(): PriorityClass {
    return classOfRank(this.rank);
  }

  markFirstByte(): boolean {
    if (this.preempted) return false;
    if (this.local !== undefined && !this.local.markFirstByte()) return false;
    if (!this.firstByteMarked) {
      this.firstByteMarked = true;
      if (!this.released) this.owner.firstByte(this);
    }
    return true;
  }

  onPreempt(listener: (error: Error) => void): void {
    if (this.preemptError !== undefined) listener(this.preemptError);
    else this.listener = listener;
  }

  settle(actualCost: number): void {
    this.actualCost = actualCost;
    this.local?.settle(actualCost);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.local?.release();
    this.owner.releaseSlot(this);
  }

  /** The owner's side of the race: true when the slot was taken before its first byte. */
  preempt(error: Error): boolean {
    if (this.firstByteMarked || this.released || this.preempted) return false;
    this.preempted = true;
    this.preemptError = error;
    this.listener?.(error);
    return true;
  }
}

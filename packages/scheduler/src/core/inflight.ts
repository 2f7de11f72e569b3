/**
 * In-flight permits: the first-byte mark, the preemption state transition, and victim choice.
 *
 * A permit is "preemptible" from admission until its first byte. Per class, preemptible permits
 * sit on an admission-ordered list, so the victim rule (strictly lower class, lowest class first,
 * then most recently admitted) is the tail of the lowest non-empty list: O(classes).
 *
 * markFirstByte and preempt are the two exits of the preemptible state; whichever runs first
 * wins and the other sees it lost. JavaScript runs them one at a time, so exactly one wins.
 */
import { CLASS_COUNT, classOfRank, type PriorityClass } from "./class.js";
import { PreemptedError } from "./errors.js";
import type { Charge, Flow } from "./fair-queue.js";

/** @internal What a permit calls back into when its holder is done. */
export interface PermitOwner {
  releasePermit(permit: SchedulerPermit): void;
  firstBytePermit(permit: SchedulerPermit): void;
  settlePermit(permit: SchedulerPermit, actualCost: number): void;
}

export type AdmissionKind = "fast" | "queued";

/**
 * An admitted request's hold on a slot, as its holder sees it: read-only facts about the
 * admission, and the four things a holder does (watch for preemption, mark the first byte, report
 * the actual cost, release). It has every member of the gateway's `Slot` (src/state/backend.ts),
 * so the gateway holds the permit itself.
 */
export interface Permit {
  /** The effective class the request runs under (the requested one, capped by the tenant's max_class). */
  readonly class: PriorityClass;
  /** Alias of `class`. */
  readonly effectiveClass: PriorityClass;
  /** The class the request asked for. */
  readonly requestedClass: PriorityClass;
  readonly tenant: string;
  /** The estimated cost (tokens) charged to the tenant at admission. */
  readonly cost: number;
  /** `fast` = admitted without waiting; `queued` = admitted after waiting. */
  readonly admission: AdmissionKind;
  /** Milliseconds spent queued before admission (0 when admitted at once). */
  readonly queueWaitMs: number;
  /**
   * Aborts when the permit is preempted; its reason is a PreemptedError. Created on first use
   * (an AbortController per request is not free): prefer `onPreempt` when a callback will do.
   */
  readonly signal: AbortSignal;
  /**
   * Registers the one callback to run when the permit is preempted (at once if it already was).
   * A higher class took the slot before the first byte: stop the upstream work and answer 503.
   */
  onPreempt(listener: (error: PreemptedError) => void): void;
  /**
   * Marks the first response byte: from now on the request cannot be preempted. Returns false
   * when preemption won the race (the holder must answer 503 instead).
   */
  markFirstByte(): boolean;
  /**
   * Reports the actual cost (tokens) once known; it replaces the estimate in the tenant's fair
   * share (the scheduler's `adjustCost`). Before or after `release()`; the last report stands.
   */
  settle(actualCost: number): void;
  /** Gives the slot back. Idempotent; a preempted permit's slot has already moved on. */
  release(): void;
}

/**
 * @internal The scheduler's permit: the public Permit plus the engine's bookkeeping (hidden from
 * the published declarations; holders see the Permit interface).
 */
export class SchedulerPermit implements Permit, Charge {
  /** @internal Effective class rank (0 bulk .. 3 system). */
  readonly rank: number;
  /** @internal */
  readonly requestedRank: number;
  readonly tenant: string;
  readonly cost: number;
  /** @internal the tenant's weight at admission (fair-share accounting uses it) */
  readonly weight: number;
  readonly queueWaitMs: number;
  readonly admission: AdmissionKind;
  /** @internal Admitted by the starvation override. */
  readonly promoted: boolean;
  /** @internal */
  released = false;
  /** @internal */
  firstByte = false;
  /** @internal */
  preempted = false;
  /** @internal Set when preempted: the class that took the slot. */
  preemptedBy: PriorityClass | undefined;
  /** @internal links of the per-class preemptible list */
  prev: SchedulerPermit | null = null;
  /** @internal */
  next: SchedulerPermit | null = null;
  /** @internal */
  listed = false;
  /** @internal fair-share accounting (see fair-queue.ts): the flow charged */
  chargeFlow: Flow | null = null;
  /** @internal units (tokens / weight) held in the flow's counter */
  charged = 0;
  /** @internal the charge is an estimate not yet settled */
  chargeOpen = false;
  private controller: AbortController | undefined;
  private preemptListener: ((error: PreemptedError) => void) | undefined;
  private readonly owner: PermitOwner;

  /** @internal */
  constructor(
    owner: PermitOwner,
    rank: number,
    requestedRank: number,
    tenant: string,
    cost: number,
    weight: number,
    queueWaitMs: number,
    admission: AdmissionKind,
    promoted: boolean,
  ) {
    this.owner = owner;
    this.rank = rank;
    this.requestedRank = requestedRank;
    this.tenant = tenant;
    this.cost = cost;
    this.weight = weight;
    this.queueWaitMs = queueWaitMs;
    this.admission = admission;
    this.promoted = promoted;
  }

  get class(): PriorityClass {
    return classOfRank(this.rank);
  }

  get effectiveClass(): PriorityClass {
    return classOfRank(this.rank);
  }

  get requestedClass(): PriorityClass {
    return classOfRank(this.requestedRank);
  }

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.preempted) this.controller.abort(this.preemptionError());
    }
    return this.controller.signal;
  }

  onPreempt(listener: (error: PreemptedError) => void): void {
    if (this.preempted) listener(this.preemptionError());
    else this.preemptListener = listener;
  }

  settle(actualCost: number): void {
    this.owner.settlePermit(this, actualCost);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.owner.releasePermit(this);
  }

  markFirstByte(): boolean {
    if (this.preempted) return false;
    if (this.firstByte) return true;
    this.firstByte = true;
    if (!this.released) this.owner.firstBytePermit(this);
    return true;
  }

  /** @internal the engine's side of the race */
  markPreempted(byRank: number): void {
    this.preempted = true;
    this.preemptedBy = classOfRank(byRank);
    if (this.controller === undefined && this.preemptListener === undefined) return;
    const error = this.preemptionError();
    this.controller?.abort(error);
    this.preemptListener?.(error);
  }

  /** @internal */
  preemptionError(): PreemptedError {
    return new PreemptedError(this.class, this.preemptedBy ?? "system");
  }
}

/** What a preemptible list needs of a permit: its class rank and the list's links, kept on it. */
export interface PreemptibleEntry<E> {
  readonly rank: number;
  listed: boolean;
  prev: E | null;
  next: E | null;
}

/**
 * Per-class admission-ordered lists of permits that have not emitted their first byte. Generic
 * over the permit so the simulator's strict reference (src/sim/strict.ts) picks its victims by
 * this same code; not part of the package's index.
 */
export class PreemptibleSet<E extends PreemptibleEntry<E>> {
  private readonly heads: (E | null)[] = [null, null, null, null];
  private readonly tails: (E | null)[] = [null, null, null, null];
  private readonly counts: number[] = [0, 0, 0, 0];

  add(permit: E): void {
    const rank = permit.rank;
    permit.listed = true;
    permit.next = null;
    permit.prev = this.tails[rank]!;
    if (permit.prev) permit.prev.next = permit;
    else this.heads[rank] = permit;
    this.tails[rank] = permit;
    this.counts[rank]!++;
  }

  remove(permit: E): void {
    if (!permit.listed) return;
    const rank = permit.rank;
    if (permit.prev) permit.prev.next = permit.next;
    else this.heads[rank] = permit.next;
    if (permit.next) permit.next.prev = permit.prev;
    else this.tails[rank] = permit.prev;
    permit.prev = permit.next = null;
    permit.listed = false;
    this.counts[rank]!--;
  }

  /**
   * The victim for a request of class `rank`: the lowest class below it first, then the least work
   * thrown away: by `cost` where the shell knows it (ties: the newer), else the newest (the least
   * time spent, the only measure of progress before a first byte).
   */
  victimBelow(rank: number, cost?: (permit: E) => number): E | null {
    for (let r = 0; r < rank && r < CLASS_COUNT; r++) {
      const tail = this.tails[r];
      if (!tail) continue;
      if (cost === undefined) return tail;
      let best = tail;
      let least = cost(tail);
      for (let p = tail.prev; p !== null && least > 0; p = p.prev) {
        const c = cost(p);
        if (c < least) {
          best = p;
          least = c;
        }
      }
      return best;
    }
    return null;
  }

  count(rank: number): number {
    return this.counts[rank]!;
  }
}

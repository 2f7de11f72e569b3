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

/** What a permit calls back into when its holder is done. */
export interface PermitOwner {
  releasePermit(permit: Permit): void;
  firstBytePermit(permit: Permit): void;
}

export type AdmissionKind = "fast" | "queued";

export class Permit {
  /** Effective class rank (0 bulk .. 3 system). */
  rank: number;
  readonly requestedRank: number;
  readonly tenant: string;
  readonly cost: number;
  readonly weight: number;
  /** Milliseconds spent queued before admission (0 when admitted at once). */
  readonly queueWaitMs: number;
  /** `fast` = admitted without waiting; `queued` = admitted after waiting. */
  readonly admission: AdmissionKind;
  /** Admitted by the starvation override. */
  readonly promoted: boolean;
  released = false;
  firstByte = false;
  preempted = false;
  /** Set when preempted: why the holder must stop. */
  preemptedBy: PriorityClass | undefined;
  /** @internal links of the per-class preemptible list */
  prev: Permit | null = null;
  /** @internal */
  next: Permit | null = null;
  /** @internal */
  listed = false;
  private controller: AbortController | undefined;
  private preemptListener: ((error: PreemptedError) => void) | undefined;
  private readonly owner: PermitOwner;

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

  /** The effective class the request runs under. */
  get class(): PriorityClass {
    return classOfRank(this.rank);
  }

  get requestedClass(): PriorityClass {
    return classOfRank(this.requestedRank);
  }

  /**
   * Fires when the permit is preempted; its reason is a PreemptedError. Created lazily: most
   * permits are never asked for it, and an AbortController is not free.
   */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.preempted) this.controller.abort(this.preemptionError());
    }
    return this.controller.signal;
  }

  /**
   * Registers the one callback to run when the permit is preempted (runs at once if it already
   * was). Cheaper than `signal` for a holder that only needs to be told.
   */
  onPreempt(listener: (error: PreemptedError) => void): void {
    if (this.preempted) listener(this.preemptionError());
    else this.preemptListener = listener;
  }

  /** Gives the slot back. Idempotent; a preempted permit's slot has already moved on. */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.owner.releasePermit(this);
  }

  /**
   * Marks the first response byte: from now on the request cannot be preempted.
   * Returns false when preemption won the race (the holder must answer 503 instead).
   */
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

  preemptionError(): PreemptedError {
    return new PreemptedError(this.class, this.preemptedBy ?? "system");
  }
}

/** Per-class admission-ordered lists of permits that have not emitted their first byte. */
export class PreemptibleSet {
  private readonly heads: (Permit | null)[] = [null, null, null, null];
  private readonly tails: (Permit | null)[] = [null, null, null, null];
  private readonly counts: number[] = [0, 0, 0, 0];

  add(permit: Permit): void {
    const rank = permit.rank;
    permit.listed = true;
    permit.next = null;
    permit.prev = this.tails[rank]!;
    if (permit.prev) permit.prev.next = permit;
    else this.heads[rank] = permit;
    this.tails[rank] = permit;
    this.counts[rank]!++;
  }

  remove(permit: Permit): void {
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

  /** The victim for an arrival of class `rank`: lowest class below it first, then newest. */
  victimBelow(rank: number): Permit | null {
    for (let r = 0; r < rank && r < CLASS_COUNT; r++) {
      const tail = this.tails[r];
      if (tail) return tail;
    }
    return null;
  }

  count(rank: number): number {
    return this.counts[rank]!;
  }
}

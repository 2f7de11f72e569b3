/**
 * The capacity-source seam: where the number of concurrent requests the fleet can run comes from.
 * Discovered (the workers' reports), pinned (an operator's number), and adaptive (a controller
 * driven by latency) all answer the same two questions: what is it now, and tell me when it moves.
 */
export interface CapacitySource {
  /** Capacity in force now (>= 0). */
  readonly capacity: number;
  /**
   * The capacity the scheduler's reservations are sized at, when the source's capacity is a limit
   * under the fleet's size (adaptive): the fleet's size. Undefined: the capacity itself.
   */
  readonly reservedAt?: number;
  /** Calls `listener` with the new capacity whenever it or `reservedAt` changes. */
  subscribe(listener: (capacity: number) => void): void;
  /** An operator's pin is over it (true) or gone (false): a source may stand down meanwhile. */
  overridden?(pinned: boolean): void;
}

/** Listeners and change detection, shared by the sources. */
export class CapacityNotifier {
  private readonly listeners: Array<(capacity: number) => void> = [];
  private last = -1;
  private lastReservedAt: number | undefined = undefined;

  subscribe(listener: (capacity: number) => void): void {
    this.listeners.push(listener);
  }

  /** Tells the listeners, when `capacity` or `reservedAt` differs from the last values told. */
  changed(capacity: number, reservedAt?: number): void {
    if (capacity === this.last && reservedAt === this.lastReservedAt) return;
    this.last = capacity;
    this.lastReservedAt = reservedAt;
    for (const listener of this.listeners) listener(capacity);
  }
}

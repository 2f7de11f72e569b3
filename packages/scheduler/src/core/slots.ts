/**
 * Capacity, reservations and per-class in-flight counts, indexed by class rank
 * (0 bulk .. 3 system).
 *
 * headroom(c) = capacity - total_inflight - sum over classes h above c of max(0, reserved_h - inflight_h):
 * only higher classes' unused reservations are held back, never a class's own.
 *
 * Reservations are derived at `reservedAt` (default: the capacity itself). An adaptive limit under
 * the fleet's size passes the fleet's size there: the reservations are taken at that size and scaled
 * down with the limit (rounded down), so each class keeps the share of slots it has at full size.
 * Taken at the limit instead, the absolute floors (system 32, interactive 128 by default) would
 * fill a limit of a few dozen and lock the lower classes out but for starvation promotions.
 */
import { CLASS_COUNT, PRIORITY_CLASSES } from "./class.js";
import { type ClassSettingsTable, requiredReservation } from "./config.js";
import { ReservationsExceedCapacityError } from "./errors.js";

export class Slots {
  capacity: number;
  total = 0;
  readonly inflight: number[] = [0, 0, 0, 0];
  /** Effective reservations: clamped at `reservedAt`, then scaled to the capacity when under it. */
  readonly reserved: number[] = [0, 0, 0, 0];
  /** The capacity the reservations are derived at (>= capacity): see the file's comment. */
  reservedAt: number;
  private settings: ClassSettingsTable;

  constructor(settings: ClassSettingsTable, capacity: number) {
    this.settings = settings;
    this.capacity = capacity;
    this.reservedAt = capacity;
    this.recompute();
  }

  /** Throws when the configured reservations do not fit `capacity` (the startup check). */
  static assertFits(settings: ClassSettingsTable, capacity: number): void {
    let sum = 0;
    const parts: string[] = [];
    for (let rank = CLASS_COUNT - 1; rank >= 0; rank--) {
      const cls = PRIORITY_CLASSES[rank]!;
      const r = requiredReservation(settings[cls], capacity);
      sum += r;
      parts.push(`${cls} ${r}`);
    }
    if (sum > capacity) throw new ReservationsExceedCapacityError(sum, capacity, parts.join(", "));
  }

  /** `reservedAt` below `capacity` (or left out) means the capacity itself. */
  setCapacity(capacity: number, reservedAt = capacity): void {
    this.capacity = capacity;
    this.reservedAt = Math.max(capacity, reservedAt);
    this.recompute();
  }

  setSettings(settings: ClassSettingsTable): void {
    this.settings = settings;
    this.recompute();
  }

  /**
   * Re-derives reservations at `reservedAt`. When they do not fit, the highest classes are filled
   * first (system, interactive, default, bulk), so a dip is absorbed by the lowest. Under a
   * smaller capacity each is then scaled by capacity / reservedAt, rounded down (the sum stays
   * within the capacity).
   */
  private recompute(): void {
    const at = this.reservedAt;
    const c = this.capacity;
    let remaining = at;
    for (let rank = CLASS_COUNT - 1; rank >= 0; rank--) {
      const want = requiredReservation(this.settings[PRIORITY_CLASSES[rank]!], at);
      const got = Math.min(want, Math.max(0, remaining));
      remaining -= got;
      // The same expression as the shared state's Lua (src/state/redis/lua/pool-state.ts).
      this.reserved[rank] = at > c ? Math.floor((got * c) / at) : got;
    }
  }

  headroom(rank: number): number {
    let held = 0;
    for (let h = rank + 1; h < CLASS_COUNT; h++) {
      const unused = this.reserved[h]! - this.inflight[h]!;
      if (unused > 0) held += unused;
    }
    return this.capacity - this.total - held;
  }

  /** A free slot exists at all (reservations ignored): the starvation rule's bound. */
  hasFreeSlot(): boolean {
    return this.total < this.capacity;
  }

  take(rank: number): void {
    this.inflight[rank]!++;
    this.total++;
  }

  give(rank: number): void {
    this.inflight[rank]!--;
    this.total--;
  }

  /** Moves one in-flight slot from one class to another (preemption hands the slot over). */
  transfer(fromRank: number, toRank: number): void {
    this.inflight[fromRank]!--;
    this.inflight[toRank]!++;
  }
}

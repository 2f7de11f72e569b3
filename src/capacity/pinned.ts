/**
 * A capacity an operator pins (admin API `PUT /api/v1/capacity`) over another source; unpinning
 * returns to that source's value. Changes apply at once.
 */
import { CapacityNotifier, type CapacitySource } from "../contracts/capacity-source.js";

export class PinnableCapacity implements CapacitySource {
  private readonly notifier = new CapacityNotifier();
  private pin: number | undefined;

  constructor(private readonly inner: CapacitySource) {
    inner.subscribe(() => this.notifier.changed(this.capacity, this.reservedAt));
  }

  get capacity(): number {
    return this.pin ?? this.inner.capacity;
  }

  /** The source's, unpinned; a pin is the capacity the reservations are sized at, as always. */
  get reservedAt(): number | undefined {
    return this.pin === undefined ? this.inner.reservedAt : undefined;
  }

  /** The pinned value, if any. */
  get pinned(): number | undefined {
    return this.pin;
  }

  /** The value underneath the pin. */
  get underlying(): number {
    return this.inner.capacity;
  }

  /** Pins capacity (undefined = back to the source underneath). */
  setPin(capacity: number | undefined): void {
    this.pin = capacity;
    this.inner.overridden?.(capacity !== undefined);
    this.notifier.changed(this.capacity, this.reservedAt);
  }

  subscribe(listener: (capacity: number) => void): void {
    this.notifier.subscribe(listener);
  }
}

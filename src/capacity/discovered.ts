/**
 * Discovered capacity: the sum over healthy workers of each one's capacity (configured, else the
 * `max_running_requests` it reports, else 64); with no healthy worker, the fallback
 * (`--max-concurrent-requests`, 1024 when unlimited). See gateway/workers.ts for discovery.
 */
import type { WorkerPool } from "../gateway/workers.js";
import { CapacityNotifier, type CapacitySource } from "./source.js";

export class DiscoveredCapacity implements CapacitySource {
  private readonly notifier = new CapacityNotifier();

  constructor(private readonly workers: WorkerPool) {
    workers.onChange(() => this.notifier.changed(this.capacity));
  }

  get capacity(): number {
    return this.workers.discoveredCapacity;
  }

  subscribe(listener: (capacity: number) => void): void {
    this.notifier.subscribe(listener);
  }
}

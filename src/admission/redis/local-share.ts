/**
 * The local fallback (fail mode `local`): while Redis is away, this replica admits on its share of
 * the fleet's capacity, capacity / N (N = replicas alive when last seen), with the core scheduler
 * itself (src/core/engine.ts): same classes, reservations, queues, fair queuing and preemption,
 * only local. When Redis returns, requests still queued here move back to the shared queues.
 *
 * The same scheduler also classifies requests (header parsing and the tenant clamp) while Redis is
 * in use, so both paths agree on every class.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { ClassSettingsTable, TenantPolicy } from "@sluice/scheduler/core/config.js";
import { createScheduler, type Scheduler } from "@sluice/scheduler/core/engine.js";
import type { SchedulerObserver } from "@sluice/scheduler/core/events.js";
import type { Permit } from "@sluice/scheduler/core/inflight.js";
import type { CancelSignal } from "@sluice/scheduler/core/signal.js";

/** The cancel signal a locally queued request waits with: the client's, plus "moved back to Redis". */
class LocalWait implements CancelSignal {
  moved = false;
  private listener: (() => void) | undefined;

  constructor(private readonly client: CancelSignal | undefined) {}

  get aborted(): boolean {
    return this.moved || (this.client?.aborted ?? false);
  }

  addEventListener(_type: "abort", listener: () => void): void {
    this.listener = listener;
    this.client?.addEventListener("abort", listener, { once: true });
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    if (this.listener === listener) this.listener = undefined;
    this.client?.removeEventListener("abort", listener);
  }

  move(): void {
    this.moved = true;
    this.listener?.();
  }
}

export const MOVED = Symbol("moved back to the shared queues");

interface LocalShareOptions {
  capacity: number;
  classes: ClassSettingsTable;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
  defaultMaxClass: PriorityClass;
  clock: Clock;
  observer: SchedulerObserver | undefined;
}

export class LocalShare {
  readonly scheduler: Scheduler;
  private readonly waits = new Set<LocalWait>();
  /** While requests move back to Redis, their "cancel" is not a client's: not counted. */
  private moving = false;

  /** Throws ReservationsExceedCapacityError when the classes' reservations do not fit `capacity`. */
  constructor(options: LocalShareOptions) {
    const observer = options.observer;
    const quiet: SchedulerObserver | undefined =
      observer === undefined
        ? undefined
        : {
            ...observer,
            admission: (cls, outcome, tenant) => {
              if (!(this.moving && outcome === "client_cancelled"))
                observer.admission?.(cls, outcome, tenant);
            },
            queueWait: (cls, seconds, outcome) => {
              if (!(this.moving && outcome === "client_cancelled"))
                observer.queueWait?.(cls, seconds, outcome);
            },
          };
    this.scheduler = createScheduler({
      capacity: options.capacity,
      classes: options.classes,
      tenantPolicies: options.tenantPolicies,
      defaultMaxClass: options.defaultMaxClass,
      clock: options.clock,
      ...(quiet ? { observer: quiet } : {}),
    });
  }

  /** A slot on the local share, or MOVED when Redis came back while the request waited. */
  async acquire(request: {
    priority: string | undefined;
    tenant: string;
    cost: number;
    signal: CancelSignal | undefined;
  }): Promise<Permit | typeof MOVED> {
    const wait = new LocalWait(request.signal);
    this.waits.add(wait);
    try {
      return await this.scheduler.acquire({ ...request, signal: wait });
    } catch (err) {
      if (wait.moved) return MOVED;
      throw err;
    } finally {
      this.waits.delete(wait);
    }
  }

  /** Redis is back: every request still queued here leaves for the shared queues. */
  moveAll(): void {
    this.moving = true;
    try {
      for (const wait of [...this.waits]) wait.move();
    } finally {
      this.moving = false;
    }
  }

  get waiting(): number {
    return this.waits.size;
  }
}

/**
 * `strict`: the reference priority scheduler's behaviour, for side-by-side comparison with sluice.
 * It is not used outside the simulator.
 *
 * Same contract knobs as sluice (classes, reservations, queue sizes and timeouts, starvation
 * promotion, preemption before the first byte, the tenant max_class clamp), but:
 * - one FIFO queue per class: no tenant weights, no token cost;
 * - arrivals may take a free slot ahead of waiters: an arrival is admitted whenever its class has
 *   headroom, whoever is queued. Waiters are woken by a dispatcher pass `wakeupMs` after a slot is
 *   freed (the reference notifies waiters, which then re-check; the simulator gives that wake-up
 *   1 ms by default), and arrivals in between take the freed slots.
 * Headroom and reservations follow the contract's formula (headroom(c) = capacity - in flight -
 * unused reservations of the classes above c); on a capacity dip the reservations are clamped
 * highest class first, as in sluice, so the two differ only in their queueing discipline.
 */
import { CLASS_COUNT, CLASS_RANK, classOfRank, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock, TimerHandle } from "@sluice/scheduler/core/clock.js";
import {
  type ClassSettingsTable,
  requiredReservation,
  type TenantPolicy,
} from "@sluice/scheduler/core/config.js";
import {
  ClientCancelledError,
  PreemptedError,
  QueueFullError,
  QueueTimeoutError,
} from "@sluice/scheduler/core/errors.js";
import { type PreemptibleEntry, PreemptibleSet } from "@sluice/scheduler/core/inflight.js";

export class StrictPermit implements PreemptibleEntry<StrictPermit> {
  firstByte = false;
  preempted = false;
  released = false;
  prev: StrictPermit | null = null;
  next: StrictPermit | null = null;
  listed = false;
  private preemptedBy = 0;
  private listener: ((error: Error) => void) | undefined;
  constructor(
    private readonly owner: StrictScheduler,
    public rank: number,
    readonly queueWaitMs: number,
  ) {}
  release(): void {
    if (this.released) return;
    this.released = true;
    this.owner.releasePermit(this);
  }
  markFirstByte(): boolean {
    if (this.preempted) return false;
    if (!this.firstByte) {
      this.firstByte = true;
      this.owner.unlist(this);
    }
    return true;
  }
  onPreempt(listener: (error: Error) => void): void {
    if (this.preempted) listener(new PreemptedError(classOfRank(this.rank), classOfRank(this.preemptedBy)));
    else this.listener = listener;
  }
  /** @internal */
  preempt(byRank: number): void {
    this.preempted = true;
    this.preemptedBy = byRank;
    this.listener?.(new PreemptedError(classOfRank(this.rank), classOfRank(byRank)));
  }
}

interface StrictWaiter {
  rank: number;
  enqueuedAt: number;
  seq: number;
  resolve: (p: StrictPermit) => void;
  reject: (e: Error) => void;
  timer: TimerHandle | undefined;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  done: boolean;
}

interface StrictOptions {
  capacity: number;
  classes: ClassSettingsTable;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
  defaultMaxClass: PriorityClass;
  clock: Clock;
  /** Delay between a slot being freed and the waiters' dispatcher pass (ms). */
  wakeupMs: number;
}

export class StrictScheduler {
  private capacity: number;
  private total = 0;
  private readonly inflight = [0, 0, 0, 0];
  private readonly reserved = [0, 0, 0, 0];
  private readonly queues: StrictWaiter[][] = [[], [], [], []];
  private readonly heads = [0, 0, 0, 0];
  private readonly sizes = [0, 0, 0, 0];
  /** The core's preemptible lists: both schedulers pick the same victim (lowest class, newest). */
  private readonly preemptible = new PreemptibleSet<StrictPermit>();
  private seq = 0;
  private wakeup: TimerHandle | undefined;
  private starveTimer: TimerHandle | undefined;
  private starveAt = Number.POSITIVE_INFINITY;
  private settledCount = 0;
  readonly promotions = [0, 0, 0, 0];
  clamps = 0;

  constructor(private readonly options: StrictOptions) {
    this.capacity = options.capacity;
    this.recompute();
  }

  get settled(): number {
    return this.settledCount;
  }

  setCapacity(capacity: number): void {
    this.capacity = capacity;
    this.recompute();
    this.dispatch();
  }

  private recompute(): void {
    let remaining = this.capacity;
    for (let r = CLASS_COUNT - 1; r >= 0; r--) {
      const want = requiredReservation(this.options.classes[classOfRank(r)], this.capacity);
      const got = Math.min(want, Math.max(0, remaining));
      this.reserved[r] = got;
      remaining -= got;
    }
  }

  private headroom(rank: number): number {
    let held = 0;
    for (let h = rank + 1; h < CLASS_COUNT; h++) {
      const unused = this.reserved[h]! - this.inflight[h]!;
      if (unused > 0) held += unused;
    }
    return this.capacity - this.total - held;
  }

  acquire(opts: {
    priority: PriorityClass;
    tenant: string;
    signal?: AbortSignal | undefined;
  }): Promise<StrictPermit> {
    const policy = this.options.tenantPolicies.get(opts.tenant);
    const maxRank = CLASS_RANK[policy?.max_class ?? this.options.defaultMaxClass];
    let rank = CLASS_RANK[opts.priority];
    if (rank > maxRank) {
      rank = maxRank;
      this.clamps++;
    }
    const cls = classOfRank(rank);
    if (opts.signal?.aborted) {
      this.settledCount++;
      return Promise.reject(new ClientCancelledError(cls, "scheduler_client_cancelled"));
    }
    if (this.headroom(rank) > 0) {
      this.settledCount++;
      return Promise.resolve(this.admit(rank, 0));
    }
    const settings = this.options.classes[cls];
    if (settings.can_preempt) {
      const victim = this.preemptible.victimBelow(rank);
      if (victim !== null) {
        this.unlist(victim);
        this.inflight[victim.rank]!--;
        this.inflight[rank]!++;
        victim.preempt(rank);
        this.settledCount++;
        const permit = new StrictPermit(this, rank, 0);
        this.preemptible.add(permit);
        return Promise.resolve(permit);
      }
    }
    if (this.sizes[rank]! >= settings.queue_size) {
      this.settledCount++;
      return Promise.reject(new QueueFullError(cls, settings.queue_size));
    }
    return new Promise<StrictPermit>((resolve, reject) => {
      const now = this.options.clock.now();
      const waiter: StrictWaiter = {
        rank,
        enqueuedAt: now,
        seq: this.seq++,
        resolve,
        reject,
        timer: undefined,
        signal: opts.signal,
        onAbort: undefined,
        done: false,
      };
      waiter.timer = this.options.clock.setTimer(
        () => this.timeout(waiter),
        settings.queue_timeout_secs * 1000,
      );
      if (opts.signal) {
        waiter.onAbort = () => this.cancel(waiter);
        opts.signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      this.queues[rank]!.push(waiter);
      this.sizes[rank]!++;
      this.armStarvation(now + settings.starvation_threshold_secs * 1000);
    });
  }

  private admit(rank: number, waitMs: number): StrictPermit {
    this.inflight[rank]!++;
    this.total++;
    const permit = new StrictPermit(this, rank, waitMs);
    this.preemptible.add(permit);
    return permit;
  }

  /** @internal */
  releasePermit(permit: StrictPermit): void {
    if (permit.preempted) return; // the slot moved to the preemptor
    this.unlist(permit);
    this.inflight[permit.rank]!--;
    this.total--;
    if (this.waiting() === 0) return;
    if (this.options.wakeupMs <= 0) this.dispatch();
    else if (this.wakeup === undefined) {
      this.wakeup = this.options.clock.setTimer(() => {
        this.wakeup = undefined;
        this.dispatch();
      }, this.options.wakeupMs);
    }
  }

  private waiting(): number {
    return this.sizes[0]! + this.sizes[1]! + this.sizes[2]! + this.sizes[3]!;
  }

  private head(rank: number): StrictWaiter | undefined {
    const q = this.queues[rank]!;
    let h = this.heads[rank]!;
    while (h < q.length && q[h]!.done) h++;
    if (h > 1024 && h * 2 > q.length) {
      q.splice(0, h);
      h = 0;
    }
    this.heads[rank] = h;
    return q[h];
  }

  private settle(w: StrictWaiter): void {
    w.done = true;
    this.sizes[w.rank]!--;
    this.settledCount++;
    if (w.timer !== undefined) this.options.clock.clearTimer(w.timer);
    if (w.signal && w.onAbort) w.signal.removeEventListener("abort", w.onAbort);
  }

  private dispatch(): void {
    const now = this.options.clock.now();
    // Starvation: the oldest waiter past its class's threshold, any free slot.
    for (;;) {
      if (this.total >= this.capacity) break;
      let best: StrictWaiter | undefined;
      for (let r = 0; r < CLASS_COUNT; r++) {
        const w = this.head(r);
        if (w === undefined) continue;
        const mark = w.enqueuedAt + this.options.classes[classOfRank(r)].starvation_threshold_secs * 1000;
        if (now >= mark && (best === undefined || w.seq < best.seq)) best = w;
      }
      if (best === undefined) break;
      this.settle(best);
      this.promotions[best.rank]!++;
      best.resolve(this.admit(best.rank, now - best.enqueuedAt));
    }
    dispatch: for (let r = CLASS_COUNT - 1; r >= 0; r--) {
      for (let w = this.head(r); w !== undefined; w = this.head(r)) {
        if (this.headroom(r) <= 0) break dispatch;
        this.settle(w);
        w.resolve(this.admit(r, now - w.enqueuedAt));
      }
    }
    this.rearmStarvation(now);
  }

  private armStarvation(at: number): void {
    if (at >= this.starveAt) return;
    if (this.starveTimer !== undefined) this.options.clock.clearTimer(this.starveTimer);
    this.starveAt = at;
    this.starveTimer = this.options.clock.setTimer(() => {
      this.starveTimer = undefined;
      this.starveAt = Number.POSITIVE_INFINITY;
      this.dispatch();
    }, at - this.options.clock.now());
  }

  private rearmStarvation(now: number): void {
    let next = Number.POSITIVE_INFINITY;
    for (let r = 0; r < CLASS_COUNT; r++) {
      const w = this.head(r);
      if (w === undefined) continue;
      const mark = w.enqueuedAt + this.options.classes[classOfRank(r)].starvation_threshold_secs * 1000;
      if (mark > now && mark < next) next = mark;
    }
    if (next !== Number.POSITIVE_INFINITY) this.armStarvation(next);
  }

  private timeout(w: StrictWaiter): void {
    if (w.done) return;
    w.timer = undefined;
    this.settle(w);
    const cls = classOfRank(w.rank);
    w.reject(new QueueTimeoutError(cls, this.options.classes[cls].queue_timeout_secs));
  }

  private cancel(w: StrictWaiter): void {
    if (w.done) return;
    this.settle(w);
    w.reject(new ClientCancelledError(classOfRank(w.rank), "scheduler_client_cancelled"));
  }

  /** @internal A permit's first byte: it can no longer be preempted. */
  unlist(p: StrictPermit): void {
    this.preemptible.remove(p);
  }
}

/**
 * The priority scheduler: acquire, dispatch, timeouts, starvation promotion and preemption.
 *
 * Every decision is a synchronous function of the state and the injected clock. The only
 * asynchrony is the Promise an acquire returns; the only timer is one clock timer armed at the
 * earliest pending deadline (a queue timeout or a starvation threshold).
 *
 * Rules (see docs/design.md):
 * - No queue jumping: an arrival takes a slot at once only when no waiter of its own or a higher
 *   class is queued and its class has headroom.
 * - Dispatch: starvation pass first (the class whose oldest waiter is the oldest past its threshold
 *   admits its next waiter in fair order; reservations ignored, capacity binding), then strict
 *   priority by class with reservation-aware headroom; within a class, weighted fair queuing
 *   across tenants. A promotion that passes a waiting higher
 *   class spends a credit that grows by the class's starvation_max_share per admission, so
 *   promoted waiters take at most that share of admissions while higher classes wait.
 * - Preemption: a waiter of a can_preempt class that is next in line (no waiter of a higher class)
 *   and has queued for its class's preempt_after_secs with no slot freed takes the slot of one
 *   victim (strictly lower class, no first byte yet, lowest class first, then the least work
 *   thrown away: the most recently admitted unless the shell reports progress). With
 *   preempt_after_secs 0 an arrival preempts at once instead of queueing.
 */
import { CLASS_COUNT, CLASS_RANK, classOfRank, type PriorityClass, parsePriority } from "./class.js";
import { type Clock, realClock } from "./clock.js";
import {
  type ClassOverrides,
  type ClassSettingsTable,
  resolveClassSettings,
  resolveTenantPolicies,
  type TenantPolicy,
} from "./config.js";
import { DeadlineTimer } from "./deadline-timer.js";
import { ClientCancelledError, ConfigError, QueueFullError, QueueTimeoutError } from "./errors.js";
import {
  ADMISSION_OUTCOMES,
  type AdmissionOutcome,
  type ClassSnapshot,
  type SchedulerCounters,
  type SchedulerObserver,
  type SchedulerSnapshot,
} from "./events.js";
import { FairQueue, type Flow, type QueueItem } from "./fair-queue.js";
import { type Permit, type PermitOwner, PreemptibleSet, SchedulerPermit } from "./inflight.js";
import type { CancelSignal } from "./signal.js";
import { Slots } from "./slots.js";

export interface SchedulerOptions {
  /** Total concurrent requests the fleet can run. */
  capacity: number;
  /**
   * Per-class overrides on top of the built-in defaults (the YAML's shape), or a complete table.
   * Validated: a bad value throws a ConfigError naming the key.
   */
  classes?: ClassOverrides | ClassSettingsTable;
  /** Tenant key -> policy (`max_class`, `weight`); validated like `classes`. */
  tenantPolicies?: ReadonlyMap<string, TenantPolicy> | Record<string, TenantPolicy>;
  /** Ceiling for tenants without a policy (default `default`). */
  defaultMaxClass?: PriorityClass;
  clock?: Clock;
  observer?: SchedulerObserver;
  /**
   * The work a preemption of this permit would throw away (prefill tokens computed so far), where
   * the shell knows the worker's progress (the simulator does). Victims are then chosen by least
   * work inside the lowest class; without it, by elapsed time (the most recently admitted).
   */
  preemptionCost?: (permit: Permit) => number;
}

export interface AcquireOptions {
  /** Requested class: a class name or a raw `x-smg-priority` value (parsed leniently). */
  priority?: PriorityClass | string | null;
  /** Tenant key (e.g. `auth:acme`); default `anonymous`. */
  tenant?: string;
  /** Estimated cost (tokens) for fair queuing; default 1. */
  cost?: number;
  /**
   * Aborting it while queued rejects with ClientCancelledError (`scheduler_client_cancelled`) and
   * frees the queue place. An AbortSignal, or any object with the same three members.
   */
  signal?: CancelSignal | undefined;
}

export interface Scheduler {
  acquire(options?: AcquireOptions): Promise<Permit>;
  /**
   * Reports a request's actual cost (tokens) once known: it replaces the estimate charged to the
   * tenant's fair-share counter at admission, with no clamping (an overestimate is credited back).
   * Works for every permit, fast path or queued, before or after `release()`. A second call
   * corrects relative to the first (the last value reported stands). Ignored for a preempted
   * permit (it was refunded in full) and for a value that is not a number >= 0; values above
   * 2^40 count as 2^40. `adjustCost(permit, 0)` refunds a request that produced nothing.
   * Same as `permit.settle(actualCost)`.
   */
  adjustCost(permit: Permit, actualCost: number): void;
  /**
   * Applies a live capacity; reservations are re-derived and waiters admitted as room appears.
   * `reservedAt` (>= capacity; default the capacity itself) is the capacity the reservations are
   * sized at: an adaptive limit under the fleet's size passes the fleet's size, and each class's
   * reservation there is scaled by capacity / reservedAt (rounded down), so the classes keep their
   * shares instead of the absolute floors filling a small limit.
   */
  setCapacity(capacity: number, reservedAt?: number): void;
  readonly capacity: number;
  /** Replaces tenant policies (e.g. on reload); queued waiters keep their class. */
  setTenantPolicies(
    policies: ReadonlyMap<string, TenantPolicy> | Record<string, TenantPolicy>,
    defaultMaxClass?: PriorityClass,
  ): void;
  /** Resolves the effective class a request would get, without admitting it. */
  classify(
    priority: string | null | undefined,
    tenant: string,
  ): { requested: PriorityClass; effective: PriorityClass; unknown: boolean };
  snapshot(): SchedulerSnapshot;
  counters(): SchedulerCounters;
  /** Number of waiters across all classes. */
  readonly queued: number;
  readonly inflight: number;
}

/**
 * A queued acquire. Its shape is kept small (docs/design.md, "A waiter's bytes"): one is held per
 * queued request, and a flood queues hundreds of thousands. Eight fields: what the waiter's flow
 * or its queue already knows is not repeated here (the tenant and weight are the flow's, the
 * effective class is the queue's), and the requested class rides in `seq`'s low bits.
 */
class Waiter implements QueueItem {
  flow: Flow<this> | null = null;
  prevInFlow: this | null = null;
  nextInFlow: this | null = null;
  /**
   * Arrival count times 4 plus the requested class's rank (0..3): it orders like the count, and
   * stays a small integer (the count restarts whenever the queues are empty).
   */
  readonly seq: number;
  readonly enqueuedAt: number;
  readonly cost: number;
  /**
   * The promise's resolve function only: its reject function is not kept (a function object less per
   * waiter); a refusal resolves it with a thenable that rejects (`refusal`).
   */
  readonly resolve: (outcome: SchedulerPermit | PromiseLike<SchedulerPermit>) => void;
  /** Set while queued with a signal: the abort listener, which also unhooks itself (`UNHOOK`). */
  onAbort: AbortHook | undefined = undefined;

  constructor(
    seq: number,
    now: number,
    cost: number,
    resolve: (outcome: SchedulerPermit | PromiseLike<SchedulerPermit>) => void,
  ) {
    this.seq = seq;
    this.enqueuedAt = now;
    this.cost = cost;
    this.resolve = resolve;
  }
}

/**
 * What a waiter's abort hook is called with to take itself off its signal instead of cancelling:
 * one closure is both the listener and the way to remove it, so a waiter keeps neither the signal
 * nor a second object for it.
 */
const UNHOOK = Symbol("unhook");
type AbortHook = (how?: unknown) => void;

/** A thenable that rejects with `error`: what a waiter's promise is resolved with to refuse it. */
function refusal(error: Error): PromiseLike<never> {
  return {
    // biome-ignore lint/suspicious/noThenProperty: a thenable on purpose (see Waiter.resolve)
    then: (_onPermit, onRefusal) => {
      onRefusal?.(error);
      return undefined as never;
    },
  } as PromiseLike<never>;
}

interface ResolvedTenant {
  maxRank: number;
  weight: number;
  /**
   * The tenant's flow in each class's queue, kept here so an admission skips the queue's map: the
   * queue never drops a kept flow (`Flow.kept`), so memory is bounded by the tenant table. Null
   * for the record shared by tenants without a policy.
   */
  flows: Array<Flow<Waiter> | null> | null;
}

function assertCapacity(capacity: number): void {
  if (!Number.isInteger(capacity) || capacity < 0) {
    throw new ConfigError("capacity", `must be an integer >= 0, got ${capacity}`);
  }
}

const ANONYMOUS = "anonymous";
const OUTCOME_INDEX = Object.fromEntries(ADMISSION_OUTCOMES.map((o, i) => [o, i])) as Record<
  AdmissionOutcome,
  number
>;

class PriorityScheduler implements Scheduler, PermitOwner {
  private readonly clock: Clock;
  private readonly observer: SchedulerObserver;
  private readonly settings: ClassSettingsTable;
  private readonly slots: Slots;
  private readonly queues: FairQueue<Waiter>[] = [];
  private readonly preemptible = new PreemptibleSet<SchedulerPermit>();
  private readonly queueLimit: number[] = [];
  private readonly timeoutMs: number[] = [];
  private readonly starvationMs: number[] = [];
  /** Per class: preempt_after_secs in ms (0: on arrival), Infinity for a class that may not preempt. */
  private readonly preemptAfterMs: number[] = [];
  private readonly preemptionCost: ((permit: Permit) => number) | undefined;
  /** Per class: starvation_max_share, and the promotion credit as of `creditAt` admissions. */
  private readonly promotionShare: number[] = [];
  private readonly promotionCredit: number[] = [1, 1, 1, 1];
  private readonly creditAt: number[] = [0, 0, 0, 0];
  /** Admissions so far (fast, queued, promoted, preemptor): the clock of the promotion credit. */
  private admissions = 0;
  private tenants = new Map<string, ResolvedTenant>();
  /** The resolve function the last promise's executor handed over (one executor, not one per waiter). */
  private captured: ((outcome: SchedulerPermit | PromiseLike<SchedulerPermit>) => void) | null = null;
  private readonly capture = (resolve: (outcome: SchedulerPermit | PromiseLike<SchedulerPermit>) => void) => {
    this.captured = resolve;
  };
  private defaultTenant: ResolvedTenant;
  private queuedTotal = 0;
  private seq = 0;
  private readonly timer: DeadlineTimer;
  private dispatching = false;
  /** No head can be past its starvation mark before this instant (a lower bound). */
  private starveCheckAt = Number.POSITIVE_INFINITY;
  private readonly admissionCounts: number[][] = [];
  private readonly preemptionCounts: number[][] = [];
  private readonly promotionCounts: number[] = [0, 0, 0, 0];
  private clampCount = 0;
  private unknownCount = 0;

  constructor(options: SchedulerOptions) {
    assertCapacity(options.capacity);
    this.clock = options.clock ?? realClock;
    this.timer = new DeadlineTimer(this.clock, () => this.onTimer());
    this.observer = options.observer ?? {};
    this.preemptionCost = options.preemptionCost;
    // A complete table resolves to itself; either way every value is checked.
    this.settings = resolveClassSettings(options.classes);
    Slots.assertFits(this.settings, options.capacity);
    this.slots = new Slots(this.settings, options.capacity);
    for (let rank = 0; rank < CLASS_COUNT; rank++) {
      const s = this.settings[classOfRank(rank)];
      this.queues.push(new FairQueue<Waiter>());
      this.queueLimit.push(s.queue_size);
      this.timeoutMs.push(s.queue_timeout_secs * 1000);
      this.starvationMs.push(s.starvation_threshold_secs * 1000);
      // A class that may not queue (queue_size 0) preempts at once: waiting is not open to it.
      this.preemptAfterMs.push(
        !s.can_preempt ? Number.POSITIVE_INFINITY : s.queue_size === 0 ? 0 : s.preempt_after_secs * 1000,
      );
      this.promotionShare.push(s.starvation_max_share);
      // A class with a share starts with one promotion in hand; a share of 0 never passes anyone.
      if (s.starvation_max_share === 0) this.promotionCredit[rank] = 0;
      this.admissionCounts.push(ADMISSION_OUTCOMES.map(() => 0));
      this.preemptionCounts.push([0, 0, 0, 0]);
    }
    this.defaultTenant = {
      maxRank: CLASS_RANK[options.defaultMaxClass ?? "default"],
      weight: 1,
      flows: null,
    };
    this.setTenantPolicies(options.tenantPolicies ?? new Map(), options.defaultMaxClass);
  }

  get capacity(): number {
    return this.slots.capacity;
  }

  get queued(): number {
    return this.queuedTotal;
  }

  get inflight(): number {
    return this.slots.total;
  }

  setTenantPolicies(
    policies: ReadonlyMap<string, TenantPolicy> | Record<string, TenantPolicy>,
    defaultMaxClass?: PriorityClass,
  ): void {
    const map = resolveTenantPolicies(policies);
    if (defaultMaxClass !== undefined)
      this.defaultTenant = { maxRank: CLASS_RANK[defaultMaxClass], weight: 1, flows: null };
    const tenants = new Map<string, ResolvedTenant>();
    for (const [key, policy] of map) {
      tenants.set(key, {
        maxRank: policy.max_class !== undefined ? CLASS_RANK[policy.max_class] : this.defaultTenant.maxRank,
        weight: policy.weight ?? 1,
        flows: [null, null, null, null],
      });
    }
    this.tenants = tenants;
    // The old records (and their flow caches) are gone: their flows may be pruned again.
    for (const queue of this.queues) queue.releaseKept();
  }

  classify(priority: string | null | undefined, tenant: string) {
    const parsed = parsePriority(priority);
    const t = this.tenants.get(tenant) ?? this.defaultTenant;
    const requested = CLASS_RANK[parsed.class];
    return {
      requested: parsed.class,
      effective: classOfRank(Math.min(requested, t.maxRank)),
      unknown: parsed.unknown,
    };
  }

  acquire(options: AcquireOptions = {}): Promise<Permit> {
    const tenant = options.tenant ?? ANONYMOUS;
    const cost = options.cost ?? 1;
    if (!(cost > 0) || !Number.isFinite(cost)) {
      return Promise.reject(new RangeError(`acquire: cost must be a finite number > 0, got ${cost}`));
    }
    const parsed = parsePriority(options.priority);
    if (parsed.unknown) {
      this.unknownCount++;
      this.observer.unknownPriority?.(tenant);
    }
    const policy = this.tenants.get(tenant) ?? this.defaultTenant;
    const requested = CLASS_RANK[parsed.class];
    let rank = requested;
    if (requested > policy.maxRank) {
      rank = policy.maxRank;
      this.clampCount++;
      this.observer.clamp?.(tenant, parsed.class, classOfRank(rank));
    }

    const signal = options.signal;
    if (signal?.aborted) {
      this.count(rank, "client_cancelled", tenant);
      this.observer.queueWait?.(classOfRank(rank), 0, "client_cancelled");
      return Promise.reject(new ClientCancelledError(classOfRank(rank), "scheduler_client_cancelled"));
    }

    const nothingAhead = this.queuedTotal === 0 || !this.waitersAtOrAbove(rank);
    if (nothingAhead && this.slots.headroom(rank) > 0) {
      return Promise.resolve(this.admitNew(rank, requested, tenant, cost, policy));
    }
    if (nothingAhead && this.preemptAfterMs[rank] === 0) {
      const victim = this.preemptible.victimBelow(rank, this.preemptionCost);
      if (victim !== null)
        return Promise.resolve(this.admitNew(rank, requested, tenant, cost, policy, victim));
    }

    const queue = this.queues[rank]!;
    if (queue.size >= this.queueLimit[rank]!) {
      this.count(rank, "rejected_queue_full", tenant);
      return Promise.reject(new QueueFullError(classOfRank(rank), this.queueLimit[rank]!));
    }
    return this.enqueue(rank, requested, tenant, cost, policy, signal);
  }

  adjustCost(permit: Permit, actualCost: number): void {
    // The permit calls back into its own scheduler (settlePermit), never into another one's queues.
    permit.settle(actualCost);
  }

  setCapacity(capacity: number, reservedAt = capacity): void {
    assertCapacity(capacity);
    if (!(reservedAt >= 0) || !Number.isFinite(reservedAt)) {
      throw new ConfigError("reservedAt", `must be a finite number >= 0, got ${reservedAt}`);
    }
    this.slots.setCapacity(capacity, reservedAt);
    this.dispatch();
  }

  // --- PermitOwner -------------------------------------------------------------------------

  settlePermit(permit: SchedulerPermit, actualCost: number): void {
    if (permit.preempted) return; // refunded in full when it was preempted
    this.queues[permit.rank]!.correct(permit, actualCost);
  }

  releasePermit(permit: SchedulerPermit): void {
    if (permit.preempted) return; // its slot already went to the preemptor, its charge was refunded
    this.queues[permit.rank]!.settle(permit); // without a correction the estimate stands
    this.preemptible.remove(permit);
    this.slots.give(permit.rank);
    if (this.queuedTotal > 0) this.dispatch();
  }

  firstBytePermit(permit: SchedulerPermit): void {
    this.preemptible.remove(permit);
  }

  // --- admission ---------------------------------------------------------------------------

  private waitersAtOrAbove(rank: number): boolean {
    for (let r = rank; r < CLASS_COUNT; r++) if (this.queues[r]!.size > 0) return true;
    return false;
  }

  /**
   * Whether a class above `rank` has waiters. A promotion then passes them even when the slot is a
   * higher class's unused reservation they cannot take: a promoted waiter holding it keeps the
   * reservation held back from them, so it costs them a slot all the same.
   */
  private waitersAbove(rank: number): boolean {
    return rank + 1 < CLASS_COUNT && this.waitersAtOrAbove(rank + 1);
  }

  // --- bounded starvation promotion ----------------------------------------------------------

  /** The class's promotion credit now: it grows by its share per admission, up to one promotion. */
  private promotionCreditOf(rank: number): number {
    const grown =
      this.promotionCredit[rank]! + this.promotionShare[rank]! * (this.admissions - this.creditAt[rank]!);
    return grown < 1 ? grown : 1;
  }

  /** A waiter past its mark may be promoted when no higher class waits, or on a whole credit. */
  private mayPromote(rank: number): boolean {
    return !this.waitersAbove(rank) || this.promotionCreditOf(rank) >= 1;
  }

  private spendPromotionCredit(rank: number): void {
    this.promotionCredit[rank] = this.promotionCreditOf(rank) - 1;
    this.creditAt[rank] = this.admissions;
  }

  /** The tenant's flow in a class's queue (configured tenants keep it on their policy record). */
  private flowOf(policy: ResolvedTenant, rank: number, tenant: string): Flow<Waiter> {
    const cache = policy.flows;
    if (cache === null) return this.queues[rank]!.flowFor(tenant, policy.weight);
    const cached = cache[rank];
    if (cached?.live) return cached;
    // Kept: never pruned while this record stands, so the next admission skips the queue's map.
    const flow = this.queues[rank]!.flowFor(tenant, policy.weight, true);
    cache[rank] = flow;
    return flow;
  }

  private admitNew(
    rank: number,
    requested: number,
    tenant: string,
    cost: number,
    policy: ResolvedTenant,
    victim: SchedulerPermit | null = null,
  ): SchedulerPermit {
    // Into a free slot, or into the victim's (preemption on arrival).
    if (victim === null) this.slots.take(rank);
    else this.takeSlotOf(victim, rank);
    const permit = new SchedulerPermit(this, rank, requested, tenant, cost, policy.weight, 0, "fast", false);
    // Fast-path admissions are charged like any other: a burst into an idle class is service too.
    this.queues[rank]!.charge(permit, cost, true, this.flowOf(policy, rank, tenant));
    this.preemptible.add(permit);
    this.count(rank, "admitted", tenant);
    this.observer.queueWait?.(classOfRank(rank), 0, "admitted");
    return permit;
  }

  /** The victim's slot passes to a request of class `rank` (the slot count moves, not the total). */
  private takeSlotOf(victim: SchedulerPermit, rank: number): void {
    this.preemptible.remove(victim);
    this.slots.transfer(victim.rank, rank);
    // Preempted before its first byte: nothing was served, the whole charge comes back.
    this.queues[victim.rank]!.refund(victim);
    victim.markPreempted(rank);
    this.preemptionCounts[victim.rank]![rank]!++;
    this.observer.preemption?.(classOfRank(victim.rank), classOfRank(rank));
    this.count(victim.rank, "preempted", victim.tenant);
  }

  private enqueue(
    rank: number,
    requested: number,
    tenant: string,
    cost: number,
    policy: ResolvedTenant,
    signal: CancelSignal | undefined,
  ): Promise<Permit> {
    const now = this.clock.now();
    const promise = new Promise<SchedulerPermit>(this.capture);
    // No live waiter compares with an older count once the queues are empty: restart it.
    if (this.queuedTotal === 0) this.seq = 0;
    const waiter = new Waiter(this.seq++ * 4 + requested, now, cost, this.captured!);
    this.captured = null;
    this.queues[rank]!.push(waiter, this.flowOf(policy, rank, tenant));
    this.queuedTotal++;
    if (signal !== undefined) this.hookAbort(waiter, rank, signal);
    const starveAt = now + this.starvationMs[rank]!;
    if (starveAt < this.starveCheckAt) this.starveCheckAt = starveAt;
    const timeoutAt = now + this.timeoutMs[rank]!;
    this.timer.arm(Math.min(starveAt, timeoutAt, now + this.preemptAfterMs[rank]!));
    return promise;
  }

  /**
   * Cancels the waiter when its signal fires. Its own function, so that `enqueue` allocates no
   * closure context for the waiters that have no signal.
   */
  private hookAbort(waiter: Waiter, rank: number, signal: CancelSignal): void {
    // Assigned to the field, not to a named const: tsx (esbuild's keepNames) gives a named
    // function its own `name` property, a property store of 260 bytes on every waiter's hook.
    waiter.onAbort = (how) => {
      if (how === UNHOOK) signal.removeEventListener("abort", waiter.onAbort!);
      else this.cancel(waiter, rank);
    };
    signal.addEventListener("abort", waiter.onAbort, { once: true });
  }

  /** Takes a waiter off its queue (it has been served, timed out or cancelled). */
  private detach(waiter: Waiter): void {
    this.queuedTotal--;
    if (waiter.onAbort !== undefined) {
      waiter.onAbort(UNHOOK);
      waiter.onAbort = undefined;
    }
  }

  /**
   * Admits a waiter of class `rank` that has left `flow` (pop or serveOutOfOrder): into a free
   * slot, or into a victim's.
   */
  private grant(
    waiter: Waiter,
    flow: Flow<Waiter>,
    rank: number,
    promoted: boolean,
    now: number,
    victim: SchedulerPermit | null = null,
  ): void {
    this.detach(waiter);
    if (victim === null) this.slots.take(rank);
    else this.takeSlotOf(victim, rank);
    const waitMs = now - waiter.enqueuedAt;
    const tenant = flow.tenant;
    const permit = new SchedulerPermit(
      this,
      rank,
      waiter.seq & 3,
      tenant,
      waiter.cost,
      flow.weight,
      waitMs,
      "queued",
      promoted,
    );
    // Charge its estimate to the flow it left (nothing has touched the queue since: still live).
    this.queues[rank]!.charge(permit, waiter.cost, false, flow);
    this.preemptible.add(permit);
    const cls = classOfRank(rank);
    if (promoted) {
      this.promotionCounts[rank]!++;
      this.observer.starvationPromotion?.(cls);
    }
    this.count(rank, "admitted", tenant);
    this.observer.queueWait?.(cls, waitMs / 1000, "admitted");
    waiter.resolve(permit);
  }

  /** Admits the next waiter of class `rank` in fair order. */
  private grantNext(rank: number, promoted: boolean, now: number): void {
    const queue = this.queues[rank]!;
    const flow = queue.peekFlow()!;
    this.grant(queue.pop()!, flow, rank, promoted, now);
  }

  private cancel(waiter: Waiter, rank: number): void {
    const flow = waiter.flow;
    if (flow === null) return; // already left the queue
    this.queues[rank]!.remove(waiter);
    this.detach(waiter);
    const cls = classOfRank(rank);
    this.count(rank, "client_cancelled", flow.tenant);
    const waitedMs = this.clock.now() - waiter.enqueuedAt;
    this.observer.queueWait?.(cls, waitedMs / 1000, "client_cancelled");
    const error = new ClientCancelledError(cls, "scheduler_client_cancelled");
    error.queueWaitMs = waitedMs;
    waiter.resolve(refusal(error));
    // A departure changes no headroom, but it may unblock nothing; no dispatch needed.
  }

  /** Admits whatever the rules allow right now. */
  private dispatch(): void {
    if (this.dispatching || this.queuedTotal === 0) return;
    this.dispatching = true;
    // One clock read per dispatch: the clock is the costliest call on this path.
    const now = this.clock.now();
    let granted = false;
    try {
      for (;;) {
        // Starvation pass (skipped until the earliest head's mark, a lower bound kept up to date on
        // enqueue), then strict priority.
        if (now >= this.starveCheckAt && this.slots.hasFreeSlot() && this.promoteStarving(now))
          granted = true;
        if (!this.serveByPriority(now)) break;
        granted = true;
        // Serving higher classes may have emptied their queues: a starving waiter then takes a
        // slot left free (a higher class's unused reservation) without spending a credit.
        if (this.queuedTotal === 0 || now < this.starveCheckAt || !this.slots.hasFreeSlot()) break;
      }
    } finally {
      this.dispatching = false;
      // Served or promoted waiters may have been hiding a younger waiter's starvation mark (rearm
      // skips a head already past its mark): arm the timer for the queues' new heads.
      if (granted && this.queuedTotal > 0) this.rearm(now);
    }
  }

  /** Classes whose oldest waiter is past its mark admit their fair heads, capacity still binding; true if any was admitted. */
  private promoteStarving(now: number): boolean {
    let granted = false;
    for (;;) {
      let best: Waiter | null = null;
      let bestRank = -1;
      let nextMark = Number.POSITIVE_INFINITY;
      for (let r = 0; r < CLASS_COUNT; r++) {
        const oldest = this.queues[r]!.oldest();
        if (oldest === null) continue;
        const mark = oldest.enqueuedAt + this.starvationMs[r]!;
        if (mark < nextMark) nextMark = mark;
        if (now >= mark && (best === null || oldest.seq < best.seq) && this.mayPromote(r)) {
          best = oldest;
          bestRank = r;
        }
      }
      this.starveCheckAt = nextMark;
      if (best === null || !this.slots.hasFreeSlot()) return granted;
      if (this.waitersAbove(bestRank)) this.spendPromotionCredit(bestRank);
      // The mark decides which class takes the slot out of priority order; inside the class, its
      // fair order decides who. Promoting the oldest waiter itself made a class whose
      // waiters had all aged past the mark run oldest-first, and, the floor never moving, a tenant
      // that came back was lifted to a stale floor: 72/28 for weights 2:1 on the Azure trace.
      this.grantNext(bestRank, true, now);
      granted = true;
    }
  }

  /**
   * Strict priority with reservation-aware headroom; true if any waiter was admitted. headroom(c)
   * never exceeds that of a higher class, so the first class with waiters and no headroom ends it.
   */
  private serveByPriority(now: number): boolean {
    let granted = false;
    for (let r = CLASS_COUNT - 1; r >= 0 && this.queuedTotal > 0; r--) {
      const queue = this.queues[r]!;
      while (queue.size > 0) {
        if (this.slots.headroom(r) <= 0) return granted;
        this.grantNext(r, false, now);
        granted = true;
      }
    }
    return granted;
  }

  // --- time --------------------------------------------------------------------------------

  private onTimer(): void {
    const now = this.clock.now();
    for (let r = 0; r < CLASS_COUNT; r++) {
      const queue = this.queues[r]!;
      const limit = this.timeoutMs[r]!;
      // Same expression as the deadline the timer was armed at (rearm): `now - enqueuedAt >= limit`
      // can be false by one ulp for fractional times, and the timer would fire again and again.
      for (let w = queue.oldest(); w !== null && w.enqueuedAt + limit <= now; w = queue.oldest()) {
        const tenant = w.flow!.tenant;
        queue.remove(w);
        this.detach(w);
        const cls = classOfRank(r);
        this.count(r, "rejected_queue_timeout", tenant);
        this.observer.queueWait?.(cls, (now - w.enqueuedAt) / 1000, "rejected_queue_timeout");
        const error = new QueueTimeoutError(cls, limit / 1000);
        error.queueWaitMs = now - w.enqueuedAt;
        w.resolve(refusal(error));
      }
    }
    this.dispatch();
    this.preemptOverdue(now);
    this.rearm(now);
  }

  /**
   * Waiters of the highest waiting class that reached their preempt_after_secs with no slot freed
   * (dispatch has just run) take a victim's slot, oldest first, while victims last. Only that
   * class is next in line; a lower class's waiters queue behind it.
   */
  private preemptOverdue(now: number): void {
    for (let r = CLASS_COUNT - 1; r >= 0; r--) {
      const queue = this.queues[r]!;
      if (queue.size === 0) continue;
      const after = this.preemptAfterMs[r]!;
      for (let w = queue.oldest(); w !== null && w.enqueuedAt + after <= now; w = queue.oldest()) {
        if (this.slots.headroom(r) > 0) return;
        const victim = this.preemptible.victimBelow(r, this.preemptionCost);
        if (victim === null) return;
        const flow = w.flow!;
        queue.serveOutOfOrder(w);
        this.grant(w, flow, r, false, now, victim);
      }
      return;
    }
  }

  /** Arms the timer at the earliest deadline still ahead: a head's timeout or starvation mark. */
  private rearm(now: number): void {
    let next = Number.POSITIVE_INFINITY;
    for (let r = 0; r < CLASS_COUNT; r++) {
      const oldest = this.queues[r]!.oldest();
      if (oldest === null) continue;
      const timeoutAt = oldest.enqueuedAt + this.timeoutMs[r]!;
      if (timeoutAt < next) next = timeoutAt;
      const starveAt = oldest.enqueuedAt + this.starvationMs[r]!;
      if (starveAt > now && starveAt < next) next = starveAt;
      const preemptAt = oldest.enqueuedAt + this.preemptAfterMs[r]!;
      if (preemptAt > now && preemptAt < next) next = preemptAt;
    }
    if (next !== Number.POSITIVE_INFINITY) this.timer.arm(next);
  }

  // --- reporting ---------------------------------------------------------------------------

  private count(rank: number, outcome: AdmissionOutcome, tenant: string): void {
    if (outcome === "admitted") this.admissions++;
    this.admissionCounts[rank]![OUTCOME_INDEX[outcome]]!++;
    this.observer.admission?.(classOfRank(rank), outcome, tenant);
  }

  snapshot(): SchedulerSnapshot {
    const slots = this.slots;
    const classes = {} as Record<PriorityClass, ClassSnapshot>;
    for (let r = 0; r < CLASS_COUNT; r++) {
      const queued = this.queues[r]!.size;
      const limit = this.queueLimit[r]!;
      const headroom = slots.headroom(r);
      const queuePressure = limit > 0 ? queued / limit : queued > 0 ? 1 : 0;
      const slotPressure = slots.capacity > 0 ? 1 - Math.max(0, headroom) / slots.capacity : 1;
      classes[classOfRank(r)] = {
        inflight: slots.inflight[r]!,
        queued,
        queueLimit: limit,
        reserved: slots.reserved[r]!,
        headroom,
        capacityPressure: Math.min(1, Math.max(0, queuePressure, slotPressure)),
      };
    }
    return {
      capacity: slots.capacity,
      inflight: slots.total,
      queued: this.queuedTotal,
      utilization: slots.capacity > 0 ? slots.total / slots.capacity : slots.total > 0 ? 1 : 0,
      classes,
    };
  }

  counters(): SchedulerCounters {
    const admissions = {} as SchedulerCounters["admissions"];
    const preemptions = {} as SchedulerCounters["preemptions"];
    const starvationPromotions = {} as SchedulerCounters["starvationPromotions"];
    for (let r = 0; r < CLASS_COUNT; r++) {
      const cls = classOfRank(r);
      const byOutcome = {} as Record<AdmissionOutcome, number>;
      ADMISSION_OUTCOMES.forEach((o, i) => {
        byOutcome[o] = this.admissionCounts[r]![i]!;
      });
      admissions[cls] = byOutcome;
      const byClass = {} as Record<PriorityClass, number>;
      for (let b = 0; b < CLASS_COUNT; b++) byClass[classOfRank(b)] = this.preemptionCounts[r]![b]!;
      preemptions[cls] = byClass;
      starvationPromotions[cls] = this.promotionCounts[r]!;
    }
    return {
      admissions,
      preemptions,
      clamps: this.clampCount,
      unknownPriority: this.unknownCount,
      starvationPromotions,
    };
  }
}

/**
 * Builds a priority scheduler. Throws ConfigError for invalid settings and
 * ReservationsExceedCapacityError when the reservations do not fit `capacity`
 * (the gateway then falls back to legacy admission).
 */
export function createScheduler(options: SchedulerOptions): Scheduler {
  return new PriorityScheduler(options);
}

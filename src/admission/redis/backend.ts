/**
 * The Redis admission backend: several gateway replicas act as one scheduler (docs/replicas.md).
 *
 * - Every decision is one script (lua/admission.ts), atomic in Redis: the fast path is one round
 *   trip (admit), a request's end another (release, which also settles its budget hold and its fair
 *   share). In-flight per class and in total never exceed capacity fleet-wide; the reservation rule,
 *   strict priority, starvation promotion and fair tags are global.
 * - Slots are leases with a TTL, renewed by this replica's heartbeat (every TTL/4; a lease lasts
 *   3/4 of the TTL), so a replica killed with SIGKILL has its slots back within the TTL. A lease's
 *   id is its fencing token: a late release of a lease that was reaped frees nothing.
 * - Queues stay local (waiters.ts); priority is global: a waiter's ticket sits in its class's
 *   shared queue and the dispatcher, run by whichever replica freed a slot, wakes the right waiter
 *   anywhere through pub/sub (wakeups.ts), with no polling.
 * - Preemption works across replicas: the preemptor's script claims a victim lease; the victim's
 *   replica settles the first-byte race locally and hands the slot over (transfer) or refuses.
 * - Redis away: fail mode `local` admits on this replica's share (local-share.ts), `closed`
 *   answers 503 scheduler_unavailable; when Redis answers again the replica rejoins: its running
 *   requests become leases again, its queued ones move back, its budget usage is added.
 */
import { hostname } from "node:os";
import { CLASS_COUNT, CLASS_RANK, classOfRank, type PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { ClassSettingsTable, TenantPolicy } from "@sluice/scheduler/core/config.js";
import {
  AdmissionError,
  ClientCancelledError,
  PreemptedError,
  QueueFullError,
  QueueTimeoutError,
} from "@sluice/scheduler/core/errors.js";
import {
  ADMISSION_OUTCOMES,
  type AdmissionOutcome,
  type ClassSnapshot,
  type SchedulerCounters,
  type SchedulerObserver,
} from "@sluice/scheduler/core/events.js";
import { MAX_CHARGE_TOKENS, MAX_WEIGHT, MIN_WEIGHT } from "@sluice/scheduler/core/fair-queue.js";
import { Slots } from "@sluice/scheduler/core/slots.js";
import type { Logger } from "pino";
import type {
  AdmissionBackend,
  AdmissionRequest,
  AdmissionSnapshot,
  Slot,
} from "../../contracts/admission-backend.js";
import { SharedStateUnavailableError } from "../../contracts/admission-backend.js";
import { budgetRefusal, type SharedBudgetBook, SharedHold } from "./budgets.js";
import type { RedisFleet } from "./fleet.js";
import type { PoolKeys } from "./keys.js";
import { LocalShare, MOVED } from "./local-share.js";
import type { StateOp } from "./metrics.js";
import { runScript, type ScriptName } from "./scripts.js";
import { SharedSlot, type SlotOwner } from "./slot.js";
import { RemoteWaiter } from "./waiters.js";
import type { WakeupHandler } from "./wakeups.js";

interface RedisBackendOptions {
  fleet: RedisFleet;
  /** The capacity pool this backend admits for (part of its keys); default "default". */
  pool?: string;
  classes: ClassSettingsTable;
  tenantPolicies: ReadonlyMap<string, TenantPolicy>;
  defaultMaxClass: PriorityClass;
  /** This replica's capacity (discovered, or pinned locally) at start. */
  capacity: number;
  observer?: SchedulerObserver | undefined;
  clock: Clock;
  logger: Logger;
  /** The budget store whose holds the admit script reserves (Redis mode's SharedBudgetBook). */
  budgets?: SharedBudgetBook | undefined;
  /** Counts a budget refusal made by the admit script (the policy stage counts its own). */
  onBudgetRejection?: ((tenant: string, code: string) => void) | undefined;
}

/** Where admission runs now. */
type Mode = "shared" | "down" | "rejoining";

interface ReplicaStatus {
  id: string;
  incarnation: string;
  host: string;
  pid: number;
  started_at: string;
  last_heartbeat: string;
  heartbeat_age_ms: number;
  leases: number;
  self: boolean;
}

interface GlobalView {
  capacity: number;
  total: number;
  inflight: number[];
  queued: number[];
  /** Leases the replicas hold above their share (capacity / N), summed; and headroom below it. */
  excess: number;
  headroom: number;
  /** The size the reservations are sized at, under adaptive limits (Scheduler.setCapacity). */
  reservedAt: number | undefined;
}

const EMPTY_ARGS: ReadonlyArray<string | number> = [0, 0, -1, -1, -1, 0, -1];

function accountingUnits(cost: number, weight: number): number {
  const c = !(cost >= 0) ? 1 : Math.min(cost, MAX_CHARGE_TOKENS);
  const w = !(weight >= MIN_WEIGHT) ? MIN_WEIGHT : Math.min(weight, MAX_WEIGHT);
  return c / w;
}

/** The budget hold the policy stage took for this request, when it is a shared one. */
function holdOf(request: AdmissionRequest): { hold: SharedHold | undefined; requestId: string | undefined } {
  const hold = request.hold instanceof SharedHold ? request.hold : undefined;
  return { hold, requestId: request.requestId };
}

export class RedisAdmissionBackend implements AdmissionBackend, SlotOwner, WakeupHandler {
  readonly mode = "scheduler" as const;
  readonly fallbackReason = undefined;
  readonly pool: string;
  private readonly fleet: RedisFleet;
  private readonly keys: PoolKeys;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly observer: SchedulerObserver;
  private readonly settings: ClassSettingsTable;
  private readonly local: LocalShare;
  private readonly budgets: SharedBudgetBook | undefined;
  private readonly onBudgetRejection: ((tenant: string, code: string) => void) | undefined;
  /** ARGV 1 of every pool script: lease and replica TTLs, class settings, pool, channel prefix. */
  private readonly poolSettings: string;
  /** KEYS of the membership scripts: the pool's `st` key (the script derives the others). */
  private readonly poolKey: readonly string[];
  private readonly queueLimit: number[] = [];
  private readonly timeoutMs: number[] = [];
  private readonly starvationMs: number[] = [];
  /** Per class: the wait target after which a queued waiter claims a victim (Infinity: never). */
  private readonly preemptAfterMs: number[] = [];
  private readonly heartbeatMs: number;
  private weights = new Map<string, number>();

  private mode_: Mode = "down";
  /**
   * The outage was taken in hand (local share, WARN): the backend starts "down" until Redis
   * answers, and a Redis that never answered at start is an outage too (a mistyped --state-url).
   */
  private outageHandled = false;
  private epoch: string | undefined;
  private registered = false;
  private seq = 0;
  /** Slots this replica holds (leases, and local-share admissions), by id. */
  private readonly slots = new Map<string, SharedSlot>();
  private readonly waiters = new Map<string, RemoteWaiter>();
  private readonly queuedPerClass = [0, 0, 0, 0];
  private firstBytes: string[] = [];
  private releasing: SharedSlot[] = [];
  /** Leases and tickets to release or cancel once Redis answers again. */
  private orphans: string[] = [];
  private pendingHolds: SharedHold[] = [];
  private localCapacity: number;
  /** What this replica reports as the fleet's size under its adaptive limit (undefined: none). */
  private localReservedAt: number | undefined = undefined;
  private view: GlobalView;
  private pin: number | undefined;
  private replicas: ReplicaStatus[] = [];
  /** The replica tokens alive when last seen. */
  private replicaTokens: string[] = [];
  /** Slots this replica's local share holds back for other replicas' excess (Redis away). */
  private heldBack = 0;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private reapTimer: NodeJS.Timeout | undefined;
  private pumpTimer: NodeJS.Timeout | undefined;
  private pumpTimerAt = Number.POSITIVE_INFINITY;
  private beating: Promise<void> | undefined;
  private beatAgain = false;
  private closed = false;
  private readonly counts: number[][] = [];
  private readonly preemptionCounts: number[][] = [];
  private readonly promotions = [0, 0, 0, 0];
  private clampCount = 0;
  private unknownCount = 0;

  private get state(): Mode {
    return this.mode_;
  }

  private set state(mode: Mode) {
    this.mode_ = mode;
    if (mode === "shared") this.fleet.notShared.delete(this.pool);
    else this.fleet.notShared.add(this.pool);
  }

  constructor(options: RedisBackendOptions) {
    this.fleet = options.fleet;
    this.pool = options.pool ?? "default";
    this.fleet.notShared.add(this.pool);
    this.keys = options.fleet.keys.pool(this.pool);
    this.clock = options.clock;
    this.logger = options.logger.child({ pool: this.pool });
    this.observer = options.observer ?? {};
    this.settings = options.classes;
    this.budgets = options.budgets;
    this.onBudgetRejection = options.onBudgetRejection;
    this.localCapacity = options.capacity;
    this.view = {
      capacity: options.capacity,
      total: 0,
      inflight: [0, 0, 0, 0],
      queued: [0, 0, 0, 0],
      excess: 0,
      headroom: 0,
      reservedAt: undefined,
    };
    // Built (and its reservations checked) at the local capacity, as the in-process backend is.
    this.local = new LocalShare({
      capacity: options.capacity,
      classes: options.classes,
      tenantPolicies: options.tenantPolicies,
      defaultMaxClass: options.defaultMaxClass,
      clock: options.clock,
      observer: options.observer,
    });
    this.setWeights(options.tenantPolicies);
    const ttlMs = options.fleet.options.leaseTtlSecs * 1000;
    this.heartbeatMs = Math.max(50, Math.floor(ttlMs / 4));
    const floors: number[] = [];
    const perSlot: number[] = [];
    const starvation: number[] = [];
    const canPreempt: boolean[] = [];
    const promotionShare: number[] = [];
    const preemptAfter: number[] = [];
    for (let r = 0; r < CLASS_COUNT; r++) {
      const s = options.classes[classOfRank(r)];
      promotionShare.push(s.starvation_max_share);
      // As in the core: a class that may not queue preempts on arrival.
      const atOnce = s.preempt_after_secs === 0 || s.queue_size === 0;
      preemptAfter.push(s.can_preempt && !atOnce ? s.preempt_after_secs * 1000 : 0);
      this.preemptAfterMs.push(
        s.can_preempt && !atOnce ? s.preempt_after_secs * 1000 : Number.POSITIVE_INFINITY,
      );
      floors.push(s.reserved_floor);
      perSlot.push(s.reserved_per_slot);
      starvation.push(s.starvation_threshold_secs * 1000);
      canPreempt.push(s.can_preempt);
      this.queueLimit.push(s.queue_size);
      this.timeoutMs.push(s.queue_timeout_secs * 1000);
      this.starvationMs.push(s.starvation_threshold_secs * 1000);
      this.counts.push(ADMISSION_OUTCOMES.map(() => 0));
      this.preemptionCounts.push([0, 0, 0, 0]);
    }
    // Pool names travel in messages as `|`-separated fields: encoded there (keys keep the name).
    const poolTag = encodeURIComponent(this.pool);
    // ARGV 1 of every pool script, built once (pool-state.ts lists the fields).
    this.poolSettings = JSON.stringify([
      ttlMs - this.heartbeatMs,
      ttlMs,
      floors,
      perSlot,
      starvation,
      canPreempt,
      poolTag,
      options.fleet.keys.channelPrefix,
      promotionShare,
      preemptAfter,
    ]);
    this.poolKey = [this.keys.st];
    options.fleet.wakeups.register(poolTag, this);
    // Usable at once when Redis answers: an admission that finds the pool uninitialised registers
    // first (the admit script says "init").
    if (options.fleet.connection.up) this.state = "shared";
    options.fleet.wakeups.onResubscribed(() => void this.recheckWaiters());
    options.fleet.connection.onDown((reason) => this.goDown(reason));
    options.fleet.connection.onUp(() => void this.rejoin());
    const previous = options.fleet.leaseCount;
    options.fleet.leaseCount = () => previous() + this.slots.size;
  }

  /** Joins the fleet (or starts on the fail mode when Redis does not answer). */
  async start(): Promise<void> {
    if (this.state === "shared") {
      try {
        await this.heartbeat(true);
      } catch {
        this.goDown("Redis did not answer at start");
      }
    } else this.goDown("Redis did not answer at start");
    this.heartbeatTimer = setInterval(() => {
      if (this.state === "shared") void this.heartbeat();
    }, this.heartbeatMs);
    this.heartbeatTimer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.heartbeatTimer !== undefined) clearInterval(this.heartbeatTimer);
    if (this.reapTimer !== undefined) clearTimeout(this.reapTimer);
    if (this.pumpTimer !== undefined) clearTimeout(this.pumpTimer);
    await this.beating;
  }

  // --- AdmissionBackend -----------------------------------------------------------------------

  classify(priority: string | undefined, tenant: string) {
    const c = this.local.scheduler.classify(priority, tenant);
    return { requested: c.requested, effective: c.effective };
  }

  setCapacity(capacity: number, reservedAt?: number): void {
    const at = reservedAt !== undefined && reservedAt > capacity ? reservedAt : undefined;
    if (capacity === this.localCapacity && at === this.localReservedAt) return;
    this.localCapacity = capacity;
    this.localReservedAt = at;
    if (this.state === "shared") void this.heartbeat();
    else this.applyLocalShare();
  }

  setTenantPolicies(policies: ReadonlyMap<string, TenantPolicy>, defaultMaxClass: PriorityClass): void {
    this.local.scheduler.setTenantPolicies(policies, defaultMaxClass);
    this.setWeights(policies);
  }

  private setWeights(policies: ReadonlyMap<string, TenantPolicy>): void {
    const weights = new Map<string, number>();
    for (const [tenant, policy] of policies)
      if (policy.weight !== undefined) weights.set(tenant, policy.weight);
    this.weights = weights;
  }

  acquire(request: AdmissionRequest): Promise<Slot> {
    if (this.state !== "shared") return this.acquireDown(request);
    const tenant = request.tenant;
    const c = this.local.scheduler.classify(request.priority, tenant);
    const rank = CLASS_RANK[c.effective];
    const requested = CLASS_RANK[c.requested];
    if (c.unknown) {
      this.unknownCount++;
      this.observer.unknownPriority?.(tenant);
    }
    if (requested > rank) {
      this.clampCount++;
      this.observer.clamp?.(tenant, c.requested, c.effective);
    }
    if (request.signal?.aborted) {
      this.count(rank, "client_cancelled", tenant);
      this.observer.queueWait?.(c.effective, 0, "client_cancelled");
      return Promise.reject(new ClientCancelledError(c.effective, "scheduler_client_cancelled"));
    }
    const cost = request.cost;
    if (!(cost > 0) || !Number.isFinite(cost)) {
      return Promise.reject(new RangeError(`acquire: cost must be a finite number > 0, got ${cost}`));
    }
    const weight = this.weights.get(tenant) ?? 1;
    const { hold, requestId } = holdOf(request);
    const reserving = hold !== undefined && !hold.reserved && !hold.settled ? hold : undefined;
    if (reserving !== undefined && requestId !== undefined) reserving.requestId = requestId;
    const waiter = new RemoteWaiter(
      `${this.fleet.replicaToken}#${++this.seq}`,
      rank,
      requested,
      tenant,
      cost,
      accountingUnits(cost, weight),
      weight,
      request.priority,
      request.signal,
      reserving,
      this.clock,
    );
    this.waiters.set(waiter.id, waiter);
    this.admit(waiter, true);
    return waiter.promise;
  }

  private admit(waiter: RemoteWaiter, firstTry: boolean): void {
    const hold = waiter.hold;
    const budgetKeys =
      hold === undefined
        ? [this.fleet.keys.noBudget, this.fleet.keys.noBudget]
        : [this.fleet.keys.budget(hold.tenant), this.fleet.keys.hold(hold.tenant, hold.requestId)];
    const args = [
      waiter.id,
      waiter.rank,
      waiter.requestedRank,
      waiter.units,
      waiter.weight,
      this.fleet.replicaToken,
      this.queuedPerClass[waiter.rank]! < this.queueLimit[waiter.rank]! ? 1 : 0,
      waiter.tenant,
      hold === undefined ? 0 : 1,
      ...(hold === undefined ? EMPTY_ARGS : hold.reservationArgs()),
    ];
    this.call("admit", "sluiceAdmit", [this.keys.st, ...budgetKeys], args).then(
      (out) => this.admitted(waiter, out as Array<string | number>, firstTry),
      (err: unknown) => this.admitFailed(waiter, err),
    );
  }

  private admitted(waiter: RemoteWaiter, out: Array<string | number>, firstTry: boolean): void {
    const status = out[0] as string;
    if (status === "init") {
      // The pool has no state (a fresh or flushed Redis): register, then try once more.
      this.heartbeat().then(
        () =>
          firstTry && this.state === "shared"
            ? this.admit(waiter, false)
            : this.admitFailed(waiter, new Error("not initialised")),
        (err: unknown) => this.admitFailed(waiter, err),
      );
      return;
    }
    this.readView(out, 3);
    const hold = waiter.hold;
    if (hold !== undefined && out[1] === "1") {
      hold.reserved = true;
      this.budgets?.noteReserved(hold);
    }
    const cls = classOfRank(waiter.rank);
    switch (status) {
      case "fast":
      case "granted":
        if (!waiter.done) this.grant(waiter, status === "fast" ? "fast" : "queued");
        return;
      case "queued":
      case "claim":
        if (!waiter.done) this.wait(waiter);
        return;
      case "full":
        this.leave(waiter);
        this.count(waiter.rank, "rejected_queue_full", waiter.tenant);
        waiter.reject(new QueueFullError(cls, this.queueLimit[waiter.rank]!));
        return;
      case "budget": {
        this.leave(waiter);
        const [reason, detail] = String(out[2]).split("|");
        const error = budgetRefusal(hold!, reason!, detail ?? "0");
        this.onBudgetRejection?.(waiter.tenant, error.code);
        waiter.reject(error);
        return;
      }
    }
  }

  private admitFailed(waiter: RemoteWaiter, err: unknown): void {
    this.waiters.delete(waiter.id);
    if (waiter.done) return;
    this.fleet.connection.failed(err);
    if (this.fleet.connection.up && this.state === "shared") {
      waiter.detach(this.clock);
      this.logger.error({ err }, "admission script failed");
      waiter.reject(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    // Redis went away under this request: whether the script ran is unknown, so its ticket (or
    // lease) is cancelled on rejoin, and the request goes where the fail mode says.
    this.orphans.push(waiter.id);
    this.handOver(waiter);
  }

  /** A waiter the shared path cannot serve goes to the local share, or is refused (closed). */
  private handOver(waiter: RemoteWaiter): void {
    if (waiter.queued) this.queuedPerClass[waiter.rank]!--;
    waiter.queued = false;
    waiter.detach(this.clock);
    this.acquireDown({
      priority: waiter.priority,
      tenant: waiter.tenant,
      cost: waiter.cost,
      signal: waiter.signal,
    }).then(
      (slot) => waiter.resolve(slot as SharedSlot),
      (err: unknown) => waiter.reject(err as Error),
    );
  }

  private leave(waiter: RemoteWaiter): void {
    this.waiters.delete(waiter.id);
    if (waiter.queued) this.queuedPerClass[waiter.rank]!--;
    waiter.queued = false;
    waiter.detach(this.clock);
  }

  /** The waiter has a lease (fast path, or granted): it becomes a slot. */
  private grant(waiter: RemoteWaiter, admission: "fast" | "queued", how = "queued"): void {
    this.leave(waiter);
    const waitMs = admission === "fast" ? 0 : this.clock.now() - waiter.enqueuedAt;
    const slot = new SharedSlot(
      this,
      waiter.id,
      waiter.rank,
      waiter.requestedRank,
      waiter.tenant,
      waiter.units,
      waiter.weight,
      admission,
      waitMs,
      true,
    );
    slot.epoch = this.epoch;
    slot.hold = waiter.hold;
    this.slots.set(slot.id, slot);
    const cls = classOfRank(waiter.rank);
    if (how === "promoted") {
      this.promotions[waiter.rank]!++;
      this.observer.starvationPromotion?.(cls);
    }
    this.count(waiter.rank, "admitted", waiter.tenant);
    this.observer.queueWait?.(cls, waitMs / 1000, "admitted");
    waiter.resolve(slot);
  }

  /** The ticket waits in its shared queue: arm the local timeout and the cancel listener. */
  private wait(waiter: RemoteWaiter): void {
    if (this.state !== "shared") {
      // Redis went away since the ticket was queued: the fail mode serves it.
      this.waiters.delete(waiter.id);
      this.orphans.push(waiter.id);
      this.handOver(waiter);
      return;
    }
    waiter.queued = true;
    this.queuedPerClass[waiter.rank]!++;
    const cls = classOfRank(waiter.rank);
    const timeoutMs = this.timeoutMs[waiter.rank]!;
    const elapsed = this.clock.now() - waiter.enqueuedAt;
    waiter.timer = this.clock.setTimer(
      () => this.gone(waiter, new QueueTimeoutError(cls, timeoutMs / 1000), "rejected_queue_timeout"),
      timeoutMs - elapsed,
    );
    // The starvation mark and the wait target need a dispatch pass even if no slot is freed meanwhile.
    const markIn = Math.min(this.starvationMs[waiter.rank]!, this.preemptAfterMs[waiter.rank]!) - elapsed;
    if (markIn < timeoutMs - elapsed) this.pumpAt(markIn + 5);
    const signal = waiter.signal;
    if (signal !== undefined) {
      if (signal.aborted) {
        this.gone(waiter, new ClientCancelledError(cls, "scheduler_client_cancelled"), "client_cancelled");
        return;
      }
      waiter.onAbort = () =>
        this.gone(waiter, new ClientCancelledError(cls, "scheduler_client_cancelled"), "client_cancelled");
      signal.addEventListener("abort", waiter.onAbort, { once: true });
    }
  }

  /** A queued waiter leaves unserved (timeout, client gone): its ticket goes, and its hold. */
  private gone(waiter: RemoteWaiter, error: Error, outcome: AdmissionOutcome): void {
    if (waiter.done) return;
    this.leave(waiter);
    const cls = classOfRank(waiter.rank);
    this.count(waiter.rank, outcome, waiter.tenant);
    const waitedMs = this.clock.now() - waiter.enqueuedAt;
    this.observer.queueWait?.(cls, waitedMs / 1000, outcome);
    if (error instanceof AdmissionError) error.queueWaitMs = waitedMs;
    const hold = waiter.hold;
    const refund = hold?.reserved === true;
    // The cancel script refunds the hold: the lease's own refund must not run again.
    if (refund) hold.reserved = false;
    waiter.reject(error);
    if (this.state !== "shared") {
      this.orphans.push(waiter.id);
      if (refund) this.pendingHolds.push(this.closingRefund(hold));
      return;
    }
    const budgetKeys = refund
      ? [this.fleet.keys.budget(hold.tenant), this.fleet.keys.hold(hold.tenant, hold.requestId)]
      : [this.fleet.keys.noBudget, this.fleet.keys.noBudget];
    this.call(
      "cancel",
      "sluiceCancel",
      [this.keys.st, ...budgetKeys],
      [waiter.id, refund ? "r" : "-", hold?.tpm ?? -1],
    ).then(
      (out) => this.readView(out as Array<string | number>, 1),
      (err: unknown) => {
        this.fleet.connection.failed(err);
        this.orphans.push(waiter.id);
        if (refund) this.pendingHolds.push(this.closingRefund(hold));
      },
    );
  }

  private closingRefund(hold: SharedHold): SharedHold {
    hold.reserved = true;
    hold.closing = { op: "r", dTokens: 0, dUsd: 0 };
    return hold;
  }

  /**
   * One timer at the earliest starvation mark or wait target of this replica's waiters: the dispatcher must run
   * then even if no slot is freed meanwhile. When it fires it runs a heartbeat (which dispatches)
   * and re-arms for the next mark.
   */
  private pumpAt(delayMs: number): void {
    const at = performance.now() + Math.max(0, delayMs);
    if (at >= this.pumpTimerAt) return;
    if (this.pumpTimer !== undefined) clearTimeout(this.pumpTimer);
    this.pumpTimerAt = at;
    this.pumpTimer = setTimeout(() => {
      this.pumpTimer = undefined;
      this.pumpTimerAt = Number.POSITIVE_INFINITY;
      if (this.state === "shared") void this.heartbeat();
      const now = this.clock.now();
      let next = Number.POSITIVE_INFINITY;
      for (const w of this.waiters.values()) {
        if (!w.queued) continue;
        for (const after of [this.starvationMs[w.rank]!, this.preemptAfterMs[w.rank]!]) {
          const mark = w.enqueuedAt + after - now;
          if (mark > 0 && mark < next) next = mark;
        }
      }
      if (next !== Number.POSITIVE_INFINITY) this.pumpAt(next + 5);
    }, at - performance.now());
    this.pumpTimer.unref();
  }

  // --- Redis away: the fail mode ----------------------------------------------------------------

  private acquireDown(request: AdmissionRequest): Promise<Slot> {
    if (this.fleet.options.failMode === "closed") {
      this.fleet.metrics?.closedRejections.inc();
      return Promise.reject(
        new SharedStateUnavailableError(
          "the shared scheduler state (Redis) is unreachable and --state-fail-mode is closed",
        ),
      );
    }
    return this.acquireLocal(request);
  }

  private async acquireLocal(request: AdmissionRequest): Promise<Slot> {
    const { hold } = holdOf(request);
    if (hold !== undefined && !hold.reserved && !hold.settled && this.budgets !== undefined) {
      hold.delegate = this.budgets.reserveLocally(hold);
    }
    const permit = await this.local.acquire({
      priority: request.priority,
      tenant: request.tenant,
      cost: request.cost,
      signal: request.signal,
    });
    if (permit === MOVED) {
      // Back to Redis: the local share's hold goes, the admit script reserves in Redis instead.
      if (hold !== undefined) this.budgets?.dropDelegate(hold);
      return this.acquire(request);
    }
    const weight = this.weights.get(request.tenant) ?? 1;
    const slot = new SharedSlot(
      this,
      `${this.fleet.replicaToken}#${++this.seq}`,
      CLASS_RANK[permit.class],
      CLASS_RANK[permit.requestedClass],
      request.tenant,
      accountingUnits(request.cost, weight),
      weight,
      permit.admission,
      permit.queueWaitMs,
      false,
    );
    slot.local = permit;
    slot.hold = hold;
    permit.onPreempt((error) => slot.preempt(error));
    this.slots.set(slot.id, slot);
    // Redis may have come back while the request waited: it joins the shared count at once.
    if (this.state === "shared") void this.adopt([slot], []);
    return slot;
  }

  /**
   * This replica's share of the fleet: capacity / N, less its leases still running, less what it
   * holds back for the other replicas' excess when Redis went away.
   */
  private applyLocalShare(): void {
    const n = Math.max(1, this.fleet.replicasAlive);
    const fleet = this.registered ? this.view.capacity : this.localCapacity;
    const fleetAt = this.registered ? this.view.reservedAt : this.localReservedAt;
    const leased = this.leasedRunning();
    const share = Math.max(0, Math.floor(fleet / n) - this.heldBack - leased);
    // Under an adaptive limit the share's reservations are sized at its part of the fleet's size.
    const at = fleetAt !== undefined && fleet > 0 ? Math.floor((share * fleetAt) / fleet) : undefined;
    this.local.scheduler.setCapacity(share, at);
  }

  private leasedRunning(): number {
    let leased = 0;
    for (const slot of this.slots.values()) if (slot.leased && slot.local === undefined) leased++;
    return leased;
  }

  /**
   * Replicas running more than their share when Redis stops go on running it (their requests are
   * not cut), so those below their share hold the excess back between them, each in proportion to
   * its headroom, rounded up: the fleet stays within capacity while it switches to local shares.
   * Taken from the last script's view, it is kept until Redis is back: the others' requests end
   * unseen. A replica over its share holds nothing back (its own leases already count).
   */
  private holdBackAtOutage(): number {
    if (!this.registered) return 0;
    const { excess, headroom, capacity } = this.view;
    if (!(excess > 0) || !(headroom > 0)) return 0;
    const share = Math.floor(capacity / Math.max(1, this.fleet.replicasAlive));
    const own = Math.max(0, share - this.leasedRunning());
    return Math.min(own, Math.ceil((excess * own) / headroom));
  }

  private goDown(reason: string): void {
    if (this.closed || (this.state === "down" && this.outageHandled)) return;
    this.outageHandled = true;
    const wasShared = this.state === "shared";
    this.state = "down";
    if (wasShared) this.fleet.metrics?.unavailable.inc();
    const n = Math.max(1, this.fleet.replicasAlive);
    if (this.fleet.options.failMode === "local") {
      this.fleet.localFallback = true;
      this.heldBack = this.holdBackAtOutage();
      this.budgets?.goLocal();
      this.applyLocalShare();
      this.logger.warn(
        { reason, replicas: n, localCapacity: this.local.scheduler.capacity, heldBack: this.heldBack },
        `shared state unreachable (${reason}): admitting on this replica's share of capacity (${this.local.scheduler.capacity} = capacity / ${n} replicas, less its running requests${this.heldBack > 0 ? ` and ${this.heldBack} held back for other replicas running above their share` : ""}) with local budgets until Redis answers`,
      );
    } else {
      this.logger.warn(
        { reason },
        `shared state unreachable (${reason}): answering 503 scheduler_unavailable until Redis answers (--state-fail-mode closed)`,
      );
    }
    // Waiters whose tickets are in Redis: served by the fail mode now; their tickets go on rejoin.
    for (const waiter of [...this.waiters.values()]) {
      if (!waiter.queued) continue;
      this.waiters.delete(waiter.id);
      this.orphans.push(waiter.id);
      this.handOver(waiter);
    }
  }

  /**
   * Redis answers again: rejoin without a restart. The local share stops admitting; this replica's
   * running requests become leases again before it registers, so a replica that has registered
   * has counted everything it runs; it then waits (at most a lease TTL) until every replica it saw
   * alive has registered too, so nobody admits against a count that misses someone's local work.
   * Then its orphans are cancelled, its budget usage added, its local waiters moved to Redis.
   */
  private async rejoin(): Promise<void> {
    if (this.closed || this.state === "rejoining" || this.state === "shared") return;
    this.state = "rejoining";
    const peers = new Set(this.replicaTokens.filter((token) => token !== this.fleet.replicaToken));
    // The count seen by the last script too: a peer that registered after the last heartbeat.
    const seen = Math.max(this.fleet.replicasAlive, peers.size + 1);
    this.local.scheduler.setCapacity(0);
    try {
      await this.adopt(this.running(), []);
      await this.heartbeat(true);
      const deadline = Date.now() + this.fleet.options.leaseTtlSecs * 1000;
      const missing = () =>
        this.replicaTokens.length < seen || [...peers].some((p) => !this.replicaTokens.includes(p));
      while (!this.closed && Date.now() < deadline && missing()) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        await this.heartbeat(true);
      }
      await this.reconcile();
      if (this.budgets?.isLocal) await this.budgets.rejoin();
      else await this.budgets?.refresh();
      this.state = "shared";
      this.outageHandled = false;
      this.heldBack = 0;
      if (this.fleet.localFallback) {
        this.fleet.localFallback = false;
        this.logger.info("shared state reachable again: the replica rejoined the fleet");
      }
      this.local.moveAll();
    } catch (err) {
      this.state = "down";
      this.applyLocalShare();
      this.fleet.connection.failed(err);
    }
  }

  /** The requests this replica runs now (leased or admitted by the local share). */
  private running(): SharedSlot[] {
    const out: SharedSlot[] = [];
    for (const slot of this.slots.values()) if (!slot.preempted && !slot.released) out.push(slot);
    return out;
  }

  /** Everything that ran or ended while Redis was away is told to it again. */
  private async reconcile(): Promise<void> {
    await this.adopt(this.running(), []);
    const orphans = this.orphans;
    this.orphans = [];
    for (const id of orphans) {
      await this.call(
        "cancel",
        "sluiceCancel",
        [this.keys.st, this.fleet.keys.noBudget, this.fleet.keys.noBudget],
        [id, "-", -1],
      );
    }
    const holds = this.pendingHolds;
    this.pendingHolds = [];
    for (const hold of holds) this.budgets?.closeNow(hold);
  }

  private async adopt(slots: SharedSlot[], waiters: RemoteWaiter[]): Promise<void> {
    const args: Array<string | number> = [this.fleet.replicaToken, slots.length];
    for (const s of slots) args.push(s.id, s.rank, s.units, s.weight, s.tenant);
    args.push(waiters.length);
    for (const w of waiters) args.push(w.id, w.rank, w.requestedRank, w.units, w.weight, w.tenant);
    const out = (await this.call("adopt", "sluiceAdopt", this.poolKey, args)) as Array<string | number>;
    for (const s of slots) {
      s.leased = true;
      s.epoch = this.epoch;
    }
    this.readView(out, 0);
  }

  // --- wake-ups -------------------------------------------------------------------------------

  granted(ticket: string, how: string): void {
    const waiter = this.waiters.get(ticket);
    if (waiter === undefined || waiter.done) return;
    this.grant(waiter, "queued", how);
  }

  preempt(lease: string, byRank: number): void {
    const slot = this.slots.get(lease);
    const byCls = classOfRank(Math.max(0, Math.min(3, byRank)));
    if (slot?.preempt(new PreemptedError(slot.effectiveClass, byCls))) {
      this.preemptionCounts[slot.rank]![byRank]!++;
      this.observer.preemption?.(slot.effectiveClass, byCls);
      this.count(slot.rank, "preempted", slot.tenant);
      slot.leased = false;
      this.slots.delete(slot.id);
      this.script("transfer", "sluiceTransfer", [lease]);
      return;
    }
    this.script("refuse", "sluiceRefuse", [lease]);
  }

  capacity(capacity: number, pin: number | undefined): void {
    if (Number.isFinite(capacity)) this.view.capacity = capacity;
    // A pin is the fleet's size; else the next view (a heartbeat's) brings the size along.
    const at = this.view.reservedAt;
    if (pin !== undefined || at === undefined || at <= this.view.capacity) this.view.reservedAt = undefined;
    this.pin = pin;
  }

  /** After a resubscription: waiters whose grant was published meanwhile get their lease. */
  private async recheckWaiters(): Promise<void> {
    if (this.state !== "shared") return;
    const queued = [...this.waiters.values()].filter((w) => w.queued);
    if (queued.length === 0) return;
    const scores = await this.fleet.connection.client.zmscore(this.keys.leases, ...queued.map((w) => w.id));
    queued.forEach((w, i) => {
      if (scores[i] !== null && !w.done) this.grant(w, "queued");
    });
  }

  // --- SlotOwner ------------------------------------------------------------------------------

  releaseSlot(slot: SharedSlot): void {
    this.slots.delete(slot.id);
    const hold = slot.hold;
    if (hold instanceof SharedHold && slot.leased && !slot.preempted) hold.ridesOnRelease = true;
    // The lease settles budgets and fair share right after the release, in the same turn: one
    // script carries all three.
    if (this.releasing.push(slot) === 1) queueMicrotask(() => this.flushReleases());
  }

  firstByte(slot: SharedSlot): void {
    if (slot.leased && this.firstBytes.length < 65_536) this.firstBytes.push(slot.id);
  }

  private flushReleases(): void {
    const releasing = this.releasing;
    this.releasing = [];
    for (const slot of releasing) {
      const hold = slot.hold instanceof SharedHold ? slot.hold : undefined;
      if (!slot.leased || slot.preempted) {
        if (hold !== undefined) this.closeHold(hold);
        if (this.state === "down") this.applyLocalShare();
        continue;
      }
      if (this.state !== "shared" || slot.epoch !== this.epoch) {
        this.orphans.push(slot.id);
        if (hold !== undefined) this.closeHold(hold);
        if (this.state === "down") this.applyLocalShare();
        continue;
      }
      const closing = hold?.reserved ? hold.closing : undefined;
      if (hold !== undefined) {
        hold.ridesOnRelease = false;
        hold.closing = undefined;
      }
      const actual = slot.actualCost === undefined ? -1 : accountingUnits(slot.actualCost, slot.weight);
      const budgetKeys =
        closing === undefined || hold === undefined
          ? [this.fleet.keys.noBudget, this.fleet.keys.noBudget]
          : [this.fleet.keys.budget(hold.tenant), this.fleet.keys.hold(hold.tenant, hold.requestId)];
      this.call(
        "release",
        "sluiceRelease",
        [this.keys.st, ...budgetKeys],
        [slot.id, actual, closing?.op ?? "-", closing?.dTokens ?? 0, closing?.dUsd ?? 0, hold?.tpm ?? -1],
      ).then(
        (out) => this.readView(out as Array<string | number>, 1),
        (err: unknown) => {
          this.fleet.connection.failed(err);
          this.orphans.push(slot.id);
          if (hold !== undefined && closing !== undefined) {
            hold.closing = closing;
            this.pendingHolds.push(hold);
          }
        },
      );
    }
  }

  private closeHold(hold: SharedHold): void {
    hold.ridesOnRelease = false;
    if (hold.closing === undefined) return;
    if (this.state === "shared") this.budgets?.closeNow(hold);
    else this.pendingHolds.push(hold);
  }

  // --- the heartbeat ------------------------------------------------------------------------------

  /** Registers, reports capacity, renews leases, reaps the dead; one at a time. */
  heartbeat(joining = false): Promise<void> {
    if (this.beating !== undefined) {
      this.beatAgain = true;
      return this.beating;
    }
    this.beating = this.beat(joining).finally(() => {
      this.beating = undefined;
      if (this.beatAgain && !this.closed) {
        this.beatAgain = false;
        if (this.state === "shared") void this.heartbeat();
      }
    });
    return this.beating;
  }

  private async beat(joining: boolean): Promise<void> {
    const renew: string[] = [];
    for (const slot of this.slots.values()) if (slot.leased && slot.epoch === this.epoch) renew.push(slot.id);
    const marks = this.firstBytes;
    this.firstBytes = [];
    const info = `${process.pid}|${this.fleet.startedAt}|${hostname()}`;
    let out: Array<unknown>;
    try {
      out = (await this.call("heartbeat", "sluiceHeartbeat", this.poolKey, [
        this.fleet.replicaToken,
        info,
        this.localCapacity,
        `${this.fleet.replicaToken}@${Date.now()}`,
        renew.length,
        ...renew,
        marks.length,
        ...marks,
        this.localReservedAt ?? -1,
      ])) as Array<unknown>;
    } catch (err) {
      this.fleet.connection.failed(err);
      if (joining) throw err;
      return;
    }
    const epoch = String(out[0]);
    const wasAlive = out[2] === 1;
    this.pin = Number(out[3]) >= 0 ? Number(out[3]) : undefined;
    const lost = out[4] as string[];
    this.readReplicas(out[5] as string[]);
    const nextLeaseMs = Number(out[6]);
    this.readView(out as Array<string | number>, 7);
    const restarted = this.epoch !== undefined && epoch !== this.epoch;
    if (this.epoch === undefined) {
      // Admitted before the first heartbeat answered: those leases live in this epoch.
      for (const slot of this.slots.values()) if (slot.leased && slot.epoch === undefined) slot.epoch = epoch;
    }
    this.epoch = epoch;
    if (restarted) {
      // Redis lost its state (restarted empty): every running request is counted again.
      this.logger.warn(
        "the shared state was reset (Redis restarted empty): re-registering this replica's leases",
      );
      const all = [...this.slots.values()].filter((s) => !s.preempted && !s.released);
      const waiting = [...this.waiters.values()].filter((w) => w.queued);
      await this.adopt(all, waiting);
    } else {
      if (lost.length > 0) this.leasesLost(lost);
      if (this.registered && !wasAlive && !joining) {
        // This replica was presumed dead (paused past the TTL): its tickets were dropped.
        const waiting = [...this.waiters.values()].filter((w) => w.queued);
        if (waiting.length > 0) await this.adopt([], waiting);
      }
    }
    this.registered = true;
    if (nextLeaseMs >= 0 && nextLeaseMs < this.heartbeatMs) this.armReaper(nextLeaseMs + 2);
  }

  /**
   * Leases reaped while their request ran: this replica was presumed dead. Before the first byte
   * the request is cut (503, its slot went to someone else); once streaming it is counted again.
   */
  private leasesLost(ids: string[]): void {
    const readopt: SharedSlot[] = [];
    for (const id of ids) {
      const slot = this.slots.get(id);
      if (slot === undefined) continue;
      this.fleet.metrics?.lostLeases.inc();
      if (slot.preempt(new PreemptedError(slot.effectiveClass, slot.effectiveClass))) {
        slot.leased = false;
        this.slots.delete(id);
        this.count(slot.rank, "preempted", slot.tenant);
      } else readopt.push(slot);
    }
    this.logger.warn(
      { lost: ids.length, cut: ids.length - readopt.length },
      "leases of this replica were reaped while their requests ran (the replica was presumed dead)",
    );
    if (readopt.length > 0)
      void this.adopt(readopt, []).catch((err: unknown) => this.fleet.connection.failed(err));
  }

  private armReaper(delayMs: number): void {
    if (this.reapTimer !== undefined) return;
    this.reapTimer = setTimeout(() => {
      this.reapTimer = undefined;
      if (this.state === "shared") void this.heartbeat();
    }, delayMs);
    this.reapTimer.unref();
  }

  private readReplicas(flat: string[]): void {
    const now = Date.now();
    const replicas: ReplicaStatus[] = [];
    const tokens: string[] = [];
    for (let i = 0; i + 3 < flat.length; i += 4) {
      const token = flat[i]!;
      tokens.push(token);
      const cut = token.lastIndexOf("~");
      const parts = flat[i + 2]!.split("|");
      // info: pid | started ms | host | heartbeat ms
      const beat = Number(parts[parts.length - 1]);
      replicas.push({
        id: cut > 0 ? token.slice(0, cut) : token,
        incarnation: cut > 0 ? token.slice(cut + 1) : "",
        host: parts.slice(2, -1).join("|"),
        pid: Number(parts[0]),
        started_at: new Date(Number(parts[1])).toISOString(),
        last_heartbeat: new Date(beat).toISOString(),
        heartbeat_age_ms: Math.max(0, now - beat),
        leases: Number(flat[i + 3]),
        self: token === this.fleet.replicaToken,
      });
    }
    this.replicas = replicas;
    this.replicaTokens = tokens;
    this.fleet.replicasAlive = Math.max(1, replicas.length);
  }

  private readView(out: Array<string | number>, at: number): void {
    const cap = Number(out[at]);
    if (!Number.isFinite(cap) || cap < 0) return;
    this.view = {
      capacity: cap,
      total: Number(out[at + 1]),
      inflight: [Number(out[at + 2]), Number(out[at + 3]), Number(out[at + 4]), Number(out[at + 5])],
      queued: [Number(out[at + 6]), Number(out[at + 7]), Number(out[at + 8]), Number(out[at + 9])],
      excess: Number(out[at + 11]) || 0,
      headroom: Number(out[at + 12]) || 0,
      reservedAt: Number(out[at + 13]) > cap ? Number(out[at + 13]) : undefined,
    };
    // Replicas registered (the local share's divisor if Redis goes away next).
    const replicas = Number(out[at + 10]);
    if (replicas >= 1) this.fleet.replicasAlive = replicas;
  }

  // --- calls ----------------------------------------------------------------------------------------

  private async call(
    op: StateOp,
    name: ScriptName,
    keys: readonly string[],
    args: ReadonlyArray<string | number>,
  ): Promise<unknown> {
    const started = performance.now();
    const out = await runScript(this.fleet.connection.client, name, keys, [this.poolSettings, ...args]);
    this.fleet.metrics?.roundTrip(op, (performance.now() - started) / 1000);
    return out;
  }

  private script(op: StateOp, name: ScriptName, args: Array<string | number>): void {
    this.call(op, name, [this.keys.st, this.fleet.keys.noBudget, this.fleet.keys.noBudget], args).then(
      (out) => this.readView(out as Array<string | number>, op === "refuse" ? 0 : 1),
      (err: unknown) => this.fleet.connection.failed(err),
    );
  }

  // --- admin --------------------------------------------------------------------------------------

  /** The fleet-wide pin, if any. */
  get pinnedCapacity(): number | undefined {
    return this.pin;
  }

  /** Pins the fleet's capacity (undefined: back to the replicas' reports); applies to every replica. */
  pinCapacity(pin: number | undefined): { capacity: number; pinned: number | undefined } {
    if (this.state !== "shared") {
      throw new SharedStateUnavailableError(
        "the shared scheduler state (Redis) is unreachable: the fleet's capacity cannot be pinned now",
      );
    }
    this.pin = pin;
    if (pin !== undefined) {
      this.view.capacity = pin;
      this.view.reservedAt = undefined;
    }
    this.call("pin", "sluicePin", this.poolKey, [pin ?? -1]).then(
      (out) => {
        const o = out as Array<string | number>;
        this.pin = Number(o[0]) >= 0 ? Number(o[0]) : undefined;
        this.readView(o, 1);
      },
      (err: unknown) => this.fleet.connection.failed(err),
    );
    return { capacity: pin ?? this.view.capacity, pinned: pin };
  }

  /** This pool's part of the admin status: the fleet's capacity, the replicas and their leases. */
  statusExtra(): Record<string, unknown> & { replicas: Array<Record<string, unknown>> } {
    const leases = [...this.slots.values()].slice(0, 1000).map((s) => ({
      id: s.id,
      class: s.effectiveClass,
      tenant: s.tenant,
      first_byte: s.firstByteMarked,
      shared: s.leased,
    }));
    const shared = this.state === "shared";
    return {
      mode: shared ? "shared" : this.fleet.options.failMode === "local" ? "local" : "closed",
      capacity: shared ? this.view.capacity : this.local.scheduler.capacity,
      fleet_capacity: this.view.capacity,
      pinned_capacity: this.pin ?? null,
      local_capacity: this.localCapacity,
      inflight: this.view.total,
      queued_here: this.queuedPerClass.reduce((a, b) => a + b, 0),
      replicas: this.replicas.map((r) => ({
        ...r,
        heartbeat_age_ms: Math.max(0, Date.now() - Date.parse(r.last_heartbeat)),
        leases_held: r.self ? leases : undefined,
      })),
    };
  }

  // --- reporting ------------------------------------------------------------------------------------

  private count(rank: number, outcome: AdmissionOutcome, tenant: string): void {
    this.counts[rank]![ADMISSION_OUTCOMES.indexOf(outcome)]!++;
    this.observer.admission?.(classOfRank(rank), outcome, tenant);
  }

  snapshot(): AdmissionSnapshot {
    if (this.state !== "shared" && this.fleet.options.failMode === "local")
      return this.local.scheduler.snapshot();
    const { capacity, total, inflight, queued, reservedAt } = this.view;
    const slots = new Slots(this.settings, capacity);
    if (reservedAt !== undefined) slots.setCapacity(capacity, reservedAt);
    slots.total = total;
    for (let r = 0; r < CLASS_COUNT; r++) slots.inflight[r] = inflight[r]!;
    const classes = {} as Record<PriorityClass, ClassSnapshot>;
    let queuedTotal = 0;
    for (let r = 0; r < CLASS_COUNT; r++) {
      const q = queued[r]!;
      queuedTotal += q;
      const limit = this.queueLimit[r]!;
      const headroom = slots.headroom(r);
      const queuePressure = limit > 0 ? q / limit : q > 0 ? 1 : 0;
      const slotPressure = capacity > 0 ? 1 - Math.max(0, headroom) / capacity : 1;
      classes[classOfRank(r)] = {
        inflight: inflight[r]!,
        queued: q,
        queueLimit: limit,
        reserved: slots.reserved[r]!,
        headroom,
        capacityPressure: Math.min(1, Math.max(0, queuePressure, slotPressure)),
      };
    }
    return {
      capacity,
      inflight: total,
      queued: queuedTotal,
      utilization: capacity > 0 ? total / capacity : total > 0 ? 1 : 0,
      classes,
    };
  }

  counters(): SchedulerCounters {
    const local = this.local.scheduler.counters();
    for (let r = 0; r < CLASS_COUNT; r++) {
      const cls = classOfRank(r);
      ADMISSION_OUTCOMES.forEach((o, i) => {
        local.admissions[cls][o] += this.counts[r]![i]!;
      });
      for (let b = 0; b < CLASS_COUNT; b++)
        local.preemptions[cls][classOfRank(b)] += this.preemptionCounts[r]![b]!;
      local.starvationPromotions[cls] += this.promotions[r]!;
    }
    local.clamps += this.clampCount;
    local.unknownPriority += this.unknownCount;
    return local;
  }
}

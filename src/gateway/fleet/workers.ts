/**
 * The upstream workers: one undici connection pool each, periodic health checks, capacity
 * discovery (SGLang `GET /get_server_info` -> `max_running_requests`), a circuit breaker each
 * (src/routing/circuit-breaker.ts), and the choice of a worker for each request among those with
 * room, by the group's routing policy (src/routing, one instance per group).
 *
 * Capacity = sum over healthy workers of (configured capacity, else reported
 * max_running_requests, else 64); with no healthy worker, the fallback capacity. A reported
 * capacity that is not an integer in 1..MAX_REPORTED_CAPACITY is not believed. "Healthy" means
 * routable: passing its health checks and its circuit not open; a half-open circuit contributes
 * only its trial requests.
 *
 * A worker is never sent more requests than its capacity (when `respectCapacity`): a request whose
 * slot passed to it from a preempted or cancelled one waits, briefly, until that one's upstream
 * request has closed, instead of landing on a worker that is still running it.
 */

import { type Clock, realClock, type TimerHandle } from "@sluice/scheduler/core/clock.js";
import type { CancelSignal } from "@sluice/scheduler/core/signal.js";
import type { Logger } from "pino";
import { Pool } from "undici";
import type { EngineView } from "../../capacity/adaptive-limit.js";
import {
  DEFAULT_ENGINE_SIGNALS,
  type EngineChoice,
  type EngineKind,
} from "../../capacity/engine-signals/engine-kind.js";
import { EngineLoad } from "../../capacity/engine-signals/engine-load.js";
import type { SglangServerInfo } from "../../capacity/engine-signals/engine-reading.js";
import { sglangServerInfo } from "../../capacity/engine-signals/engine-reading.js";
import {
  FootprintMean,
  type KvCapacitySettings,
  kvBudgetTokens,
  kvCandidates,
  kvRequestRoom,
  REQUESTS_CAPACITY,
} from "../../capacity/kv-budget.js";
import { GatewayError } from "../../contracts/gateway-error.js";
import {
  NO_ROUTING_OBSERVER,
  type RoutingObserver,
  type RoutingPolicy,
  type RoutingPolicyFactory,
  type RoutingRequest,
} from "../../contracts/routing-policy.js";
import { CircuitBreaker } from "../../routing/circuit-breaker.js";
import { createRoutingPolicy } from "../../routing/create.js";
import {
  BREAKER_COUNTING_OFF,
  type BreakerOptions,
  DEFAULT_ROUTING,
  type RoutingOptions,
} from "../../routing/options.js";
import type { EngineSignalOptions, HealthCheckOptions, WorkerPolicy, WorkerSpec } from "../options.js";
import { EngineSignalReader } from "./engine-signals.js";
import type { ServedModels } from "./pool-formation.js";
import { TokensPerEvent } from "./tokens-per-event.js";

export const UNREPORTED_WORKER_CAPACITY = 64;
/** A worker reporting more running requests than this is lying or misconfigured. */
const MAX_REPORTED_CAPACITY = 16_384;

export class Worker {
  readonly url: string;
  pool: Pool;
  readonly configuredCapacity: number | undefined;
  reportedCapacity: number | undefined;
  /** Output tokens per event of its streams, for adaptive capacity's pace (SGLang reports its interval). */
  readonly tokensPerEvent = new TokensPerEvent();
  /** Context length the worker reports (vLLM `max_model_len`, SGLang `context_length`). */
  contextLength: number | undefined;
  /** `Authorization` value sent to this worker (its own API key), if any. */
  readonly authorization: string | undefined;
  /** The models it serves: configured (wins), else learned from `GET /v1/models`. */
  served: ServedModels;
  readonly configuredModels: boolean;
  /** `served_model_name` from `GET /get_server_info` (SGLang), used when `/v1/models` lists none. */
  infoModel: string | undefined;
  /** The group (model pool) the worker is in now; undefined while it is in none. */
  group: WorkerGroup | undefined;
  healthy = false;
  /**
   * Has it ever passed a check? One that has not is joining, not returning: its first pass admits
   * it (a worker still loading its model when the gateway starts is served from its first 200),
   * and the probe rounds run faster until it does (WorkerPool.armProbes).
   */
  everHealthy = false;
  /** Requests this gateway has in flight on the worker (the load routing policies balance). */
  inflight = 0;
  /** Prompt tokens (the gateway's estimate) of those requests: carries the engine's KV use between scrapes. */
  promptTokensInFlight = 0;
  /** KV footprints (prompt + predicted output) of those requests, under kv_tokens (src/capacity/kv-budget.ts). */
  footprintTokens = 0;
  /** Its pool counts in KV tokens but its engine reports no KV capacity: warned once (model-pools.ts). */
  kvFallbackWarned = false;
  /**
   * Its own limit under adaptive capacity (src/capacity/adaptive.ts sets it): routing puts no more
   * requests on it than this. Undefined in static mode: its capacity alone bounds it.
   */
  adaptiveLimit: number | undefined = undefined;
  /** Its engine as configured (`workers[].engine`, else the fleet's `worker_engine`). */
  readonly engineSetting: EngineChoice;
  /** Its engine as recognised when it joined (undefined before). */
  engine: EngineKind | undefined = undefined;
  /** Its /metrics is scraped for load (vLLM; SGLang with --enable-metrics). */
  scrapesMetrics = false;
  /** What SGLang's /get_server_info said of capacity (undefined: not SGLang, or not read). */
  sglangInfo: SglangServerInfo | undefined = undefined;
  /**
   * Its `GET /v1/models` cards look like vLLM's (`max_model_len`, or `owned_by: "vllm"`): a hint for
   * engine recognition when its /metrics says nothing.
   */
  modelCardsLikeVllm = false;
  /** KV cache capacity in tokens, as its engine reports it. */
  kvCapacityTokens: number | undefined = undefined;
  /** Its engine's last reading, carried forward by this gateway's own requests (engine-load.ts). */
  readonly engineLoad = new EngineLoad();
  /** Why its engine signals are unusable now (logged once); undefined while they are fine. */
  engineProblem: string | undefined = undefined;
  private failures = 0;
  private successes = 0;

  private readonly connectTimeoutMs: number;

  constructor(
    spec: WorkerSpec,
    connectTimeoutMs: number,
    defaultApiKey: string | undefined,
    /** Opened by failed requests, refused connections and failed health checks. */
    readonly breaker: CircuitBreaker,
    defaultEngine: EngineChoice = DEFAULT_ENGINE_SIGNALS.engine,
  ) {
    const url = new URL(spec.url);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new Error(`worker url ${spec.url}: only http and https are supported`);
    }
    this.url = url.origin;
    this.configuredCapacity = spec.capacity;
    this.engineSetting = spec.engine ?? defaultEngine;
    const key = spec.apiKey ?? defaultApiKey;
    this.authorization = key !== undefined ? `Bearer ${key}` : undefined;
    this.connectTimeoutMs = connectTimeoutMs;
    this.configuredModels = spec.models !== undefined && spec.models.length > 0;
    this.served = this.configuredModels ? { kind: "models", models: [...spec.models!] } : { kind: "unknown" };
    this.pool = this.newPool();
  }

  private newPool(): Pool {
    // No connection cap: admission bounds how many requests a worker gets, and a capped pool
    // would queue requests where no timeout sees them.
    return new Pool(this.url, {
      pipelining: 1,
      keepAliveTimeout: 30_000,
      connectTimeout: this.connectTimeoutMs,
    });
  }

  /**
   * Replaces the connection pool (the old one is closed in the background). Used when undici
   * refused a request's arguments: the pool must not keep any state from it.
   */
  resetPool(): void {
    const old = this.pool;
    this.pool = this.newPool();
    old.close().catch(() => old.destroy());
  }

  get capacity(): number {
    return this.configuredCapacity ?? this.reportedCapacity ?? UNREPORTED_WORKER_CAPACITY;
  }

  /** Requests may go to it: it passes its health checks and its circuit is not open. */
  get routable(): boolean {
    return this.healthy && this.breaker.state !== "open";
  }

  /**
   * Its capacity less the requests other clients hold at its engine (at the last scrape), at least
   * 1 so a worker busy with others' work still drains this gateway's queue one at a time.
   */
  get engineRoom(): number {
    const foreign = this.engineLoad.foreign;
    const room = foreign === 0 ? this.capacity : Math.max(1, this.capacity - foreign);
    const budget = this.budgetTokens;
    if (budget === undefined) return room;
    return Math.min(room, kvRequestRoom(budget, this.group!.footprints.published, this.capacity));
  }

  /**
   * Its KV token budget (KV capacity x target utilization) when its pool counts in KV tokens and
   * its engine reports its KV capacity; undefined otherwise (it counts requests).
   */
  get budgetTokens(): number | undefined {
    const kv = this.group?.kv;
    if (kv === undefined || kv.unit !== "kv_tokens" || this.kvCapacityTokens === undefined) return undefined;
    return kvBudgetTokens(this.kvCapacityTokens, kv.targetUtilization);
  }

  /** The unit its room is counted in now: kv_tokens only with a KV budget. */
  get capacityUnit(): KvCapacitySettings["unit"] {
    return this.budgetTokens === undefined ? "requests" : "kv_tokens";
  }

  /**
   * Its engine's load now for adaptive capacity: the last scrape, with this gateway's requests
   * admitted or completed since counted in (a request beyond what the engine runs waits there).
   * Undefined when its engine exports no reading.
   */
  engineView(): EngineView | undefined {
    const scrape = this.engineLoad.latest;
    if (scrape === undefined) return undefined;
    const { running, waiting } = scrape.reading;
    // Own requests at the scrape: what the engine held less the foreign load.
    const ownThen = Math.max(0, running + waiting - scrape.foreign);
    const nowWaiting = Math.max(0, waiting + this.inflight - ownThen);
    const open = scrape.foreign + this.inflight;
    return {
      running: Math.max(0, open - nowWaiting),
      waiting: nowWaiting,
      kvUtilization: this.engineLoad.estimatedKvUtilization(this.promptTokensInFlight),
      maxRunning: scrape.reading.maxRunning,
    };
  }

  /** Its share of the pool's capacity: all of its room, its trial requests when half-open, none when open. */
  get availableCapacity(): number {
    return this.breaker.capacityOf(this.engineRoom);
  }

  /**
   * How many requests routing may put on it: its capacity (under its adaptive limit, if any); under
   * an operator's pin above its pool's capacity, its share of the pin instead (see `WorkerGroup.pin`).
   */
  get room(): number {
    const lifted = this.group?.pinnedRoomOf(this);
    if (lifted !== undefined) return lifted;
    return Math.min(this.engineRoom, this.adaptiveLimit ?? Number.POSITIVE_INFINITY);
  }

  /**
   * It can take one more request: its circuit admits one, and (when `bounded`) it is under its
   * room (its capacity and adaptive limit, or its share of a pin).
   */
  hasRoom(bounded: boolean): boolean {
    if (!this.breaker.admits(this.inflight)) return false;
    return !bounded || this.inflight < this.room;
  }

  /** Records one health probe; returns true when the worker's health flipped. */
  record(ok: boolean, options: HealthCheckOptions, first: boolean): boolean {
    if (first) {
      this.healthy = ok;
      this.everHealthy = ok;
      this.failures = ok ? 0 : 1;
      this.successes = ok ? 1 : 0;
      return true;
    }
    if (ok) {
      this.failures = 0;
      this.successes++;
      // The success threshold guards a worker coming back from failures, not one joining.
      if (!this.healthy && (this.successes >= options.successThreshold || !this.everHealthy)) {
        this.healthy = true;
        this.everHealthy = true;
        return true;
      }
    } else {
      this.successes = 0;
      this.failures++;
      if (this.healthy && this.failures >= options.failureThreshold) {
        this.healthy = false;
        return true;
      }
    }
    return false;
  }
}

/**
 * The workers of one model pool, and what choosing among them needs: the healthy ones, the
 * routing policy (one instance per group, made on first use), and the requests waiting for one
 * with room. A fleet without model pools has one group holding every worker.
 */
export class WorkerGroup {
  /** The model pool's name ("" for the group of every worker). */
  name = "";
  members: Worker[] = [];
  healthy: Worker[] = [];
  policy: RoutingPolicy<Worker> | undefined;
  /** Its model pool's capacity unit and KV target (the pool factory sets it). */
  kv: KvCapacitySettings = REQUESTS_CAPACITY;
  /** Mean footprint of the pool's recent requests (kv_tokens): what its rooms are derived from. */
  readonly footprints = new FootprintMean();
  /** The group's capacity may have moved outside a health round (the pool re-reads it). */
  capacityMoved: () => void = () => {};
  /** Requests waiting for a worker of this group with room (FIFO). */
  readonly roomWaiters: Array<() => void> = [];
  /**
   * The operator's pin on the group's model pool (`PUT /api/v1/capacity`), read when routing: the
   * pool's PinnableCapacity, or the fleet-wide pin in Redis (the gateway sets it). A pin is the
   * capacity the operator wants at the workers: above the sum of their reports, each healthy
   * worker's room is lifted in proportion, to ceil(its capacity x pin / that sum), so the rooms
   * add up to at least the pin and no admitted request waits for a worker the pin promised.
   * Under the sum, rooms stay the reports (admission bounds the total).
   */
  pin: () => number | undefined = NO_PIN;
  /** The healthy members' capacity (the `capacity` getter's sum), kept for routing's room checks. */
  private healthyCapacity = 0;
  /** Room waits: requests admitted that found every worker full, by how the wait ended. */
  readonly roomWaits = { now: 0, dispatched: 0, timeout: 0, cancelled: 0, noWorker: 0 };

  /** Sets the members (the worker's `group` follows) and recomputes the healthy ones. */
  setMembers(members: Worker[]): void {
    for (const w of this.members) if (w.group === this) w.group = undefined;
    this.members = members;
    for (const w of members) w.group = this;
    this.refreshHealthy();
  }

  /** Recomputes the healthy (routable) members; the policy forgets those that left. */
  /**
   * The healthy workers that serve `model`. Usually all of them; only a pool whose workers serve
   * different model lists (a base model on two workers, an adapter on one) filters.
   */
  healthyFor(model: string | undefined): Worker[] {
    if (model === undefined || !this.mixed) return this.healthy;
    return this.healthy.filter((w) => w.served.kind !== "models" || w.served.models.includes(model));
  }

  /** Members serve different model lists (so a request's model narrows the choice). */
  private mixed = false;

  /** `worker`'s room under a pin above the group's capacity; undefined with none (or none above). */
  pinnedRoomOf(worker: Worker): number | undefined {
    const pin = this.pin();
    const sum = this.healthyCapacity;
    if (pin === undefined || sum <= 0 || pin <= sum) return undefined;
    return Math.ceil((worker.availableCapacity * pin) / sum);
  }

  refreshHealthy(): void {
    const before = this.healthy;
    this.healthy = this.members.filter((w) => w.routable);
    let sum = 0;
    for (const w of this.healthy) sum += w.availableCapacity;
    this.healthyCapacity = sum;
    const first = this.members[0]?.served;
    this.mixed = this.members.some((w) => !sameServed(w.served, first!));
    const policy = this.policy;
    if (policy !== undefined)
      for (const w of before) if (!this.healthy.includes(w)) policy.onWorkerRemoved(w);
  }

  /** Sum of the healthy members' capacity (half-open ones: their trials); 0 when none is healthy. */
  get capacity(): number {
    let sum = 0;
    for (const w of this.healthy) sum += w.availableCapacity;
    return sum;
  }

  /**
   * A request of `footprint` KV tokens arrived for this pool (kv_tokens): when the mean moved
   * enough, the workers' rooms and so the pool's capacity are derived again.
   */
  observeFootprint(footprint: number): void {
    if (!this.footprints.observe(footprint)) return;
    this.refreshHealthy();
    this.capacityMoved();
    this.wakeAll();
  }

  /** Wakes every waiter (each re-checks for room): used when the group closes or changes. */
  wakeAll(): void {
    for (const wake of this.roomWaiters.splice(0)) wake();
  }
}

interface WorkerPoolOptions {
  workers: WorkerSpec[];
  policy: WorkerPolicy;
  health: HealthCheckOptions;
  /** Capacity used when no worker is healthy. */
  fallbackCapacity: number;
  logger: Logger;
  /** Upstream connect timeout. */
  connectTimeoutSecs?: number;
  /** Bearer key for workers that have none of their own. */
  apiKey?: string | undefined;
  /** Drives the health-check loop (the gateway's clock, so a test clock drives probes too). */
  clock?: Clock;
  /** The policies' knobs (defaults: DEFAULT_ROUTING); the policy itself is `policy`. */
  routing?: Partial<Omit<RoutingOptions, "policy">> | undefined;
  /** A policy of the embedder's own, one per group, instead of `policy`. */
  routingPolicy?: RoutingPolicyFactory | undefined;
  /** Where policies count their choices. */
  routingObserver?: RoutingObserver | undefined;
  /** Circuit breakers (default: BREAKER_COUNTING_OFF, only refused connections and health checks open). */
  breaker?: BreakerOptions | undefined;
  /** Engine recognition and /metrics scrapes (default DEFAULT_ENGINE_SIGNALS). */
  engineSignals?: Partial<EngineSignalOptions> | undefined;
  /** Narrow workers' rooms by the load other clients hold at their engines (off with shared state). */
  countForeignLoad?: boolean | undefined;
}

/** No pin: the default of `WorkerGroup.pin`. */
const NO_PIN = (): number | undefined => undefined;

/**
 * How long an admitted request waits for a worker of its pool with room (every one full) before it
 * is answered 503 `worker_room_timeout`: the dispatch bound (docs/gateway.md, "Workers and capacity").
 */
export const ROOM_WAIT_MS = 5000;
const ROOM_RECHECK_MS = 100;

/** What a caller that has no request to describe routes with: no prompt, no headers. */
const NO_REQUEST: RoutingRequest = { json: undefined, promptText: () => "", header: () => undefined };

/** The first probe round's delay while a worker has never passed a check. */
const JOINING_FIRST_DELAY_MS = 1000;

export class WorkerPool {
  readonly workers: Worker[];
  /** Every worker as one group: the choice when a request names no model pool. */
  readonly all = new WorkerGroup();
  private readonly options: WorkerPoolOptions;
  private readonly clock: Clock;
  private timer: TimerHandle | undefined;
  private started = false;
  /** The next round's delay while a worker has never passed a check (see armProbes). */
  private joiningDelayMs = JOINING_FIRST_DELAY_MS;
  private readonly changeListeners: Array<() => void> = [];
  private closed = false;
  /** Timers that re-check an open circuit when its cooldown ends (capacity comes back half-open). */
  private readonly cooldowns = new Map<Worker, TimerHandle>();
  /**
   * Never send a worker more than its capacity. On in the priority scheduler's mode, whose
   * admission is bounded by the capacity sum; legacy admission has its own limit.
   */
  respectCapacity = false;

  constructor(options: WorkerPoolOptions) {
    this.options = options;
    this.clock = options.clock ?? realClock;
    const connectMs = (options.connectTimeoutSecs ?? 10) * 1000;
    const breaker = options.breaker ?? BREAKER_COUNTING_OFF;
    const engineSettings = { ...DEFAULT_ENGINE_SIGNALS, ...options.engineSignals };
    this.workers = options.workers.map(
      (spec) =>
        new Worker(
          spec,
          connectMs,
          options.apiKey,
          new CircuitBreaker(breaker, this.clock),
          engineSettings.engine,
        ),
    );
    this.all.members = this.workers;
    this.engines = new EngineSignalReader({
      settings: engineSettings,
      workers: this.workers,
      logger: options.logger,
      clock: this.clock,
      get: (worker, path, timeoutMs) => this.get(worker, path, timeoutMs),
      changed: () => this.refresh(),
      countForeignLoad: options.countForeignLoad ?? true,
    });
  }

  /** Engine recognition and the /metrics scrapes (docs/capacity.md). */
  readonly engines: EngineSignalReader;

  /** The pool's clock (scrape ages are measured on it). */
  now(): number {
    return this.clock.now();
  }

  /** First discovery: probe every worker once, so the admission mode is decided on real capacity. */
  async discover(): Promise<void> {
    await Promise.all(this.workers.map((w) => this.probe(w, true)));
    this.refresh();
  }

  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    this.armProbes();
    this.engines.start();
  }

  /**
   * The next probe round, one interval after the last one ended: rounds never overlap. While a
   * worker has never passed a check (started before it, or still loading its model), rounds come
   * sooner: 1 s, then doubling up to the interval, so a fleet started together serves within about
   * a second instead of an interval or two, and a worker that never comes costs little.
   */
  private armProbes(): void {
    if (this.closed) return;
    const intervalMs = this.options.health.intervalSecs * 1000;
    let delayMs = intervalMs;
    if (this.workers.some((w) => !w.everHealthy)) {
      delayMs = Math.min(intervalMs, this.joiningDelayMs);
      this.joiningDelayMs *= 2;
    } else this.joiningDelayMs = JOINING_FIRST_DELAY_MS;
    this.timer = this.clock.setTimer(() => {
      this.timer = undefined;
      void this.probeAll().finally(() => this.armProbes());
    }, delayMs);
  }

  /** Calls `listener` whenever the healthy set or a worker's capacity may have changed. */
  onChange(listener: () => void): void {
    this.changeListeners.push(listener);
  }

  get discoveredCapacity(): number {
    if (this.all.healthy.length === 0) return this.options.fallbackCapacity;
    return this.all.capacity;
  }

  get healthyCount(): number {
    return this.all.healthy.length;
  }

  /** Largest context length any healthy worker reports (for the cost ceiling), if any does. */
  get contextLength(): number | undefined {
    let max: number | undefined;
    for (const w of this.all.healthy) {
      if (w.contextLength !== undefined && (max === undefined || w.contextLength > max))
        max = w.contextLength;
    }
    return max;
  }

  /**
   * Takes a worker for one request: a healthy one with room, by the configured policy. When every
   * healthy worker that serves the model is full (a slot passed on by preemption or a cancel whose
   * upstream request is still closing; an adapter only some workers of its pool serve), waits until
   * one frees, up to ROOM_WAIT_MS, then throws 503 `worker_room_timeout`: a worker is never sent
   * more than its room. Rejects when `signal` aborts. Returns undefined when no worker is healthy.
   * Every wait is counted in the group's `roomWaits` (sluice_pool_room_waiting and
   * sluice_pool_room_waits_total). Give the worker back with `release`.
   */
  async acquire(
    signal: CancelSignal,
    group: WorkerGroup = this.all,
    request: RoutingRequest = NO_REQUEST,
    model?: string,
    footprint?: number,
  ): Promise<Worker | undefined> {
    const now = this.tryAcquire(group, request, model, footprint);
    if (now !== null) return now;
    const waits = group.roomWaits;
    waits.now++;
    let outcome: "dispatched" | "timeout" | "cancelled" | "noWorker" = "cancelled";
    try {
      let worker = this.pick(group, request, model, footprint);
      const deadline = performance.now() + ROOM_WAIT_MS;
      while (worker !== undefined && !worker.hasRoom(this.respectCapacity) && performance.now() < deadline) {
        // Woken by a release in the group; re-checked every ROOM_RECHECK_MS anyway, for room that
        // comes another way (a pin, a worker back in rotation, a report that grew).
        await this.waitForRoom(group, signal, Math.min(ROOM_RECHECK_MS, deadline - performance.now()));
        worker = this.pick(group, request, model, footprint);
      }
      if (worker === undefined) {
        outcome = "noWorker";
        return undefined;
      }
      if (!worker.hasRoom(this.respectCapacity)) {
        outcome = "timeout";
        throw new GatewayError(
          "worker_room_timeout",
          `no worker of pool ${group.name || "*"} had room for this admitted request within ${ROOM_WAIT_MS / 1000} s`,
        );
      }
      outcome = "dispatched";
      worker.inflight++;
      return worker;
    } finally {
      waits.now--;
      waits[outcome]++;
    }
  }

  /**
   * Takes a worker at once when one has room (or none is healthy: undefined); null when every
   * healthy worker is full and the caller must wait (`acquire`).
   */
  tryAcquire(
    group: WorkerGroup = this.all,
    request: RoutingRequest = NO_REQUEST,
    model?: string,
    footprint?: number,
  ): Worker | undefined | null {
    const worker = this.pick(group, request, model, footprint);
    if (worker === undefined) return undefined;
    if (!worker.hasRoom(this.respectCapacity)) return null;
    worker.inflight++;
    return worker;
  }

  /**
   * Takes a worker for a retry (docs/routing.md "Retries"): like `tryAcquire`, by the group's
   * policy, but only among the healthy workers `eligible` accepts (those the request has not tried)
   * and with room. Never waits: the request keeps its slot, and an attempt that finds no such
   * worker ends with the failure it had. Undefined when there is none.
   */
  tryAcquireFor(
    group: WorkerGroup,
    request: RoutingRequest,
    model: string | undefined,
    eligible: (worker: Worker) => boolean,
    footprint?: number,
  ): Worker | undefined {
    const bounded = this.respectCapacity;
    let candidates: readonly Worker[] = group
      .healthyFor(model)
      .filter((w) => eligible(w) && w.hasRoom(bounded));
    if (candidates.length === 0) return undefined;
    if (footprint !== undefined && group.kv.unit === "kv_tokens")
      candidates = kvCandidates(candidates, footprint);
    group.policy ??= this.newPolicy();
    const worker = group.policy.choose(candidates, request);
    if (worker !== undefined) worker.inflight++;
    return worker;
  }

  release(worker: Worker): void {
    worker.inflight--;
    const waiters = worker.group?.roomWaiters;
    if (waiters !== undefined && waiters.length > 0) waiters.shift()!();
    else if (this.all.roomWaiters.length > 0) this.all.roomWaiters.shift()!();
  }

  /**
   * A worker failed in a way only a dead or unreachable worker does (connection refused): its
   * circuit opens at once; a passing health check (or the cooldown) lets trial requests through.
   */
  reportUnreachable(worker: Worker): void {
    if (worker.breaker.tripUnreachable()) this.circuitChanged(worker);
  }

  /**
   * The outcome of one request on `worker`, for its circuit breaker: `ok` false for a failure the
   * worker caused (reset, timeout, bad response, a 5xx answer). Refused connections go through
   * `reportUnreachable`; cancels and preemptions are no outcome.
   */
  recordOutcome(worker: Worker, ok: boolean): void {
    if (ok ? worker.breaker.recordSuccess() : worker.breaker.recordFailure()) this.circuitChanged(worker);
  }

  /** A circuit changed state: log it, re-derive the healthy sets and capacity, arm its cooldown. */
  private circuitChanged(worker: Worker): void {
    const { breaker } = worker;
    const state = breaker.state;
    const fields = { worker: worker.url, circuit: state, reason: breaker.openReason };
    if (state === "open")
      this.options.logger.warn(fields, `circuit open (${breaker.openReason}): worker out of rotation`);
    else this.options.logger.info(fields, `circuit ${state === "closed" ? "closed" : "half-open"}`);
    const pending = this.cooldowns.get(worker);
    if (pending !== undefined) this.clock.clearTimer(pending);
    this.cooldowns.delete(worker);
    const endsAt = breaker.cooldownEndsAt;
    if (endsAt !== undefined && !this.closed) {
      const timer = this.clock.setTimer(() => {
        this.cooldowns.delete(worker);
        if (breaker.state === "half_open") this.circuitChanged(worker);
      }, endsAt - this.clock.now());
      this.cooldowns.set(worker, timer);
    }
    this.refresh();
  }

  /** Characters held by the groups' prefix trees (cache_aware). */
  get routingTreeChars(): number {
    const groups = new Set<WorkerGroup>([this.all]);
    for (const w of this.workers) if (w.group !== undefined) groups.add(w.group);
    let sum = 0;
    for (const g of groups) sum += g.policy?.treeChars ?? 0;
    return sum;
  }

  private waitForRoom(group: WorkerGroup, signal: CancelSignal, ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(new Error("cancelled while waiting for a worker"));
        return;
      }
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        const i = group.roomWaiters.indexOf(done);
        if (i !== -1) group.roomWaiters.splice(i, 1);
        resolve();
      };
      const onAbort = () => {
        done();
        reject(new Error("cancelled while waiting for a worker"));
      };
      const timer = setTimeout(done, Math.max(1, ms));
      signal.addEventListener("abort", onAbort, { once: true });
      group.roomWaiters.push(done);
    });
  }

  /**
   * Picks a healthy worker by the group's policy, among those with room when any has room (room:
   * under capacity with the priority scheduler, and a half-open circuit's trial limit); undefined
   * when none is healthy.
   */
  pick(
    group: WorkerGroup = this.all,
    request: RoutingRequest = NO_REQUEST,
    model?: string,
    footprint?: number,
  ): Worker | undefined {
    const healthy = group.healthyFor(model);
    const bounded = this.respectCapacity;
    let candidates: readonly Worker[] = healthy;
    let full = 0;
    for (const w of healthy) if (!w.hasRoom(bounded)) full++;
    if (full > 0 && full < healthy.length) candidates = healthy.filter((w) => w.hasRoom(bounded));
    if (candidates.length === 0) return undefined;
    // kv_tokens: among them, those whose KV budget the request fits (else the most headroom).
    if (footprint !== undefined && group.kv.unit === "kv_tokens")
      candidates = kvCandidates(candidates, footprint);
    group.policy ??= this.newPolicy();
    return group.policy.choose(candidates, request);
  }

  /** A policy instance for one group. */
  private newPolicy(): RoutingPolicy<Worker> {
    const { routingPolicy, routing, policy, routingObserver } = this.options;
    if (routingPolicy !== undefined) return routingPolicy<Worker>();
    return createRoutingPolicy<Worker>(
      { ...DEFAULT_ROUTING, ...routing, policy },
      routingObserver ?? NO_ROUTING_OBSERVER,
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    this.engines.close();
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    this.timer = undefined;
    for (const timer of this.cooldowns.values()) this.clock.clearTimer(timer);
    this.cooldowns.clear();
    this.all.wakeAll();
    for (const w of this.workers) w.group?.wakeAll();
    await Promise.all(this.workers.map((w) => w.pool.close().catch(() => w.pool.destroy())));
  }

  private async probeAll(): Promise<void> {
    if (this.closed) return;
    await Promise.all(this.workers.map((w) => this.probe(w, false)));
    this.refresh();
  }

  private async probe(worker: Worker, first: boolean): Promise<void> {
    const { health, logger } = this.options;
    const ok = await this.get(worker, health.endpoint).then(
      (r) => r.status >= 200 && r.status < 300,
      () => false,
    );
    const wasHealthy = worker.healthy;
    const flipped = worker.record(ok, health, first);
    // The circuit follows the health checks, so the two never disagree about a worker: out of the
    // checks = held open; back in (or reachable again after a refused connection) = closed.
    if (!worker.healthy) {
      if (worker.breaker.hold()) this.circuitChanged(worker);
    } else if (ok && worker.breaker.checkPassed(true)) this.circuitChanged(worker);
    const joined = worker.healthy && (first || (flipped && !wasHealthy));
    if (joined) await this.readCapacity(worker);
    // The model list is read every round: a worker may change what it serves without going down.
    if (worker.healthy) await this.readModels(worker);
    // Its engine, once it joined: /get_server_info and /v1/models have been read (auto uses both).
    if (joined) await this.engines.recognise(worker);
    if (flipped && !first) {
      logger.warn(
        { worker: worker.url, healthy: worker.healthy },
        worker.healthy ? "worker healthy" : "worker unhealthy",
      );
    } else if (first && !worker.healthy) {
      logger.warn({ worker: worker.url }, "worker unhealthy at startup");
    }
  }

  private async readCapacity(worker: Worker): Promise<void> {
    worker.sglangInfo = undefined;
    try {
      const r = await this.get(worker, "/get_server_info");
      if (r.status !== 200) return;
      const info = JSON.parse(r.body) as Record<string, unknown>;
      const capacityInfo = sglangServerInfo(info);
      if (capacityInfo.maxRunningRequests !== undefined || capacityInfo.maxTotalNumTokens !== undefined)
        worker.sglangInfo = capacityInfo;
      const max = info.max_running_requests;
      const believable =
        typeof max === "number" && Number.isInteger(max) && max >= 1 && max <= MAX_REPORTED_CAPACITY;
      worker.reportedCapacity = believable ? max : undefined;
      if (!believable && max !== undefined && max !== null) {
        this.options.logger.warn(
          { worker: worker.url, reported: String(max).slice(0, 40), used: worker.capacity },
          `worker reports an unusable max_running_requests; using ${worker.capacity}`,
        );
      }
      worker.tokensPerEvent.seed(info.stream_interval);
      const context = info.context_length;
      if (typeof context === "number" && Number.isInteger(context) && context > 0) {
        worker.contextLength = context;
      }
      // SGLang names its model here too: what a worker without /v1/models serves.
      const served = info.served_model_name;
      worker.infoModel =
        typeof served === "string" && served.length > 0 && served.length <= 256 ? served : undefined;
    } catch {
      // Not SGLang (or no such endpoint): the worker keeps its configured or default capacity.
    }
  }

  /**
   * `GET /v1/models`: the models the worker serves (unless configured) and, from vLLM, each one's
   * `max_model_len`. A worker that answers but lists no model serves any model (the catch-all pool).
   * A failed read keeps what was known.
   */
  private async readModels(worker: Worker): Promise<void> {
    let data: unknown;
    try {
      const r = await this.get(worker, "/v1/models");
      if (r.status === 200) data = (JSON.parse(r.body) as { data?: unknown }).data;
      else if (r.status !== 404) return; // a transient failure: keep what was known
    } catch {
      return;
    }
    const ids: string[] = [];
    let maxLen = 0;
    let ownedByVllm = false;
    if (Array.isArray(data)) {
      for (const model of data) {
        const m = model as { id?: unknown; max_model_len?: unknown; owned_by?: unknown } | null;
        if (m?.owned_by === "vllm") ownedByVllm = true;
        if (typeof m?.id === "string" && m.id.length > 0 && m.id.length <= 256 && !ids.includes(m.id)) {
          ids.push(m.id);
        }
        const len = m?.max_model_len;
        if (typeof len === "number" && Number.isInteger(len) && len > maxLen) maxLen = len;
      }
    }
    if (worker.contextLength === undefined && maxLen > 0) worker.contextLength = maxLen;
    worker.modelCardsLikeVllm = maxLen > 0 || ownedByVllm;
    if (worker.configuredModels) return;
    // No model list: the name /get_server_info gave (SGLang), else any model (the catch-all pool).
    if (ids.length === 0 && worker.infoModel !== undefined) ids.push(worker.infoModel);
    const before = worker.served;
    worker.served = ids.length > 0 ? { kind: "models", models: ids.sort() } : { kind: "any" };
    if (!sameServed(before, worker.served)) {
      this.options.logger.info(
        { worker: worker.url, models: ids.length > 0 ? ids : "any (it lists none)" },
        "worker models learned",
      );
    }
  }

  private async get(
    worker: Worker,
    path: string,
    timeout = this.options.health.timeoutSecs * 1000,
  ): Promise<{ status: number; body: string }> {
    const res = await worker.pool.request({
      method: "GET",
      path,
      headers: worker.authorization !== undefined ? { authorization: worker.authorization } : {},
      headersTimeout: timeout,
      bodyTimeout: timeout,
      signal: AbortSignal.timeout(timeout),
    });
    const body = await res.body.text();
    return { status: res.statusCode, body };
  }

  private refresh(): void {
    this.all.refreshHealthy();
    for (const w of this.workers) w.group?.refreshHealthy();
    for (const listener of this.changeListeners) listener();
  }
}

function sameServed(a: ServedModels, b: ServedModels): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind !== "models" || b.kind !== "models") return true;
  return a.models.length === b.models.length && a.models.every((m, i) => m === b.models[i]);
}

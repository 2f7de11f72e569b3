/**
 * Model pools (docs/gateway.md, "Model pools"): one gateway in front of workers that serve
 * different models. Each pool has its own capacity, admission (reservations, per-class queues,
 * starvation, preemption), adaptive limit and shedding; a request is routed by its body's `model`
 * to its pool, and never leaves it. Tenant policy (budgets, clamps, allowlists) stays fleet-wide.
 *
 * Pools form from what workers serve (pool-formation.ts) and re-form on every health round: a
 * worker that changes its models, leaves or comes back moves or resizes its pool without a restart.
 * A pool is named by its first model when it forms, and keeps its name (and its queue) while
 * models join or leave it. A pool left with no worker keeps its name and its queue: new requests for its models get 503
 * `no_healthy_workers` at once; queued ones wait for a worker to come back, and get that 503 at
 * their queue timeout.
 */
import type { Logger } from "pino";
import type { AdaptiveCapacity } from "../../capacity/adaptive.js";
import type { PinnableCapacity } from "../../capacity/pinned.js";
import type { AdmissionBackend } from "../../contracts/admission-backend.js";
import { CapacityNotifier, type CapacitySource } from "../../contracts/capacity-source.js";
import { GatewayError } from "../../contracts/gateway-error.js";
import type { PoolView } from "../../contracts/pool-view.js";
import type { LoadShedding } from "../../shedding/load-shedding.js";
import { CATCH_ALL_POOL, formPools } from "./pool-formation.js";
import { type Worker, WorkerGroup, type WorkerPool } from "./workers.js";

/** One pool's parts. */
export interface ModelPool extends PoolView {
  /** Its alphabetically first model, or `*` (the catch-all pool). */
  readonly name: string;
  /** The models it serves now (sorted; empty for `*`). */
  readonly models: readonly string[];
  readonly workers: WorkerGroup;
  readonly admission: AdmissionBackend;
  /** Admission is the fleet-wide legacy limiter, shared by every pool (scheduler disabled). */
  readonly sharedAdmission: boolean;
  /** The capacity in force: discovered from its workers (or adaptive), pinnable. */
  readonly capacity: PinnableCapacity;
  readonly adaptive: AdaptiveCapacity | undefined;
  readonly shedding: LoadShedding | undefined;
  /** Stops its timers (adaptive limit, shedding calibration). */
  stop(): void;
}

/** Capacity of a pool as discovered: the sum over its healthy workers (0 when none is). */
class PoolCapacity implements CapacitySource {
  private readonly notifier = new CapacityNotifier();
  private last = -1;

  constructor(private readonly group: WorkerGroup) {}

  get capacity(): number {
    return this.group.capacity;
  }

  /** Tells subscribers when the value moved (called after the group's workers changed). */
  refresh(): void {
    const c = this.capacity;
    if (c === this.last) return;
    this.last = c;
    this.notifier.changed(c);
  }

  subscribe(listener: (capacity: number) => void): void {
    this.notifier.subscribe(listener);
  }
}

/** Builds a pool's parts the first time its name appears. */
export type PoolFactory = (
  name: string,
  models: readonly string[],
  group: WorkerGroup,
  discovered: PoolCapacity,
) => ModelPool;

interface PoolEntry {
  pool: ModelPool;
  discovered: PoolCapacity;
  models: string[];
}

export class ModelPools {
  private readonly entries = new Map<string, PoolEntry>();
  /** Model -> the pool serving it now, or the pool that last served it (then with no worker). */
  private readonly byModel = new Map<string, PoolEntry>();
  private readonly listeners: Array<(pool: ModelPool) => void> = [];

  constructor(
    private readonly workers: WorkerPool,
    private readonly create: PoolFactory,
    private readonly logger: Logger,
    /** Where a request that names no model goes (`default_model`). */
    readonly defaultModel: string | undefined,
  ) {}

  /** Calls `listener` with each pool created from now on. */
  onCreated(listener: (pool: ModelPool) => void): void {
    this.listeners.push(listener);
  }

  /** Every pool, by name. */
  get all(): ModelPool[] {
    return [...this.entries.values()].map((e) => e.pool);
  }

  /** The models some pool serves now (what `GET /v1/models` lists), sorted. */
  get servedModels(): string[] {
    const out: string[] = [];
    for (const [model, e] of this.byModel) {
      if (e.models.includes(model) && e.pool.workers.members.length > 0) out.push(model);
    }
    return out.sort();
  }

  /** A pool by its name or any model it serves or served. */
  find(nameOrModel: string): ModelPool | undefined {
    return (this.entries.get(nameOrModel) ?? this.byModel.get(nameOrModel))?.pool;
  }

  /**
   * Re-forms the pools from what the workers serve now, and refreshes every pool's healthy
   * workers and capacity. Called after each health round and at startup.
   */
  refresh(): void {
    const formed = formPools(this.workers.workers.map((w) => w.served));
    const taken = new Set<PoolEntry>();
    for (const f of formed) {
      const members = f.workers.map((i) => this.workers.workers[i]!);
      // The pool this group continues: the one of its name, else the one sharing most of its models
      // (a pool keeps its name and its queue when a model joins or leaves it).
      let entry = this.entries.get(f.name);
      if (entry !== undefined && taken.has(entry)) entry = undefined;
      entry ??= this.overlapping(f.models, taken);
      const isNew = entry === undefined;
      // A new pool is built on its members, so its startup checks see their real capacity.
      entry ??= this.add(f.name, f.models, members);
      taken.add(entry);
      if (isNew || !sameList(entry.models, f.models) || !sameList(entry.pool.workers.members, members)) {
        this.logger.info(
          { pool: entry.pool.name, models: f.models, workers: members.map((w) => w.url) },
          "model pool formed",
        );
      }
      entry.models = f.models;
      (entry.pool as { models: readonly string[] }).models = f.models;
      entry.pool.workers.setMembers(members);
      for (const model of f.models) this.byModel.set(model, entry);
    }
    for (const [name, entry] of this.entries) {
      if (taken.has(entry)) continue;
      if (entry.pool.workers.members.length > 0) {
        this.logger.warn({ pool: name, models: entry.models }, "model pool has no worker left");
        entry.pool.workers.setMembers([]);
        entry.pool.workers.wakeAll();
      }
      // A pool with no worker whose models all moved elsewhere, and nothing queued or running,
      // is gone for good.
      const claimed = entry.models.every((m) => this.byModel.get(m) !== entry);
      const snap = entry.pool.admission.snapshot();
      if (claimed && snap.inflight === 0 && snap.queued === 0) {
        this.entries.delete(name);
        entry.pool.stop();
      }
    }
    for (const entry of this.entries.values()) {
      this.warnKvFallback(entry.pool);
      entry.discovered.refresh();
    }
  }

  /** Once per worker: its pool counts KV tokens but its engine reports no KV capacity. */
  private warnKvFallback(pool: ModelPool): void {
    if (pool.workers.kv.unit !== "kv_tokens") return;
    for (const w of pool.workers.healthy) {
      if (w.kvFallbackWarned || w.kvCapacityTokens !== undefined || w.engine === undefined) continue;
      w.kvFallbackWarned = true;
      this.logger.warn(
        { pool: pool.name, worker: w.url, engine: w.engine, capacity: w.capacity },
        "capacity_unit kv_tokens: the worker's engine reports no KV capacity; its room counts requests",
      );
    }
  }

  /** The pool not yet taken that shares the most of `models` (none for the catch-all pool). */
  private overlapping(models: readonly string[], taken: ReadonlySet<PoolEntry>): PoolEntry | undefined {
    let best: PoolEntry | undefined;
    let bestShared = 0;
    for (const e of this.entries.values()) {
      if (taken.has(e)) continue;
      let shared = 0;
      for (const m of models) if (e.models.includes(m)) shared++;
      if (shared > bestShared) {
        best = e;
        bestShared = shared;
      }
    }
    return best;
  }

  private add(name: string, models: readonly string[], members: Worker[]): PoolEntry {
    const group = new WorkerGroup();
    group.name = name;
    group.setMembers(members);
    const discovered = new PoolCapacity(group);
    // kv_tokens: a new mean footprint moves the workers' rooms between health rounds.
    group.capacityMoved = () => discovered.refresh();
    const pool = this.create(name, models, group, discovered);
    const entry: PoolEntry = { pool, discovered, models: [] };
    this.entries.set(name, entry);
    for (const listener of this.listeners) listener(pool);
    return entry;
  }

  /**
   * The pool a request for `model` goes to. Throws the request's answer when there is none:
   * 400 (no model named, and several pools), 404 `model_not_found`, or 503 `no_healthy_workers`
   * (its pool has no worker now, or no worker has said yet what it serves).
   */
  route(requested: string | undefined): ModelPool {
    const model = requested ?? this.defaultModel;
    let entry: PoolEntry | undefined;
    if (model !== undefined) entry = this.byModel.get(model) ?? this.entries.get(CATCH_ALL_POOL);
    else if (this.entries.size === 1) entry = this.entries.values().next().value;
    else if (this.entries.size > 1) {
      throw new GatewayError(
        "invalid_request_body",
        'the request must name its "model": this gateway serves several models and has no default_model',
        { param: "model" },
      );
    }
    if (entry === undefined) throw this.unknown(model);
    if (entry.pool.workers.healthy.length === 0) {
      const what = model === undefined ? `pool ${entry.pool.name}` : `model "${model}"`;
      throw new GatewayError(
        "no_healthy_workers",
        entry.pool.workers.members.length === 0
          ? `no worker serves ${what} now`
          : `no healthy worker serves ${what} now`,
      );
    }
    return entry.pool;
  }

  private unknown(model: string | undefined): GatewayError {
    // While some worker has not said what it serves, the model may be its: 503, not 404.
    if (model === undefined || this.workers.workers.some((w: Worker) => w.served.kind === "unknown")) {
      return new GatewayError(
        "no_healthy_workers",
        model === undefined
          ? "no healthy worker is available (none has said yet what it serves)"
          : `no worker serves model "${model}" now (some workers have not answered yet)`,
      );
    }
    return new GatewayError("model_not_found", `The model \`${model}\` does not exist.`, { param: "model" });
  }

  /** Stops every pool's timers. */
  stop(): void {
    for (const e of this.entries.values()) e.pool.stop();
  }
}

function sameList<T>(a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

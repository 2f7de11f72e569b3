/**
 * The upstream workers: one undici connection pool each, periodic health checks, capacity
 * discovery (SGLang `GET /get_server_info` -> `max_running_requests`), and the choice of a worker
 * for each request (`power_of_two`, `round_robin`, `random`) among those with room.
 *
 * Capacity = sum over healthy workers of (configured capacity, else reported
 * max_running_requests, else 64); with no healthy worker, the fallback capacity. A reported
 * capacity that is not an integer in 1..MAX_REPORTED_CAPACITY is not believed.
 *
 * A worker is never sent more requests than its capacity (when `respectCapacity`): a request whose
 * slot passed to it from a preempted or cancelled one waits, briefly, until that one's upstream
 * request has closed, instead of landing on a worker that is still running it.
 */
import type { Logger } from "pino";
import { Pool } from "undici";
import { type Clock, realClock, type TimerHandle } from "../core/clock.js";
import type { CancelSignal } from "../core/signal.js";
import type { HealthCheckOptions, WorkerPolicy, WorkerSpec } from "./options.js";

export const UNREPORTED_WORKER_CAPACITY = 64;
/** A worker reporting more running requests than this is lying or misconfigured. */
export const MAX_REPORTED_CAPACITY = 16_384;

export class Worker {
  readonly url: string;
  pool: Pool;
  readonly configuredCapacity: number | undefined;
  reportedCapacity: number | undefined;
  /** Context length the worker reports (vLLM `max_model_len`, SGLang `context_length`). */
  contextLength: number | undefined;
  /** `Authorization` value sent to this worker (its own API key), if any. */
  readonly authorization: string | undefined;
  healthy = false;
  /** Requests this gateway has in flight on the worker (for power-of-two choice). */
  inflight = 0;
  private failures = 0;
  private successes = 0;

  private readonly connectTimeoutMs: number;

  constructor(spec: WorkerSpec, connectTimeoutMs: number, defaultApiKey: string | undefined) {
    const url = new URL(spec.url);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new Error(`worker url ${spec.url}: only http and https are supported`);
    }
    this.url = url.origin;
    this.configuredCapacity = spec.capacity;
    const key = spec.apiKey ?? defaultApiKey;
    this.authorization = key !== undefined ? `Bearer ${key}` : undefined;
    this.connectTimeoutMs = connectTimeoutMs;
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

  markUnhealthy(): void {
    this.healthy = false;
    this.successes = 0;
  }

  /** Records one health probe; returns true when the worker's health flipped. */
  record(ok: boolean, options: HealthCheckOptions, first: boolean): boolean {
    if (first) {
      this.healthy = ok;
      this.failures = ok ? 0 : 1;
      this.successes = ok ? 1 : 0;
      return true;
    }
    if (ok) {
      this.failures = 0;
      this.successes++;
      if (!this.healthy && this.successes >= options.successThreshold) {
        this.healthy = true;
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

export interface WorkerPoolOptions {
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
}

/** How long a request waits for a worker with room before it is sent to the least loaded one. */
const ROOM_WAIT_MS = 5000;

export class WorkerPool {
  readonly workers: Worker[];
  private readonly options: WorkerPoolOptions;
  private healthy: Worker[] = [];
  private rr = 0;
  private readonly clock: Clock;
  private timer: TimerHandle | undefined;
  private started = false;
  private readonly changeListeners: Array<() => void> = [];
  private closed = false;
  /** Requests waiting for a worker with room (FIFO). */
  private readonly roomWaiters: Array<() => void> = [];
  /**
   * Never send a worker more than its capacity. On in the priority scheduler's mode, whose
   * admission is bounded by the capacity sum; legacy admission has its own limit.
   */
  respectCapacity = false;

  constructor(options: WorkerPoolOptions) {
    this.options = options;
    this.clock = options.clock ?? realClock;
    const connectMs = (options.connectTimeoutSecs ?? 10) * 1000;
    this.workers = options.workers.map((spec) => new Worker(spec, connectMs, options.apiKey));
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
  }

  /** The next probe round, one interval after the last one ended: rounds never overlap. */
  private armProbes(): void {
    if (this.closed) return;
    this.timer = this.clock.setTimer(() => {
      this.timer = undefined;
      void this.probeAll().finally(() => this.armProbes());
    }, this.options.health.intervalSecs * 1000);
  }

  /** Calls `listener` whenever the healthy set or a worker's capacity may have changed. */
  onChange(listener: () => void): void {
    this.changeListeners.push(listener);
  }

  get discoveredCapacity(): number {
    if (this.healthy.length === 0) return this.options.fallbackCapacity;
    let sum = 0;
    for (const w of this.healthy) sum += w.capacity;
    return sum;
  }

  get healthyCount(): number {
    return this.healthy.length;
  }

  /** Largest context length any healthy worker reports (for the cost ceiling), if any does. */
  get contextLength(): number | undefined {
    let max: number | undefined;
    for (const w of this.healthy) {
      if (w.contextLength !== undefined && (max === undefined || w.contextLength > max))
        max = w.contextLength;
    }
    return max;
  }

  /**
   * Takes a worker for one request: a healthy one with room, by the configured policy. When every
   * healthy worker is full (a slot passed on by preemption or a cancel whose upstream request is
   * still closing), waits until one frees, up to ROOM_WAIT_MS, or until `signal` aborts. Returns
   * undefined when no worker is healthy. Give it back with `release`.
   */
  async acquire(signal: CancelSignal): Promise<Worker | undefined> {
    const now = this.tryAcquire();
    if (now !== null) return now;
    let worker = this.pick();
    const deadline = performance.now() + ROOM_WAIT_MS;
    while (worker !== undefined && worker.inflight >= worker.capacity && performance.now() < deadline) {
      await this.waitForRoom(signal, deadline - performance.now());
      worker = this.pick();
    }
    if (worker !== undefined) worker.inflight++;
    return worker;
  }

  /**
   * Takes a worker at once when one has room (or none is healthy: undefined); null when every
   * healthy worker is full and the caller must wait (`acquire`).
   */
  tryAcquire(): Worker | undefined | null {
    const worker = this.pick();
    if (worker === undefined) return undefined;
    if (this.respectCapacity && worker.inflight >= worker.capacity) return null;
    worker.inflight++;
    return worker;
  }

  release(worker: Worker): void {
    worker.inflight--;
    if (this.roomWaiters.length > 0) this.roomWaiters.shift()!();
  }

  /**
   * A worker failed in a way only a dead or unreachable worker does (connection refused): take it
   * out of rotation at once; the health checks bring it back.
   */
  reportUnreachable(worker: Worker): void {
    if (!worker.healthy) return;
    worker.markUnhealthy();
    this.options.logger.warn({ worker: worker.url }, "worker unreachable: taken out of rotation");
    this.refresh();
  }

  private waitForRoom(signal: CancelSignal, ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(new Error("cancelled while waiting for a worker"));
        return;
      }
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        const i = this.roomWaiters.indexOf(done);
        if (i !== -1) this.roomWaiters.splice(i, 1);
        resolve();
      };
      const onAbort = () => {
        done();
        reject(new Error("cancelled while waiting for a worker"));
      };
      const timer = setTimeout(done, Math.max(1, ms));
      signal.addEventListener("abort", onAbort, { once: true });
      this.roomWaiters.push(done);
    });
  }

  /**
   * Picks a healthy worker by the configured policy, preferring workers with room; undefined when
   * none is healthy.
   */
  pick(): Worker | undefined {
    let healthy = this.healthy;
    if (this.respectCapacity) {
      let full = 0;
      for (const w of healthy) if (w.inflight >= w.capacity) full++;
      if (full > 0 && full < healthy.length) healthy = healthy.filter((w) => w.inflight < w.capacity);
    }
    const n = healthy.length;
    if (n === 0) return undefined;
    if (n === 1) return healthy[0];
    switch (this.options.policy) {
      case "round_robin":
        this.rr = (this.rr + 1) % n;
        return healthy[this.rr];
      case "random":
        return healthy[Math.floor(Math.random() * n)];
      default: {
        // Power of two choices: the less loaded of two distinct random workers.
        const i = Math.floor(Math.random() * n);
        let j = Math.floor(Math.random() * (n - 1));
        if (j >= i) j++;
        const a = healthy[i]!;
        const b = healthy[j]!;
        return a.inflight <= b.inflight ? a : b;
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    this.timer = undefined;
    for (const wake of this.roomWaiters.splice(0)) wake();
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
    if (worker.healthy && (first || (flipped && !wasHealthy))) {
      await this.readCapacity(worker);
      await this.readContextLength(worker);
    }
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
    try {
      const r = await this.get(worker, "/get_server_info");
      if (r.status !== 200) return;
      const info = JSON.parse(r.body) as Record<string, unknown>;
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
      const context = info.context_length;
      if (typeof context === "number" && Number.isInteger(context) && context > 0) {
        worker.contextLength = context;
      }
    } catch {
      // Not SGLang (or no such endpoint): the worker keeps its configured or default capacity.
    }
  }

  /** vLLM reports `max_model_len` per model in /v1/models. */
  private async readContextLength(worker: Worker): Promise<void> {
    if (worker.contextLength !== undefined) return;
    try {
      const r = await this.get(worker, "/v1/models");
      if (r.status !== 200) return;
      const data = (JSON.parse(r.body) as { data?: unknown }).data;
      if (!Array.isArray(data)) return;
      for (const model of data) {
        const len = (model as { max_model_len?: unknown } | null)?.max_model_len;
        if (typeof len === "number" && Number.isInteger(len) && len > 0) {
          worker.contextLength = Math.max(worker.contextLength ?? 0, len);
        }
      }
    } catch {
      // No model list: no context length.
    }
  }

  private async get(worker: Worker, path: string): Promise<{ status: number; body: string }> {
    const timeout = this.options.health.timeoutSecs * 1000;
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
    this.healthy = this.workers.filter((w) => w.healthy);
    for (const listener of this.changeListeners) listener();
  }
}

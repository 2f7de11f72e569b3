/**
 * The upstream workers: one undici connection pool each, periodic health checks, capacity
 * discovery (SGLang `GET /get_server_info` -> `max_running_requests`), and the choice of a worker
 * for each request (`power_of_two`, `round_robin`, `random`).
 *
 * Capacity = sum over healthy workers of (configured capacity, else reported
 * max_running_requests, else 64); with no healthy worker, the fallback capacity.
 */
import type { Logger } from "pino";
import { Pool } from "undici";
import type { HealthCheckOptions, WorkerPolicy, WorkerSpec } from "./options.js";

export const UNREPORTED_WORKER_CAPACITY = 64;

export class Worker {
  readonly url: string;
  readonly pool: Pool;
  readonly configuredCapacity: number | undefined;
  reportedCapacity: number | undefined;
  healthy = false;
  /** Requests this gateway has in flight on the worker (for power-of-two choice). */
  inflight = 0;
  private failures = 0;
  private successes = 0;

  constructor(spec: WorkerSpec, connections: number) {
    const url = new URL(spec.url);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new Error(`worker url ${spec.url}: only http and https are supported`);
    }
    this.url = url.origin;
    this.configuredCapacity = spec.capacity;
    this.pool = new Pool(this.url, { connections, pipelining: 1, keepAliveTimeout: 30_000 });
  }

  get capacity(): number {
    return this.configuredCapacity ?? this.reportedCapacity ?? UNREPORTED_WORKER_CAPACITY;
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
  /** Called whenever the capacity sum changes. */
  onCapacityChange?: (capacity: number) => void;
  /** Connections per worker pool. */
  connectionsPerWorker?: number;
}

export class WorkerPool {
  readonly workers: Worker[];
  private readonly options: WorkerPoolOptions;
  private healthy: Worker[] = [];
  private rr = 0;
  private timer: NodeJS.Timeout | undefined;
  private lastCapacity = -1;
  private pinned: number | undefined;
  private probing = false;
  private closed = false;

  constructor(options: WorkerPoolOptions) {
    this.options = options;
    const connections = options.connectionsPerWorker ?? 256;
    this.workers = options.workers.map((spec) => new Worker(spec, connections));
  }

  /** First discovery: probe every worker once, so the admission mode is decided on real capacity. */
  async discover(): Promise<void> {
    await Promise.all(this.workers.map((w) => this.probe(w, true)));
    this.refresh();
  }

  start(): void {
    if (this.timer !== undefined || this.closed) return;
    this.timer = setInterval(() => void this.probeAll(), this.options.health.intervalSecs * 1000);
    this.timer.unref();
  }

  /** Capacity in force: the pinned value (admin API) or the discovered one. */
  get capacity(): number {
    return this.pinned ?? this.discoveredCapacity;
  }

  get pinnedCapacity(): number | undefined {
    return this.pinned;
  }

  /** Pins capacity (undefined = back to discovery); applies at once. */
  pinCapacity(capacity: number | undefined): void {
    this.pinned = capacity;
    this.refresh();
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

  /** Picks a healthy worker by the configured policy, or undefined when none is healthy. */
  pick(): Worker | undefined {
    const healthy = this.healthy;
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
    if (this.timer !== undefined) clearInterval(this.timer);
    await Promise.all(this.workers.map((w) => w.pool.close().catch(() => w.pool.destroy())));
  }

  private async probeAll(): Promise<void> {
    if (this.probing || this.closed) return;
    this.probing = true;
    try {
      await Promise.all(this.workers.map((w) => this.probe(w, false)));
      this.refresh();
    } finally {
      this.probing = false;
    }
  }

  private async probe(worker: Worker, first: boolean): Promise<void> {
    const { health, logger } = this.options;
    const ok = await this.get(worker, health.endpoint).then(
      (r) => r.status >= 200 && r.status < 300,
      () => false,
    );
    const wasHealthy = worker.healthy;
    const flipped = worker.record(ok, health, first);
    if (worker.healthy && (first || (flipped && !wasHealthy))) await this.readCapacity(worker);
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
      worker.reportedCapacity = typeof max === "number" && Number.isInteger(max) && max > 0 ? max : undefined;
    } catch {
      // Not SGLang (or no such endpoint): the worker keeps its configured or default capacity.
    }
  }

  private async get(worker: Worker, path: string): Promise<{ status: number; body: string }> {
    const timeout = this.options.health.timeoutSecs * 1000;
    const res = await worker.pool.request({
      method: "GET",
      path,
      headersTimeout: timeout,
      bodyTimeout: timeout,
      signal: AbortSignal.timeout(timeout),
    });
    const body = await res.body.text();
    return { status: res.statusCode, body };
  }

  private refresh(): void {
    this.healthy = this.workers.filter((w) => w.healthy);
    const capacity = this.capacity;
    if (capacity !== this.lastCapacity) {
      const before = this.lastCapacity;
      this.lastCapacity = capacity;
      if (before !== -1) {
        this.options.logger.info(
          { capacity, previous: before, healthy: this.healthy.length },
          "capacity changed",
        );
      }
      this.options.onCapacityChange?.(capacity);
    }
  }
}

/**
 * One replica's membership in a fleet sharing a Redis: its settings, key names, connections and
 * wake-up channel, shared by every admission backend (one per model pool) and the budget store of
 * the process. The replica token (`<replica id>~<incarnation>`) names this process's leases and
 * tickets, so a restarted replica with the same id never touches its previous life's leases.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import { StateConnection } from "./connection.js";
import { StateKeys } from "./keys.js";
import { StateMetrics } from "./metrics.js";
import type { StateOptions } from "./options.js";
import { Wakeups } from "./wakeups.js";

export class RedisFleet {
  readonly keys: StateKeys;
  readonly connection: StateConnection;
  readonly wakeups: Wakeups;
  readonly replicaToken: string;
  readonly startedAt = Date.now();
  /** Replicas alive when last seen (the local share's divisor); at least 1. */
  replicasAlive = 1;
  /** Whether some backend runs on its local share now (metrics). */
  localFallback = false;
  /**
   * Admission is the in-process legacy limiter (scheduler off, or failed safe): only budgets are
   * shared, and while Redis is away they are this replica's share (budgets.ts), a local fallback.
   */
  legacyAdmission = false;
  /** Pools whose backend is not using Redis now (down, or rejoining). */
  readonly notShared = new Set<string>();
  /** Leases held by this replica across its pools (metrics). */
  leaseCount: () => number = () => 0;
  readonly metrics: StateMetrics | undefined;

  constructor(
    readonly options: StateOptions,
    readonly logger: Logger,
    registry?: Registry,
  ) {
    this.keys = new StateKeys(options.keyPrefix);
    this.replicaToken = `${options.replicaId}~${randomBytes(3).toString("hex")}`;
    this.connection = new StateConnection({ url: options.url, logger, name: `sluice:${this.replicaToken}` });
    this.wakeups = new Wakeups(this.connection.subscriber, [
      this.keys.channel(this.replicaToken),
      this.keys.fleetChannel,
    ]);
    this.metrics =
      registry === undefined
        ? undefined
        : new StateMetrics(registry, {
            up: () => this.connection.up && this.notShared.size === 0,
            localFallback: () => this.localFallback || (this.legacyAdmission && !this.connection.up),
            replicas: () => this.replicasAlive,
            leases: () => this.leaseCount(),
          });
  }

  /** Connects; resolves whether Redis answered or not (a fail mode decides what happens then). */
  async start(): Promise<void> {
    await this.connection.start();
  }

  /** The URL without its password, for logs and status. */
  get redactedUrl(): string {
    try {
      const url = new URL(this.options.url);
      if (url.password !== "") url.password = "***";
      return url.toString();
    } catch {
      return "(invalid)";
    }
  }

  close(): Promise<void> {
    return this.connection.close();
  }
}

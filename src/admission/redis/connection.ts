/**
 * The connections to Redis (or Valkey) and whether it can be reached. Two connections per
 * replica: one for commands (auto-pipelined: scripts issued in the same tick share a write), one
 * subscribed to the replica's wake-up channel (a subscribed connection can do nothing else).
 *
 * Commands never wait for a connection: with the offline queue off, a command issued while Redis
 * is away fails at once, and the caller falls back (fail mode `local`) or refuses (`closed`).
 * ioredis keeps reconnecting in the background; `onUp` listeners run each time the command
 * connection is ready again, `onDown` ones once per outage.
 */
import { Redis, type RedisOptions } from "ioredis";
import type { Logger } from "pino";
import { defineScripts } from "./scripts.js";

/** Replies that mean "not now" rather than a bug in a script. */
const UNAVAILABLE_REPLY = /^(LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY|MISCONF)\b/;

/** True when a failed command says Redis is unreachable or not serving (not a script error). */
function isUnavailable(error: unknown): boolean {
  const e = error as { name?: string; message?: string };
  if (e?.name === "ReplyError") return UNAVAILABLE_REPLY.test(e.message ?? "");
  return true;
}

interface ConnectionOptions {
  url: string;
  logger: Logger;
  /** A command that takes longer fails (Redis paused or partitioned); default 1000 ms. */
  commandTimeoutMs?: number;
  /** For logs and CLIENT LIST. */
  name: string;
}

function redisOptions(name: string, commandTimeoutMs: number, pipelined: boolean): RedisOptions {
  return {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: commandTimeoutMs,
    connectTimeout: 2000,
    enableAutoPipelining: pipelined,
    // Reconnect promptly: a replica rejoins the fleet as soon as Redis answers again.
    retryStrategy: (times) => Math.min(50 * times, 500),
    connectionName: name,
  };
}

export class StateConnection {
  readonly client: Redis;
  readonly subscriber: Redis;
  private readonly logger: Logger;
  private ready = false;
  private closed = false;
  private readonly upListeners: Array<() => void> = [];
  private readonly downListeners: Array<(reason: string) => void> = [];

  constructor(options: ConnectionOptions) {
    this.logger = options.logger;
    const timeout = options.commandTimeoutMs ?? 1000;
    this.client = new Redis(options.url, redisOptions(options.name, timeout, true));
    // The subscriber never runs commands with a timeout (SUBSCRIBE waits for messages).
    this.subscriber = new Redis(options.url, {
      ...redisOptions(`${options.name}:sub`, 0, false),
      commandTimeout: undefined,
    });
    defineScripts(this.client);
    this.client.on("ready", () => {
      this.ready = true;
      for (const listener of this.upListeners) listener();
    });
    this.client.on("close", () => this.down("the connection to Redis closed"));
    this.client.on("error", (err: Error) => this.down(err.message));
    this.subscriber.on("error", () => {});
  }

  get up(): boolean {
    return this.ready;
  }

  /** Connects both; resolves either way (a Redis that is down at start is a fallback, not a crash). */
  async start(): Promise<void> {
    await Promise.allSettled([this.client.connect(), this.subscriber.connect()]);
  }

  onUp(listener: () => void): void {
    this.upListeners.push(listener);
  }

  onDown(listener: (reason: string) => void): void {
    this.downListeners.push(listener);
  }

  /** A command failed as if Redis were away: treat it so until the connection is ready again. */
  failed(error: unknown): void {
    if (!isUnavailable(error) || this.closed) return;
    const wasReady = this.ready;
    this.down((error as Error).message ?? String(error));
    // A command that timed out on an open socket (Redis paused): reconnect, so that "ready" tells
    // when Redis answers again.
    if (wasReady) this.client.disconnect(true);
  }

  private down(reason: string): void {
    if (this.closed || !this.ready) return;
    this.ready = false;
    this.logger.debug({ reason }, "redis unavailable");
    for (const listener of this.downListeners) listener(reason);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.ready = false;
    this.client.disconnect();
    this.subscriber.disconnect();
  }
}

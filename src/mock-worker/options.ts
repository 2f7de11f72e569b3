/**
 * Public types of the mock worker and the defaults its options resolve to.
 */

export interface MockWorkerOptions {
  /** 0 = ephemeral (default 0). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 64; reported by /get_server_info; requests beyond it wait inside the worker (FIFO). */
  maxRunningRequests?: number;
  /** Default "mock-llm". */
  model?: string;
  /** Base time to first token, default 20. */
  ttftMs?: number;
  /** Base per-token delay (inter-token latency), default 5. */
  tokenDelayMs?: number;
  /**
   * Fraction added per extra running request, default 0.02:
   * effective delay = base * (1 + batchSlowdown * (running - 1)).
   */
  batchSlowdown?: number;
  /** Output length when the request gives none, default 16. */
  defaultMaxTokens?: number;
  /** Initial health, default true. */
  healthy?: boolean;
  /** Default true; false = /get_server_info omits max_running_requests (to test the 64 fallback). */
  reportCapacity?: boolean;
}

export interface MockWorkerStats {
  running: number;
  waiting: number;
  completed: number;
  aborted: number;
  totalRequests: number;
  peakRunning: number;
  lastRequestHeaders?: Record<string, string | string[] | undefined>;
  lastRequestBody?: string;
}

export interface MockWorker {
  /** e.g. http://127.0.0.1:40123 */
  readonly url: string;
  readonly port: number;
  /** /health answers 503 while unhealthy. */
  setHealthy(healthy: boolean): void;
  stats(): MockWorkerStats;
  /** Closes the server and all sockets promptly. */
  close(): Promise<void>;
}

export type ResolvedOptions = Required<MockWorkerOptions>;

export function resolveOptions(opts: MockWorkerOptions = {}): ResolvedOptions {
  const resolved: ResolvedOptions = {
    port: opts.port ?? 0,
    host: opts.host ?? "127.0.0.1",
    maxRunningRequests: opts.maxRunningRequests ?? 64,
    model: opts.model ?? "mock-llm",
    ttftMs: opts.ttftMs ?? 20,
    tokenDelayMs: opts.tokenDelayMs ?? 5,
    batchSlowdown: opts.batchSlowdown ?? 0.02,
    defaultMaxTokens: opts.defaultMaxTokens ?? 16,
    healthy: opts.healthy ?? true,
    reportCapacity: opts.reportCapacity ?? true,
  };
  if (!Number.isInteger(resolved.maxRunningRequests) || resolved.maxRunningRequests < 1) {
    throw new RangeError(`maxRunningRequests must be a positive integer, got ${resolved.maxRunningRequests}`);
  }
  if (!Number.isInteger(resolved.defaultMaxTokens) || resolved.defaultMaxTokens < 0) {
    throw new RangeError(`defaultMaxTokens must be a non-negative integer, got ${resolved.defaultMaxTokens}`);
  }
  for (const key of ["ttftMs", "tokenDelayMs", "batchSlowdown"] as const) {
    const v = resolved[key];
    if (!Number.isFinite(v) || v < 0) throw new RangeError(`${key} must be a non-negative number, got ${v}`);
  }
  return resolved;
}

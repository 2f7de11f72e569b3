/**
 * A ledger sink: where `usage` rows are stored. The writer (writer.ts) calls one method at a time;
 * a sink never sees two calls at once.
 */
import type { RecentUsage } from "./recent.js";
import type { LedgerRow } from "./row.js";

export interface LedgerSink {
  /** For logs: the target, without credentials. */
  readonly description: string;
  /**
   * Connects and creates the tables. Throws LedgerUnavailableError when the target cannot be used
   * now (a DuckDB file held by another process, a database that does not answer).
   */
  open(): Promise<void>;
  /**
   * Inserts the rows in one transaction: all or none. `retry` is set when this batch failed before;
   * the sink then leaves out rows already stored (the failure may have come after the commit), so a
   * retried batch never creates duplicates.
   */
  write(rows: readonly LedgerRow[], retry: boolean): Promise<void>;
  /** Recomputes the per-minute rollups of these minutes (epoch ms of each minute's start). */
  rollup(minutes: readonly number[]): Promise<void>;
  /**
   * Deletes up to `limit` rows older than `cutoffMs`, and the rollups older than it; returns how
   * many rows went (the writer calls again while that is `limit`).
   */
  retain(cutoffMs: number, limit: number): Promise<number>;
  /**
   * The rollups of the minutes from `sinceMs` on (the dashboard's last hour). Optional: a sink of
   * an embedder's own may have no rollups to read.
   */
  readRecent?(sinceMs: number): Promise<RecentUsage>;
  /** Succeeds when the sink answers a trivial query (tells a bad batch from a sink that is down). */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** The sink cannot be used now; `advice` says what to do about it. */
export class LedgerUnavailableError extends Error {
  constructor(
    message: string,
    readonly advice: string,
  ) {
    super(message);
    this.name = "LedgerUnavailableError";
  }
}

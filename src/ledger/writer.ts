/**
 * The ledger writer: the gateway's outcome sink in front of a ledger sink. The request path only
 * pushes a row into a bounded buffer; batches are written in the background, one at a time.
 *
 * - Buffer: at most `bufferRows` rows (10,000) wait; past that a row is dropped, counted in
 *   sluice_ledger_dropped_rows_total{reason="buffer_full"} and logged once per interval.
 * - Flush: every `flushIntervalMs` (200 ms), and at once when `batchRows` (1,000) rows wait; a
 *   write takes up to `maxBatchRows` (5,000) rows, so a backlog drains in big batches. Rows that
 *   arrive during a write wait for the next period unless a full batch does: a busy gateway
 *   commits a few times a second, not once per handful of rows (a commit's fixed cost dominates
 *   small batches: ~40 µs a row at 7,000 rows/s in batches of ~50, ~8 µs in batches of 1,000).
 * - A failed batch stays at the head and is retried with backoff (200 ms doubling to 5 s), marked as
 *   a retry so the sink inserts nothing twice. After `maxAttempts` (5) failures, a sink that still
 *   answers a ping is refusing this batch: it is dropped (reason="write_failed"). A sink that does
 *   not answer is down: the batch waits, bounded by the buffer.
 * - A sink that cannot be opened (a DuckDB file another process holds, PostgreSQL down) is logged
 *   once with what to do, and opened again every `reopenIntervalMs` (10 s); rows buffer meanwhile.
 * - Rollups of the minutes written to are recomputed every `rollupIntervalMs` (10 s), once each
 *   minute has ended; retention deletes rows older than `retentionDays` at open and every
 *   `retentionIntervalMs` (1 h), 50,000 rows per statement so writes go on in between.
 * - close() writes everything buffered (within `closeTimeoutMs`, 10 s), the last rollups, and
 *   closes the sink; rows it could not write are dropped (reason="shutdown") and logged.
 * - recentUsage() (the dashboard's last hour) answers from a cache, and reads the rollups again in
 *   the background when the cache is a rollup period old: never on the caller's path, at most once
 *   per `rollupIntervalMs` (the rollups change no faster), one sink call at a time like the rest.
 */
import type { Logger } from "pino";
import { Counter, Gauge, type Registry } from "prom-client";
import type { OutcomeRecord, OutcomeSink } from "../contracts/outcome.js";
import { defaultReplicaId } from "../contracts/replica-id.js";
import { RECENT_SPAN_MS, type RecentUsage } from "./recent.js";
import { type LedgerRow, minuteOf, TS_MS, toLedgerRow } from "./row.js";
import { type LedgerSink, LedgerUnavailableError } from "./sink.js";
import { DEFAULT_RETENTION_DAYS, type LedgerTarget } from "./target.js";

export interface LedgerOptions {
  target: LedgerTarget;
  /** Rows older than this many days are deleted, both tables (default 30). */
  retentionDays?: number | undefined;
  /** This replica's id in the `replica` column: `--replica-id`, by default `hostname-pid`. */
  replica?: string | undefined;
  /** Rows that may wait for the sink (default 10,000); past it rows are dropped and counted. */
  bufferRows?: number | undefined;
  /** Rows waiting that start a flush at once (default 1,000). */
  batchRows?: number | undefined;
  /** Largest batch one write takes (default 5,000). */
  maxBatchRows?: number | undefined;
  /** Flush period (default 200 ms). */
  flushIntervalMs?: number | undefined;
  /** Rollup period (default 10 s). */
  rollupIntervalMs?: number | undefined;
  /** Retention period (default 1 h). */
  retentionIntervalMs?: number | undefined;
  /** Time between attempts to open a sink that could not be opened (default 10 s). */
  reopenIntervalMs?: number | undefined;
  /** Time close() may spend writing what is buffered (default 10 s). */
  closeTimeoutMs?: number | undefined;
  /** At most one "rows dropped" log line per this period (default 10 s). */
  dropLogIntervalMs?: number | undefined;
  /** Failed attempts before a batch the sink refuses is dropped (default 5). */
  maxAttempts?: number | undefined;
}

export const LEDGER_DEFAULTS = {
  retentionDays: DEFAULT_RETENTION_DAYS,
  bufferRows: 10_000,
  batchRows: 1_000,
  maxBatchRows: 5_000,
  flushIntervalMs: 200,
  rollupIntervalMs: 10_000,
  retentionIntervalMs: 3_600_000,
  reopenIntervalMs: 10_000,
  closeTimeoutMs: 10_000,
  dropLogIntervalMs: 10_000,
  maxAttempts: 5,
} as const;

export const LEDGER_METRIC_NAMES = {
  rows: "sluice_ledger_rows_total",
  dropped: "sluice_ledger_dropped_rows_total",
  buffer: "sluice_ledger_buffer_rows",
  up: "sluice_ledger_up",
} as const;

type DropReason = "buffer_full" | "write_failed" | "shutdown";
const DROP_REASONS: readonly DropReason[] = ["buffer_full", "write_failed", "shutdown"];

const BACKOFF_BASE_MS = 200;
const BACKOFF_MAX_MS = 5_000;
/** Minutes recomputed per rollup statement. */
const ROLLUP_CHUNK = 120;
/** A minute's rollup waits this long after the minute ends, for the rows still being written. */
const ROLLUP_GRACE_MS = 5_000;
/** Rows one retention statement deletes at most. */
const RETENTION_SLICE = 50_000;

function errorMessage(err: unknown): string {
  const e = err as Error & { errors?: Error[]; code?: string };
  return e?.message || e?.errors?.[0]?.message || e?.code || String(err);
}

const sleep = (ms: number) =>
  new Promise<void>((resolve) => {
    setTimeout(resolve, Math.max(0, ms));
  });

/** `promise`, or undefined once `ms` have passed. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), Math.max(0, ms));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export interface LedgerStats {
  open: boolean;
  buffered: number;
  written: number;
  dropped: number;
}

/** The ledger's state for the admin status and the dashboard. */
export interface LedgerStatus {
  /** The target, without credentials. */
  sink: string;
  /** Open and its last write succeeded (sluice_ledger_up). */
  up: boolean;
  buffered_rows: number;
  written_rows: number;
  dropped_rows: number;
}

/** The last read of the rollups: what it found (undefined before the first), and why the last one failed. */
export interface RecentUsageRead {
  usage: RecentUsage | undefined;
  /** When `usage` was read, epoch ms. */
  readAtMs: number | undefined;
  /** The last read's error, when it failed (the sink cannot read rollups, or it is down). */
  error: string | undefined;
}

export class LedgerWriter implements OutcomeSink {
  readonly replica: string;
  readonly description: string;
  private readonly o: Required<Omit<LedgerOptions, "target" | "replica">>;
  private buffer: LedgerRow[] = [];
  private opened = false;
  private closing = false;
  private closed = false;
  private closePromise: Promise<void> | undefined;
  private opening: Promise<void> | undefined;
  private pumping: Promise<boolean> | undefined;
  private kicked = false;
  private attempts = 0;
  private retryAt = 0;
  private readonly dirty = new Set<number>();
  private lock: Promise<unknown> = Promise.resolve();
  private readonly timers: NodeJS.Timeout[] = [];
  private reopenTimer: NodeJS.Timeout | undefined;
  private openFailureLogged = false;
  private retaining = false;
  private rollupFailureLogged = false;
  private dropsUnlogged = new Map<DropReason, number>();
  private lastDropLog = Number.NEGATIVE_INFINITY;
  private written = 0;
  private droppedTotal = 0;
  private recent: RecentUsageRead = { usage: undefined, readAtMs: undefined, error: undefined };
  private recentAttemptAt = Number.NEGATIVE_INFINITY;
  private recentReading = false;
  private readonly rowsCounter: Counter | undefined;
  private readonly droppedCounter: Counter<"reason"> | undefined;

  constructor(
    private readonly sink: LedgerSink,
    options: Omit<LedgerOptions, "target">,
    private readonly logger: Logger,
    registry?: Registry,
  ) {
    const defined = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
    this.o = { ...LEDGER_DEFAULTS, ...defined } as Required<Omit<LedgerOptions, "target" | "replica">>;
    this.replica = options.replica ?? defaultReplicaId();
    this.description = sink.description;
    if (registry !== undefined) {
      const registers = [registry];
      this.rowsCounter = new Counter({
        name: LEDGER_METRIC_NAMES.rows,
        help: "Ledger rows written to the sink.",
        registers,
      });
      this.droppedCounter = new Counter({
        name: LEDGER_METRIC_NAMES.dropped,
        help: "Ledger rows dropped: buffer_full (the sink is slow or down), write_failed (the sink refused a batch), shutdown (not written by close).",
        labelNames: ["reason"],
        registers,
      });
      for (const reason of DROP_REASONS) this.droppedCounter.inc({ reason }, 0);
      const self = this;
      new Gauge({
        name: LEDGER_METRIC_NAMES.buffer,
        help: "Ledger rows waiting for the sink.",
        registers,
        collect() {
          this.set(self.buffer.length);
        },
      });
      new Gauge({
        name: LEDGER_METRIC_NAMES.up,
        help: "1 when the ledger sink is open and its last write succeeded, else 0.",
        registers,
        collect() {
          this.set(self.up ? 1 : 0);
        },
      });
    }
  }

  /** Opens the sink in the background and starts the flush, rollup and retention timers. */
  start(): void {
    void this.tryOpen();
    const every = (ms: number, fn: () => void) => {
      const timer = setInterval(fn, ms);
      timer.unref();
      this.timers.push(timer);
    };
    every(this.o.flushIntervalMs, () => {
      void this.pump();
      this.logDrops(false);
    });
    every(this.o.rollupIntervalMs, () => void this.rollup());
    every(this.o.retentionIntervalMs, () => void this.retain());
  }

  /** The outcome sink: O(1), never waits, never throws. */
  record(outcome: OutcomeRecord): void {
    if (this.closed) {
      this.drop(1, "shutdown");
      return;
    }
    if (this.buffer.length >= this.o.bufferRows) {
      this.drop(1, "buffer_full");
      return;
    }
    this.buffer.push(toLedgerRow(outcome, this.replica));
    if (this.buffer.length >= this.o.batchRows) this.kick();
  }

  stats(): LedgerStats {
    return {
      open: this.opened,
      buffered: this.buffer.length,
      written: this.written,
      dropped: this.droppedTotal,
    };
  }

  status(): LedgerStatus {
    return {
      sink: this.description,
      up: this.up,
      buffered_rows: this.buffer.length,
      written_rows: this.written,
      dropped_rows: this.droppedTotal,
    };
  }

  /**
   * The last hour of rollups as last read, at once. When that read is a rollup period old (or
   * flush() wrote since), a new read starts in the background; its result is there for a later call.
   */
  recentUsage(): RecentUsageRead {
    const due = Date.now() - this.recentAttemptAt >= this.o.rollupIntervalMs;
    if (due && !this.recentReading && this.opened && !this.closing) void this.readRecent();
    return this.recent;
  }

  private async readRecent(): Promise<void> {
    const sink = this.sink;
    this.recentReading = true;
    this.recentAttemptAt = Date.now();
    try {
      if (sink.readRecent === undefined)
        throw new Error(`the ledger ${this.description} has no rollups to read`);
      const sinceMs = minuteOf(Date.now() - RECENT_SPAN_MS) + 60_000;
      const usage = await this.exclusive(() => sink.readRecent!(sinceMs));
      this.recent = { usage, readAtMs: Date.now(), error: undefined };
    } catch (err) {
      this.recent = { ...this.recent, error: errorMessage(err) };
    } finally {
      this.recentReading = false;
    }
  }

  private get up(): boolean {
    return this.opened && this.attempts === 0;
  }

  /**
   * Writes everything buffered now and the rollups of what was written; rejects when the sink is
   * not open or a write failed (the rows stay buffered).
   */
  async flush(): Promise<void> {
    if (this.opening !== undefined) await this.opening;
    if (!this.opened) throw new Error(`the ledger ${this.description} is not open`);
    await this.pumping;
    this.retryAt = 0;
    if (!(await this.pump(true))) throw new Error(`the ledger ${this.description} could not write every row`);
    await this.rollup(true);
    // The rollups just changed: the next recentUsage() reads them again.
    this.recentAttemptAt = Number.NEGATIVE_INFINITY;
  }

  /** Writes what is buffered (within closeTimeoutMs), the last rollups, and closes the sink. */
  close(): Promise<void> {
    this.closePromise ??= this.shutdown();
    return this.closePromise;
  }

  // --- opening ---------------------------------------------------------------------------------

  private tryOpen(): Promise<void> {
    this.opening ??= this.exclusive(() => this.sink.open())
      .then(
        () => {
          this.opened = true;
          if (this.openFailureLogged) {
            this.logger.info({ ledger: this.description }, "ledger open: buffered rows are written now");
          } else {
            this.logger.info({ ledger: this.description, replica: this.replica }, "ledger open");
          }
          this.kick();
          void this.retain();
        },
        (err: unknown) => this.openFailed(err),
      )
      .finally(() => {
        this.opening = undefined;
      });
    return this.opening;
  }

  private openFailed(err: unknown): void {
    const message = errorMessage(err);
    if (!this.openFailureLogged) {
      this.openFailureLogged = true;
      const advice = err instanceof LedgerUnavailableError ? `${err.advice}. ` : "";
      this.logger.warn(
        { ledger: this.description, err: message },
        `no ledger: ${message}. ${advice}Requests are served as usual; their ledger rows wait in a buffer ` +
          `of ${this.o.bufferRows} rows and past it are dropped (sluice_ledger_dropped_rows_total). ` +
          `Trying again every ${this.o.reopenIntervalMs / 1000} s.`,
      );
    } else {
      this.logger.debug({ ledger: this.description, err: message }, "ledger still unavailable");
    }
    if (!this.closing) {
      this.reopenTimer = setTimeout(() => void this.tryOpen(), this.o.reopenIntervalMs);
      this.reopenTimer.unref();
    }
  }

  // --- writing ---------------------------------------------------------------------------------

  private kick(): void {
    if (this.kicked || this.pumping !== undefined || !this.opened || this.closing) return;
    this.kicked = true;
    setImmediate(() => {
      this.kicked = false;
      void this.pump();
    });
  }

  /**
   * Starts writing (unless a write is under way or a retry is not due). `all`: until the buffer is
   * empty, true when it is. Otherwise what waits now, then more only while a full batch waits: rows
   * that arrive during a write wait for the next period rather than go out as many small commits.
   */
  private pump(all = false): Promise<boolean> {
    if (this.pumping !== undefined) return this.pumping;
    if (!this.opened || this.buffer.length === 0) return Promise.resolve(this.buffer.length === 0);
    if (Date.now() < this.retryAt) return Promise.resolve(false);
    this.pumping = this.drain(all).finally(() => {
      this.pumping = undefined;
    });
    return this.pumping;
  }

  /** Writes batches (see pump); false when a write failed and its batch stays for a retry. */
  private async drain(all: boolean): Promise<boolean> {
    for (let first = true; this.buffer.length > 0; first = false) {
      if (!first && !all && this.buffer.length < this.o.batchRows) break;
      const n = Math.min(this.buffer.length, this.o.maxBatchRows);
      const batch = this.buffer.slice(0, n);
      try {
        const retry = this.attempts > 0;
        await this.exclusive(() => this.sink.write(batch, retry));
      } catch (err) {
        if (await this.writeFailed(err, n)) continue;
        return false;
      }
      this.buffer.splice(0, n);
      this.written += n;
      this.rowsCounter?.inc(n);
      let last = Number.NaN;
      for (const row of batch) {
        const minute = minuteOf(row[TS_MS]);
        if (minute !== last) this.dirty.add(minute);
        last = minute;
      }
      if (this.attempts > 0) {
        this.logger.info(
          { ledger: this.description, attempts: this.attempts },
          "ledger writes resumed: the failed batch is written",
        );
        this.attempts = 0;
        this.retryAt = 0;
      }
    }
    return true;
  }

  /** True when the failed batch was dropped (go on with the next); false when it waits for a retry. */
  private async writeFailed(err: unknown, n: number): Promise<boolean> {
    this.attempts++;
    const message = errorMessage(err);
    if (this.attempts === 1) {
      this.logger.warn(
        { ledger: this.description, err: message, rows: n },
        `ledger write failed, retrying: ${message}`,
      );
    }
    if (this.attempts >= this.o.maxAttempts) {
      const answers = await this.exclusive(() => this.sink.ping()).then(
        () => true,
        () => false,
      );
      if (answers) {
        // The sink is up but refuses this batch: drop it rather than hold every later row behind it.
        this.buffer.splice(0, n);
        this.attempts = 0;
        this.retryAt = 0;
        this.drop(n, "write_failed");
        this.logger.error(
          { ledger: this.description, err: message, rows: n },
          `ledger batch dropped after ${this.o.maxAttempts} failed attempts: ${message}`,
        );
        return true;
      }
    }
    this.retryAt = Date.now() + Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (this.attempts - 1));
    return false;
  }

  private drop(n: number, reason: DropReason): void {
    this.droppedTotal += n;
    this.droppedCounter?.inc({ reason }, n);
    this.dropsUnlogged.set(reason, (this.dropsUnlogged.get(reason) ?? 0) + n);
    this.logDrops(false);
  }

  /** At most one line per dropLogIntervalMs (unless forced), with the drops since the last one. */
  private logDrops(force: boolean): void {
    if (this.dropsUnlogged.size === 0) return;
    const now = Date.now();
    if (!force && now - this.lastDropLog < this.o.dropLogIntervalMs) return;
    const byReason = Object.fromEntries(this.dropsUnlogged);
    const total = [...this.dropsUnlogged.values()].reduce((a, b) => a + b, 0);
    this.dropsUnlogged = new Map();
    this.lastDropLog = now;
    this.logger.warn(
      { ledger: this.description, dropped: byReason, bufferRows: this.o.bufferRows },
      `ledger dropped ${total} rows (${Object.entries(byReason)
        .map(([r, c]) => `${r}: ${c}`)
        .join(", ")}); see sluice_ledger_dropped_rows_total`,
    );
  }

  // --- rollups and retention ---------------------------------------------------------------------

  /**
   * Recomputes the rollups of the minutes written to. On the period only minutes that ended (by
   * ROLLUP_GRACE_MS) are done, so each minute is computed about once, not every period while it
   * fills; flush() and close() do all of them (`all`).
   */
  private async rollup(all = false): Promise<void> {
    if (!this.opened || this.dirty.size === 0) return;
    const ended = all ? Number.POSITIVE_INFINITY : Date.now() - 60_000 - ROLLUP_GRACE_MS;
    const minutes = [...this.dirty].filter((m) => m <= ended).sort((a, b) => a - b);
    for (const m of minutes) this.dirty.delete(m);
    for (let i = 0; i < minutes.length; i += ROLLUP_CHUNK) {
      const chunk = minutes.slice(i, i + ROLLUP_CHUNK);
      try {
        await this.exclusive(() => this.sink.rollup(chunk));
        this.rollupFailureLogged = false;
      } catch (err) {
        for (const m of minutes.slice(i)) this.dirty.add(m);
        if (!this.rollupFailureLogged) {
          this.rollupFailureLogged = true;
          this.logger.warn(
            { ledger: this.description, err: errorMessage(err) },
            "ledger rollup failed; retrying on the next period",
          );
        }
        return;
      }
    }
  }

  /** Deletes old rows a slice at a time: a large first deletion never holds writes back for long. */
  private async retain(): Promise<void> {
    if (!this.opened || this.retaining) return;
    this.retaining = true;
    const cutoff = Date.now() - this.o.retentionDays * 86_400_000;
    let rows = 0;
    try {
      for (;;) {
        const n = await this.exclusive(() => this.sink.retain(cutoff, RETENTION_SLICE));
        rows += n;
        if (n < RETENTION_SLICE || this.closing) break;
      }
    } catch (err) {
      this.logger.warn({ ledger: this.description, err: errorMessage(err) }, "ledger retention failed");
    } finally {
      this.retaining = false;
      if (rows > 0) {
        this.logger.info(
          { ledger: this.description, rows, retentionDays: this.o.retentionDays },
          "ledger retention deleted old rows",
        );
      }
    }
  }

  // --- shutdown ----------------------------------------------------------------------------------

  private async shutdown(): Promise<void> {
    this.closing = true;
    for (const timer of this.timers) clearInterval(timer);
    clearTimeout(this.reopenTimer);
    const deadline = Date.now() + this.o.closeTimeoutMs;
    const left = () => deadline - Date.now();
    if (this.opening !== undefined) await within(this.opening, left());
    // One last chance for a sink that was unavailable (say, the other process let go of the file).
    if (!this.opened && this.buffer.length > 0 && left() > 0) await within(this.tryOpen(), left());
    if (this.pumping !== undefined) await within(this.pumping, left());
    if (this.opened) {
      while (this.buffer.length > 0 && left() > 0) {
        this.retryAt = 0;
        const done = await within(this.pump(true), left());
        if (done === true) break;
        if (done === undefined) break;
        await sleep(Math.min(left(), BACKOFF_BASE_MS * 2 ** Math.max(0, this.attempts - 1)));
      }
    }
    // Anything recorded from here on is counted as dropped at once.
    this.closed = true;
    const unwritten = this.buffer.length;
    if (unwritten > 0) {
      this.buffer = [];
      this.drop(unwritten, "shutdown");
      this.logger.error(
        { ledger: this.description, rows: unwritten },
        `ledger: ${unwritten} rows could not be written before shutdown`,
      );
    }
    this.logDrops(true);
    if (this.opened && left() > 0) await within(this.rollup(true), left());
    await within(
      this.sink.close().catch((err: unknown) => {
        this.logger.warn({ ledger: this.description, err: errorMessage(err) }, "ledger close failed");
      }),
      Math.max(left(), 1000),
    );
    this.opened = false;
  }

  /** Runs sink calls one at a time. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn);
    this.lock = run.catch(() => {});
    return run;
  }
}

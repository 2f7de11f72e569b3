/**
 * The embedded ledger: a DuckDB file, written from a worker thread (duckdb-worker.ts) so the
 * appender's synchronous work and the commit's fsync never run on the gateway's event loop.
 *
 * DuckDB lets one process open a file for writing. A gateway that finds its file held by another
 * process still starts and serves; the writer logs why it has no ledger and what to do about it.
 */
import { Worker } from "node:worker_threads";
import type { RecentUsage } from "./recent.js";
import type { LedgerRow } from "./row.js";
import { type LedgerSink, LedgerUnavailableError } from "./sink.js";

export type WorkerRequest =
  | { id: number; op: "open" }
  | { id: number; op: "write"; rows: readonly LedgerRow[]; retry: boolean }
  | { id: number; op: "rollup"; minutes: readonly number[] }
  | { id: number; op: "retain"; cutoffMs: number; limit: number }
  | { id: number; op: "recent"; sinceMs: number }
  | { id: number; op: "ping" }
  | { id: number; op: "close" };

type Op = WorkerRequest extends infer R ? (R extends { id: number } ? Omit<R, "id"> : never) : never;

export type WorkerReply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; message: string };

/**
 * DuckDB settings of the gateway's embedded instance: a ledger must not take the gateway's machine
 * (DuckDB's defaults are every core and 80% of memory); big aggregations spill to disk instead. A
 * checkpoint every 64 MB of WAL (DuckDB's default is 16 MB) rewrites partly filled row groups less
 * often (+15-20% rows/s in bench/ledger.bench.ts) and keeps a replay after a crash short.
 */
const DUCKDB_GATEWAY_CONFIG: Record<string, string> = {
  threads: "2",
  memory_limit: "512MB",
  checkpoint_threshold: "64MB",
};

/** Who holds a DuckDB file, from DuckDB's lock error ("Conflicting lock is held in X (PID n)"). */
export function lockHolder(message: string): string | undefined {
  if (!/Could not set lock on file/i.test(message)) return undefined;
  const m = /Conflicting lock is held in (.*?) \(PID (\d+)\)/.exec(message);
  return m === null ? "another process" : `${m[1]} (PID ${m[2]})`;
}

/** Starts a worker on this module's sibling; under tsx (tests, `npm start`) it registers tsx first. */
function startWorker(workerData: unknown): Worker {
  const here = import.meta.url;
  if (here.endsWith(".ts")) {
    const file = new URL("./duckdb-worker.ts", here).href;
    const tsx = import.meta.resolve("tsx/esm/api");
    const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(file)}); })`;
    return new Worker(boot, { eval: true, workerData });
  }
  return new Worker(new URL("./duckdb-worker.js", here), { workerData });
}

export class DuckDbSink implements LedgerSink {
  readonly description: string;
  private worker: Worker | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();

  constructor(
    readonly path: string,
    private readonly config: Record<string, string> = DUCKDB_GATEWAY_CONFIG,
  ) {
    this.description = `duckdb:${path}`;
  }

  async open(): Promise<void> {
    if (this.worker === undefined) this.spawn();
    try {
      await this.call({ op: "open" });
    } catch (err) {
      await this.stop();
      const message = (err as Error).message;
      const holder = lockHolder(message);
      if (holder !== undefined) {
        throw new LedgerUnavailableError(
          `the DuckDB file ${this.path} is held by ${holder}`,
          "DuckDB lets one process write a file: give each replica its own file " +
            "(--ledger duckdb:sluice-ledger-<replica>.duckdb) or share a PostgreSQL ledger (--ledger postgres://...)",
        );
      }
      throw new LedgerUnavailableError(
        `cannot open the DuckDB file ${this.path}: ${message}`,
        "check that its directory exists and is writable, or choose another path with --ledger duckdb:PATH",
      );
    }
  }

  async write(rows: readonly LedgerRow[], retry: boolean): Promise<void> {
    await this.ready();
    await this.call({ op: "write", rows, retry });
  }

  async rollup(minutes: readonly number[]): Promise<void> {
    await this.ready();
    await this.call({ op: "rollup", minutes });
  }

  async retain(cutoffMs: number, limit: number): Promise<number> {
    await this.ready();
    return (await this.call({ op: "retain", cutoffMs, limit })) as number;
  }

  /** Read in the thread that holds the file: DuckDB lets one instance open it. */
  async readRecent(sinceMs: number): Promise<RecentUsage> {
    await this.ready();
    return (await this.call({ op: "recent", sinceMs })) as RecentUsage;
  }

  async ping(): Promise<void> {
    await this.ready();
    await this.call({ op: "ping" });
  }

  async close(): Promise<void> {
    if (this.worker === undefined) return;
    try {
      await this.call({ op: "close" });
    } finally {
      await this.stop();
    }
  }

  /** A worker that died (it should not) is started again and reopens the file. */
  private async ready(): Promise<void> {
    if (this.worker === undefined) await this.open();
  }

  private spawn(): void {
    const worker = startWorker({ path: this.path, config: this.config });
    // Referenced only while a request is pending: an idle ledger never keeps the process alive, and
    // a pending flush (at shutdown) always does.
    worker.unref();
    worker.on("message", (reply: WorkerReply) => {
      const waiter = this.pending.get(reply.id);
      if (waiter === undefined) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      if (reply.ok) waiter.resolve(reply.value);
      else waiter.reject(new Error(reply.message));
    });
    const gone = (err: Error) => {
      if (this.worker === worker) this.worker = undefined;
      for (const waiter of this.pending.values()) waiter.reject(err);
      this.pending.clear();
    };
    worker.on("error", gone);
    worker.on("exit", (code) => gone(new Error(`the DuckDB ledger thread exited (${code})`)));
    this.worker = worker;
  }

  private call(op: Op): Promise<unknown> {
    const worker = this.worker;
    if (worker === undefined) return Promise.reject(new Error("the DuckDB ledger is not open"));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) worker.ref();
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ ...op, id });
    });
  }

  private async stop(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (worker !== undefined) await worker.terminate();
  }
}

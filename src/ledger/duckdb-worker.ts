/**
 * The DuckDB sink's thread. DuckDB's appender (its fastest write path) is synchronous and commits
 * with a WAL fsync; here it runs off the gateway's event loop. The gateway posts batches of row
 * tuples (a structured clone of ~0.3 µs a row) and gets one answer per request, in order.
 */
import { parentPort, workerData } from "node:worker_threads";
import { type DuckDBAppender, type DuckDBConnection, DuckDBInstance } from "@duckdb/node-api";
import type { WorkerReply, WorkerRequest } from "./duckdb.js";
import { recentUsageFromRows, recentUsageStatements } from "./recent.js";
import { type LedgerRow, TS_MS, USAGE_COLUMNS } from "./row.js";
import { dedupInsertSql, retentionStatements, rollupStatements, schemaStatements } from "./sql.js";

const { path, config } = workerData as { path: string; config: Record<string, string> };
let instance: DuckDBInstance | undefined;
let connection: DuckDBConnection | undefined;

const TYPES = USAGE_COLUMNS.map((c) => c.type);

function append(appender: DuckDBAppender, rows: readonly LedgerRow[]): void {
  for (const row of rows) {
    for (let i = 0; i < TYPES.length; i++) {
      const v = row[i];
      if (v === null || v === undefined) appender.appendNull();
      else if (typeof v === "string") appender.appendVarchar(v);
      else if (TYPES[i] === "integer") appender.appendInteger(v);
      // BIGINT columns too: the appender casts, and a double holds every integer a row carries
      // exactly (toLedgerRow rounds them), without a BigInt per value.
      else appender.appendDouble(v);
    }
    appender.endRow();
  }
  appender.flushSync();
}

async function appendTo(conn: DuckDBConnection, rows: readonly LedgerRow[], temp: boolean): Promise<void> {
  const appender = temp
    ? await conn.createAppender("staging", "main", "temp")
    : await conn.createAppender("usage");
  try {
    append(appender, rows);
  } finally {
    try {
      appender.closeSync();
    } catch {
      // The flush already failed and said why.
    }
  }
}

async function transaction(conn: DuckDBConnection, statements: string[]): Promise<void> {
  await conn.run("BEGIN TRANSACTION");
  try {
    for (const sql of statements) await conn.run(sql);
    await conn.run("COMMIT");
  } catch (err) {
    await conn.run("ROLLBACK").catch(() => {});
    throw err;
  }
}

async function deleted(conn: DuckDBConnection, sql: string): Promise<number> {
  const result = await conn.runAndReadAll(sql);
  const first = result.getRows()[0]?.[0];
  return typeof first === "bigint" || typeof first === "number" ? Number(first) : 0;
}

function conn(): DuckDBConnection {
  if (connection === undefined) throw new Error("the DuckDB ledger is not open");
  return connection;
}

async function handle(request: WorkerRequest): Promise<unknown> {
  switch (request.op) {
    case "open": {
      if (connection !== undefined) return undefined;
      const db = await DuckDBInstance.create(path, config);
      try {
        const c = await db.connect();
        for (const sql of schemaStatements("duckdb")) await c.run(sql);
        await c.run("CREATE TEMP TABLE IF NOT EXISTS staging AS SELECT * FROM usage LIMIT 0");
        instance = db;
        connection = c;
      } catch (err) {
        db.closeSync();
        throw err;
      }
      return undefined;
    }
    case "write": {
      const c = conn();
      const rows = request.rows;
      if (rows.length === 0) return undefined;
      if (!request.retry) {
        await appendTo(c, rows, false);
        return undefined;
      }
      // A retried batch: stage it, then insert only the rows `usage` does not have yet.
      let lo = Number.POSITIVE_INFINITY;
      let hi = Number.NEGATIVE_INFINITY;
      for (const row of rows) {
        lo = Math.min(lo, row[TS_MS]);
        hi = Math.max(hi, row[TS_MS]);
      }
      try {
        await appendTo(c, rows, true);
        await c.run(dedupInsertSql("temp.main.staging", lo, hi));
      } finally {
        await c.run("DELETE FROM temp.main.staging");
      }
      return undefined;
    }
    case "rollup":
      await transaction(conn(), rollupStatements("duckdb", request.minutes));
      return undefined;
    case "retain": {
      const c = conn();
      const sql = retentionStatements("duckdb", request.cutoffMs, request.limit);
      const rows = await deleted(c, sql.usage);
      await c.run(sql.rollup);
      return rows;
    }
    case "recent": {
      const c = conn();
      const sql = recentUsageStatements("duckdb", request.sinceMs);
      const minutes = (await c.runAndReadAll(sql.minutes)).getRows();
      const tenants = (await c.runAndReadAll(sql.tenants)).getRows();
      return recentUsageFromRows(request.sinceMs, minutes, tenants);
    }
    case "ping":
      await conn().run("SELECT 1");
      return undefined;
    case "close":
      connection?.closeSync();
      instance?.closeSync();
      connection = undefined;
      instance = undefined;
      return undefined;
  }
}

const port = parentPort!;
let chain: Promise<void> = Promise.resolve();
port.on("message", (request: WorkerRequest) => {
  chain = chain.then(async () => {
    let reply: WorkerReply;
    try {
      reply = { id: request.id, ok: true, value: await handle(request) };
    } catch (err) {
      reply = { id: request.id, ok: false, message: (err as Error).message };
    }
    port.postMessage(reply);
  });
});

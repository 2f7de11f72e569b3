/**
 * The shared ledger: PostgreSQL, for several replicas (each row names its replica). A batch is one
 * `INSERT ... SELECT FROM unnest(<one array per column>) ON CONFLICT (sluice_request_id) DO NOTHING`:
 * one parameter per column whatever the batch size, one round trip, and the unique gateway-made id
 * makes a retried batch insert nothing twice, while requests that share a client's X-Request-Id are
 * a row each.
 *
 * The URL may choose a schema: `postgres://u@h/db?options=-c%20search_path%3Dledger`.
 */
import pg from "pg";
import { type RecentUsage, recentUsageFromRows, recentUsageStatements } from "./recent.js";
import type { LedgerRow } from "./row.js";
import { USAGE_COLUMNS } from "./row.js";
import { type LedgerSink, LedgerUnavailableError } from "./sink.js";
import { retentionStatements, rollupStatements, schemaStatements, sqlType } from "./sql.js";
import { redactUrl } from "./target.js";

const INSERT_SQL =
  `INSERT INTO usage (${USAGE_COLUMNS.map((c) => c.name).join(", ")}) SELECT * FROM unnest(` +
  USAGE_COLUMNS.map((c, i) => `$${i + 1}::${sqlType("postgres", c.type)}[]`).join(", ") +
  ") ON CONFLICT (sluice_request_id) DO NOTHING";

/** A PostgreSQL or connection error as one line (Node's AggregateError of a refused connect has none). */
export function pgErrorMessage(err: unknown): string {
  const e = err as Error & { code?: string; errors?: Error[] };
  if (e.message) return e.message;
  const inner = e.errors?.[0] as (Error & { code?: string }) | undefined;
  return inner?.message || e.code || inner?.code || String(err);
}

interface PostgresSinkOptions {
  /** Client-side limit on one statement (default 30 s): a hung server cannot hold the writer forever. */
  queryTimeoutMs?: number;
  connectTimeoutMs?: number;
}

export class PostgresSink implements LedgerSink {
  readonly description: string;
  private readonly pool: pg.Pool;

  constructor(url: string, options: PostgresSinkOptions = {}) {
    this.description = redactUrl(url);
    this.pool = new pg.Pool({
      connectionString: url,
      max: 1,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
      query_timeout: options.queryTimeoutMs ?? 30_000,
      idleTimeoutMillis: 30_000,
      application_name: "sluice-ledger",
    });
    // An idle connection that breaks is dropped by the pool; the next write reconnects.
    this.pool.on("error", () => {});
  }

  async open(): Promise<void> {
    try {
      // Replicas starting together must not race on CREATE TABLE IF NOT EXISTS.
      await this.transaction("sluice_ledger_schema", schemaStatements("postgres"));
    } catch (err) {
      throw new LedgerUnavailableError(
        `cannot use the PostgreSQL ledger ${this.description}: ${pgErrorMessage(err)}`,
        "check that the server is up and that the URL's user may create tables in its schema " +
          "(the ledger creates usage and usage_minute)",
      );
    }
  }

  async write(rows: readonly LedgerRow[]): Promise<void> {
    if (rows.length === 0) return;
    const columns = USAGE_COLUMNS.map((_, i) => rows.map((row) => row[i]));
    await this.pool.query({ name: "sluice_ledger_insert", text: INSERT_SQL, values: columns });
  }

  async rollup(minutes: readonly number[]): Promise<void> {
    // Serialized across replicas: each recomputation sees every row committed before it started.
    await this.transaction("usage_minute", rollupStatements("postgres", minutes));
  }

  async retain(cutoffMs: number, limit: number): Promise<number> {
    const sql = retentionStatements("postgres", cutoffMs, limit);
    const result = await this.pool.query(sql.usage);
    await this.pool.query(sql.rollup);
    return result.rowCount ?? 0;
  }

  async readRecent(sinceMs: number): Promise<RecentUsage> {
    const sql = recentUsageStatements("postgres", sinceMs);
    const minutes = await this.pool.query({ text: sql.minutes, rowMode: "array" });
    const tenants = await this.pool.query({ text: sql.tenants, rowMode: "array" });
    return recentUsageFromRows(sinceMs, minutes.rows as unknown[][], tenants.rows as unknown[][]);
  }

  async ping(): Promise<void> {
    await this.pool.query("SELECT 1");
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  /** Runs the statements in one transaction holding an advisory lock named `lock` (per schema). */
  private async transaction(lock: string, statements: string[]): Promise<void> {
    const client = await this.pool.connect();
    let broken = false;
    try {
      await client.query("BEGIN");
      await client.query("SELECT pg_advisory_xact_lock(hashtext(current_schema() || $1))", [`.${lock}`]);
      for (const sql of statements) await client.query(sql);
      await client.query("COMMIT");
    } catch (err) {
      await client.query("ROLLBACK").catch(() => {
        broken = true;
      });
      throw err;
    } finally {
      client.release(broken);
    }
  }
}

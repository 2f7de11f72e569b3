/**
 * Reading the ledger, for `sluice ledger query` and `sluice report`: any SQL against a DuckDB file
 * (opened read-only) or PostgreSQL (a read-only session). Values come back as plain JSON values:
 * integers that fit as numbers, the rest as strings, timestamps as ISO strings.
 */
import { copyFile, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { DuckDBInstance } from "@duckdb/node-api";
import pg from "pg";
import { lockHolder } from "./duckdb.js";
import { pgErrorMessage } from "./postgres.js";
import { type Dialect, TO_UNIX_TIMESTAMP_TEMP_MACRO } from "./sql.js";
import { describeTarget, type LedgerTarget } from "./target.js";

export type Cell = string | number | boolean | null | Cell[] | { [key: string]: Cell };

export interface QueryResult {
  columns: string[];
  rows: Cell[][];
}

export interface LedgerReader {
  readonly dialect: Dialect;
  readonly description: string;
  query(sql: string): Promise<QueryResult>;
  close(): Promise<void>;
}

/** A query the user can fix (bad SQL, a locked or missing file): printed as is, exit 1. */
class LedgerQueryError extends Error {
  override name = "LedgerQueryError";
}

export function plainValue(value: unknown): Cell {
  if (value === null || value === undefined) return null;
  if (typeof value === "bigint")
    return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString();
  if (typeof value === "number") return Number.isFinite(value) ? value : String(value);
  if (typeof value === "string" || typeof value === "boolean") return value;
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (Array.isArray(value)) return value.map(plainValue);
  if (typeof value === "object") {
    const out: Record<string, Cell> = {};
    for (const [k, v] of Object.entries(value)) out[k] = plainValue(v);
    return out;
  }
  return String(value);
}

interface ReaderOptions {
  /**
   * DuckDB only: when a running gateway holds the file, query a copy of it taken now (the file and
   * its WAL) instead of failing.
   */
  snapshot?: boolean;
}

export async function openLedgerReader(
  target: LedgerTarget,
  options: ReaderOptions = {},
): Promise<LedgerReader> {
  switch (target.kind) {
    case "duckdb":
      return openDuckDbReader(target.path, options.snapshot === true);
    case "postgres":
      return openPostgresReader(target.url);
    default:
      throw new LedgerQueryError(`there is no ledger to query (--ledger ${describeTarget(target)})`);
  }
}

async function openDuckDbReader(path: string, snapshot: boolean): Promise<LedgerReader> {
  try {
    await stat(path);
  } catch {
    throw new LedgerQueryError(
      `no ledger at ${path}: a gateway creates it when it starts with --ledger duckdb:${path}`,
    );
  }
  let instance: DuckDBInstance;
  let copyDir: string | undefined;
  try {
    instance = await DuckDBInstance.create(path, { access_mode: "READ_ONLY" });
  } catch (err) {
    const message = (err as Error).message;
    const holder = lockHolder(message);
    if (holder === undefined) throw new LedgerQueryError(`cannot open ${path}: ${message}`);
    if (!snapshot) {
      throw new LedgerQueryError(
        `the ledger ${path} is open in ${holder}, a running gateway most likely. DuckDB lets no other ` +
          "process open a file while one writes it. Query a copy taken now with --snapshot, stop that " +
          "gateway, or give the gateways a PostgreSQL ledger (--ledger postgres://...) to query while they run.",
      );
    }
    copyDir = await mkdtemp(join(tmpdir(), "sluice-ledger-"));
    const copy = join(copyDir, basename(path));
    try {
      await copyFile(path, copy);
      await copyFile(`${path}.wal`, `${copy}.wal`).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== "ENOENT") throw e;
      });
      instance = await DuckDBInstance.create(copy);
    } catch (e) {
      await rm(copyDir, { recursive: true, force: true });
      throw new LedgerQueryError(
        `cannot read a copy of ${path} (the gateway may have been checkpointing; try again): ${(e as Error).message}`,
      );
    }
  }
  const connection = await instance.connect();
  await connection.run(TO_UNIX_TIMESTAMP_TEMP_MACRO);
  return {
    dialect: "duckdb",
    description: `duckdb:${path}${copyDir === undefined ? "" : " (a copy taken now)"}`,
    async query(sql) {
      let result: Awaited<ReturnType<typeof connection.runAndReadAll>>;
      try {
        result = await connection.runAndReadAll(sql);
      } catch (err) {
        throw new LedgerQueryError((err as Error).message);
      }
      return { columns: result.columnNames(), rows: result.getRowsJS().map((row) => row.map(plainValue)) };
    },
    async close() {
      connection.closeSync();
      instance.closeSync();
      if (copyDir !== undefined) await rm(copyDir, { recursive: true, force: true });
    },
  };
}

/** int8 and numeric as numbers when they fit, else as their text. */
function numberOrText(text: string): number | string {
  const n = Number(text);
  return Number.isFinite(n) && (Number.isSafeInteger(n) || !/^-?\d+$/.test(text)) ? n : text;
}

async function openPostgresReader(url: string): Promise<LedgerReader> {
  const description = describeTarget({ kind: "postgres", url });
  const client = new pg.Client({
    connectionString: url,
    connectionTimeoutMillis: 10_000,
    application_name: "sluice-ledger-query",
    types: {
      getTypeParser: ((oid: number, format?: "text" | "binary") =>
        oid === 20 || oid === 1700
          ? numberOrText
          : pg.types.getTypeParser(oid, format ?? "text")) as typeof pg.types.getTypeParser,
    },
  });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.query("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY");
  } catch (err) {
    await client.end().catch(() => {});
    throw new LedgerQueryError(`cannot reach the PostgreSQL ledger ${description}: ${pgErrorMessage(err)}`);
  }
  return {
    dialect: "postgres",
    description,
    async query(sql) {
      let result: pg.QueryArrayResult | pg.QueryArrayResult[];
      try {
        result = (await client.query({ text: sql, rowMode: "array" })) as
          | pg.QueryArrayResult
          | pg.QueryArrayResult[];
      } catch (err) {
        throw new LedgerQueryError(pgErrorMessage(err));
      }
      // Several statements: the last one's result, as DuckDB does.
      const last = Array.isArray(result) ? result[result.length - 1]! : result;
      return {
        columns: (last.fields ?? []).map((f) => f.name),
        rows: (last.rows ?? []).map((row) => row.map(plainValue)),
      };
    },
    async close() {
      await client.end();
    },
  };
}

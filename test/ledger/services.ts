/**
 * The ledger tests' real parts: a DuckDB file in a temp dir, and PostgreSQL (DATABASE_URL, default
 * postgres://postgres@127.0.0.1:5432/test) in a schema of each test's own, dropped afterwards. A test
 * that needs PostgreSQL skips with the reason when it is unreachable, unless SLUICE_REQUIRE_SERVICES
 * is set (CI), where it fails.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { DuckDBInstance } from "@duckdb/node-api";
import pg from "pg";
import type { OutcomeRecord } from "../../src/contracts/outcome.js";
import { plainValue } from "../../src/ledger/query.js";

export const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export const ROOT = new URL("../../", import.meta.url).pathname;

/** A temp dir for this test, removed afterwards. */
export async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "sluice-ledger-test-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A URL whose connections use a fresh schema (created now, dropped after the test), or undefined
 * when PostgreSQL is unreachable and the test was skipped.
 */
export async function postgresSchema(t: TestContext): Promise<string | undefined> {
  const admin = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 3000 });
  admin.on("error", () => {});
  try {
    await admin.connect();
  } catch (err) {
    const e = err as Error & { errors?: Error[] };
    const reason = `PostgreSQL unreachable at ${DATABASE_URL}: ${e.message || e.errors?.[0]?.message}`;
    if (process.env.SLUICE_REQUIRE_SERVICES) throw new Error(`${reason} (SLUICE_REQUIRE_SERVICES is set)`);
    process.stdout.write(`# skipped: ${reason}\n`);
    t.skip(reason);
    return undefined;
  }
  const schema = `sluice_test_${randomBytes(6).toString("hex")}`;
  await admin.query(`CREATE SCHEMA ${schema}`);
  t.after(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  });
  const url = new URL(DATABASE_URL);
  url.searchParams.set("options", `-c search_path=${schema}`);
  return url.toString();
}

export type Row = Record<string, unknown>;

/** Rows of a query against PostgreSQL (int8 and numeric as numbers). */
export async function pgRows(url: string, sql: string): Promise<Row[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const result = await client.query(sql);
    return result.rows.map((row: Row) =>
      Object.fromEntries(
        Object.entries(row).map(([k, v]) => [
          k,
          typeof v === "string" && /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v,
        ]),
      ),
    );
  } finally {
    await client.end();
  }
}

/** Rows of a query against a DuckDB file, opened read-only for the query. */
export async function duckRows(path: string, sql: string): Promise<Row[]> {
  const instance = await DuckDBInstance.create(path, { access_mode: "READ_ONLY" });
  try {
    const connection = await instance.connect();
    const result = await connection.runAndReadAll(sql);
    const names = result.columnNames();
    const rows = result
      .getRowsJS()
      .map((row) => Object.fromEntries(row.map((v, i) => [names[i], plainValue(v)])));
    connection.closeSync();
    return rows;
  } finally {
    instance.closeSync();
  }
}

let seq = 0;

/** An outcome record with everything set; `overrides` on top. */
export function outcome(overrides: Partial<OutcomeRecord> = {}): OutcomeRecord {
  seq++;
  return {
    tsMs: Date.now(),
    requestId: `test-${process.pid}-${seq}`,
    tenantId: "auth:acme",
    model: "mock-llm",
    requestedClass: "default",
    effectiveClass: "default",
    admission: "fast",
    outcome: "ok",
    status: 200,
    errorCode: undefined,
    queueWaitMs: 0,
    ttftMs: 5,
    durationMs: 10,
    estimatedTokens: 7,
    inputTokens: 3,
    outputTokens: 4,
    costUsd: 0.000_002,
    worker: "http://127.0.0.1:1",
    ...overrides,
  };
}

/**
 * The ledger's SQL, per dialect: the two tables, the per-minute rollup and retention. Everything
 * else (the sinks' write paths, the report) builds on these.
 */
import { type ColumnType, USAGE_COLUMNS } from "./row.js";

export type Dialect = "duckdb" | "postgres";

const TYPES: Record<Dialect, Record<ColumnType, string>> = {
  duckdb: { bigint: "BIGINT", integer: "INTEGER", double: "DOUBLE", text: "VARCHAR" },
  postgres: { bigint: "bigint", integer: "integer", double: "double precision", text: "text" },
};

export function sqlType(dialect: Dialect, type: ColumnType): string {
  return TYPES[dialect][type];
}

/** `usage_minute`: one row per minute, tenant, class, admission, outcome and error code. */
const ROLLUP_COLUMNS: ReadonlyArray<{ name: string; type: ColumnType; notNull?: boolean }> = [
  { name: "minute_ms", type: "bigint", notNull: true },
  { name: "tenant_id", type: "text", notNull: true },
  { name: "effective_class", type: "text" },
  { name: "admission", type: "text", notNull: true },
  { name: "outcome", type: "text", notNull: true },
  { name: "error_code", type: "text" },
  { name: "requests", type: "bigint", notNull: true },
  { name: "queue_wait_ms_sum", type: "double", notNull: true },
  { name: "queue_wait_ms_p50", type: "double" },
  { name: "queue_wait_ms_p99", type: "double" },
  { name: "queue_wait_ms_max", type: "double" },
  { name: "input_tokens", type: "bigint" },
  { name: "output_tokens", type: "bigint" },
  { name: "cost_usd", type: "double" },
];

function columnsDdl(
  dialect: Dialect,
  columns: ReadonlyArray<{ name: string; type: ColumnType; notNull?: boolean }>,
) {
  return columns
    .map((c) => `${c.name} ${sqlType(dialect, c.type)}${c.notNull ? " NOT NULL" : ""}`)
    .join(", ");
}

/**
 * Creates what is missing, and brings a ledger an older sluice wrote up to date (docs/ledger.md,
 * "Ledgers written by an older sluice"): the columns it lacks are added (nullable, at the end, in
 * USAGE_COLUMNS order), and in PostgreSQL the old primary key (request_id, replica, ts_ms), which
 * dropped the rows of requests reusing an X-Request-Id, is replaced by a unique index on the
 * gateway's own id. PostgreSQL's unique `sluice_request_id` makes a batch retried after a lost
 * acknowledgement insert nothing twice; DuckDB has no index (an index would live in the gateway's
 * memory) and deduplicates a retried batch with an anti-join on the same column instead.
 */
export function schemaStatements(dialect: Dialect): string[] {
  const usage = columnsDdl(dialect, USAGE_COLUMNS);
  const rollup = columnsDdl(dialect, ROLLUP_COLUMNS);
  if (dialect === "duckdb") {
    return [
      `CREATE TABLE IF NOT EXISTS usage (${usage})`,
      ...USAGE_COLUMNS.map(
        (c) => `ALTER TABLE usage ADD COLUMN IF NOT EXISTS ${c.name} ${sqlType(dialect, c.type)}`,
      ),
      `CREATE TABLE IF NOT EXISTS usage_minute (${rollup})`,
      TO_UNIX_TIMESTAMP_MACRO,
    ];
  }
  return [
    `CREATE TABLE IF NOT EXISTS usage (${usage})`,
    postgresMigration(),
    `CREATE UNIQUE INDEX IF NOT EXISTS ${PG_KEY_INDEX} ON usage (sluice_request_id)`,
    "CREATE INDEX IF NOT EXISTS usage_ts_ms_idx ON usage (ts_ms)",
    `CREATE TABLE IF NOT EXISTS usage_minute (${rollup})`,
    "CREATE INDEX IF NOT EXISTS usage_minute_minute_ms_idx ON usage_minute (minute_ms)",
  ];
}

/** The unique index on the gateway's id: every row's key, and a retried batch's conflict target. */
const PG_KEY_INDEX = "usage_sluice_request_id_key";

/**
 * One DO block that alters `usage` only when it must (an ALTER TABLE takes an exclusive lock, and
 * every replica runs this at each start): adds each missing column, and drops the primary key an
 * older sluice made on (request_id, replica, ts_ms).
 */
function postgresMigration(): string {
  const columns = USAGE_COLUMNS.map(
    (c) =>
      "IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() " +
      `AND table_name = 'usage' AND column_name = '${c.name}') THEN ` +
      `ALTER TABLE usage ADD COLUMN ${c.name} ${sqlType("postgres", c.type)}; END IF;`,
  );
  return (
    `DO $$ BEGIN ${columns.join(" ")} ` +
    "IF EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'usage'::regclass AND contype = 'p') THEN " +
    "EXECUTE (SELECT 'ALTER TABLE usage DROP CONSTRAINT ' || quote_ident(conname) FROM pg_constraint " +
    "WHERE conrelid = 'usage'::regclass AND contype = 'p'); END IF; END $$"
  );
}

/** ClickHouse's `toUnixTimestamp` (whole seconds), so obleth's ledger queries run as written. */
const TO_UNIX_TIMESTAMP_MACRO =
  "CREATE OR REPLACE MACRO toUnixTimestamp(ts) AS CAST(floor(epoch(ts)) AS BIGINT)";
export const TO_UNIX_TIMESTAMP_TEMP_MACRO = TO_UNIX_TIMESTAMP_MACRO.replace("MACRO", "TEMP MACRO");

/** The minute (epoch ms) of `ts_ms`, in SQL. */
function minuteSql(dialect: Dialect, column = "ts_ms"): string {
  return dialect === "duckdb" ? `(${column} // 60000) * 60000` : `(${column} / 60000) * 60000`;
}

/** A continuous quantile of `expr`, optionally over the rows matching `filter`. */
export function quantileSql(dialect: Dialect, expr: string, p: number, filter?: string): string {
  const f = filter === undefined ? "" : ` FILTER (WHERE ${filter})`;
  return dialect === "duckdb"
    ? `quantile_cont(${expr}, ${p})${f}`
    : `percentile_cont(${p}) WITHIN GROUP (ORDER BY ${expr})${f}`;
}

function integers(values: readonly number[]): string {
  for (const v of values) if (!Number.isSafeInteger(v)) throw new Error(`not an integer: ${v}`);
  return values.join(", ");
}

/**
 * Recomputes the rollups of these minutes from `usage` (delete, then insert): idempotent, exact
 * quantiles, and a late row (a long stream settles minutes after it arrived) just marks its minute
 * again. Run both statements in one transaction.
 */
export function rollupStatements(dialect: Dialect, minutes: readonly number[]): string[] {
  const list = integers(minutes);
  const lo = Math.min(...minutes);
  const hi = Math.max(...minutes) + 60_000;
  const minute = minuteSql(dialect);
  const names = ROLLUP_COLUMNS.map((c) => c.name).join(", ");
  return [
    `DELETE FROM usage_minute WHERE minute_ms IN (${list})`,
    `INSERT INTO usage_minute (${names}) SELECT ${minute} AS minute_ms, tenant_id, effective_class, admission, ` +
      `outcome, error_code, count(*), sum(queue_wait_ms), ${quantileSql(dialect, "queue_wait_ms", 0.5)}, ` +
      `${quantileSql(dialect, "queue_wait_ms", 0.99)}, max(queue_wait_ms), sum(input_tokens), ` +
      `sum(output_tokens), sum(cost_usd) FROM usage WHERE ts_ms >= ${lo} AND ts_ms < ${hi} ` +
      `AND ${minute} IN (${list}) GROUP BY 1, 2, 3, 4, 5, 6`,
  ];
}

/**
 * Deletes up to `limit` rows that arrived before `cutoffMs` (a slice at a time, so writes go on
 * between slices), and the rollups of minutes that ended before it.
 */
export function retentionStatements(
  dialect: Dialect,
  cutoffMs: number,
  limit: number,
): { usage: string; rollup: string } {
  const [cutoff, n] = [integers([Math.floor(cutoffMs)]), integers([limit])];
  const id = dialect === "duckdb" ? "rowid" : "ctid";
  return {
    usage: `DELETE FROM usage WHERE ${id} IN (SELECT ${id} FROM usage WHERE ts_ms < ${cutoff} LIMIT ${n})`,
    rollup: `DELETE FROM usage_minute WHERE minute_ms <= ${cutoff} - 60000`,
  };
}

/**
 * `INSERT INTO usage` of a retried batch, from the staging table, leaving out rows already in: by the
 * gateway's id, never the client's (two requests with one X-Request-Id are two rows).
 */
export function dedupInsertSql(staging: string, loMs: number, hiMs: number): string {
  return (
    `INSERT INTO usage SELECT s.* FROM ${staging} s WHERE NOT EXISTS (SELECT 1 FROM usage u ` +
    `WHERE u.ts_ms BETWEEN ${integers([loMs])} AND ${integers([hiMs])} AND u.ts_ms = s.ts_ms ` +
    "AND u.sluice_request_id = s.sluice_request_id)"
  );
}

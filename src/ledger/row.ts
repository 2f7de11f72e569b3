/**
 * The ledger's row: one per request, built from the gateway's outcome record. The `usage` table has
 * exactly these columns, in this order, in every sink (docs/ledger.md).
 */
import type { OutcomeRecord } from "../contracts/outcome.js";
import { newRequestId } from "../contracts/request-id.js";

/** Column types, named portably; each sink maps them to its own SQL types. */
export type ColumnType = "bigint" | "integer" | "double" | "text";

interface Column {
  readonly name: string;
  readonly type: ColumnType;
  readonly notNull: boolean;
}

const col = (name: string, type: ColumnType, notNull = false): Column => ({ name, type, notNull });

/**
 * The `usage` table, in column order. Columns added after the first release come last, in the order
 * they were added: a ledger written by an older sluice gets them appended (sql.ts, migrations), so
 * its columns stay in this order too (DuckDB's appender writes by position).
 */
export const USAGE_COLUMNS: readonly Column[] = [
  col("ts_ms", "bigint", true),
  col("request_id", "text", true),
  col("replica", "text", true),
  col("tenant_id", "text", true),
  col("model", "text"),
  col("requested_class", "text"),
  col("effective_class", "text"),
  col("admission", "text", true),
  col("outcome", "text", true),
  col("status", "integer", true),
  col("error_code", "text"),
  col("queue_wait_ms", "double", true),
  col("ttft_ms", "double"),
  col("duration_ms", "double", true),
  col("input_tokens", "bigint"),
  col("output_tokens", "bigint"),
  col("estimated_tokens", "bigint", true),
  col("cost_usd", "double"),
  col("worker", "text"),
  // Added with issue 35. Null in rows an older sluice wrote.
  col("sluice_request_id", "text"),
  col("token_source", "text"),
];

/** A `usage` row as a tuple in column order: cheap to buffer, to post to a worker and to bind. */
export type LedgerRow = [
  tsMs: number,
  requestId: string,
  replica: string,
  tenantId: string,
  model: string | null,
  requestedClass: string | null,
  effectiveClass: string | null,
  admission: string,
  outcome: string,
  status: number,
  errorCode: string | null,
  queueWaitMs: number,
  ttftMs: number | null,
  durationMs: number,
  inputTokens: number | null,
  outputTokens: number | null,
  estimatedTokens: number,
  costUsd: number | null,
  worker: string | null,
  sluiceRequestId: string,
  tokenSource: string | null,
];

/** Index of ts_ms in a row. */
export const TS_MS = 0;

/** Longest text value stored; longer values (a client-chosen model name, say) are cut. */
const MAX_TEXT = 256;

/**
 * Text as stored: at most MAX_TEXT characters, and no NUL (PostgreSQL rejects it in text, and one
 * poisoned row must not hold a whole batch back).
 */
function text(value: string): string {
  const cut = value.length > MAX_TEXT ? value.slice(0, MAX_TEXT) : value;
  return cut.includes("\u0000") ? cut.replaceAll("\u0000", "\uFFFD") : cut;
}

function optText(value: string | undefined): string | null {
  return value === undefined ? null : text(value);
}

function num(value: number): number {
  return Number.isFinite(value) ? value : 0;
}

function optNum(value: number | undefined): number | null {
  return value === undefined || !Number.isFinite(value) ? null : value;
}

function optInt(value: number | undefined): number | null {
  return value === undefined || !Number.isFinite(value) ? null : Math.round(value);
}

export function toLedgerRow(o: OutcomeRecord, replica: string): LedgerRow {
  return [
    Math.round(num(o.tsMs)),
    text(o.requestId),
    replica,
    text(o.tenantId),
    optText(o.model),
    o.requestedClass ?? null,
    o.effectiveClass ?? null,
    o.admission,
    o.outcome,
    Math.round(num(o.status)),
    o.errorCode ?? null,
    num(o.queueWaitMs),
    optNum(o.ttftMs),
    num(o.durationMs),
    optInt(o.inputTokens),
    optInt(o.outputTokens),
    Math.round(num(o.estimatedTokens)),
    optNum(o.costUsd),
    optText(o.worker),
    // The row's key: the gateway's id (a record built elsewhere without one gets a fresh one).
    text(o.sluiceRequestId ?? newRequestId()),
    o.tokenSource ?? null,
  ];
}

/** The start of a timestamp's minute, epoch ms. */
export function minuteOf(tsMs: number): number {
  return Math.floor(tsMs / 60_000) * 60_000;
}

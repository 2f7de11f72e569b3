/**
 * The ledger's recent past, read from the per-minute rollups (`usage_minute`) for the dashboard:
 * per minute, requests by outcome with their tokens, cost and queue wait; per tenant, the totals of
 * the span. Both sinks run the same two statements and hand back plain rows; this module shapes them.
 */
import { type Dialect, sqlType } from "./sql.js";

/** Span the dashboard shows, and tenants it lists (the heaviest by tokens). */
export const RECENT_SPAN_MS = 3_600_000;
const RECENT_TENANTS = 20;

/** One minute's requests, as the rollups count them (the dashboard's live tally keeps the same). */
export interface RecentMinute {
  /** The minute's start, epoch ms. */
  minuteMs: number;
  requests: number;
  /** Requests by outcome (ok, rejected, timeout, preempted, cancelled, error). */
  byOutcome: Record<string, number>;
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
  queueWaitMsSum: number;
  queueWaitMsMax: number;
}

/** One tenant's requests over a span. */
export interface RecentTenant {
  tenant: string;
  requests: number;
  /** Requests refused before a slot (admission `rejected`). */
  rejected: number;
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
}

export interface RecentUsage {
  /** Minutes from this one (epoch ms) on. */
  sinceMs: number;
  minutes: RecentMinute[];
  tenants: RecentTenant[];
}

/** Rows as the sinks return them: one array per row, in the statements' column order. */
type RawRows = ReadonlyArray<ReadonlyArray<unknown>>;

/**
 * The two statements: per minute and outcome, and per tenant (the RECENT_TENANTS heaviest). Every
 * number is cast to a double, so DuckDB (HUGEINT sums) and PostgreSQL (numeric sums) both answer
 * with plain numbers.
 */
export function recentUsageStatements(
  dialect: Dialect,
  sinceMs: number,
): { minutes: string; tenants: string } {
  if (!Number.isSafeInteger(sinceMs)) throw new Error(`not an integer: ${sinceMs}`);
  const d = (expr: string) => `CAST(${expr} AS ${sqlType(dialect, "double")})`;
  const sum = (column: string) => d(`coalesce(sum(${column}), 0)`);
  return {
    minutes:
      `SELECT ${d("minute_ms")}, outcome, ${sum("requests")}, ${sum("input_tokens")}, ` +
      `${sum("output_tokens")}, ${sum("cost_usd")}, ${sum("queue_wait_ms_sum")}, ` +
      `${d("coalesce(max(queue_wait_ms_max), 0)")} FROM usage_minute WHERE minute_ms >= ${sinceMs} ` +
      "GROUP BY minute_ms, outcome ORDER BY minute_ms, outcome",
    tenants:
      `SELECT tenant_id, ${sum("requests")}, ` +
      `${d("coalesce(sum(CASE WHEN admission = 'rejected' THEN requests ELSE 0 END), 0)")}, ` +
      `${sum("input_tokens")}, ${sum("output_tokens")}, ${sum("cost_usd")} FROM usage_minute ` +
      `WHERE minute_ms >= ${sinceMs} GROUP BY tenant_id ` +
      `ORDER BY coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0) DESC, tenant_id ` +
      `LIMIT ${RECENT_TENANTS}`,
  };
}

/** A minute with nothing counted yet. */
export function emptyRecentMinute(minuteMs: number): RecentMinute {
  return {
    minuteMs,
    requests: 0,
    byOutcome: {},
    inputTokens: 0,
    outputTokens: 0,
    costUsd: 0,
    queueWaitMsSum: 0,
    queueWaitMsMax: 0,
  };
}

function num(value: unknown): number {
  const n = typeof value === "bigint" ? Number(value) : Number(value ?? 0);
  return Number.isFinite(n) ? n : 0;
}

/** Shapes the rows of `recentUsageStatements` into minutes (oldest first) and tenants. */
export function recentUsageFromRows(sinceMs: number, minuteRows: RawRows, tenantRows: RawRows): RecentUsage {
  const minutes = new Map<number, RecentMinute>();
  for (const row of minuteRows) {
    const minuteMs = num(row[0]);
    let m = minutes.get(minuteMs);
    if (m === undefined) {
      m = emptyRecentMinute(minuteMs);
      minutes.set(minuteMs, m);
    }
    const requests = num(row[2]);
    const outcome = String(row[1]);
    m.requests += requests;
    m.byOutcome[outcome] = (m.byOutcome[outcome] ?? 0) + requests;
    m.inputTokens += num(row[3]);
    m.outputTokens += num(row[4]);
    m.costUsd += num(row[5]);
    m.queueWaitMsSum += num(row[6]);
    m.queueWaitMsMax = Math.max(m.queueWaitMsMax, num(row[7]));
  }
  return {
    sinceMs,
    minutes: [...minutes.values()].sort((a, b) => a.minuteMs - b.minuteMs),
    tenants: tenantRows.map((row) => ({
      tenant: String(row[0]),
      requests: num(row[1]),
      rejected: num(row[2]),
      inputTokens: num(row[3]),
      outputTokens: num(row[4]),
      costUsd: num(row[5]),
    })),
  };
}

/**
 * `sluice report`: per tenant and class over a window, from the `usage` table — admission counts
 * (fast, queued, rejected), queue-wait p50/p99 of the requests that got and kept a slot, tokens in
 * and out, cost, and the requests that ended with an error code, by code.
 *
 * A preempted request got a slot (its row says `fast` or `queued`) and lost it before its first
 * byte: its client got a 503, so the report counts it as rejected, with the refusals, and leaves
 * its wait out of the quantiles.
 */
import type { Cell, LedgerReader, QueryResult } from "./query.js";
import { quantileSql } from "./sql.js";

interface ReportRow {
  tenant_id: string;
  effective_class: string | null;
  requests: number;
  /** Got a slot at once and kept it. */
  fast: number;
  /** Got a slot after waiting in the queue and kept it. */
  queued: number;
  /** Never got a slot (refused, or left the queue without one), or lost it to preemption. */
  rejected: number;
  /** Whole ms, over the fast and queued requests; null when there were none. */
  queue_wait_p50_ms: number | null;
  queue_wait_p99_ms: number | null;
  input_tokens: number;
  output_tokens: number;
  /** Rounded to COST_DECIMALS. */
  cost_usd: number;
  /** Requests that ended with an error code (rejections, timeouts, preemptions, cancels, upstream failures). */
  errors: Record<string, number>;
}

interface Report {
  since: string;
  until: string;
  ledger: string;
  rows: ReportRow[];
}

/** `30s`, `15m`, `1h`, `7d`, `2w`, or a date/time Date.parse accepts; returns epoch ms. */
export function parseSince(raw: string, now = Date.now()): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$/.exec(raw);
  if (m !== null) {
    const unit = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[m[2] as "s"];
    return Math.round(now - Number(m[1]) * unit);
  }
  const at = Date.parse(raw);
  if (Number.isNaN(at)) {
    throw new Error(
      `--since "${raw}" must be a duration (30s, 15m, 1h, 7d, 2w) or a date (2025-01-31T12:00Z)`,
    );
  }
  return at;
}

/** Cost is rounded to a hundredth of a cent in every format (table, CSV, JSON). */
const COST_DECIMALS = 4;

/** How the table and CSV print the report's fractional columns. */
export const REPORT_DECIMALS: Readonly<Record<string, number>> = { cost_usd: COST_DECIMALS };

/**
 * What the report's columns count, printed under its table: which requests each column holds, and
 * why its wait quantiles need not match the live table of `sluice demo`.
 */
export const REPORT_NOTES = [
  "fast, queued: got a slot at once, or after queueing, and kept it. rejected:",
  "refused a slot, or preempted before the first byte (503 scheduler_preempted).",
  "wait_p50_ms, wait_p99_ms: whole ms queued, of the fast and queued requests of",
  "the tenant and class, whatever their outcome. The live table of sluice demo",
  "counts the requests answered 200, per model pool and class: the two differ",
  "when a tenant's requests span pools, a class mixes tenants, or admitted",
  "requests failed.",
];

function roundTo(value: number, decimals: number): number {
  const scale = 10 ** decimals;
  return Math.round(value * scale) / scale;
}

const CLASS_ORDER =
  "CASE effective_class WHEN 'system' THEN 0 WHEN 'interactive' THEN 1 WHEN 'default' THEN 2 WHEN 'bulk' THEN 3 ELSE 4 END";

function num(value: Cell | undefined): number {
  return typeof value === "number" ? value : value === null || value === undefined ? 0 : Number(value);
}

function optWholeMs(value: Cell | undefined): number | null {
  return value === null || value === undefined ? null : Math.round(num(value));
}

export async function buildReport(
  reader: LedgerReader,
  sinceMs: number,
  untilMs = Date.now(),
): Promise<Report> {
  const d = reader.dialect;
  const since = Math.floor(sinceMs);
  const kept = "outcome <> 'preempted'";
  const admitted = `admission <> 'rejected' AND ${kept}`;
  const main = await reader.query(
    `SELECT tenant_id, effective_class, count(*) AS requests, ` +
      `count(*) FILTER (WHERE admission = 'fast' AND ${kept}) AS fast, ` +
      `count(*) FILTER (WHERE admission = 'queued' AND ${kept}) AS queued, ` +
      `count(*) FILTER (WHERE NOT (${admitted})) AS rejected, ` +
      `${quantileSql(d, "queue_wait_ms", 0.5, admitted)} AS p50, ` +
      `${quantileSql(d, "queue_wait_ms", 0.99, admitted)} AS p99, ` +
      `coalesce(sum(input_tokens), 0) AS input_tokens, coalesce(sum(output_tokens), 0) AS output_tokens, ` +
      `coalesce(sum(cost_usd), 0) AS cost_usd ` +
      `FROM usage WHERE ts_ms >= ${since} GROUP BY tenant_id, effective_class ` +
      `ORDER BY tenant_id, ${CLASS_ORDER}`,
  );
  const errors = await reader.query(
    `SELECT tenant_id, effective_class, error_code, count(*) AS n FROM usage ` +
      `WHERE ts_ms >= ${since} AND error_code IS NOT NULL ` +
      `GROUP BY tenant_id, effective_class, error_code ORDER BY n DESC, error_code`,
  );
  const key = (tenant: Cell | undefined, cls: Cell | undefined) => `${tenant}\u0000${cls ?? ""}`;
  const byKey = new Map<string, Record<string, number>>();
  for (const [tenant, cls, code, n] of errors.rows) {
    const k = key(tenant, cls);
    const codes = byKey.get(k) ?? {};
    codes[String(code)] = num(n);
    byKey.set(k, codes);
  }
  const rows = main.rows.map(
    ([tenant, cls, requests, fast, queued, rejected, p50, p99, input, output, cost]): ReportRow => ({
      tenant_id: String(tenant),
      effective_class: cls === null || cls === undefined ? null : String(cls),
      requests: num(requests),
      fast: num(fast),
      queued: num(queued),
      rejected: num(rejected),
      queue_wait_p50_ms: optWholeMs(p50),
      queue_wait_p99_ms: optWholeMs(p99),
      input_tokens: num(input),
      output_tokens: num(output),
      cost_usd: roundTo(num(cost), COST_DECIMALS),
      errors: byKey.get(key(tenant, cls)) ?? {},
    }),
  );
  return {
    since: new Date(since).toISOString(),
    until: new Date(untilMs).toISOString(),
    ledger: reader.description,
    rows,
  };
}

/** The report as one table (errors as `code:count` joined by spaces), for table and CSV output. */
export function reportTable(report: Report): QueryResult {
  return {
    columns: [
      "tenant",
      "class",
      "requests",
      "fast",
      "queued",
      "rejected",
      "wait_p50_ms",
      "wait_p99_ms",
      "tokens_in",
      "tokens_out",
      "cost_usd",
      "errors",
    ],
    rows: report.rows.map((r) => [
      r.tenant_id,
      r.effective_class ?? "-",
      r.requests,
      r.fast,
      r.queued,
      r.rejected,
      r.queue_wait_p50_ms,
      r.queue_wait_p99_ms,
      r.input_tokens,
      r.output_tokens,
      r.cost_usd,
      Object.entries(r.errors)
        .map(([code, n]) => `${code}:${n}`)
        .join(" "),
    ]),
  };
}

/**
 * The dashboard's "Last hour": the ledger's per-minute rollups where it has them, and this gateway's
 * own minutes (live-minutes.ts) after the last minute the rollups hold, so the panel shows what
 * happened from the first request on, the current minute included, instead of waiting for the
 * rollups (a minute is rolled up 5 to 15 s after it ends). Without a ledger it is this gateway's
 * own minutes alone. Pure: the snapshot calls it with what it read.
 */

import type { RecentMinute, RecentTenant } from "../ledger/recent.js";
import type { RecentUsageRead } from "../ledger/writer.js";
import type { LiveMinutes } from "./live-minutes.js";
import { minuteOf } from "./live-minutes.js";

const HOUR_MS = 3_600_000;
/** Tenant rows listed (the heaviest by tokens), as the ledger's read lists. */
const TENANT_ROWS = 20;

export interface LastHour {
  /** The first minute shown: the first one with traffic in the hour (the current one when none). */
  since_ms: number;
  /** The current minute (still filling). */
  current_minute_ms: number;
  /** A ledger is configured: older minutes come from its rollups. */
  from_ledger: boolean;
  /** When the rollups were last read; null before the first read or without a ledger. */
  read_at_ms: number | null;
  /** The last read's error. */
  error: string | null;
  /** Minutes from this one on are this gateway's own count (not rolled up yet); null when none are. */
  live_from_ms: number | null;
  totals: {
    requests: number;
    rejected: number;
    input_tokens: number;
    output_tokens: number;
    cost_usd: number;
  };
  minutes: Array<{
    minute_ms: number;
    /** ledger: the rollups (every replica writing to it); live: this gateway's own records. */
    source: "ledger" | "live";
    requests: number;
    by_outcome: Record<string, number>;
    input_tokens: number;
    output_tokens: number;
    cost_usd: number;
    queue_wait_ms_avg: number;
    queue_wait_ms_max: number;
  }>;
  tenants: Array<{
    tenant: string;
    requests: number;
    rejected: number;
    input_tokens: number;
    output_tokens: number;
    cost_usd: number;
  }>;
}

const round = (n: number, digits: number) => {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
};

function addTenant(into: Map<string, RecentTenant>, t: RecentTenant): void {
  const have = into.get(t.tenant);
  if (have === undefined) {
    into.set(t.tenant, { ...t });
    return;
  }
  have.requests += t.requests;
  have.rejected += t.rejected;
  have.inputTokens += t.inputTokens;
  have.outputTokens += t.outputTokens;
  have.costUsd += t.costUsd;
}

/**
 * The last hour at `nowMs`: the rollups of `ledger` (undefined without a ledger), then the `live`
 * minutes after the newest rolled-up minute.
 */
export function lastHour(ledger: RecentUsageRead | undefined, live: LiveMinutes, nowMs: number): LastHour {
  const current = minuteOf(nowMs);
  const hourStart = current - HOUR_MS + 60_000;
  const usage = ledger?.usage;
  const fromLedger = (usage?.minutes ?? []).filter((m) => m.minuteMs >= hourStart);
  const newestRolled = fromLedger.reduce((a, m) => Math.max(a, m.minuteMs), Number.NEGATIVE_INFINITY);
  const liveFrom = Math.max(hourStart, newestRolled + 60_000);
  const fromLive = live.from(liveFrom);

  const minutes: Array<{ source: "ledger" | "live"; m: RecentMinute }> = [
    ...fromLedger.map((m) => ({ source: "ledger" as const, m })),
    ...fromLive.map((l) => ({ source: "live" as const, m: l.minute })),
  ];
  const tenants = new Map<string, RecentTenant>();
  for (const t of usage?.tenants ?? []) addTenant(tenants, t);
  for (const l of fromLive) for (const t of l.tenants) addTenant(tenants, t);

  const totals = { requests: 0, rejected: 0, input_tokens: 0, output_tokens: 0, cost_usd: 0 };
  for (const { m } of minutes) {
    totals.requests += m.requests;
    totals.rejected += m.byOutcome.rejected ?? 0;
    totals.input_tokens += m.inputTokens;
    totals.output_tokens += m.outputTokens;
    totals.cost_usd += m.costUsd;
  }
  totals.cost_usd = round(totals.cost_usd, 6);
  const first = minutes.reduce((a, { m }) => Math.min(a, m.minuteMs), current);
  return {
    since_ms: first,
    current_minute_ms: current,
    from_ledger: ledger !== undefined,
    read_at_ms: ledger?.readAtMs ?? null,
    error: ledger?.error ?? null,
    live_from_ms: fromLive.length > 0 ? fromLive[0]!.minute.minuteMs : null,
    totals,
    minutes: minutes.map(({ source, m }) => ({
      minute_ms: m.minuteMs,
      source,
      requests: m.requests,
      by_outcome: m.byOutcome,
      input_tokens: m.inputTokens,
      output_tokens: m.outputTokens,
      cost_usd: round(m.costUsd, 6),
      queue_wait_ms_avg: m.requests > 0 ? round(m.queueWaitMsSum / m.requests, 3) : 0,
      queue_wait_ms_max: round(m.queueWaitMsMax, 3),
    })),
    tenants: [...tenants.values()]
      .sort(
        (a, b) =>
          b.inputTokens + b.outputTokens - (a.inputTokens + a.outputTokens) ||
          b.requests - a.requests ||
          a.tenant.localeCompare(b.tenant),
      )
      .slice(0, TENANT_ROWS)
      .map((t) => ({
        tenant: t.tenant,
        requests: t.requests,
        rejected: t.rejected,
        input_tokens: t.inputTokens,
        output_tokens: t.outputTokens,
        cost_usd: round(t.costUsd, 6),
      })),
  };
}

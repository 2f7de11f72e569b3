/**
 * This gateway's own last hour, per minute, from the outcome records as they come: what the
 * ledger's rollups will say once they catch up (the ledger rolls a minute up 5 to 15 s after it
 * ends, so its current minute is never there). The dashboard's "Last hour" shows these minutes
 * where the rollups have nothing yet, and all of them without a ledger. Bounded: 61 minutes, and
 * per minute the tenants seen in it.
 */
import type { OutcomeRecord, OutcomeSink } from "../contracts/outcome.js";
import { emptyRecentMinute, type RecentMinute, type RecentTenant } from "../ledger/recent.js";

const MINUTE_MS = 60_000;
/** The hour and the current minute. */
const MINUTES_KEPT = 61;
/** Tenants kept per minute; past it they are summed as `other` (as in the metrics' top N). */
const TENANTS_PER_MINUTE = 500;

interface LiveMinute extends RecentMinute {
  tenants: Map<string, RecentTenant>;
}

export const minuteOf = (tsMs: number) => Math.floor(tsMs / MINUTE_MS) * MINUTE_MS;

const emptyTenant = (tenant: string): RecentTenant => ({
  tenant,
  requests: 0,
  rejected: 0,
  inputTokens: 0,
  outputTokens: 0,
  costUsd: 0,
});

export class LiveMinutes implements OutcomeSink {
  /** By minute start, oldest first. */
  private readonly minutes = new Map<number, LiveMinute>();
  /** The first minute this tally saw (it knows nothing of the time before). */
  private firstMinute: number | undefined;

  record(o: OutcomeRecord): void {
    const minuteMs = minuteOf(o.tsMs);
    let m = this.minutes.get(minuteMs);
    if (m === undefined) {
      m = { ...emptyRecentMinute(minuteMs), tenants: new Map() };
      this.minutes.set(minuteMs, m);
      this.trim(minuteMs);
    }
    this.firstMinute = Math.min(this.firstMinute ?? minuteMs, minuteMs);
    m.requests++;
    m.byOutcome[o.outcome] = (m.byOutcome[o.outcome] ?? 0) + 1;
    m.inputTokens += o.inputTokens ?? 0;
    m.outputTokens += o.outputTokens ?? 0;
    m.costUsd += o.costUsd ?? 0;
    m.queueWaitMsSum += o.queueWaitMs;
    m.queueWaitMsMax = Math.max(m.queueWaitMsMax, o.queueWaitMs);
    let name = o.tenantId;
    if (!m.tenants.has(name) && m.tenants.size >= TENANTS_PER_MINUTE) name = "other";
    let t = m.tenants.get(name);
    if (t === undefined) {
      t = emptyTenant(name);
      m.tenants.set(name, t);
    }
    t.requests++;
    if (o.admission === "rejected") t.rejected++;
    t.inputTokens += o.inputTokens ?? 0;
    t.outputTokens += o.outputTokens ?? 0;
    t.costUsd += o.costUsd ?? 0;
  }

  /** Drops minutes older than the hour before `newestMs` (records arrive about in order). */
  private trim(newestMs: number): void {
    const oldest = newestMs - (MINUTES_KEPT - 1) * MINUTE_MS;
    for (const key of this.minutes.keys()) if (key < oldest) this.minutes.delete(key);
  }

  /** The minute of the first record, or undefined before any. */
  get since(): number | undefined {
    return this.firstMinute;
  }

  /** The minutes from `fromMs` on (oldest first), with each one's tenants (copies). */
  from(fromMs: number): Array<{ minute: RecentMinute; tenants: RecentTenant[] }> {
    return [...this.minutes.values()]
      .filter((m) => m.minuteMs >= fromMs)
      .sort((a, b) => a.minuteMs - b.minuteMs)
      .map(({ tenants, ...minute }) => ({
        minute: { ...minute, byOutcome: { ...minute.byOutcome } },
        tenants: [...tenants.values()].map((t) => ({ ...t })),
      }));
  }
}

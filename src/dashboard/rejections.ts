/**
 * The dashboard's view of outcome records: the requests the gateway refused or cut (every record
 * with an error code: 401, 403, 429, 408, 503, 499, 502, ...). Three views of them, all bounded:
 *
 * - the latest ones, one by one, in a fixed ring (for automation: request ids);
 * - groups by (error code, tenant, model pool) with a count since start and when one was last seen
 *   (what the page shows: fifty identical refusals are one row with a count of fifty);
 * - a running count per error code.
 *
 * One more outcome sink beside the ledger and the embedder's own: never waits, never throws.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { OutcomeRecord, OutcomeSink } from "../contracts/outcome.js";

const DEFAULT_REJECTIONS_KEPT = 50;
/** Groups kept; past it the one seen longest ago goes (its count is still in the code totals). */
const DEFAULT_GROUPS_KEPT = 200;

export interface Rejection {
  /** Arrival, epoch ms. */
  ts_ms: number;
  request_id: string;
  tenant: string;
  /** The model pool the request was for; null when its model matched no pool. */
  pool: string | null;
  /** The effective class, else the requested one; null when the request never got that far. */
  class: PriorityClass | null;
  status: number;
  code: string;
}

/** Rejections of one error code, tenant and pool. */
export interface RejectionGroup {
  code: string;
  tenant: string;
  pool: string | null;
  /** The status of the last one. */
  status: number;
  count: number;
  first_ms: number;
  last_ms: number;
  /** The last one's request id and class. */
  last_request_id: string;
  last_class: PriorityClass | null;
}

interface CodeCount {
  /** The status this code was last answered with. */
  status: number;
  total: number;
}

/** The model pool a request's model belongs to (null when none). */
export type PoolOfModel = (model: string | undefined) => string | null;

const groupKey = (code: string, tenant: string, pool: string | null) => JSON.stringify([code, tenant, pool]);

export class RejectionLog implements OutcomeSink {
  private readonly ring: Array<Rejection | undefined>;
  private next = 0;
  private count = 0;
  private readonly codes = new Map<string, CodeCount>();
  /** In the order last seen, oldest first (a Map keeps insertion order: re-inserted on each hit). */
  private readonly groupMap = new Map<string, RejectionGroup>();

  constructor(
    readonly kept = DEFAULT_REJECTIONS_KEPT,
    private readonly poolOf: PoolOfModel = () => null,
    readonly groupsKept = DEFAULT_GROUPS_KEPT,
  ) {
    this.ring = new Array<Rejection | undefined>(kept);
  }

  record(outcome: OutcomeRecord): void {
    const code = outcome.errorCode;
    if (code === undefined) return;
    const ts = Math.round(outcome.tsMs);
    const pool = this.poolOf(outcome.model);
    const cls = outcome.effectiveClass ?? outcome.requestedClass ?? null;
    this.ring[this.next] = {
      ts_ms: ts,
      request_id: outcome.requestId,
      tenant: outcome.tenantId,
      pool,
      class: cls,
      status: outcome.status,
      code,
    };
    this.next = (this.next + 1) % this.kept;
    this.count++;
    const c = this.codes.get(code);
    if (c === undefined) this.codes.set(code, { status: outcome.status, total: 1 });
    else {
      c.status = outcome.status;
      c.total++;
    }
    this.group(code, outcome, ts, pool, cls);
  }

  private group(
    code: string,
    outcome: OutcomeRecord,
    ts: number,
    pool: string | null,
    cls: PriorityClass | null,
  ): void {
    const key = groupKey(code, outcome.tenantId, pool);
    const g = this.groupMap.get(key);
    if (g === undefined) {
      this.groupMap.set(key, {
        code,
        tenant: outcome.tenantId,
        pool,
        status: outcome.status,
        count: 1,
        first_ms: ts,
        last_ms: ts,
        last_request_id: outcome.requestId,
        last_class: cls,
      });
      if (this.groupMap.size > this.groupsKept) {
        const oldest = this.groupMap.keys().next().value;
        if (oldest !== undefined) this.groupMap.delete(oldest);
      }
      return;
    }
    g.count++;
    g.status = outcome.status;
    g.first_ms = Math.min(g.first_ms, ts);
    g.last_ms = Math.max(g.last_ms, ts);
    g.last_request_id = outcome.requestId;
    g.last_class = cls;
    this.groupMap.delete(key);
    this.groupMap.set(key, g);
  }

  /** Rejections recorded since start. */
  get total(): number {
    return this.count;
  }

  /** The kept rejections, newest first. */
  latest(): Rejection[] {
    const out: Rejection[] = [];
    for (let i = 1; i <= this.kept; i++) {
      const r = this.ring[(this.next - i + this.kept) % this.kept];
      if (r === undefined) break;
      out.push({ ...r });
    }
    return out;
  }

  /** The groups, last seen first (copies). */
  groups(): RejectionGroup[] {
    return [...this.groupMap.values()]
      .map((g) => ({ ...g }))
      .sort((a, b) => b.last_ms - a.last_ms || b.count - a.count);
  }

  /** Totals per error code since start (a copy). */
  codeTotals(): Map<string, CodeCount> {
    return new Map([...this.codes].map(([code, c]) => [code, { ...c }]));
  }
}

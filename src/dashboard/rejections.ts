/**
 * The dashboard's view of outcome records: the latest requests the gateway refused or cut (every
 * record with an error code: 401, 403, 429, 408, 503, 499, 502, ...), in a fixed ring, and a running
 * count per error code. One more outcome sink beside the ledger and the embedder's own: O(1), never
 * waits, never throws.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { OutcomeRecord, OutcomeSink } from "../contracts/outcome.js";

const DEFAULT_REJECTIONS_KEPT = 50;

export interface Rejection {
  /** Arrival, epoch ms. */
  ts_ms: number;
  request_id: string;
  tenant: string;
  /** The effective class, else the requested one; null when the request never got that far. */
  class: PriorityClass | null;
  status: number;
  code: string;
}

interface CodeCount {
  /** The status this code was last answered with. */
  status: number;
  total: number;
}

export class RejectionLog implements OutcomeSink {
  private readonly ring: Array<Rejection | undefined>;
  private next = 0;
  private count = 0;
  private readonly codes = new Map<string, CodeCount>();

  constructor(readonly kept = DEFAULT_REJECTIONS_KEPT) {
    this.ring = new Array<Rejection | undefined>(kept);
  }

  record(outcome: OutcomeRecord): void {
    const code = outcome.errorCode;
    if (code === undefined) return;
    this.ring[this.next] = {
      ts_ms: Math.round(outcome.tsMs),
      request_id: outcome.requestId,
      tenant: outcome.tenantId,
      class: outcome.effectiveClass ?? outcome.requestedClass ?? null,
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

  /** Totals per error code since start (a copy). */
  codeTotals(): Map<string, CodeCount> {
    return new Map([...this.codes].map(([code, c]) => [code, { ...c }]));
  }
}

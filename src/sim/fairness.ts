/**
 * Fairness measured online, per class, among the tenants that send traffic in that class:
 *
 * - the backlogged period: the time during which every tenant of the class has a request waiting for
 *   admission;
 * - shares and Jain's index: the service each tenant received during the backlogged period, where a
 *   completed request's actual tokens (prompt + output) are spread evenly over its time in the fleet
 *   (admission to end; issue 36). Counting them at dispatch instead credited a tenant with nothing
 *   while its requests in flight were being served: on the Azure trace, a tenant whose demand was
 *   met had thousands of millisecond stretches with one waiter, in each of which the other tenant
 *   was dispatched first (the fair queue counts the first tenant's in-flight work), and the share
 *   read 36/64 for weights 2:1 while the fair queue's counters agreed with the weights;
 * - the dispatch-time service (`FairnessWindow.service`: actual tokens at admission, minus those
 *   later preempted before their first byte) feeds the service gap, the quantity the VTC bound is
 *   about;
 * - the service gap: for every pair of tenants, over every stretch of time during which both are
 *   continuously backlogged, |S_f/w_f - S_g/w_g| over that stretch; the largest is reported beside
 *   the VTC bound (docs/simulate.md derives the bound used).
 */

export interface Window {
  name: string;
  fromMs: number;
  toMs: number;
}

class FairnessWindow {
  /** Tokens dispatched per member while every member was backlogged. */
  readonly service: Float64Array;
  /** Milliseconds during which every member was backlogged. */
  backloggedMs = 0;
  private readonly pairD: Float64Array;
  private readonly pairMin: Float64Array;
  private readonly pairMax: Float64Array;
  readonly pairGap: Float64Array;
  private readonly pairActive: Uint8Array;

  constructor(
    readonly window: Window,
    readonly size: number,
  ) {
    this.service = new Float64Array(size);
    const pairs = (size * (size - 1)) / 2;
    this.pairD = new Float64Array(pairs);
    this.pairMin = new Float64Array(pairs);
    this.pairMax = new Float64Array(pairs);
    this.pairGap = new Float64Array(pairs);
    this.pairActive = new Uint8Array(pairs);
  }

  contains(t: number): boolean {
    return t >= this.window.fromMs && t < this.window.toMs;
  }

  static pairIndex(a: number, b: number, size: number): number {
    // a < b
    return a * size - (a * (a + 1)) / 2 + (b - a - 1);
  }

  /** Member `a` received `units` (tokens / weight); members with backlog[b] > 0 are co-backlogged. */
  move(a: number, units: number, backlogged: (b: number) => boolean): void {
    const n = this.size;
    for (let b = 0; b < n; b++) {
      if (b === a) continue;
      const lo = a < b ? a : b;
      const hi = a < b ? b : a;
      const p = FairnessWindow.pairIndex(lo, hi, n);
      if (!backlogged(b)) {
        this.pairActive[p] = 0;
        continue;
      }
      if (this.pairActive[p] === 0) {
        this.pairActive[p] = 1;
        this.pairD[p] = 0;
        this.pairMin[p] = 0;
        this.pairMax[p] = 0;
      }
      const d = this.pairD[p]! + (a < b ? units : -units);
      this.pairD[p] = d;
      if (d < this.pairMin[p]!) this.pairMin[p] = d;
      if (d > this.pairMax[p]!) this.pairMax[p] = d;
      const gap = Math.max(d - this.pairMin[p]!, this.pairMax[p]! - d);
      if (gap > this.pairGap[p]!) this.pairGap[p] = gap;
    }
  }

  /** A member's backlog emptied: every stretch it was part of ends. */
  end(a: number): void {
    const n = this.size;
    for (let b = 0; b < n; b++) {
      if (b === a) continue;
      this.pairActive[FairnessWindow.pairIndex(a < b ? a : b, a < b ? b : a, n)] = 0;
    }
  }

  /** The largest gap and the pair it was seen between. */
  largestGap(): { gap: number; a: number; b: number } {
    let best = { gap: 0, a: -1, b: -1 };
    const n = this.size;
    for (let a = 0; a < n; a++) {
      for (let b = a + 1; b < n; b++) {
        const g = this.pairGap[FairnessWindow.pairIndex(a, b, n)]!;
        if (g > best.gap) best = { gap: g, a, b };
      }
    }
    return best;
  }
}

/** One class's tenants, their backlog, and the windows measured over them. */
export class FairnessGroup {
  /** Member index per tenant index (-1 when the tenant sends nothing in this class). */
  readonly memberOf: Int32Array;
  readonly backlog: Int32Array;
  private backloggedCount = 0;
  private allSince = Number.NaN;
  readonly windows: FairnessWindow[];
  /** Largest estimated cost of one request admitted in the class (tokens). */
  maxEstimate = 0;
  /** Largest total estimated tokens in flight in the class at once. */
  maxInflightEstimate = 0;
  inflightEstimate = 0;
  private readonly isBacklogged = (b: number) => this.backlog[b]! > 0;
  /** The backlogged stretches, [from, to) in ms, in time order. */
  readonly stretches: number[] = [];
  /** Completed requests: member, admitted, ended (ms) and actual tokens, four numbers each. */
  private readonly served: number[] = [];

  constructor(
    readonly cls: number,
    /** Tenant indices of the members. */
    readonly members: number[],
    /** Fair-share weight per member. */
    readonly weights: number[],
    tenantCount: number,
    windows: Window[],
  ) {
    this.memberOf = new Int32Array(tenantCount).fill(-1);
    members.forEach((t, i) => {
      this.memberOf[t] = i;
    });
    this.backlog = new Int32Array(members.length);
    this.windows = windows.map((w) => new FairnessWindow(w, members.length));
  }

  get allBacklogged(): boolean {
    return this.backloggedCount === this.members.length && this.members.length > 1;
  }

  /** A request of `tenant` starts waiting for admission. */
  queued(tenant: number, now: number): void {
    const m = this.memberOf[tenant]!;
    if (m < 0) return;
    if (this.backlog[m]!++ === 0) {
      this.backloggedCount++;
      if (this.allBacklogged) this.allSince = now;
    }
  }

  /** A request of `tenant` stops waiting (admitted or rejected). Call after dispatched(). */
  left(tenant: number, now: number): void {
    const m = this.memberOf[tenant]!;
    if (m < 0) return;
    if (--this.backlog[m]! === 0) {
      if (this.allBacklogged) this.closeAll(now);
      this.backloggedCount--;
      for (const w of this.windows) w.end(m);
    }
  }

  /** A request of `tenant` is admitted with `tokens` actual tokens; call before left(). */
  dispatched(tenant: number, tokens: number, estimate: number, now: number): void {
    this.inflightEstimate += estimate;
    if (this.inflightEstimate > this.maxInflightEstimate) this.maxInflightEstimate = this.inflightEstimate;
    if (estimate > this.maxEstimate) this.maxEstimate = estimate;
    const m = this.memberOf[tenant]!;
    if (m < 0) return;
    const all = this.allBacklogged;
    const units = tokens / this.weights[m]!;
    for (const w of this.windows) {
      if (!w.contains(now)) continue;
      if (all) w.service[m]! += tokens;
      w.move(m, units, this.isBacklogged);
    }
  }

  /** An admitted request left the fleet (finished, failed or preempted). */
  finished(estimate: number): void {
    this.inflightEstimate -= estimate;
  }

  /** An admitted request was preempted before its first byte: its service is taken back. */
  undone(tenant: number, tokens: number, now: number): void {
    const m = this.memberOf[tenant]!;
    if (m < 0) return;
    const all = this.allBacklogged;
    for (const w of this.windows) {
      if (!w.contains(now)) continue;
      if (all) w.service[m] = Math.max(0, w.service[m]! - tokens);
      w.move(m, -tokens / this.weights[m]!, this.isBacklogged);
    }
  }

  /** A request of `tenant` admitted at `from` completed at `to` with `tokens` actual tokens. */
  completed(tenant: number, from: number, to: number, tokens: number): void {
    const m = this.memberOf[tenant]!;
    if (m < 0 || this.members.length < 2) return;
    this.served.push(m, from, to, tokens);
  }

  /**
   * Per member, the tokens served during the window's backlogged stretches: each completed request's
   * tokens spread evenly over [admitted, ended] (a zero-length one counts where it falls).
   */
  spreadService(window: Window, minStretchMs = 0): Float64Array {
    const out = new Float64Array(this.members.length);
    const st = this.stretches;
    const n = st.length / 2;
    const rec = this.served;
    for (let i = 0; i < rec.length; i += 4) {
      const m = rec[i]!;
      const from = rec[i + 1]!;
      const to = rec[i + 2]!;
      const tokens = rec[i + 3]!;
      // The first stretch that ends after the request started.
      let lo = 0;
      let hi = n;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (st[2 * mid + 1]! <= from) lo = mid + 1;
        else hi = mid;
      }
      for (let k = lo; k < n && st[2 * k]! <= to; k++) {
        if (st[2 * k + 1]! - st[2 * k]! < minStretchMs) continue;
        const a = Math.max(from, st[2 * k]!, window.fromMs);
        const b = Math.min(to, st[2 * k + 1]!, window.toMs);
        if (to > from) {
          if (b > a) out[m]! += (tokens * (b - a)) / (to - from);
        } else if (a <= b && b < st[2 * k + 1]! && a >= window.fromMs && a < window.toMs) {
          out[m]! += tokens;
        }
      }
    }
    return out;
  }

  private closeAll(now: number): void {
    const since = this.allSince;
    if (now > since) this.stretches.push(since, now);
    for (const w of this.windows) {
      const from = Math.max(since, w.window.fromMs);
      const to = Math.min(now, w.window.toMs);
      if (to > from) w.backloggedMs += to - from;
    }
    this.allSince = Number.NaN;
  }

  /** Ends the run: a backlogged period still open is closed at `now`. */
  close(now: number): void {
    if (this.allBacklogged) {
      this.closeAll(now);
      this.allSince = now;
    }
  }
}

/**
 * Stretches shorter than this are left out of the sustained shares: in a stretch of a few
 * milliseconds one waiter is served, and which tenant's is decides the share, not the weights.
 */
export const SUSTAINED_STRETCH_MS = 10_000;

/** Milliseconds of the window's backlogged stretches at least `minStretchMs` long. */
export function stretchTime(stretches: readonly number[], window: Window, minStretchMs: number): number {
  let ms = 0;
  for (let k = 0; k < stretches.length; k += 2) {
    if (stretches[k + 1]! - stretches[k]! < minStretchMs) continue;
    const a = Math.max(stretches[k]!, window.fromMs);
    const b = Math.min(stretches[k + 1]!, window.toMs);
    if (b > a) ms += b - a;
  }
  return ms;
}

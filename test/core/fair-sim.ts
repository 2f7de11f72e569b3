/**
 * A discrete-event driver for fairness tests: the real scheduler (createScheduler) on a
 * ManualClock, fed requests with an estimate, an actual cost, a time to first byte and a service
 * time. Every admission, first byte, completion (adjustCost with the actual, then release) and
 * departure is logged at its exact instant: the driver stops the clock at every queue-timeout
 * deadline, so a timeout is seen when it happens, not at the next event. Nothing sleeps.
 *
 * The log is what the fluid reference (fluid-reference.ts) replays and what the bounds are
 * checked against. One class (bulk) is shared by the tenants under test; `system` requests, when
 * used, preempt bulk requests that have not produced their first byte.
 */
import type { SchedulerPermit } from "@sluice/scheduler/core/inflight.js";
import { type AdmissionError, ManualClock } from "../../src/index.js";
import { createTestScheduler, flush, noReservations, type TestScheduler } from "./helpers.js";

/**
 * Lets the reactions to promises the scheduler settled synchronously run (admissions, rejections):
 * they are already queued, so a few microtask turns are enough, and much cheaper than a
 * setImmediate round per event. run() ends with a full flush anyway.
 */
async function settle(): Promise<void> {
  await null;
  await null;
  await null;
}

export interface SimTenant {
  readonly name: string;
  readonly weight: number;
}

export interface SimOptions {
  capacity: number;
  tenants: readonly SimTenant[];
  /** Queue timeout of the shared class, seconds (default: effectively none). */
  timeoutSecs?: number;
  /** Queue size of the shared class (default 1e6). */
  queueSize?: number;
  /** Starvation threshold of the shared class, seconds (default: effectively none). */
  starvationSecs?: number;
}

export interface RequestSpec {
  tenant: string;
  /** Estimated cost given to acquire. */
  est: number;
  /** Actual cost reported with adjustCost when the request completes. */
  act: number;
  /** Admission to completion. */
  serviceMs: number;
  /** Admission to first byte (preemptible until then); default 0. */
  ttftMs?: number;
  /** The client leaves this long after arriving (abort while queued; cut short while running). */
  cancelAfterMs?: number;
  /** A `system` request (preempts a bulk one when it finds no room). */
  system?: boolean;
}

export type RequestState =
  | "pending"
  | "running"
  | "done"
  | "timeout"
  | "cancelled"
  | "queue_full"
  | "preempted";

export class SimRequest implements RequestSpec {
  readonly tenant: string;
  readonly est: number;
  readonly act: number;
  readonly serviceMs: number;
  readonly ttftMs: number;
  readonly cancelAfterMs: number | undefined;
  readonly system: boolean;
  state: RequestState = "pending";
  admittedAt = Number.NaN;
  firstByteAt = Number.NaN;
  doneAt = Number.NaN;
  /** The cost reported at completion (the actual, or what was produced before a cancel). */
  reported = 0;
  admission: "fast" | "queued" | undefined = undefined;
  promoted = false;
  permit: SchedulerPermit | undefined = undefined;
  readonly controller: AbortController | undefined;

  constructor(
    readonly id: number,
    readonly arrivedAt: number,
    spec: RequestSpec,
  ) {
    this.tenant = spec.tenant;
    this.est = spec.est;
    this.act = spec.act;
    this.serviceMs = spec.serviceMs;
    this.ttftMs = spec.ttftMs ?? 0;
    this.cancelAfterMs = spec.cancelAfterMs;
    this.system = spec.system ?? false;
    this.controller = spec.cancelAfterMs !== undefined ? new AbortController() : undefined;
  }
}

export type LogEvent =
  | { t: number; kind: "arrive"; id: number }
  | { t: number; kind: "dispatch"; id: number }
  | { t: number; kind: "leave"; id: number; why: "timeout" | "cancelled" | "queue_full" | "preempted" }
  | { t: number; kind: "complete"; id: number; reported: number }
  | { t: number; kind: "capacity"; value: number };

interface Pending {
  at: number;
  seq: number;
  fn: () => void;
}

export class FairSim {
  readonly clock = new ManualClock();
  readonly s: TestScheduler;
  readonly requests: SimRequest[] = [];
  readonly log: LogEvent[] = [];
  readonly weights: ReadonlyMap<string, number>;
  readonly timeoutMs: number;
  private readonly events: Pending[] = [];
  private seq = 0;
  private readonly errors: unknown[] = [];

  constructor(readonly options: SimOptions) {
    const tenantPolicies: Record<string, { weight: number; max_class: "system" }> = {};
    for (const t of options.tenants) tenantPolicies[t.name] = { weight: t.weight, max_class: "system" };
    tenantPolicies["sys"] = { weight: 1, max_class: "system" };
    this.weights = new Map(options.tenants.map((t) => [t.name, t.weight]));
    this.timeoutMs = (options.timeoutSecs ?? 1e7) * 1000;
    this.s = createTestScheduler({
      capacity: options.capacity,
      clock: this.clock,
      tenantPolicies,
      classes: noReservations({
        bulk: {
          queue_size: options.queueSize ?? 1_000_000,
          queue_timeout_secs: options.timeoutSecs ?? 1e7,
          starvation_threshold_secs: options.starvationSecs ?? 1e7,
        },
        system: { can_preempt: true, queue_size: 1_000_000, queue_timeout_secs: 1e7 },
      }),
    });
  }

  /** Schedules `fn` at absolute time `at` (ms). */
  at(at: number, fn: () => void): void {
    const e = { at, seq: this.seq++, fn };
    const h = this.events;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const q = h[p]!;
      if (q.at < e.at || (q.at === e.at && q.seq < e.seq)) break;
      h[i] = q;
      i = p;
    }
    h[i] = e;
  }

  private popEvent(): Pending | undefined {
    const h = this.events;
    const top = h[0];
    const last = h.pop();
    if (top === undefined || last === undefined || h.length === 0) return top;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= h.length) break;
      const r = l + 1;
      let c = l;
      if (r < h.length && (h[r]!.at < h[l]!.at || (h[r]!.at === h[l]!.at && h[r]!.seq < h[l]!.seq))) c = r;
      const x = h[c]!;
      if (last.at < x.at || (last.at === x.at && last.seq < x.seq)) break;
      h[i] = x;
      i = c;
    }
    h[i] = last;
    return top;
  }

  /** A request arriving at `at`. */
  arrive(at: number, spec: RequestSpec): void {
    this.at(at, () => this.submit(spec));
  }

  /** A live capacity change at `at`. */
  capacityAt(at: number, value: number): void {
    this.at(at, () => {
      this.log.push({ t: this.clock.now(), kind: "capacity", value });
      this.s.setCapacity(value);
    });
  }

  /** Runs every event up to `until` (ms), flushing promise reactions after each. */
  async run(until: number): Promise<void> {
    // The scheduler builds an error per timeout; their stack traces are most of the cost of a run.
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      await this.runEvents(until);
    } finally {
      Error.stackTraceLimit = stackTraceLimit;
    }
  }

  private async runEvents(until: number): Promise<void> {
    for (;;) {
      const top = this.events[0];
      if (top === undefined || top.at > until) break;
      this.popEvent();
      this.clock.advanceTo(top.at);
      top.fn();
      await settle();
    }
    this.clock.advanceTo(until);
    await flush();
    if (this.errors.length > 0) throw this.errors[0];
  }

  private submit(spec: RequestSpec): void {
    const now = this.clock.now();
    const r = new SimRequest(this.requests.length, now, spec);
    this.requests.push(r);
    if (!spec.system) this.log.push({ t: now, kind: "arrive", id: r.id });
    const promise = this.s.acquire({
      priority: spec.system ? "system" : "bulk",
      tenant: spec.system ? "sys" : spec.tenant,
      cost: spec.est,
      signal: r.controller?.signal,
    });
    promise.then(
      (permit) => this.onAdmitted(r, permit),
      (error: unknown) => this.onRejected(r, error),
    );
    // Stop the clock at this waiter's deadline, so its timeout is logged when it happens.
    if (!spec.system) this.at(now + this.timeoutMs, () => {});
    if (spec.cancelAfterMs !== undefined) this.at(now + spec.cancelAfterMs, () => this.cancel(r));
  }

  private onAdmitted(r: SimRequest, permit: SchedulerPermit): void {
    const now = this.clock.now();
    r.state = "running";
    r.permit = permit;
    r.admittedAt = now;
    r.admission = permit.admission;
    r.promoted = permit.promoted;
    if (!r.system) this.log.push({ t: now, kind: "dispatch", id: r.id });
    permit.onPreempt(() => {
      r.state = "preempted";
      r.doneAt = this.clock.now();
      this.log.push({ t: this.clock.now(), kind: "leave", id: r.id, why: "preempted" });
      permit.release(); // a no-op for capacity: the slot already moved on
    });
    if (r.ttftMs <= 0) this.firstByte(r);
    else this.at(now + r.ttftMs, () => this.firstByte(r));
    this.at(now + r.serviceMs, () => this.complete(r, r.act));
  }

  private firstByte(r: SimRequest): void {
    if (r.state !== "running" || !Number.isNaN(r.firstByteAt)) return;
    if (r.permit!.markFirstByte()) r.firstByteAt = this.clock.now();
  }

  private complete(r: SimRequest, reported: number): void {
    if (r.state !== "running") return;
    r.state = "done";
    r.doneAt = this.clock.now();
    r.reported = reported;
    if (!r.system) this.log.push({ t: r.doneAt, kind: "complete", id: r.id, reported });
    this.s.adjustCost(r.permit!, reported);
    r.permit!.release();
  }

  private cancel(r: SimRequest): void {
    if (r.state === "pending") {
      r.controller!.abort();
      return; // the rejection is logged when it lands (at this same instant)
    }
    if (r.state !== "running") return;
    // Cut short while running: what was produced so far is what it cost.
    const produced = Number.isNaN(r.firstByteAt)
      ? 0
      : Math.round((r.act * (this.clock.now() - r.admittedAt)) / r.serviceMs);
    this.complete(r, Math.min(r.act, produced));
  }

  private onRejected(r: SimRequest, error: unknown): void {
    const code = (error as AdmissionError).code;
    const why =
      code === "scheduler_queue_timeout"
        ? "timeout"
        : code === "scheduler_client_cancelled"
          ? "cancelled"
          : code === "scheduler_queue_full"
            ? "queue_full"
            : undefined;
    if (why === undefined) {
      this.errors.push(error);
      return;
    }
    r.state = why;
    r.doneAt = this.clock.now();
    if (!r.system) this.log.push({ t: r.doneAt, kind: "leave", id: r.id, why });
  }

  /** Tokens reported by completed requests of each tenant whose completion falls in [from, to). */
  completedTokens(from: number, to: number): Map<string, number> {
    const out = new Map<string, number>([...this.weights.keys()].map((n) => [n, 0]));
    for (const r of this.requests) {
      if (r.system || r.state !== "done" || r.doneAt < from || r.doneAt >= to) continue;
      out.set(r.tenant, out.get(r.tenant)! + r.reported);
    }
    return out;
  }
}

/** Shares (fractions of the total) of a per-tenant tally. */
export function shares(tally: ReadonlyMap<string, number>): Map<string, number> {
  let total = 0;
  for (const v of tally.values()) total += v;
  return new Map([...tally].map(([k, v]) => [k, total > 0 ? v / total : 0]));
}

/** Largest relative deviation |share - weight share| / weight share over the tenants. */
export function worstShareError(
  tally: ReadonlyMap<string, number>,
  weights: ReadonlyMap<string, number>,
): number {
  let weightSum = 0;
  for (const w of weights.values()) weightSum += w;
  let worst = 0;
  for (const [name, share] of shares(tally)) {
    const want = weights.get(name)! / weightSum;
    worst = Math.max(worst, Math.abs(share - want) / want);
  }
  return worst;
}

/** "12.5 / 25.0 / 62.5" */
export function formatShares(tally: ReadonlyMap<string, number>): string {
  return [...shares(tally).values()].map((s) => (100 * s).toFixed(1)).join(" / ");
}

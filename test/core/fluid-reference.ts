/**
 * The fluid reference for fairness tests: generalized processor sharing (GPS) replayed over a
 * FairSim log. docs/fairness.md states what it computes and the bounds checked against it.
 *
 * The reference sees the same requests arrive and leave as the real scheduler, and the same
 * service: every time the real scheduler dispatches a request that is not preempted afterwards,
 * the reference server delivers exactly that request's actual cost at that instant. It does not
 * give it to that request: it shares it among the tenants that still have outstanding work, in
 * proportion to their weights (water-filling: a tenant never gets more than its outstanding work;
 * what it cannot take goes to the others). A tenant's outstanding work is the actual cost of its
 * requests that have arrived, minus the whole cost of those that left unserved (timeout, cancel,
 * preemption), minus the fluid service it has received. So the reference is what an ideal fluid
 * scheduler would have given each tenant with the same arrivals, departures and total service:
 * the service each tenant is owed.
 *
 * Outstanding work is kept per tenant, not per request: a per-request fluid would spend part of a
 * tenant's share on requests the real queue later drops (timeouts in overload) and still owe the
 * tenant every request the real scheduler served, crediting the tenant twice; over many overload
 * episodes that drifts without bound and measures the reference, not the scheduler.
 *
 * Real service is counted the same way: the actual cost of each dispatched request, at its
 * dispatch, unless it was preempted (a preempted request served nothing).
 */
import type { FairSim, LogEvent } from "./fair-sim.js";

const EPS = 1e-9;

interface FluidTenant {
  readonly name: string;
  readonly weight: number;
  /** Outstanding work. */
  demand: number;
  /** Cumulative fluid service. */
  fluid: number;
  /** Cumulative real service (dispatch-valued). */
  real: number;
  /** Waiters in the real queue (real backlog). */
  queued: number;
  /** Real-backlog period in progress: the lag's extremes since it began. */
  lagMin: number;
  lagMax: number;
  /** Start of the real-backlog period in progress (ms), NaN when not backlogged. */
  since: number;
}

export interface LagReport {
  /** Worst lag over any stretch of a continuously backlogged period, per tenant (tokens). */
  worst: Map<string, number>;
  /** Where the worst happened: the backlogged period's start and the time the lag peaked. */
  where: Map<string, { since: number; at: number }>;
  /** Largest |real - fluid| cumulative since the start, per tenant, seen while backlogged. */
  worstCumulative: Map<string, number>;
  /** Total service delivered, and how much of it no tenant had fluid demand for. */
  delivered: number;
  wasted: number;
  /** Final cumulative fluid and real service per tenant. */
  fluid: Map<string, number>;
  real: Map<string, number>;
}

/** The value of each request's service: the actual reported at completion (planned if still running). */
function serviceValue(sim: FairSim, id: number): number {
  const r = sim.requests[id]!;
  if (r.state === "preempted") return 0;
  if (r.state === "done") return r.reported;
  return r.act;
}

/**
 * Replays the log through GPS. `onEvent` (optional) sees each tenant's real and fluid totals after
 * every event, for checks that need the whole trajectory.
 */
export function replayGps(
  sim: FairSim,
  onEvent?: (
    e: LogEvent,
    tenants: ReadonlyMap<string, { real: number; fluid: number; queued: number }>,
  ) => void,
): LagReport {
  const tenants = new Map<string, FluidTenant>();
  for (const [name, weight] of sim.weights) {
    tenants.set(name, {
      name,
      weight,
      demand: 0,
      fluid: 0,
      real: 0,
      queued: 0,
      lagMin: 0,
      lagMax: 0,
      since: Number.NaN,
    });
  }
  const list = [...tenants.values()];
  const report: LagReport = {
    worst: new Map(list.map((t) => [t.name, 0])),
    where: new Map(),
    worstCumulative: new Map(list.map((t) => [t.name, 0])),
    delivered: 0,
    wasted: 0,
    fluid: new Map(),
    real: new Map(),
  };

  const give = (t: FluidTenant, amount: number) => {
    t.fluid += amount;
    t.demand -= amount;
    if (t.demand < EPS) t.demand = 0;
  };

  /** Water-fills `amount` over the tenants with fluid demand, by weight. */
  const serve = (amount: number) => {
    report.delivered += amount;
    let left = amount;
    while (left > EPS) {
      const active = list.filter((t) => t.demand > EPS);
      if (active.length === 0) {
        report.wasted += left;
        return;
      }
      let weightSum = 0;
      let level = Number.POSITIVE_INFINITY; // service per unit weight until the first tenant runs dry
      for (const t of active) {
        weightSum += t.weight;
        level = Math.min(level, t.demand / t.weight);
      }
      const step = Math.min(level, left / weightSum);
      for (const t of active) give(t, t.weight * step);
      left -= step * weightSum;
    }
  };

  const view = new Map(list.map((t) => [t.name, t as { real: number; fluid: number; queued: number }]));
  const before = new Map<string, boolean>();
  for (const e of sim.log) {
    for (const u of list) before.set(u.name, u.queued > 0);
    if (e.kind === "capacity") {
      onEvent?.(e, view);
      continue;
    }
    const r = sim.requests[e.id]!;
    const t = tenants.get(r.tenant)!;
    switch (e.kind) {
      case "arrive": {
        // Its work is what it really costs (what a cut-short request produced, if it was cut).
        t.demand += r.state === "done" ? r.reported : r.act;
        t.queued++;
        break;
      }
      case "dispatch": {
        t.queued--;
        const value = serviceValue(sim, e.id);
        if (value > 0) {
          t.real += value;
          serve(value);
        }
        break;
      }
      case "leave":
        if (e.why !== "preempted") t.queued--;
        // It takes its whole cost out of the tenant's outstanding work (never below 0).
        t.demand = Math.max(0, t.demand - r.act);
        break;
      case "complete":
        break;
    }
    // Lag bookkeeping for every tenant (service to one moves the others' lag too). The event that
    // ends a backlogged period (its last waiter dispatched) still belongs to it.
    for (const u of list) {
      const lag = u.real - u.fluid;
      if (u.queued > 0 || before.get(u.name)) {
        if (Number.isNaN(u.since)) {
          u.since = e.t;
          u.lagMin = u.lagMax = lag;
        } else {
          if (lag < u.lagMin) u.lagMin = lag;
          if (lag > u.lagMax) u.lagMax = lag;
        }
        const spread = u.lagMax - u.lagMin;
        if (spread > report.worst.get(u.name)!) {
          report.worst.set(u.name, spread);
          report.where.set(u.name, { since: u.since, at: e.t });
        }
        const cumulative = Math.abs(lag);
        if (cumulative > report.worstCumulative.get(u.name)!) report.worstCumulative.set(u.name, cumulative);
      }
      if (u.queued === 0) u.since = Number.NaN;
    }
    onEvent?.(e, view);
  }
  for (const t of list) {
    report.fluid.set(t.name, t.fluid);
    report.real.set(t.name, t.real);
  }
  return report;
}

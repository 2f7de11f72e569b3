/**
 * The fairness bounds of docs/fairness.md, measured on a FairSim run. Everything here is computed
 * from what a client of the scheduler can observe (each request's estimate, actual, and when it
 * was queued, dispatched, completed or left), never from the scheduler's internals.
 *
 * Service is dispatch-valued: a request that was dispatched and not preempted counts its actual
 * cost (what it reported at completion) at its dispatch.
 */
import type { FairSim } from "./fair-sim.js";

export interface TenantMasses {
  /** Largest estimate (tokens). */
  E: number;
  /** Largest total of (actual - estimate)+ over the tenant's requests in flight at one time. */
  U: number;
  /** Largest total of max(estimate, actual) in flight at one time. */
  M: number;
  /** Largest total of estimates in flight at one time. */
  P: number;
  /** Omega = E + U + 3M + 2P: the tenant's term in the bounds (tokens). */
  omega: number;
}

/** Per-tenant in-flight masses over the whole run. */
export function tenantMasses(sim: FairSim): Map<string, TenantMasses> {
  const out = new Map<string, TenantMasses>();
  const cur = new Map<string, { U: number; M: number; P: number }>();
  for (const name of sim.weights.keys()) {
    out.set(name, { E: 0, U: 0, M: 0, P: 0, omega: 0 });
    cur.set(name, { U: 0, M: 0, P: 0 });
  }
  const open = new Set<number>();
  for (const e of sim.log) {
    if (e.kind === "capacity" || e.kind === "arrive") continue;
    const r = sim.requests[e.id]!;
    const m = out.get(r.tenant)!;
    const c = cur.get(r.tenant)!;
    const actual = r.state === "done" ? r.reported : r.act;
    const sign = e.kind === "dispatch" ? 1 : -1;
    if (e.kind === "dispatch") {
      open.add(e.id);
      m.E = Math.max(m.E, r.est);
    } else if (open.has(e.id)) {
      open.delete(e.id); // completed, or preempted while running
    } else {
      continue; // left while queued
    }
    c.U += sign * Math.max(0, actual - r.est);
    c.M += sign * Math.max(r.est, actual);
    c.P += sign * r.est;
    m.U = Math.max(m.U, c.U);
    m.M = Math.max(m.M, c.M);
    m.P = Math.max(m.P, c.P);
  }
  for (const m of out.values()) m.omega = m.E + m.U + 3 * m.M + 2 * m.P;
  return out;
}

/** Dispatch-valued service of a request (0 when preempted). */
export function served(sim: FairSim, id: number): number {
  const r = sim.requests[id]!;
  if (r.state === "preempted") return 0;
  return r.state === "done" ? r.reported : r.act;
}

export interface PairReport {
  /** Worst |W_f/w_f - W_g/w_g| over any stretch where both were backlogged, and its bound. */
  worst: number;
  bound: number;
  f: string;
  g: string;
}

/**
 * Theorem 1: for tenants f and g both continuously backlogged over [t1, t2],
 * |W_f/w_f - W_g/w_g| <= Omega_f/w_f + Omega_g/w_g. Returns the pair closest to its bound.
 */
export function pairwise(sim: FairSim, masses: ReadonlyMap<string, TenantMasses>): PairReport[] {
  const names = [...sim.weights.keys()];
  const index = new Map(names.map((n, i) => [n, i]));
  const weight = names.map((n) => sim.weights.get(n)!);
  const n = names.length;
  const queued = new Array<number>(n).fill(0);
  const norm = new Array<number>(n).fill(0); // W / w so far
  // Per pair (i < j): inside a stretch where both are backlogged, the extremes of norm_i - norm_j.
  const active: boolean[] = [];
  const lo: number[] = [];
  const hi: number[] = [];
  const worst: number[] = [];
  for (let k = 0; k < n * n; k++) {
    active.push(false);
    lo.push(0);
    hi.push(0);
    worst.push(0);
  }
  for (const e of sim.log) {
    if (e.kind === "capacity" || e.kind === "complete") continue;
    const r = sim.requests[e.id]!;
    const i0 = index.get(r.tenant)!;
    const wasQueued = queued[i0]! > 0;
    let gain = 0;
    if (e.kind === "arrive") queued[i0]!++;
    else if (e.kind === "dispatch") {
      queued[i0]!--;
      gain = served(sim, e.id) / weight[i0]!;
      norm[i0]! += gain;
    } else if (e.why !== "preempted") queued[i0]!--;
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const k = i * n + j;
        const nowBoth = queued[i]! > 0 && queued[j]! > 0;
        // The event that ends a stretch (its last waiter dispatched) still belongs to it.
        const qi = i === i0 ? wasQueued : queued[i]! > 0;
        const qj = j === i0 ? wasQueued : queued[j]! > 0;
        const x = norm[i]! - norm[j]!;
        if (nowBoth || (qi && qj)) {
          if (!active[k]) {
            // The stretch starts just before this event's service.
            const prev = x - (i === i0 ? gain : j === i0 ? -gain : 0);
            active[k] = true;
            lo[k] = Math.min(prev, x);
            hi[k] = Math.max(prev, x);
          } else {
            if (x < lo[k]!) lo[k] = x;
            if (x > hi[k]!) hi[k] = x;
          }
          if (hi[k]! - lo[k]! > worst[k]!) worst[k] = hi[k]! - lo[k]!;
        }
        if (!nowBoth) active[k] = false;
      }
    }
  }
  const out: PairReport[] = [];
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      const f = names[i]!;
      const g = names[j]!;
      const bound = masses.get(f)!.omega / weight[i]! + masses.get(g)!.omega / weight[j]!;
      out.push({ worst: worst[i * n + j]!, bound, f, g });
    }
  }
  return out;
}

/**
 * The GPS lag bound of docs/fairness.md for a continuously backlogged tenant f:
 * Lambda_f = w_f * max over g != f of (Omega_f/w_f + Omega_g/w_g) + 2 (N - 1) A.
 */
export function gpsLagBound(sim: FairSim, masses: ReadonlyMap<string, TenantMasses>, f: string): number {
  const { proven, allowance } = gpsLagParts(sim, masses, f);
  return proven + allowance;
}

/** Lambda_f's two parts: w_f * max Theta_fg (proven) and 2 (N - 1) A (the argued edge allowance). */
export function gpsLagParts(
  sim: FairSim,
  masses: ReadonlyMap<string, TenantMasses>,
  f: string,
): { proven: number; allowance: number } {
  const wf = sim.weights.get(f)!;
  let A = 0;
  for (const r of sim.requests) if (!r.system) A = Math.max(A, r.act);
  let theta = 0;
  for (const [g, wg] of sim.weights) {
    if (g === f) continue;
    theta = Math.max(theta, masses.get(f)!.omega / wf + masses.get(g)!.omega / wg);
  }
  return { proven: wf * theta, allowance: 2 * (sim.weights.size - 1) * A };
}

export interface WaitReport {
  tenant: string;
  /** Tokens charged to other tenants (final charges) during the tenant's longest wait. */
  worst: number;
  bound: number;
  /** The same wait in dispatches. */
  dispatches: number;
}

/** A request's final charge: its reported actual once done, its estimate while running, 0 if preempted. */
export function finalCharge(sim: FairSim, id: number): number {
  const r = sim.requests[id]!;
  if (r.state === "done") return r.reported;
  if (r.state === "running") return r.est;
  return 0;
}

/**
 * Theorem 3: while f is backlogged and waits for its next dispatch, the final charges of the
 * requests dispatched to another tenant g add up to at most
 * w_g (E_f + 2 U_f + M_f + P_f) / w_f + 2 P_g + U_g + max(E_g, A_g); the bound for the wait is the
 * sum over g != f. A_g is g's largest actual.
 */
export function waits(sim: FairSim, masses: ReadonlyMap<string, TenantMasses>): WaitReport[] {
  const names = [...sim.weights.keys()];
  const largestActual = new Map(names.map((n) => [n, 0]));
  for (const r of sim.requests) {
    if (r.system) continue;
    largestActual.set(r.tenant, Math.max(largestActual.get(r.tenant)!, r.act, r.reported));
  }
  const bounds = new Map<string, number>();
  for (const f of names) {
    const mf = masses.get(f)!;
    const wf = sim.weights.get(f)!;
    let b = 0;
    for (const g of names) {
      if (g === f) continue;
      const mg = masses.get(g)!;
      const wg = sim.weights.get(g)!;
      b +=
        (wg * (mf.E + 2 * mf.U + mf.M + mf.P)) / wf + 2 * mg.P + mg.U + Math.max(mg.E, largestActual.get(g)!);
    }
    bounds.set(f, b);
  }
  const queued = new Map(names.map((n) => [n, 0]));
  const since = new Map(names.map((n) => [n, 0]));
  const sinceN = new Map(names.map((n) => [n, 0]));
  const worst = new Map(names.map((n) => [n, 0]));
  const worstN = new Map(names.map((n) => [n, 0]));
  for (const e of sim.log) {
    if (e.kind === "capacity") continue;
    const r = sim.requests[e.id]!;
    if (e.kind === "arrive") {
      if (queued.get(r.tenant) === 0) {
        since.set(r.tenant, 0); // a wait starts when the tenant becomes backlogged
        sinceN.set(r.tenant, 0);
      }
      queued.set(r.tenant, queued.get(r.tenant)! + 1);
    } else if (e.kind === "leave" && e.why !== "preempted") {
      queued.set(r.tenant, queued.get(r.tenant)! - 1);
    } else if (e.kind === "dispatch") {
      queued.set(r.tenant, queued.get(r.tenant)! - 1);
      since.set(r.tenant, 0);
      sinceN.set(r.tenant, 0);
      const charge = finalCharge(sim, e.id);
      for (const f of names) {
        if (f === r.tenant || queued.get(f)! === 0) continue;
        since.set(f, since.get(f)! + charge);
        sinceN.set(f, sinceN.get(f)! + 1);
        worst.set(f, Math.max(worst.get(f)!, since.get(f)!));
        worstN.set(f, Math.max(worstN.get(f)!, sinceN.get(f)!));
      }
    }
  }
  return names.map((n) => ({
    tenant: n,
    worst: worst.get(n)!,
    bound: bounds.get(n)!,
    dispatches: worstN.get(n)!,
  }));
}

/**
 * Dispatch-valued service per tenant over the dispatches made while every tenant was backlogged
 * (the periods where shares must follow weights).
 */
export function allBackloggedService(sim: FairSim): Map<string, number> {
  const names = [...sim.weights.keys()];
  const queued = new Map(names.map((n) => [n, 0]));
  const tally = new Map(names.map((n) => [n, 0]));
  for (const e of sim.log) {
    if (e.kind === "capacity") continue;
    const r = sim.requests[e.id]!;
    if (e.kind === "arrive") queued.set(r.tenant, queued.get(r.tenant)! + 1);
    else if (e.kind === "leave" && e.why !== "preempted") queued.set(r.tenant, queued.get(r.tenant)! - 1);
    else if (e.kind === "dispatch") {
      if (names.every((n) => queued.get(n)! > 0))
        tally.set(r.tenant, tally.get(r.tenant)! + served(sim, e.id));
      queued.set(r.tenant, queued.get(r.tenant)! - 1);
    }
  }
  return tally;
}

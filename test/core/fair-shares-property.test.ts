/**
 * Fair shares against a fluid reference, with fast-check driving the real scheduler (ManualClock,
 * no sleeping) through random overload: arrivals with random sizes and estimate errors from 0.1x
 * to 4x (the actual is reported with adjustCost at completion), queue timeouts, client cancels
 * (while queued and while running), preemption by a higher class, and live capacity changes.
 *
 * Checked on every run (docs/fairness.md derives the bounds):
 * (a) every continuously backlogged tenant's served tokens stay within Lambda_f of what the GPS
 *     reference (fluid-reference.ts) owes it, over any stretch of the backlogged period; and any
 *     two continuously backlogged tenants stay within Theorem 1's bound of each other;
 * (b) over long overloaded runs, token shares over the periods where every tenant is backlogged
 *     are within 2% (relative) of the weights, including a tenant that always underestimates;
 * (c) no backlogged tenant waits longer than Theorem 3's bound for its next service (measured in
 *     tokens handed to other tenants meanwhile: time is meaningless when capacity can drop to 1).
 *
 * Deterministic: fixed fast-check seeds, and each scenario's per-request draws come from a seeded
 * PRNG that fast-check generates (so a failure replays and shrinks on the scenario's structure).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import fc from "fast-check";
import {
  allBackloggedService,
  gpsLagBound,
  gpsLagParts,
  pairwise,
  tenantMasses,
  waits,
} from "./fair-bounds.js";
import { FairSim, formatShares, worstShareError } from "./fair-sim.js";
import { replayGps } from "./fluid-reference.js";

/** Largest actual cost of a request (tokens). */
const A = 1000;

interface Phase {
  ms: number;
  capacity: number;
  /** Per tenant: offered load as a multiple of the whole capacity (requests/s x mean service). */
  load: number[];
  /** Preempting `system` arrivals per second. */
  preemptRate: number;
}

interface Scenario {
  weights: number[];
  timeoutSecs: number;
  phases: Phase[];
  seed: number;
  /** Share of requests whose client leaves (while queued or while running). */
  cancelProb: number;
  /** Tenant 0 always underestimates: actual = 2 x estimate. */
  underestimator: boolean;
}

/** Mean service time of a request: 20 ms + 0.5 ms per actual token (act uniform in 1..A). */
const MEAN_SERVICE_MS = 20 + 0.5 * (A / 2);

function build(sc: Scenario): FairSim {
  const rand = prng(sc.seed);
  const tenants = sc.weights.map((weight, i) => ({ name: `t${i}`, weight }));
  const sim = new FairSim({ capacity: sc.phases[0]!.capacity, tenants, timeoutSecs: sc.timeoutSecs });
  let start = 0;
  for (const phase of sc.phases) {
    const end = start + phase.ms;
    if (start > 0) sim.capacityAt(start, phase.capacity);
    tenants.forEach((t, i) => {
      const perMs = (phase.load[i]! * phase.capacity) / MEAN_SERVICE_MS;
      if (perMs <= 0) return;
      for (let at = start + rand() / perMs; at < end; at += -Math.log(1 - rand()) / perMs) {
        const act = 1 + Math.floor(rand() * A);
        // Estimate error log-uniform in 0.1x .. 4x of the actual; the underestimator sends half.
        const ratio = sc.underestimator && i === 0 ? 0.5 : Math.exp(Math.log(0.1) + rand() * Math.log(40));
        const cancel = rand() < sc.cancelProb;
        sim.arrive(at, {
          tenant: t.name,
          act,
          est: Math.max(1, Math.round(act * ratio)),
          serviceMs: 20 + 0.5 * act,
          ttftMs: rand() * 150,
          cancelAfterMs: cancel ? rand() * 6000 : undefined,
        });
      }
    });
    if (phase.preemptRate > 0) {
      for (
        let at = start + rand() * 1000;
        at < end;
        at += -Math.log(1 - rand()) / (phase.preemptRate / 1000)
      ) {
        sim.arrive(at, { tenant: "sys", system: true, act: 1, est: 1, serviceMs: 200 + rand() * 800 });
      }
    }
    start = end;
  }
  return sim;
}

function duration(sc: Scenario): number {
  return sc.phases.reduce((a, p) => a + p.ms, 0);
}

const WEIGHT = fc.constantFrom(1, 2, 3, 5);

const phaseGen = (tenants: number, overloaded: boolean): fc.Arbitrary<Phase> =>
  fc.record({
    ms: fc.noBias(fc.integer({ min: 3_000, max: 20_000 })),
    capacity: fc.integer({ min: 1, max: 8 }),
    // Overloaded: every tenant alone offers 1.2x..2x the capacity. Otherwise anything from idle to 2x.
    // Unbiased: fast-check's default bias toward 0 would leave most phases idle.
    load: fc.array(
      fc.noBias(fc.integer(overloaded ? { min: 12, max: 20 } : { min: 0, max: 20 })).map((x) => x / 10),
      {
        minLength: tenants,
        maxLength: tenants,
      },
    ),
    preemptRate: fc.oneof(
      fc.constant(0),
      fc.noBias(fc.integer({ min: 1, max: 20 })).map((x) => x / 10),
    ),
  });

const scenarioGen = (overloaded: boolean, phases: { min: number; max: number }): fc.Arbitrary<Scenario> =>
  fc.integer({ min: 2, max: 4 }).chain((n) =>
    fc.record({
      weights: fc.array(WEIGHT, { minLength: n, maxLength: n }),
      timeoutSecs: fc.integer({ min: 2, max: 30 }),
      phases: fc.array(phaseGen(n, overloaded), { minLength: phases.min, maxLength: phases.max }),
      seed: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
      cancelProb: fc.constantFrom(0, 0.05, 0.15),
      underestimator: fc.boolean(),
    }),
  );

/** The worst figures seen, reported as diagnostics (and copied into docs/fairness.md). */
const seen = {
  requests: 0,
  runs: 0,
  lagOverProven: 0,
  lagOverA: 0,
  lagOverBound: 0,
  pairOverBound: 0,
  waitOverBound: 0,
  waitTokensOverA: 0,
  waitDispatches: 0,
};

async function checkBounds(sc: Scenario): Promise<void> {
  const sim = build(sc);
  await sim.run(duration(sc));
  seen.runs++;
  seen.requests += sim.requests.length;
  const masses = tenantMasses(sim);
  const gps = replayGps(sim);
  for (const [tenant, lag] of gps.worst) {
    const bound = gpsLagBound(sim, masses, tenant);
    seen.lagOverA = Math.max(seen.lagOverA, lag / A);
    if (bound > 0) seen.lagOverBound = Math.max(seen.lagOverBound, lag / bound);
    const { proven } = gpsLagParts(sim, masses, tenant);
    if (proven > 0) seen.lagOverProven = Math.max(seen.lagOverProven, lag / proven);
    assert.ok(lag <= bound, `(a) ${tenant}: lag ${lag.toFixed(0)} vs GPS over its bound ${bound.toFixed(0)}`);
  }
  for (const p of pairwise(sim, masses)) {
    if (p.bound > 0) seen.pairOverBound = Math.max(seen.pairOverBound, p.worst / p.bound);
    assert.ok(
      p.worst <= p.bound,
      `(a) ${p.f}/${p.g}: ${p.worst.toFixed(1)} over Theorem 1's ${p.bound.toFixed(1)}`,
    );
  }
  for (const w of waits(sim, masses)) {
    if (w.bound > 0) seen.waitOverBound = Math.max(seen.waitOverBound, w.worst / w.bound);
    seen.waitTokensOverA = Math.max(seen.waitTokensOverA, w.worst / A);
    seen.waitDispatches = Math.max(seen.waitDispatches, w.dispatches);
    assert.ok(
      w.worst <= w.bound,
      `(c) ${w.tenant}: waited ${w.worst.toFixed(0)} tokens, bound ${w.bound.toFixed(0)}`,
    );
  }
}

describe("fair shares against the GPS fluid reference (fast-check, manual clock)", () => {
  test("(a) lag vs GPS, pairwise bound and (c) waits, random load from idle to 2x per tenant", async (t) => {
    await fc.assert(
      fc.asyncProperty(scenarioGen(false, { min: 2, max: 5 }), async (sc) => {
        await checkBounds(sc);
      }),
      { numRuns: 30, seed: 17_0817, endOnFailure: true },
    );
    t.diagnostic(
      `worst lag vs GPS ${seen.lagOverA.toFixed(2)} A (${(100 * seen.lagOverBound).toFixed(1)}% of its bound)`,
    );
    t.diagnostic(`worst pairwise difference ${(100 * seen.pairOverBound).toFixed(1)}% of Theorem 1's bound`);
    t.diagnostic(
      `worst wait ${seen.waitTokensOverA.toFixed(1)} A to others (${seen.waitDispatches} dispatches), ${(100 * seen.waitOverBound).toFixed(1)}% of its bound`,
    );
  });

  test("(a)+(c) in sustained overload (every tenant alone offers 1.2x..2x the capacity)", async (t) => {
    await fc.assert(
      fc.asyncProperty(scenarioGen(true, { min: 2, max: 4 }), async (sc) => {
        await checkBounds(sc);
      }),
      { numRuns: 20, seed: 8_0006, endOnFailure: true },
    );
    t.diagnostic(
      `worst lag vs GPS so far ${seen.lagOverA.toFixed(2)} A (${(100 * seen.lagOverBound).toFixed(1)}% of its bound)`,
    );
    t.diagnostic(`(a)/(c): ${seen.runs} runs, ${seen.requests} requests`);
    t.diagnostic(`worst lag vs GPS ${(100 * seen.lagOverProven).toFixed(1)}% of Lambda's proven part alone`);
  });

  test("(b) token shares within 2% of weights over the periods where every tenant is backlogged", async (t) => {
    let worst = 0;
    let shareRequests = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 4 }).chain((n) =>
          fc.record({
            weights: fc.array(WEIGHT, { minLength: n, maxLength: n }),
            timeoutSecs: fc.integer({ min: 2, max: 30 }),
            seed: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
            cancelProb: fc.constantFrom(0, 0.05),
            underestimator: fc.boolean(),
            capacity: fc.integer({ min: 4, max: 8 }),
            preemptRate: fc.constantFrom(0, 0.5),
            capacityChanges: fc.boolean(),
          }),
        ),
        async (p) => {
          // 160 s of sustained overload (every tenant alone offers 1.1x the capacity), in 20 s
          // phases: capacity moves between 4 and 8 when asked.
          const phases: Phase[] = [];
          const rand = prng(p.seed ^ 0x9e3779b9);
          for (let i = 0; i < 8; i++) {
            phases.push({
              ms: 20_000,
              capacity: p.capacityChanges ? 4 + Math.floor(rand() * 5) : p.capacity,
              load: p.weights.map(() => 1.1),
              preemptRate: p.preemptRate,
            });
          }
          const sc: Scenario = { ...p, phases };
          const sim = build(sc);
          await sim.run(duration(sc));
          shareRequests += sim.requests.length;
          const tally = allBackloggedService(sim);
          const error = worstShareError(tally, sim.weights);
          worst = Math.max(worst, error);
          assert.ok(
            error <= 0.02,
            `weights ${p.weights.join(":")}: shares ${formatShares(tally)} (${(100 * error).toFixed(2)}% off)`,
          );
        },
      ),
      { numRuns: 8, seed: 2_024, endOnFailure: true },
    );
    t.diagnostic(`worst relative share error ${(100 * worst).toFixed(2)}% (${shareRequests} requests)`);
  });
});

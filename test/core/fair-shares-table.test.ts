/**
 * Regression tests for issue 17's table and issue 8 item 6, on the core alone with a ManualClock.
 *
 * Capacity 8, one class, tenants a/b/c with weights 1:2:5, each arriving at 8 requests/s (more than
 * the whole capacity alone: 3x overload together), service 1024 ms. Served tokens are the actual
 * costs reported by completed requests, counted after a warm-up. Before the fix the weight-1
 * tenant's head timed out, the next one was re-tagged behind everybody, and it was never served.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FairSim, formatShares, worstShareError } from "./fair-sim.js";

const TENANTS = [
  { name: "a", weight: 1 },
  { name: "b", weight: 2 },
  { name: "c", weight: 5 },
] as const;
const WEIGHTS = new Map(TENANTS.map((t) => [t.name, t.weight]));

interface Row {
  timeoutSecs: number | undefined;
  /** estimate = over x actual */
  over: number;
}

/** Runs one row: `seconds` of simulated time, shares counted from `warmSeconds` on. */
async function runRow(row: Row, seconds: number, warmSeconds: number) {
  const sim = new FairSim({ capacity: 8, tenants: TENANTS, timeoutSecs: row.timeoutSecs });
  const actual = 1000;
  const end = seconds * 1000;
  // Each tenant every 125 ms, phase-shifted by a few ms so arrivals are not simultaneous.
  TENANTS.forEach((t, i) => {
    for (let at = i; at < end; at += 125) {
      sim.arrive(at, { tenant: t.name, est: actual * row.over, act: actual, serviceMs: 1024 });
    }
  });
  await sim.run(end);
  const tally = sim.completedTokens(warmSeconds * 1000, end);
  return { sim, tally, error: worstShareError(tally, WEIGHTS) };
}

describe("issue 17 table: 1:2:5 at 3x overload, capacity 8, service 1024 ms", () => {
  const rows: Array<Row & { label: string }> = [
    { label: "no timeout, exact estimates", timeoutSecs: undefined, over: 1 },
    { label: "5 s timeout, exact estimates", timeoutSecs: 5, over: 1 },
    { label: "30 s timeout, exact estimates", timeoutSecs: 30, over: 1 },
    { label: "5 s timeout, 4x overestimates", timeoutSecs: 5, over: 4 },
  ];
  for (const row of rows) {
    test(`${row.label}: token shares 12.5 / 25 / 62.5 within 2%`, async (t) => {
      const { tally, error } = await runRow(row, 200, 40);
      t.diagnostic(`shares ${formatShares(tally)} (worst relative error ${(100 * error).toFixed(2)}%)`);
      assert.ok(error <= 0.02, `shares ${formatShares(tally)}`);
    });
  }
});

describe("issue 8 item 6: estimate error must not move shares", () => {
  /** 1:2:5 sharing `capacity` slots, random actual sizes, each tenant alone offering 1.5x capacity. */
  async function run(
    capacity: number,
    estimate: (tenant: string, actual: number) => number,
    timeoutSecs?: number,
  ) {
    const sim = new FairSim({ capacity, tenants: TENANTS, timeoutSecs });
    let seed = 12_345;
    const rand = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const end = 200_000;
    const meanServiceMs = 20 + 0.5 * 500;
    for (const t of TENANTS) {
      const gap = meanServiceMs / (1.5 * capacity);
      for (let at = rand() * gap; at < end; at += gap * 2 * rand()) {
        const act = 1 + Math.floor(rand() * 1000);
        sim.arrive(at, {
          tenant: t.name,
          act,
          est: Math.max(1, estimate(t.name, act)),
          serviceMs: 20 + 0.5 * act,
        });
      }
    }
    await sim.run(end);
    const tally = sim.completedTokens(30_000, end);
    return { tally, error: worstShareError(tally, WEIGHTS) };
  }

  test("4 slots, actual = 1/4 of the estimate for everyone: shares within 2%", async (t) => {
    const { tally, error } = await run(4, (_, act) => 4 * act);
    t.diagnostic(`shares ${formatShares(tally)} (worst relative error ${(100 * error).toFixed(2)}%)`);
    assert.ok(error <= 0.02, `shares ${formatShares(tally)}`);
  });

  test("one tenant always underestimates (actual = 2x estimate): shares within 2%", async (t) => {
    for (const under of ["a", "c"]) {
      const { tally, error } = await run(
        8,
        (tenant, act) => (tenant === under ? Math.round(act / 2) : act),
        5,
      );
      t.diagnostic(
        `${under} underestimates: shares ${formatShares(tally)} (worst ${(100 * error).toFixed(2)}%)`,
      );
      assert.ok(error <= 0.02, `${under} underestimates: shares ${formatShares(tally)}`);
    }
  });
});

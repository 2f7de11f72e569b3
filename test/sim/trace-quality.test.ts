/**
 * Scheduling quality on the shipped trace excerpts (traces/, issue 36 deliverable 4): short replays
 * at the speeds where the excerpt's peak demand is 2x and 3x the fleet (the rule of
 * src/sim/trace-quality.ts), asserting the headline figures of BENCHMARKS.md's trace section, and
 * the 2:1 fair shares over the backlogged stretches. Virtual time, seed 1: deterministic.
 */
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { loadScenario, simulate } from "../../src/sim/index.js";
import type { PolicyReport } from "../../src/sim/report.js";
import {
  azureTargets,
  classRow,
  fleetWork,
  peakWork,
  runPreemptAfter,
  runVariant,
  VARIANTS,
  type Variant,
} from "../../src/sim/trace-quality.js";

const root = (p: string) => fileURLToPath(new URL(`../../${p}`, import.meta.url));

/** The speed at which the scenario's busiest 10 s offer `k` times the fleet's throughput. */
async function speedFor(file: string, k: number): Promise<number> {
  const s = loadScenario(root(file));
  const w = peakWork(s);
  return (k * (await fleetWork(s, w.meanPerRequest))) / w.peak;
}

async function runAll(file: string, speed: number): Promise<Record<Variant, PolicyReport>> {
  const s = loadScenario(root(file), { speed });
  const out = {} as Record<Variant, PolicyReport>;
  for (const v of VARIANTS) out[v] = await runVariant(s, v);
  return out;
}

describe("the Azure excerpt (conversation interactive 2, code default 1)", () => {
  const file = "scenarios/azure-conv-code.yaml";
  let at2: Record<Variant, PolicyReport>;
  let at3: Record<Variant, PolicyReport>;
  let speed2 = 0;
  before(async () => {
    speed2 = await speedFor(file, 2);
    at2 = await runAll(file, speed2);
    at3 = await runAll(file, (speed2 * 3) / 2);
  });

  test("the peak-demand rule: the excerpt's busiest 10 s is about 2.3x the fleet at speed 1", async () => {
    // 2x at speed ~0.86: the rule puts the excerpt's peak between the hour's mean (0.68x) and peak (3.7x).
    assert.ok(speed2 > 0.7 && speed2 < 1, `speed for 2x: ${speed2}`);
  });

  test("at 2x: sluice refuses no interactive request, loses <= 2% of default and throws away <= 2% of prefill", () => {
    const t = azureTargets(at2.sluice, at2.strict);
    assert.deepEqual(
      t.map(([label, met]) => [label, met]),
      [
        ["interactive: none refused", true],
        // 250 ms (the wait target) against strict's 194 ms: missed, the frontier test below shows why.
        ["interactive: wait p99 <= 1.25x strict's", false],
        ["default: <= 2% lost after retries", true],
        ["default: <= 2% of prefill thrown away", true],
      ],
    );
    // strict preempts on arrival and loses far more of the default class.
    const lost = (r: PolicyReport) => classRow(r, "default")!.lost;
    assert.ok(
      lost(at2.strict) >= 10 * Math.max(1, lost(at2.sluice)),
      `${lost(at2.strict)} vs ${lost(at2.sluice)}`,
    );
  });

  test("at 2x: preemption buys interactive wait; off, nothing is lost and interactive waits longer", () => {
    const p99 = (r: PolicyReport) => classRow(r, "interactive")!.waitP99!;
    assert.ok(p99(at2["sluice-no-preempt"]) > p99(at2.sluice));
    assert.equal(classRow(at2["sluice-no-preempt"], "default")!.lost, 0);
    // sluice's interactive wait p99 is its wait target (preempt_after_secs 0.25 s), not more.
    assert.ok(p99(at2.sluice) <= 260, `${p99(at2.sluice)}`);
  });

  test("at 2x, the frontier: preempting on arrival meets the wait target and misses the loss target", async () => {
    const s = loadScenario(root(file), { speed: speed2 });
    const t = azureTargets(await runPreemptAfter(s, 0), at2.strict);
    assert.equal(t[1]![1], true, t[1]![2]);
    assert.equal(t[2]![1], false, t[2]![2]);
  });

  test("at 3x: sluice still refuses no interactive request; strict and fifo refuse many", () => {
    const refused = (r: PolicyReport) => classRow(r, "interactive")!.refused;
    assert.equal(refused(at3.sluice), 0);
    assert.equal(refused(at3["sluice-no-preempt"]), 0);
    assert.ok(refused(at3.strict) >= 50, `${refused(at3.strict)}`);
    assert.ok(refused(at3.fifo) >= 10, `${refused(at3.fifo)}`);
    // and the prefill sluice throws away stays under 2% of all prefill.
    assert.ok(classRow(at3.sluice, "default")!.preemptedPrefillShare <= 0.02);
  });
});

describe("the Mooncake excerpt (split in an interactive and a default tenant)", () => {
  test("at 3x: sluice refuses no interactive request, fifo does; preemption off, interactive waits seconds", async () => {
    const file = "scenarios/mooncake-conv.yaml";
    const r = await runAll(file, await speedFor(file, 3));
    const i = (v: Variant) => classRow(r[v], "interactive")!;
    assert.equal(i("sluice").refused, 0);
    assert.equal(i("strict").refused, 0);
    assert.ok(i("fifo").refused > 0);
    assert.ok(i("sluice").waitP99! <= 260, `${i("sluice").waitP99}`);
    assert.ok(i("sluice-no-preempt").waitP99! >= 10 * i("sluice").waitP99!);
  });
});

describe("fair shares on the Azure excerpt (both services in default at 2:1, 3x)", () => {
  test("over the backlogged stretches of 10 s or more the shares are the weights within 5%, for minutes", async () => {
    const report = await simulate(loadScenario(root("scenarios/azure-fair-share.yaml")));
    const f = report.policies.sluice!.fairness.all!.default!;
    assert.ok(f.sustained.backlogged_s >= 120, `${f.sustained.backlogged_s} s`);
    assert.ok(f.sustained.share_error! <= 0.05, JSON.stringify(f.sustained));
    // Every backlogged stretch, however short, counted: within 11% (one dispatch decides a
    // millisecond stretch; docs/simulate.md).
    assert.ok(f.share_error! <= 0.11, `${f.share_error}`);
    // And the service gap well inside the VTC bound (it was 0.94x before the promotion fix).
    assert.ok(f.service_gap_vtc_ratio! <= 0.5, `${f.service_gap_vtc_ratio}`);
  });
});

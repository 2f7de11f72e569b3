/**
 * Load shedding weighs its queue by each request's predicted output (accounting/output-prediction.ts):
 * the completion rate counts served requests, so a queued request counts its predicted output over
 * the mean prediction of the requests served, through a noise band (one within a factor of two).
 * As many queued requests predict a longer wait when their answers are predicted much longer.
 * Manual clock, no timers.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { PoolTicket } from "../../src/accounting/pool-ticket.js";
import { bandedWeight, LoadShedding } from "../../src/shedding/load-shedding.js";

/**
 * Three seconds of 10 served requests a second, each predicted `servedPrediction` output tokens,
 * with 10 requests of tenant acme's default class queued, each predicted `queuedPrediction`.
 */
function run(servedPrediction: number | undefined, queuedPrediction: number | undefined): LoadShedding {
  const clock = new ManualClock(Date.UTC(2026, 10, 27, 12));
  const shedding = new LoadShedding({ prioritized: { maxQueueWaitMs: 1500 } }, clock);
  for (let i = 0; i < 10; i++) shedding.queue("default", "acme", 1, queuedPrediction);
  for (let s = 0; s < 3; s++) {
    for (let i = 0; i < 10; i++) shedding.served("default", "other", 500, servedPrediction);
    clock.advance(1000);
    shedding.calibrate();
  }
  return shedding;
}

describe("shedding weighs the queue by predicted output", () => {
  test("ten queued requests predicted as long as the served ones wait one second: nothing shed", () => {
    const shedding = run(100, 100);
    const status = shedding.status().prioritized!;
    assert.equal(Math.round(status.predictedWaitMs), 1000);
    assert.equal(status.threshold, 0);
    assert.equal(shedding.check("default", "acme", undefined).shed, false);
  });

  test("the same ten predicted six times longer count three each (past the noise band): three seconds, past the bound: shed", () => {
    // What may wait: 10 a second x (1.5 s + the next second) = 25 served requests; 30 wait.
    const shedding = run(100, 600);
    const status = shedding.status().prioritized!;
    assert.equal(Math.round(status.predictedWaitMs), 3000);
    assert.ok(status.threshold > 0, `threshold ${status.threshold}`);
    let shed = 0;
    for (let i = 0; i < 20; i++) if (shedding.check("default", "acme", undefined).shed) shed++;
    assert.ok(shed > 0, "some of acme's arrivals are refused");
  });

  test("inside the noise band (half to twice the served mean) a request counts one", () => {
    assert.equal(Math.round(run(100, 190).status().prioritized!.predictedWaitMs), 1000);
    assert.equal(Math.round(run(100, 55).status().prioritized!.predictedWaitMs), 1000);
    assert.equal(bandedWeight(1.5), 1);
    assert.equal(bandedWeight(0.6), 1);
    assert.equal(bandedWeight(4), 2);
    assert.equal(bandedWeight(0.25), 0.5);
    assert.equal(bandedWeight(Number.NaN), 1);
    // Ten requests predicted a tenth of the served mean count 0.2 each: 0.2 s.
    assert.equal(Math.round(run(100, 10).status().prioritized!.predictedWaitMs), 200);
  });

  test("without predictions each queued request counts one, as before", () => {
    const shedding = run(undefined, undefined);
    assert.equal(Math.round(shedding.status().prioritized!.predictedWaitMs), 1000);
    const mixed = run(100, undefined);
    assert.equal(
      Math.round(mixed.status().prioritized!.predictedWaitMs),
      1000,
      "unpredicted requests count one",
    );
  });

  test("a request leaves the queue with the weight it entered with", () => {
    const clock = new ManualClock(0);
    const shedding = new LoadShedding({ prioritized: { maxQueueWaitMs: 1500 } }, clock);
    for (let i = 0; i < 10; i++) shedding.served("default", "other", 500, 100);
    shedding.queue("default", "acme", 1, 900);
    shedding.queue("default", "acme", 1, 800);
    shedding.queue("default", "acme", -1, 900);
    clock.advance(1000);
    shedding.calibrate();
    // One request of weight 8 / 2 = 4 left, 10 served in the second: 0.4 s.
    assert.equal(Math.round(shedding.status().prioritized!.predictedWaitMs), 400);
  });

  test("a pool ticket carries its request's prediction into the queue, out of it, and into served", () => {
    const clock = new ManualClock(0);
    const shedding = new LoadShedding({ prioritized: { maxQueueWaitMs: 1500 } }, clock);
    const counters = { shedding, now: () => clock.now() };
    for (let i = 0; i < 10; i++) {
      const served = new PoolTicket(counters, "other", 100);
      served.queued("default");
      served.admitted();
      served.served("default", 500);
      served.ended();
    }
    const waiting = Array.from({ length: 5 }, () => new PoolTicket(counters, "acme", 800));
    for (const t of waiting) t.queued("default");
    clock.advance(1000);
    shedding.calibrate();
    // 5 queued at 8x the served mean count 4 each: 20 served requests' worth at 10 a second.
    assert.equal(shedding.status().prioritized!.queued, 20);
    assert.equal(Math.round(shedding.status().prioritized!.predictedWaitMs), 2000);
    for (const t of waiting) t.ended();
    clock.advance(1000);
    shedding.calibrate();
    assert.equal(shedding.status().prioritized!.queued, 0, "each left with the weight it came with");
  });
});

/**
 * Load shedding weighs its queue by each request's predicted output (accounting/output-prediction.ts):
 * the completion rate counts served requests, so a queued request counts its predicted output over
 * the mean prediction of the requests served. As many queued requests predict a longer wait when
 * their answers are predicted longer. Manual clock, no timers.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { LoadShedding } from "../../src/shedding/load-shedding.js";

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

  test("the same ten predicted four times longer wait four seconds, past the bound: shed", () => {
    const shedding = run(100, 400);
    const status = shedding.status().prioritized!;
    assert.equal(Math.round(status.predictedWaitMs), 4000);
    assert.ok(status.threshold > 0, `threshold ${status.threshold}`);
    let shed = 0;
    for (let i = 0; i < 20; i++) if (shedding.check("default", "acme", undefined).shed) shed++;
    assert.ok(shed > 0, "some of acme's arrivals are refused");
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
    shedding.queue("default", "acme", 1, 100);
    shedding.queue("default", "acme", -1, 900);
    clock.advance(1000);
    shedding.calibrate();
    // One request of weight 1 left, 10 served in the second: 0.1 s.
    assert.equal(Math.round(shedding.status().prioritized!.predictedWaitMs), 100);
  });
});

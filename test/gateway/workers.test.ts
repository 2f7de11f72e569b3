/**
 * Workers and capacity: health checks take a worker out and put it back with capacity following
 * live; a worker that reports no capacity counts 64; a configured per-worker capacity wins. Probe
 * rounds run on the gateway's clock: a ManualClock advanced by the test starts each one.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import {
  assertError,
  assertOk,
  HEALTH_INTERVAL_MS,
  LEVEL_WARN,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const RESERVING_YAML = smallSchedulerYaml({
  classes: { system: { reserved_floor: 1 }, interactive: { reserved_floor: 1 } },
});

describe("gateway workers: health and capacity", () => {
  test("a worker going unhealthy drops capacity live; it comes back when healthy", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4 }, { maxRunningRequests: 6 }],
      schedulerYaml: RESERVING_YAML,
      gateway: { clock },
    });
    const [w1, w2] = fleet.workers as [(typeof fleet.workers)[0], (typeof fleet.workers)[0]];
    assert.equal(fleet.snapshot().capacity, 10);
    assert.equal(fleet.gateway.workers.healthyCount, 2);
    let s = await fleet.scrape();
    assert.equal(metric(s, "sluice_capacity"), 10);
    assert.equal(metric(s, "sluice_workers_healthy"), 2);

    w2.setHealthy(false);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(() => fleet.snapshot().capacity === 4, "capacity without the second worker");
    s = await fleet.scrape();
    assert.equal(metric(s, "sluice_capacity"), 4);
    assert.equal(metric(s, "sluice_workers_healthy"), 1);
    assert.equal(fleet.snapshot().classes.system.reserved, 1);
    assert.equal(fleet.snapshot().classes.interactive.reserved, 1);
    assert.ok(
      fleet.logs.some((l) => l.level === LEVEL_WARN && l.msg === "worker unhealthy" && l.worker === w2.url),
    );

    const before = w2.stats().totalRequests;
    for (let i = 0; i < 4; i++) assertOk(await fleet.chat());
    assert.equal(w2.stats().totalRequests, before, "no request goes to the unhealthy worker");
    assert.equal(w1.stats().totalRequests, 4);

    w2.setHealthy(true);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(() => fleet.snapshot().capacity === 10, "capacity back with the second worker");
    s = await fleet.scrape();
    assert.equal(metric(s, "sluice_capacity"), 10);
    assert.equal(metric(s, "sluice_workers_healthy"), 2);
    const ready = JSON.parse((await fleet.send("/readiness")).text);
    assert.deepEqual(ready, {
      status: "ready",
      admission_mode: "scheduler",
      fallback_reason: null,
      fallback_code: null,
      healthy_workers: 2,
      capacity: 10,
    });
  });

  test("a worker that reports no capacity counts 64; a configured capacity overrides the reported one", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ reportCapacity: false }, { maxRunningRequests: 4 }, { maxRunningRequests: 5 }],
      workerCapacity: [undefined, 3, undefined],
      schedulerYaml: RESERVING_YAML,
    });
    const [unreported, overridden, reported] = fleet.gateway.workers.workers;
    assert.equal(unreported!.capacity, 64);
    assert.equal(overridden!.capacity, 3);
    assert.equal(reported!.capacity, 5);
    assert.equal(fleet.snapshot().capacity, 64 + 3 + 5);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_capacity"), 72);
  });

  test("with no healthy worker the pool's capacity is 0, a new request gets 503 no_healthy_workers at once; readiness 503", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4 }],
      schedulerYaml: RESERVING_YAML,
      legacy: { maxConcurrentRequests: 50 },
      gateway: { clock },
    });
    assert.equal(fleet.snapshot().capacity, 4);
    fleet.workers[0]!.setHealthy(false);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(() => fleet.snapshot().capacity === 0, "no capacity without a healthy worker");
    assertError(await fleet.chat(), 503, "no_healthy_workers");
    assert.equal(fleet.snapshot().inflight + fleet.snapshot().queued, 0, "nothing was admitted or queued");
    const ready = await fleet.send("/readiness");
    assert.equal(ready.status, 503);
    assert.equal(JSON.parse(ready.text).healthy_workers, 0);
    fleet.workers[0]!.setHealthy(true);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(() => fleet.snapshot().capacity === 4, "capacity back");
    assert.equal((await fleet.send("/readiness")).status, 200);
  });

  test("probe rounds run on the gateway's clock: one ManualClock step marks a dead worker unhealthy", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4 }, { maxRunningRequests: 6 }],
      schedulerYaml: RESERVING_YAML,
      gateway: { clock },
    });
    const dead = fleet.gateway.workers.workers[1]!;
    assert.equal(clock.pendingTimers(), 1, "the next probe round is armed on the test clock");
    await fleet.workers[1]!.close();

    clock.advance(HEALTH_INTERVAL_MS - 1);
    assert.equal(clock.pendingTimers(), 1, "no round before the interval");
    clock.advance(1);
    // The round is under way (its probes are I/O): the next is armed only when it ends.
    clock.advance(10 * HEALTH_INTERVAL_MS);
    assert.equal(clock.pendingTimers(), 0, "rounds never overlap");
    await waitFor(() => !dead.healthy, "the round marked the dead worker unhealthy");
    assert.equal(fleet.snapshot().capacity, 4);
    assert.ok(fleet.logs.some((l) => l.msg === "worker unhealthy" && l.worker === dead.url));
    await waitFor(() => clock.pendingTimers() === 1, "the next round armed after this one ended");
  });
  test("a worker down when the gateway starts is probed every 1, 2, 4 s (up to the interval) and serves from its first passing check", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4, healthy: false }, { maxRunningRequests: 6 }],
      schedulerYaml: RESERVING_YAML,
      // Three passes bring back a worker that failed; a joining one needs one.
      health: { successThreshold: 3, failureThreshold: 2 },
      gateway: { clock },
    });
    const joining = fleet.gateway.workers.workers[0]!;
    assert.equal(joining.healthy, false);
    assert.equal(fleet.snapshot().capacity, 6);
    const round = async (ms: number) => {
      clock.advance(ms - 1);
      assert.equal(clock.pendingTimers(), 1, `no round before ${ms} ms`);
      clock.advance(1);
      await waitFor(() => clock.pendingTimers() === 1, "the round ended and armed the next");
    };
    await round(1000);
    await round(2000);
    fleet.workers[0]!.setHealthy(true);
    await round(4000);
    assert.equal(joining.healthy, true, "one pass admits a worker that never served");
    await waitFor(() => fleet.snapshot().capacity === 10, "its capacity joins");
    // Everyone has joined: rounds are back at the interval, and a worker that fails and returns
    // needs the success threshold.
    await round(HEALTH_INTERVAL_MS);
    fleet.workers[0]!.setHealthy(false);
    await round(HEALTH_INTERVAL_MS);
    await round(HEALTH_INTERVAL_MS);
    assert.equal(joining.healthy, false);
    fleet.workers[0]!.setHealthy(true);
    await round(HEALTH_INTERVAL_MS);
    await round(HEALTH_INTERVAL_MS);
    assert.equal(joining.healthy, false, "two passes of three");
    await round(HEALTH_INTERVAL_MS);
    assert.equal(joining.healthy, true);
  });
});

/**
 * Adaptive capacity end to end: a gateway in `capacity_mode: adaptive` in front of a mock worker
 * that advertises 64 slots but whose time per token rises steeply past 8 running requests. Real
 * HTTP and real streams; the controller's windows close on a ManualClock the test moves once per
 * round of traffic, so the run takes seconds instead of the minutes it stands for.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "../../src/core/clock.js";
import { type Fleet, metric, schedulerDoc, startFleet } from "../harness.js";

const KNEE = 8;
const TPOT_SLO_MS = 12;
const LONG = { queue_timeout_secs: 3600, queue_size: 10_000, starvation_threshold_secs: 3600 };

/** Keeps `clients` streams going until `stop()`; counts answers by status. */
function closedLoop(fleet: Fleet, clients: number) {
  let running = true;
  const statuses = new Map<number, number>();
  const loops = Array.from({ length: clients }, async () => {
    while (running) {
      const reply = await fleet.chat({ stream: true, max_tokens: 12 }).catch(() => undefined);
      if (reply !== undefined) statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1);
    }
  });
  return {
    statuses,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

describe("adaptive capacity over HTTP", () => {
  test("a worker advertising 64 with a knee at 8: the limit settles near the knee, TPOT under the SLO", async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 10, 23, 12));
    const fleet = await startFleet(t, {
      workers: [
        {
          maxRunningRequests: 64,
          ttftMs: 3,
          tokenDelayMs: 2,
          batchSlowdown: 0,
          knee: KNEE,
          kneeSlowdown: 1,
        },
      ],
      schedulerYaml: schedulerDoc({
        classes: { system: LONG, interactive: LONG, default: LONG, bulk: LONG },
      }),
      gateway: {
        clock,
        capacity: { mode: "adaptive", minCapacity: 2, tpotSloMs: TPOT_SLO_MS },
      },
    });
    assert.equal(fleet.gateway.admission.mode, "scheduler");
    const adaptive = fleet.gateway.adaptive;
    assert.ok(adaptive, "the gateway runs adaptive capacity");
    assert.equal(fleet.gateway.capacity.capacity, 64, "cold start from the discovered capacity");

    const load = closedLoop(fleet, 32);
    const limits: number[] = [];
    const peaks: number[] = [];
    const inBand = (limit: number) => limit >= KNEE * 0.5 && limit <= KNEE * 1.5;
    // Settled: ten windows in a row within a band around 8, where 64 would have put TPOT at
    // 2 x (1 + 56) ms. A slow machine gives fewer samples per window, so the run may take more
    // windows, never more than 90.
    const settled = () => limits.length >= 10 && limits.slice(-10).every(inBand);
    try {
      while (!settled() && limits.length < 90) {
        fleet.workers[0]!.resetStats();
        // A round of real traffic, then the window closes on the manual clock.
        await new Promise((resolve) => setTimeout(resolve, 300));
        peaks.push(fleet.workers[0]!.stats().peakRunning);
        clock.advance(1000);
        limits.push(fleet.gateway.capacity.capacity);
      }
    } finally {
      await load.stop();
    }
    const snapshot = adaptive.snapshot();
    const detail = `limits ${limits.join(" ")}; worker peaks ${peaks.join(" ")}; snapshot ${JSON.stringify({
      phase: snapshot.phase,
      tpot: snapshot.tpotP90Ms,
      base: snapshot.tpotBaselineMs,
      probes: snapshot.probes,
    })}`;
    t.diagnostic(detail);
    assert.ok(settled(), detail);
    // What the worker really ran followed the limit: a window's peak counts what the limit before
    // it admitted and is still running (a lower limit aborts nothing, it only drains).
    for (let i = limits.length - 9; i < limits.length; i++) {
      assert.ok(peaks[i]! <= Math.max(limits[i - 1]!, limits[i - 2]!) + 1, detail);
    }
    for (const peak of peaks.slice(-5)) assert.ok(peak <= KNEE * 1.5, detail);
    assert.ok(snapshot.tpotP90Ms !== null && snapshot.tpotP90Ms < TPOT_SLO_MS, detail);
    assert.ok((load.statuses.get(200) ?? 0) > 100, `answers: ${JSON.stringify([...load.statuses])}`);
    assert.deepEqual([...load.statuses.keys()], [200], "every request served, none refused");

    // What an operator sees: the limit and its inputs on /metrics and in the admin status.
    const m = await fleet.scrape();
    assert.equal(metric(m, "sluice_capacity_limit"), fleet.gateway.capacity.capacity);
    assert.ok((metric(m, "sluice_capacity_adjustments_total", { direction: "decrease" }) ?? 0) >= 1);
    assert.ok((metric(m, "sluice_adaptive_tpot_p90_seconds") ?? 0) > 0);
    const status = fleet.gateway.status() as { capacity_mode: string; adaptive: { limit: number } | null };
    assert.equal(status.capacity_mode, "adaptive");
    assert.ok(status.adaptive !== null && status.adaptive.limit >= 2);
  });

  test("a pin wins over the controller, and unpinning hands capacity back to it", async (t) => {
    const clock = new ManualClock(0);
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 32 }],
      schedulerYaml: schedulerDoc(),
      gateway: { clock, capacity: { mode: "adaptive", minCapacity: 4, maxCapacity: 24 } },
    });
    // The cold start is clamped to the bounds.
    assert.equal(fleet.gateway.capacity.capacity, 24);
    fleet.gateway.capacity.setPin(3);
    assert.equal(fleet.gateway.capacity.capacity, 3);
    clock.advance(5000);
    assert.equal(fleet.gateway.capacity.capacity, 3);
    fleet.gateway.capacity.setPin(undefined);
    assert.equal(fleet.gateway.capacity.capacity, fleet.gateway.adaptive!.capacity);
  });

  test("bad bounds are a startup error naming the key", async (t) => {
    await assert.rejects(
      startFleet(t, {
        workers: [{ maxRunningRequests: 8 }],
        gateway: { capacity: { mode: "adaptive", minCapacity: 10, maxCapacity: 5 } },
      }),
      /adaptive_min_capacity|adaptive_max_capacity/,
    );
  });
});

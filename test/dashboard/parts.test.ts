/**
 * The dashboard's parts on their own: queue-wait percentiles by Prometheus's histogram_quantile rule
 * (hand-computed cases), the bounded ring of rejections, the sample ring's window bases, and the
 * Dashboard's one timer: snapshots and keep-alive comments on every stream, a client that leaves
 * dropped, and close() ending every stream and stopping the timer.
 */
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { Dashboard } from "../../src/dashboard/dashboard.js";
import { RejectionLog } from "../../src/dashboard/rejections.js";
import {
  type CounterSample,
  histogramQuantile,
  readCounters,
  SampleRing,
} from "../../src/dashboard/samples.js";
import type { DashboardSources } from "../../src/dashboard/snapshot.js";
import { createMetrics, QUEUE_WAIT_BUCKETS } from "../../src/metrics/index.js";
import { waitFor } from "../helpers/harness.js";
import { outcome } from "../ledger/services.js";
import { openEvents, snapshotsIn } from "./helpers.js";

describe("histogramQuantile (Prometheus's rule)", () => {
  const bounds = [1, 2, 4];
  test("interpolates inside the bucket the rank falls in, from 0 for the first", () => {
    assert.equal(histogramQuantile(bounds, [0, 0, 0, 0], 0.5), null, "empty");
    assert.equal(histogramQuantile(bounds, [0, 10, 10, 10], 0.5), 1.5);
    const p90 = histogramQuantile(bounds, [0, 10, 10, 10], 0.9)!;
    assert.ok(Math.abs(p90 - 1.9) < 1e-12, `p90 ${p90}`);
    assert.equal(histogramQuantile(bounds, [4, 4, 4, 4], 0.5), 0.5);
    assert.equal(histogramQuantile(bounds, [2, 2, 6, 8], 0.5), 3);
    assert.equal(histogramQuantile(bounds, [2, 2, 6, 8], 0.75), 4);
  });

  test("a rank in +Inf is the highest finite bound", () => {
    assert.equal(histogramQuantile(bounds, [0, 0, 0, 5], 0.5), 4);
    assert.equal(histogramQuantile(bounds, [2, 2, 6, 8], 0.99), 4);
  });

  test("reads the gateway's queue-wait histogram per class from its registry", async () => {
    const metrics = createMetrics({ collectProcessMetrics: false });
    for (const seconds of [0.0005, 0.2, 0.2, 0.2, 3])
      metrics.observer.queueWait!("bulk", seconds, "admitted");
    const sample = await readCounters(metrics.registry, new Map());
    const bulk = sample.waits.get("bulk")!;
    assert.equal(bulk.at(-1), 5, "the +Inf bucket is the count");
    assert.deepEqual(sample.waits.get("system")?.at(-1), 0);
    // Rank 2.5 of 5 falls in (0.1, 0.25], which holds 3 after 1 below: 0.1 + 0.15 * 1.5 / 3.
    const p50 = histogramQuantile(QUEUE_WAIT_BUCKETS, bulk, 0.5)!;
    assert.ok(Math.abs(p50 - 0.175) < 1e-9, `p50 ${p50}`);
  });
});

describe("RejectionLog", () => {
  test("keeps the newest rejections, newest first, and counts every code", () => {
    const log = new RejectionLog(3);
    assert.deepEqual(log.latest(), []);
    log.record(outcome({ requestId: "ok-1", errorCode: undefined, status: 200 }));
    for (let i = 1; i <= 5; i++) {
      log.record(
        outcome({
          requestId: `r-${i}`,
          tsMs: 1000 + i,
          status: i % 2 === 0 ? 429 : 408,
          errorCode: i % 2 === 0 ? "scheduler_queue_full" : "scheduler_queue_timeout",
          effectiveClass: undefined,
          requestedClass: "bulk",
        }),
      );
    }
    assert.equal(log.total, 5, "served requests are not rejections");
    assert.deepEqual(
      log.latest().map((r) => [r.request_id, r.ts_ms, r.status, r.code, r.class]),
      [
        ["r-5", 1005, 408, "scheduler_queue_timeout", "bulk"],
        ["r-4", 1004, 429, "scheduler_queue_full", "bulk"],
        ["r-3", 1003, 408, "scheduler_queue_timeout", "bulk"],
      ],
    );
    assert.deepEqual(Object.fromEntries(log.codeTotals()), {
      scheduler_queue_timeout: { status: 408, total: 3 },
      scheduler_queue_full: { status: 429, total: 2 },
    });
  });
});

describe("SampleRing", () => {
  const sample = (tMs: number): CounterSample => ({
    tMs,
    statuses: new Map(),
    codes: new Map(),
    tokens: new Map(),
    waits: new Map(),
  });

  test("a window's base is the newest sample at least that old, else the oldest", () => {
    const ring = new SampleRing(8);
    assert.equal(ring.base(1000, 5000), undefined);
    for (let t = 1000; t <= 10_000; t += 1000) ring.push(sample(t));
    assert.equal(ring.latest?.tMs, 10_000);
    assert.equal(ring.base(10_500, 5000)?.tMs, 5000);
    assert.equal(ring.base(10_500, 60_000)?.tMs, 3000, "only the last 8 are kept");
    assert.equal(ring.base(10_000, 1000)?.tMs, 9000, "a sample of the same instant is no base");
  });
});

describe("Dashboard", () => {
  function sources(calls: { n: number }): DashboardSources {
    return {
      admission: {
        mode: "legacy",
        fallbackReason: undefined,
        snapshot() {
          calls.n++;
          return { capacity: 4, inflight: 1, queued: 0, utilization: 0.25, classes: null };
        },
      },
      capacity: { capacity: 4, underlying: 4, pinned: undefined },
      workers: { healthyCount: 1, workers: [{ healthy: true }] },
      adaptive: undefined,
      shedding: undefined,
      activity: { snapshot: () => new Map() },
      budgets: { remaining: () => ({}) },
      policies: () => new Map(),
      ledger: undefined,
      pools: () => [],
    };
  }

  test("one timer feeds every stream, with keep-alive comments; close() ends them and stops it", async (t) => {
    const calls = { n: 0 };
    const metrics = createMetrics({ collectProcessMetrics: false });
    const dashboard = new Dashboard(metrics.registry, sources(calls), { intervalMs: 50, keepAliveMs: 200 });
    const server = createServer((req, res) => dashboard.events(req, res));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(() => {
      dashboard.close();
      server.closeAllConnections();
      server.close();
    });
    dashboard.start();
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    const [a, b] = [await openEvents(url, null), await openEvents(url, null)];
    await waitFor(
      () => snapshotsIn(a).length >= 5 && snapshotsIn(b).length >= 5 && a.comments.includes("keep-alive"),
      "snapshots and a keep-alive on both streams",
    );
    assert.ok(b.comments.includes("keep-alive"), "the other stream has its keep-alive too");
    assert.equal(a.events[0]!.event, "history");
    assert.equal(snapshotsIn(a)[0]!.gateway.inflight, 1);
    assert.equal(dashboard.watchers, 2);
    a.close();
    await waitFor(() => dashboard.watchers === 1, "the client that left is dropped");
    // The chart's history fills from the timer, whoever watches.
    const c = await openEvents(url, null);
    await waitFor(() => c.events.length >= 1, "history");
    const history = JSON.parse(c.events[0]!.data) as { interval_ms: number; points: unknown[] };
    assert.equal(history.interval_ms, 50);
    assert.ok(history.points.length >= 3, `the history holds the ticks so far (${history.points.length})`);
    dashboard.close();
    await Promise.all([b.ended, c.ended]);
    assert.equal(dashboard.watchers, 0);
    const after = calls.n;
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(calls.n, after, "no snapshot is built after close");
    // A stream opened after close ends at once.
    const late = await openEvents(url, null);
    await late.ended;
    assert.equal(late.events.length, 0);
  });

  test("snapshots are built only while someone watches", async (t) => {
    const calls = { n: 0 };
    const metrics = createMetrics({ collectProcessMetrics: false });
    const dashboard = new Dashboard(metrics.registry, sources(calls), { intervalMs: 20 });
    t.after(() => dashboard.close());
    dashboard.start();
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(calls.n, 0);
    const s = await dashboard.snapshot();
    assert.equal(calls.n, 1);
    assert.equal(s.gateway.capacity, 4);
    assert.ok(s.outcomes.window_secs !== null, "the timer sampled the counters meanwhile");
  });
});

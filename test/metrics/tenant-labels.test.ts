import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createScheduler, ManualClock, type Scheduler } from "../../src/index.js";
import {
  createMetrics,
  OTHER_TENANT,
  SCHEDULER_METRIC_NAMES,
  TenantLabeler,
} from "../../src/metrics/index.js";
import { labelValues, metric, scrape } from "../helpers/harness.js";

const UNKNOWN = SCHEDULER_METRIC_NAMES.unknownPriority;
const CLAMP = SCHEDULER_METRIC_NAMES.clamp;

function schedulerFor(metrics: ReturnType<typeof createMetrics>): Scheduler {
  return createScheduler({
    capacity: 1_000,
    clock: new ManualClock(),
    observer: metrics.observer,
    defaultMaxClass: "system",
    tenantPolicies: Object.fromEntries(
      ["t1", "t2", "t3", "t4", "t5"].map((t) => [t, { max_class: "default" as const }]),
    ),
  });
}

/** `count` requests of `tenant`, each admitted at once and released. */
async function traffic(scheduler: Scheduler, tenant: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) (await scheduler.acquire({ tenant, priority: "bulk" })).release();
}

/** Interleaved traffic: round after round, every tenant with requests left sends one. */
async function interleaved(scheduler: Scheduler, volumes: Record<string, number>): Promise<void> {
  const left = { ...volumes };
  for (let more = true; more; ) {
    more = false;
    for (const tenant of Object.keys(left)) {
      if (left[tenant]! > 0) {
        left[tenant]!--;
        more = true;
        await traffic(scheduler, tenant, 1);
      }
    }
  }
}

describe("tenant label cap (top N)", () => {
  test("N=2, five tenants: the two busiest keep their labels, the others are `other`", async () => {
    const metrics = createMetrics({ tenantMetricTopN: 2, collectProcessMetrics: false });
    const scheduler = schedulerFor(metrics);
    await interleaved(scheduler, { t3: 5, t1: 20, t5: 1, t2: 15, t4: 3 });
    // Each tenant then sends one unknown-priority request and one clamped (system -> default) request.
    for (const tenant of ["t1", "t2", "t3", "t4", "t5"]) {
      (await scheduler.acquire({ tenant, priority: "urgent" })).release();
      (await scheduler.acquire({ tenant, priority: "system" })).release();
    }
    const s = await scrape(metrics);
    assert.deepEqual(labelValues(s, UNKNOWN, "tenant"), ["other", "t1", "t2"]);
    assert.equal(metric(s, UNKNOWN, { tenant: "t1" }), 1);
    assert.equal(metric(s, UNKNOWN, { tenant: "t2" }), 1);
    assert.equal(metric(s, UNKNOWN, { tenant: "other" }), 3);
    assert.deepEqual(labelValues(s, CLAMP, "tenant"), ["other", "t1", "t2"]);
    const clampLabels = { requested_class: "system", effective_class: "default" };
    assert.equal(metric(s, CLAMP, { tenant: "other", ...clampLabels }), 3);
    assert.equal(metric(s, CLAMP, { tenant: "t1", ...clampLabels }), 1);
    assert.deepEqual(metrics.tenants.labelledTenants(), ["t1", "t2"]);
    assert.equal(metrics.tenantLabel("t1"), "t1");
    assert.equal(metrics.tenantLabel("t4"), OTHER_TENANT);
    assert.equal(metrics.tenantLabel("never-seen"), OTHER_TENANT);
  });

  test("a tenant entering the top N keeps its earlier counts under `other`; the one it displaces loses its series", async () => {
    const metrics = createMetrics({ tenantMetricTopN: 2, collectProcessMetrics: false });
    const scheduler = schedulerFor(metrics);
    // t3 and t4 come first and take the two free labels.
    await traffic(scheduler, "t3", 3);
    await traffic(scheduler, "t4", 3);
    (await scheduler.acquire({ tenant: "t3", priority: "urgent" })).release();
    (await scheduler.acquire({ tenant: "t4", priority: "urgent" })).release();
    // t1 is still `other`.
    (await scheduler.acquire({ tenant: "t1", priority: "urgent" })).release();
    let s = await scrape(metrics);
    assert.deepEqual(labelValues(s, UNKNOWN, "tenant"), ["other", "t3", "t4"]);
    assert.equal(metric(s, UNKNOWN, { tenant: "other" }), 1);

    // t1 becomes the busiest tenant: it takes the weakest label (t4's, whose series is removed).
    await traffic(scheduler, "t1", 10);
    assert.deepEqual(metrics.tenants.labelledTenants(), ["t1", "t3"]);
    for (const tenant of ["t1", "t3", "t4"])
      (await scheduler.acquire({ tenant, priority: "urgent" })).release();
    s = await scrape(metrics);
    assert.deepEqual(labelValues(s, UNKNOWN, "tenant"), ["other", "t1", "t3"]);
    assert.equal(metric(s, UNKNOWN, { tenant: "t1" }), 1, "only the counts after promotion");
    assert.equal(metric(s, UNKNOWN, { tenant: "t3" }), 2);
    assert.equal(metric(s, UNKNOWN, { tenant: "other" }), 2, "t1's earlier count and t4's new one");
    assert.deepEqual(metrics.tenants.labelledTenants(), ["t1", "t3"]);
  });

  test("N=0: every tenant is `other`", async () => {
    const metrics = createMetrics({ tenantMetricTopN: 0, collectProcessMetrics: false });
    const scheduler = schedulerFor(metrics);
    await interleaved(scheduler, { t1: 10, t2: 5 });
    for (const tenant of ["t1", "t2", "t3"]) {
      (await scheduler.acquire({ tenant, priority: "urgent" })).release();
      (await scheduler.acquire({ tenant, priority: "system" })).release();
    }
    const s = await scrape(metrics);
    assert.deepEqual(labelValues(s, UNKNOWN, "tenant"), ["other"]);
    assert.equal(metric(s, UNKNOWN, { tenant: "other" }), 3);
    assert.deepEqual(labelValues(s, CLAMP, "tenant"), ["other"]);
    assert.equal(metrics.tenants.size, 0);
    assert.equal(metrics.tenantLabel("t1"), OTHER_TENANT);
  });

  test("the tenant key `other` never gets a label of its own", () => {
    const labeler = new TenantLabeler({ topN: 2 });
    for (let i = 0; i < 10; i++) labeler.record(OTHER_TENANT);
    labeler.record("");
    assert.equal(labeler.size, 0);
    assert.equal(labeler.label(OTHER_TENANT), OTHER_TENANT);
    assert.equal(labeler.label(""), OTHER_TENANT);
  });

  test("memory stays bounded: 100k distinct tenants, while a heavy hitter keeps its label", async () => {
    const metrics = createMetrics({ collectProcessMetrics: false });
    const labeler = metrics.tenants;
    assert.equal(labeler.topN, 32);
    const observer = metrics.observer;
    for (let i = 0; i < 100_000; i++) {
      const tenant = i % 10 === 0 ? "auth:heavy" : `auth:t${i}`;
      observer.admission?.("default", "admitted", tenant);
      if (i % 7 === 0) observer.unknownPriority?.(tenant);
      assert.ok(labeler.size <= labeler.tableSize);
    }
    assert.equal(labeler.tableSize, 128);
    assert.ok(labeler.size <= 128);
    assert.ok(labeler.labelledTenants().length <= 32);
    assert.equal(labeler.label("auth:heavy"), "auth:heavy");
    // The registry holds at most N + 1 tenant series.
    const s = await scrape(metrics);
    const tenants = labelValues(s, UNKNOWN, "tenant");
    assert.ok(tenants.length <= 33, `${tenants.length} tenant series`);
    assert.ok(tenants.includes("other"));
    assert.ok(tenants.includes("auth:heavy"));
  });

  test("a labeler's table never exceeds its size and labels never exceed N", () => {
    const labeler = new TenantLabeler({ topN: 4, tableSize: 8 });
    const demoted: string[] = [];
    labeler.onDemote((t) => demoted.push(t));
    for (let i = 0; i < 10_000; i++) {
      labeler.record(`t${i % 997}`);
      labeler.label(`x${i}`);
      assert.ok(labeler.size <= 8);
      assert.ok(labeler.labelledTenants().length <= 4);
    }
    for (const t of labeler.labelledTenants()) assert.equal(labeler.label(t), t);
    assert.ok(demoted.length > 0);
  });

  test("decay lets the ranking follow recent traffic", () => {
    const recent = new TenantLabeler({ topN: 1, decayEvery: 100 });
    const forever = new TenantLabeler({ topN: 1, decayEvery: 1_000_000 });
    for (const labeler of [recent, forever]) {
      for (let i = 0; i < 1_000; i++) labeler.record("old");
      for (let i = 0; i < 500; i++) labeler.record("new");
    }
    assert.deepEqual(recent.labelledTenants(), ["new"]);
    assert.deepEqual(forever.labelledTenants(), ["old"]);
  });

  test("hysteresis: a challenger must beat the weakest label by the margin", () => {
    const labeler = new TenantLabeler({ topN: 1, hysteresis: 0.5 });
    for (let i = 0; i < 10; i++) labeler.record("a");
    for (let i = 0; i < 15; i++) labeler.record("b");
    assert.deepEqual(labeler.labelledTenants(), ["a"], "15 does not beat 10 * 1.5");
    labeler.record("b");
    assert.deepEqual(labeler.labelledTenants(), ["b"]);
  });

  test("rejects invalid sizes", () => {
    assert.throws(() => new TenantLabeler({ topN: -1 }), RangeError);
    assert.throws(() => new TenantLabeler({ topN: 1.5 }), RangeError);
    assert.throws(() => new TenantLabeler({ topN: 8, tableSize: 4 }), RangeError);
    assert.throws(() => createMetrics({ tenantMetricTopN: -1, collectProcessMetrics: false }), RangeError);
  });
});
